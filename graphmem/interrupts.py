"""Ctrl-C and SIGTERM while a module loads: held back until it has loaded (issues 38, 55).

A KeyboardInterrupt raised while an extension module initializes (onnx's nanobind core,
numpy's multiarray, protobuf's upb) leaves that module half made: onnx's crashed the
process (SIGSEGV, SIGABRT) in 3 of ~380 Ctrl-Cs, numpy's turned it into an ImportError.
:func:`deferred` runs a block with SIGINT recorded instead of raised, and raises it
(through the handler that was there before) once the block is done; :func:`install`
puts every module the process loads from its files from then on under it (the CLI calls
it; importing graphmem as a library changes nothing).
"""
from __future__ import annotations

import importlib.machinery
import signal
import sys
import threading

# the signals held back: Ctrl-C, and SIGTERM (a `kill`, a job scheduler's stop), which
# during a module's load turned into a traceback or an ImportError as SIGINT did
HELD = (signal.SIGINT, signal.SIGTERM)


def _record(signum, frame) -> None:
    _Deferred.pending.append(signum)


class _Deferred:
    """The context of :func:`deferred` (a class, not a generator: it runs around every
    module a command imports)."""

    depth = 0  # how many blocks are open (the outermost swaps the handlers)
    pending: list = []  # the signals that came meanwhile, in order
    previous: dict = {}  # signal -> the handler the outermost block swapped out

    def __enter__(self):
        cls = _Deferred
        if cls.depth == 0:
            cls.previous = {}
            if threading.current_thread() is threading.main_thread():
                for signum in HELD:
                    handler = signal.getsignal(signum)
                    # None: not set from Python; SIG_IGN: nothing to hold
                    if handler not in (None, _record, signal.SIG_IGN):
                        cls.previous[signum] = signal.signal(signum, _record)
        cls.depth += 1
        return self

    def __exit__(self, *exc):
        cls = _Deferred
        cls.depth -= 1
        if cls.depth == 0 and cls.previous:
            previous, cls.previous = cls.previous, {}
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            pending, cls.pending = cls.pending, []
            deliver(pending)
        return False


_DEFERRED = _Deferred()


def deliver(signals: list) -> None:
    """Raise the first of ``signals`` (a list of signal numbers held back, emptied)
    through the handler now in place: the command ends as if it had come now."""
    if signals:
        first = signals[0]
        signals.clear()
        signal.raise_signal(first)


def deferred() -> _Deferred:
    """Run the block with SIGINT and SIGTERM held back; one that came during it is
    delivered after it."""
    return _DEFERRED


def _deferring(base: type) -> type:
    """A subclass of the file loader ``base`` that creates and runs its module with
    SIGINT deferred."""

    class Deferring(base):
        def create_module(self, spec):
            with deferred():
                return super().create_module(spec)

        def exec_module(self, module):
            with deferred():
                super().exec_module(module)

    Deferring.__name__ = Deferring.__qualname__ = "Deferring" + base.__name__
    return Deferring


# the file loaders of importlib's path finder: compiled modules, and Python ones (a
# Ctrl-C inside a module's body, or in the import system's own cleanup after it, was
# printed as "Exception ignored" and lost: the command went on and exited 0)
_LOADERS = {base: _deferring(base) for base in (
    importlib.machinery.ExtensionFileLoader, importlib.machinery.SourceFileLoader,
    importlib.machinery.SourcelessFileLoader)}


class _Finder(importlib.machinery.PathFinder):
    """importlib's path finder (all of it: caches, distributions), whose file loaders
    defer SIGINT."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        spec = super().find_spec(name, path, target)
        wrap = _LOADERS.get(type(spec.loader)) if spec is not None else None
        if wrap is not None:
            spec.loader = wrap(spec.loader.name, spec.loader.path)
        return spec


def install() -> None:
    """Load every module from now on with SIGINT deferred: ``sys.meta_path``'s path
    finder is replaced by a subclass that finds the same modules and wraps their file
    loaders."""
    for i, finder in enumerate(sys.meta_path):
        if finder is importlib.machinery.PathFinder:
            sys.meta_path[i] = _Finder
            return


# A Ctrl-C that lands where Python cannot raise it (a __del__, a weakref callback) is
# "ignored" with a four-line traceback on stderr and the command goes on. Under
# :func:`install` the import machinery's callbacks run with it held back; anywhere else
# the CLI's hook keeps it quiet and remembers it, and the command ends with 130 and one
# line once it is done (cli.entry). __main__ sets the hook before the CLI's imports, and
# cli.entry again for the installed `graphmem` script, which starts there.
_swallowed = False
_default_unraisable = sys.unraisablehook


def _unraisable(args) -> None:
    global _swallowed
    if args.exc_type is not None and issubclass(args.exc_type, KeyboardInterrupt):
        _swallowed = True
        return
    _default_unraisable(args)


def catch_unraisable() -> None:
    """Route Python's unraisable exceptions through the hook above (the CLI only)."""
    sys.unraisablehook = _unraisable


def swallowed() -> bool:
    """Whether a Ctrl-C landed where Python could not raise it."""
    return _swallowed
