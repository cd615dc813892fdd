"""``python -m graphmem <command>``: each command is a module in graphmem.commands."""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import threading

from graphmem import interrupts, notes, streams
from graphmem.errors import GraphmemError

# Module names under graphmem.commands, in the order ``--help`` lists them.
COMMANDS = ("plan", "verify", "report", "fit", "place", "train", "export", "probe", "models")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``graphmem:`` line and exit 2, as any other
    bad input (``--help`` still prints the usage)."""

    def error(self, message: str):
        command = self.prog.removeprefix("graphmem").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"graphmem: {where}{message} (see {self.prog} --help)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with every command's options; given ``argv`` that names a command,
    with only that command's (so that a command imports only the modules it uses)."""
    parser = _Parser(
        prog="graphmem", description="Static memory planner for ONNX computation graphs.")
    from graphmem import __version__
    parser.add_argument("--version", action="version", version=f"graphmem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    parser.commands = sub  # the commands' parsers: ``sub.choices``, by name
    named = next((a for a in argv or () if not a.startswith("-")), None)
    if named in COMMANDS:
        names = [named]
    elif "--version" in (argv or ()):  # answered before any command is needed
        names = []
    else:
        names = COMMANDS
    for name in names:
        importlib.import_module(f".commands.{name}", __package__).add_parser(sub)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that temporary files are cleaned up on the
    way out, as for Ctrl-C."""


def _terminate(signum, frame) -> None:
    raise Terminated()


# ONNX Runtime's telemetry (1.2x on Linux and macOS) writes a device id and a database
# under ~/.cache/Microsoft/DeveloperTools and a ".ses" file in $TMPDIR when its first
# session is made: files outside a command's outputs. Its documented opt-out, read once
# when the runtime starts, is set for graphmem's commands (a value already set wins).
ORT_OPT_OUT = {"ORT_DISABLE_TELEMETRY": "1"}


# the signals __main__ held back while the CLI's modules loaded (entry() passes its
# list): main() delivers them once the handlers that answer them are in place
_held: list = []


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments): its exit status."""
    for name, value in ORT_OPT_OUT.items():
        os.environ.setdefault(name, value)
    argv = _negative_values(sys.argv[1:] if argv is None else argv)
    previous: dict = {}
    guard = None
    command = None
    try:
        if _main_thread():
            previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, _terminate)
            if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
                previous[signal.SIGINT] = signal.signal(
                    signal.SIGINT, signal.default_int_handler)
        interrupts.deliver(_held)
        guard = streams.guard()
        notes.clear()
        guard.stdout.before_first_write = notes.release  # the notes come before the output
        from graphmem.commands.progress import early, hold
        early(next((a for a in argv if not a.startswith("-")), None))
        with interrupts.deferred():  # the command's modules load here
            args = _parse(argv)
        if getattr(args, "model", None):
            hold()  # no progress line through a pipe until the model is read and checked
        command = args.command
        code = int(args.func(args) or 0)
        notes.flush()
        sys.stdout.flush()
        return _output_checked(guard, command, code)
    except GraphmemError as exc:
        # the one line that explains the exit: notes made on the way are dropped
        print(f"graphmem: {exc}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        # a file can ask for more than the process may have (issue 55: 3 M empty
        # subgraphs in 6 MB); the traceback would say nothing more
        exc = " ".join(str(exc).split())[:100]
        print(f"graphmem: ran out of memory{f' ({exc})' if exc else ''}: the command "
              "needs more memory than this process may use", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("graphmem: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("graphmem: terminated", file=sys.stderr)
        return 143
    finally:
        # the clean-up runs whole: a signal that comes meanwhile is held back and
        # delivered through the handler in place before main ran (__main__'s, which
        # entry answers; Python's default, which raises KeyboardInterrupt)
        late: list = []
        for signum in previous:
            signal.signal(signum, lambda signum, frame: late.append(signum))
        notes.drop()  # flushed above on success; dropped on every other way out
        if "graphmem.commands.progress" in sys.modules:
            sys.modules["graphmem.commands.progress"].ended()
        _remove_temporaries()
        if guard is not None:
            guard.restore()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        interrupts.deliver(late)


# commands whose exit status is a verdict (verify: 0 PASS, 1 the plan is wrong, 2 bad
# input): a fault of their output is said, and the verdict kept
VERDICT_COMMANDS = frozenset({"verify"})


def _output_checked(guard, command: str | None, code: int) -> int:
    """``code``, or :data:`streams.OUTPUT_FAILED` with one line where stdout could not
    be written (a full device, a closed descriptor, a pipe whose reader went away)."""
    fault = guard.stdout.fault
    if fault is None or not guard.stdout.written:
        return code
    print(f"graphmem: cannot write the output to stdout: {fault}", file=sys.stderr)
    return code if command in VERDICT_COMMANDS else streams.OUTPUT_FAILED


def _remove_temporaries() -> None:
    """The folders --ort-optimize and --infer-by-running made, removed on every way out
    (their module is imported only by a command that made some)."""
    made = sys.modules.get("graphmem.frontend.ort_optimize")
    if made is not None:
        made.cleanup()


def entry(held: list | None = None) -> None:
    """The process's entry point (``python -m graphmem``, the ``graphmem`` script): exits
    with main()'s status, with 130 for a Ctrl-C and 143 for a SIGTERM wherever it lands.

    main() turns a signal into 130 or 143 itself while it runs. One that lands after it
    returned (its outputs complete) would otherwise end the process by the signal
    (status -2 to a parent, -SIGINT) with a traceback, or pass unnoticed in the
    interpreter's shutdown (an atexit function): from then on it ends the process at
    once with 130 or 143. One that lands while a module loads waits until it has loaded
    (it could crash the process there: :mod:`graphmem.interrupts`); ``held``: those
    __main__ held back while the CLI's own modules loaded.
    """
    global _held
    interrupts.catch_unraisable()
    if held is None:  # the graphmem script: held by the package from its first line
        held = getattr(sys.modules.get("graphmem"), "_held", None)
    held = _held = held if held is not None else []
    try:
        interrupts.install()
        code = main()
        _late_handlers()
        if held and code not in (130, 143):  # came between main's handlers and these
            code = _late_code(held[0])
        if interrupts.swallowed() and code != 130:  # a Ctrl-C Python could not raise
            print("graphmem: interrupted", file=sys.stderr)
            code = 130
    except KeyboardInterrupt:  # between main's return and the handlers
        _late_handlers()
        print("graphmem: interrupted", file=sys.stderr)
        code = 130
    except Terminated:
        _late_handlers()
        print("graphmem: terminated", file=sys.stderr)
        code = 143
    exit_now(code)


def _late_handlers() -> None:
    if _main_thread():
        signal.signal(signal.SIGINT, _interrupted_late)
        signal.signal(signal.SIGTERM, _interrupted_late)


def _late_code(signum: int) -> int:
    if signum == signal.SIGTERM:
        print("graphmem: terminated", file=sys.stderr)
        return 143
    print("graphmem: interrupted", file=sys.stderr)
    return 130


def exit_now(code: int) -> None:
    """End the process with ``code`` without the interpreter's teardown, which frees
    every module and object one by one (numpy's, onnx's, ONNX Runtime's): about 25 ms of
    CPU of a 0.16 s squeezenet plan, that a user waits for. What of the teardown
    matters is done first: the atexit functions run (a coverage tool saves there) and
    the standard streams are flushed; every output file is closed by now (graphmem's
    writes are ``with`` blocks). A Python thread still running (none of graphmem's: the
    verify heartbeat is a daemon) gets the ordinary exit, which waits for it."""
    import atexit
    import os
    if any(t.is_alive() and not t.daemon for t in threading.enumerate()
           if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    _flush_streams()
    os._exit(_last_signal(code))


# the signals answered after main returned (the late handlers')
LATE = (signal.SIGINT, signal.SIGTERM)


def _last_signal(code: int) -> int:
    """``code``, or 130 or 143 for a signal that came as the process ends: Python runs a
    handler between two of its instructions, and ``os._exit`` is one, so a signal that
    came during it would pass unanswered (exit 0). Both are blocked here (blocking runs
    the handler of one that came before: it ends the process) and one pending since is
    answered."""
    if not _main_thread():
        return code
    signal.pthread_sigmask(signal.SIG_BLOCK, LATE)
    pending = signal.sigpending()
    for signum in LATE:
        if signum in pending and code not in (130, 143):
            term = signum == signal.SIGTERM
            try:
                os.write(2, b"graphmem: terminated\n" if term else b"graphmem: interrupted\n")
            except OSError:
                pass
            return 143 if term else 130
    return code


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the process started with it closed
                stream.flush()
        except (OSError, ValueError):  # a closed pipe (graphmem report | head)
            pass


def _interrupted_late(signum, frame) -> None:
    """Ctrl-C or SIGTERM after main() returned: every output is written and closed, so
    nothing is left to clean up; what was printed is flushed and the process ends with
    130 or 143 (an exception here could surface in the interpreter's shutdown, where it
    is ignored)."""
    import os
    _flush_streams()
    term = signum == signal.SIGTERM
    try:
        os.write(2, b"graphmem: terminated\n" if term else b"graphmem: interrupted\n")
    except OSError:
        pass
    os._exit(143 if term else 130)


def _parse(argv: list[str]) -> argparse.Namespace:
    """The command line, parsed; building the parser imports the command's modules
    (numpy, the passes), with the cyclic garbage collector off: imports make many
    objects and no garbage, and its passes over them were 4-7 ms of a 0.15 s plan."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        parser = build_parser(argv)
        args, extra = parser.parse_known_args(argv)
    finally:
        if enabled:
            gc.enable()
    if extra:  # said by the command's parser, which names the command and its --help
        parser.commands.choices.get(args.command, parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    return args


def _negative_values(argv: list[str]) -> list[str]:
    """``--budget -5GiB`` as ``--budget=-5GiB``: argparse takes a value that starts with
    '-' and is not a plain number for an option, and would not say what is wrong with
    it; joined, the option's own check names the problem."""
    out: list[str] = []
    for tok in argv:
        if (out and out[-1].startswith("--") and "=" not in out[-1]
                and len(tok) > 1 and tok[0] == "-" and (tok[1].isdigit() or tok[1] == ".")):
            out[-1] = f"{out[-1]}={tok}"
        else:
            out.append(tok)
    return out


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
