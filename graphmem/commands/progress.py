"""What a long command is doing, on stderr, while it runs.

On a terminal: a transient status line (rich's spinner), as ``plan`` shows its stages,
erased when the command ends. Without one (a pipe, a CI log): lines
``graphmem: <command>: stage 2 of 4: <what>, <seconds> s`` from a thread, so that a
stage spent inside ONNX Runtime or the planner, which calls nothing back, shows too:
the first after :data:`FIRST_LINE_AFTER` seconds once the command's input is read and
checked (:func:`hold`, :func:`accept`: a refused input is one line), then one whenever the stage or its
count (``3 of 10 cases``) changes (at most one a second), and one every
:data:`PROGRESS_EVERY` seconds while nothing changes. stdout is never written:
``--json`` output stays one object.

One :class:`Progress` is active at a time; :func:`graphmem.commands.common.stages` (the
loader's and the planner's stage names) reports into it while it is (:func:`active`).
"""
from __future__ import annotations

import sys
import threading
import time
from contextvars import ContextVar
from typing import Callable

# Without a terminal: the first progress line after this many seconds (a command done
# sooner prints none), a line at least this often while nothing changes, and at most
# one a second when something does
FIRST_LINE_AFTER = 1.0
PROGRESS_EVERY = 10.0
CHANGE_EVERY = 1.0
# GRAPHMEM_PROGRESS_AFTER=SECONDS in the environment moves the first line (a log that
# should hold only the result and the errors: a large value); the tests of error
# lines set it, so that how many lines a failing command writes does not depend on
# how loaded the machine is
AFTER_VARIABLE = "GRAPHMEM_PROGRESS_AFTER"


def first_line_after() -> float:
    """Seconds into the command before the first line through a pipe."""
    import os
    try:
        seconds = float(os.environ[AFTER_VARIABLE])
    except (KeyError, ValueError):
        return FIRST_LINE_AFTER
    return seconds if seconds >= 0 else FIRST_LINE_AFTER  # NaN and negatives: the default

# Through a pipe the lines wait until the command's input is read and accepted
# (:func:`hold`, :func:`accept`): a command refusing its input says so in one line,
# whatever the time it took to find the fault on a loaded machine
_ACCEPTED = threading.Event()
_ACCEPTED.set()

_ACTIVE: ContextVar["Progress | None"] = ContextVar("graphmem_progress", default=None)
_EARLY: ContextVar[bool] = ContextVar("graphmem_early_line", default=False)
# when the CLI's command started (before its imports): a Progress counts from there
_COMMAND_START: ContextVar["float | None"] = ContextVar("graphmem_command_start",
                                                        default=None)

# Commands that can take more than two seconds: they say so on a terminal before their
# modules are even imported (numpy, onnx, rich: a second or two on a busy machine)
LONG_COMMANDS = frozenset({"train", "fit", "report", "verify", "export", "probe"})


def early(command: str | None) -> None:
    """On a terminal, one ``graphmem: <command>: starting`` line on stderr at once, before
    the imports; the command's :class:`Progress` (or the end of the command) erases it.
    Every command's :class:`Progress` counts its seconds from here (:func:`ended`)."""
    _COMMAND_START.set(time.monotonic())
    if command not in LONG_COMMANDS:
        return
    try:
        if not sys.stderr.isatty():
            return
        sys.stderr.write(f"graphmem: {command}: starting\r")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        return
    _EARLY.set(True)


def ended() -> None:
    """The CLI's command ended: its early line erased, its start forgotten."""
    clear_early()
    _COMMAND_START.set(None)
    _ACCEPTED.set()


def hold() -> None:
    """The command is reading its input (its model, a saved plan): no progress line
    through a pipe until :func:`accept`, so that a refusal is the command's one line."""
    _ACCEPTED.clear()


def accept() -> None:
    """The command's input is read and checked: its progress lines may start (at once,
    where the reading took longer than the first line waits)."""
    _ACCEPTED.set()


def clear_early() -> None:
    """Erase the line :func:`early` wrote, if it is there."""
    if _EARLY.get():
        _EARLY.set(False)
        try:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def active() -> "Progress | None":
    """The Progress of the command under way, if one is shown."""
    return _ACTIVE.get()


