"""What a long command is doing, on stderr, while it runs.

On a terminal: a transient status line (rich's spinner), as ``plan`` shows its stages,
erased when the command ends. Without one (a pipe, a CI log): a line
``graphmem: <command>: <status>, <seconds> s`` every :data:`PROGRESS_EVERY` seconds from
a thread, so that a stage spent inside ONNX Runtime or the planner, which calls nothing
back, shows too. stdout is never written: ``--json`` output stays one object.

One :class:`Progress` is active at a time; :func:`graphmem.commands.common.stages` (the
loader's and the planner's stage names) reports into it while it is (:func:`active`).
"""
from __future__ import annotations

import sys
import threading
import time
from contextvars import ContextVar
from typing import Callable

# Without a terminal, a progress line on stderr this often, in seconds
PROGRESS_EVERY = 10.0

_ACTIVE: ContextVar["Progress | None"] = ContextVar("graphmem_progress", default=None)
_EARLY: ContextVar[bool] = ContextVar("graphmem_early_line", default=False)

# Commands that can take more than two seconds: they say so on a terminal before their
# modules are even imported (numpy, onnx, rich: a second or two on a busy machine)
LONG_COMMANDS = frozenset({"train", "fit", "report", "verify", "export"})


def early(command: str | None) -> None:
    """On a terminal, one ``graphmem: <command>: starting`` line on stderr at once, before
    the imports; the command's :class:`Progress` (or the end of the command) erases it."""
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
    """``with Progress("train") as progress: progress("building the graph")``.

    ``terminal`` (default: whether stderr is one) picks the spinner or the timed lines;
    ``quiet`` shows nothing. Calling it names the stage under way; :meth:`on_step`
    counts steps of one (``3 of 10 batches``)."""

    def __init__(self, command: str, *, quiet: bool = False, terminal: bool | None = None):
        self.command = command
        self.quiet = quiet
        self.terminal = terminal
        self.status = "starting"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._spinner = None
        self._token = None
        self._start = time.monotonic()

    def __enter__(self) -> "Progress":
        self._start = time.monotonic()
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
        self.status = status
        if self._spinner is not None:
            self._spinner.update(self._text())

    def on_step(self, done: int, total: int, what: str = "nodes") -> None:
        self(f"{done:,} of {total:,} {what}")

    def callback(self, prefix: str = "") -> Callable[[str], None]:
        """A stage callback (what ``plan_graph(progress=...)`` takes) that names the
        stage under ``prefix``."""
        return lambda stage: self(f"{prefix}{stage}" if prefix else stage)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self._start

    def _text(self) -> str:
        from rich.markup import escape
        return f"graphmem: {escape(self.command)}: {escape(self.status)}"

    def _beat(self) -> None:
        while not self._stop.wait(PROGRESS_EVERY if PROGRESS_EVERY > 0 else 0.01):
            print(f"graphmem: {self.command}: {self.status}, {self.seconds:.0f} s",
                  file=sys.stderr, flush=True)


class Heartbeat(Progress):
    """The timed lines alone (no spinner): ``verify``'s, whose terminal progress is a bar
    over the nodes. ``enabled=False`` shows nothing."""

    def __init__(self, enabled: bool = True, command: str = "verify"):
        super().__init__(command, quiet=not enabled, terminal=False)