class Progress:
    """``with Progress("train", stages=4) as progress: progress("building the graph")``.

    Calling it starts the next stage (``stage 2 of 4: building the graph``; ``stages``:
    how many the command will name, if it knows); :meth:`on_step` counts the steps of
    the stage under way (``3 of 10 cases``); :meth:`callback`'s stages (the loader's,
    the planner's) are shown beside the stage under way, as its part. ``terminal``
    (default: whether stderr is one) picks the spinner or the timed lines; ``quiet``
    shows nothing."""

    def __init__(self, command: str, *, quiet: bool = False, terminal: bool | None = None,
                 stages: int | None = None):
        self.command = command
        self.quiet = quiet
        self.terminal = terminal
        self.stages = stages
        self.stage = 0
        self.title = "starting"
        self.part = ""  # a callback's stage, or a count of steps, within the stage
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._spinner = None
        self._token = None
        self._start = time.monotonic()

    @property
    def status(self) -> str:
        """The line's text: the stage, its number of the command's, and its part."""
        if self.stage == 0 or self.stages == 1:  # no stages, or one: its name alone
            head = self.title
        elif self.stages:
            head = f"stage {self.stage} of {max(self.stages, self.stage)}: {self.title}"
        else:
            head = f"stage {self.stage}: {self.title}"
        return f"{head}, {self.part}" if self.part else head

    @status.setter
    def status(self, text: str) -> None:
        self(text)

    def __enter__(self) -> "Progress":
        started = _COMMAND_START.get()
        self._start = time.monotonic() if started is None else started
        if self.quiet:
            return self
        if self.terminal is None:
            from rich.console import Console
            self.terminal = Console(stderr=True).is_terminal
        if self.terminal:
            from rich.console import Console
            clear_early()
            self._spinner = Console(stderr=True).status(self._text())
            self._spinner.__enter__()
        else:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
        if self._spinner is not None:
            self._spinner.__exit__(*exc)
            self._spinner = None
        if self._token is not None:
            _ACTIVE.reset(self._token)
            self._token = None

    def __call__(self, status: str) -> None:
        """The next stage starts: ``status`` says what it does."""
        self.stage += 1
        self.title, self.part = status, ""
        self._update()

    def on_step(self, done: int, total: int, what: str = "nodes") -> None:
        self.part = f"{done:,} of {total:,} {what}"
        self._update()

    def callback(self, prefix: str = "") -> Callable[[str], None]:
        """A stage callback (what ``plan_graph(progress=...)`` takes): what it names is
        shown as a part of the stage under way, after ``prefix``."""
        def part(stage: str) -> None:
            self.part = f"{prefix}{stage}"
            self._update()
        return part

    @property
    def seconds(self) -> float:
        return time.monotonic() - self._start

    def _update(self) -> None:
        if self._spinner is not None:
            self._spinner.update(self._text())

    def _text(self) -> str:
        from rich.markup import escape
        return f"graphmem: {escape(self.command)}: {escape(self.status)}"

    def _beat(self) -> None:
        every = max(PROGRESS_EVERY, 0.0)
        tick = min(0.25, every) or 0.01
        first = first_line_after()
        said, said_at = None, 0.0
        while not self._stop.wait(tick):
            now = self.seconds
            text = self.status
            if now < first or not _ACCEPTED.is_set():
                continue
            if (said is None or now - said_at >= every
                    or (text != said and now - said_at >= min(CHANGE_EVERY, every))):
                if said is None:
                    from graphmem.notes import release
                    release()  # the notes held so far (the zoo model used) come first
                print(f"graphmem: {self.command}: {text}, {now:.0f} s", file=sys.stderr,
                      flush=True)
                said, said_at = text, now


class Heartbeat(Progress):
    """The timed lines alone (no spinner): ``verify``'s, whose terminal progress is a bar
    over the nodes. ``enabled=False`` shows nothing."""

    def __init__(self, enabled: bool = True, command: str = "verify",
                 stages: int | None = None):
        super().__init__(command, quiet=not enabled, terminal=False, stages=stages)
