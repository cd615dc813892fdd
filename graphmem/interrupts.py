"""Ctrl-C while a compiled module loads: held back until it has loaded (issue 38).

A KeyboardInterrupt raised while an extension module initializes (onnx's nanobind core,
numpy's multiarray, protobuf's upb) leaves that module half made: onnx's crashed the
process (SIGSEGV, SIGABRT) in 3 of ~380 Ctrl-Cs, numpy's turned it into an ImportError.
:func:`deferred` runs a block with SIGINT recorded instead of raised, and raises it
(through the handler that was there before) once the block is done; :func:`install`
puts every extension module the process loads from then on under it (the CLI calls it;
importing graphmem as a library changes nothing).
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import signal
import sys
import threading

_depth = 0
_pending = False
_previous = None


def _record(signum, frame) -> None:
    global _pending
    _pending = True


@contextlib.contextmanager
def deferred():
    """Run the block with SIGINT held back; a Ctrl-C during it is delivered after it."""
    global _depth, _pending, _previous
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach Python in the main thread only
        return
    if _depth == 0:
        previous = signal.getsignal(signal.SIGINT)
        if previous is None or previous is _record:  # a handler not set from Python
            yield
            return
        _previous = signal.signal(signal.SIGINT, _record)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            signal.signal(signal.SIGINT, _previous)
            if _pending:
                _pending = False
                if _previous is not signal.SIG_IGN:
                    signal.raise_signal(signal.SIGINT)  # the restored handler takes it


class _DeferringLoader(importlib.machinery.ExtensionFileLoader):
    """An extension module's loader that creates and runs it with SIGINT deferred."""

    def create_module(self, spec):
        with deferred():
            return super().create_module(spec)

    def exec_module(self, module):
        with deferred():
            super().exec_module(module)


class _Finder:
    """importlib's path finder, whose extension-module loaders defer SIGINT."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and type(spec.loader) is importlib.machinery.ExtensionFileLoader:
            spec.loader = _DeferringLoader(spec.loader.name, spec.loader.path)
        return spec

    @classmethod
    def invalidate_caches(cls):
        importlib.machinery.PathFinder.invalidate_caches()


def install() -> None:
    """Load every extension module from now on with SIGINT deferred: a finder that asks
    ``sys.meta_path``'s path finder, and wraps the loaders of extension modules, goes in
    just before it (so it finds the same modules)."""
    for i, finder in enumerate(sys.meta_path):
        if finder is _Finder:
            return
        if finder is importlib.machinery.PathFinder:
            sys.meta_path.insert(i, _Finder)
            return


# A Ctrl-C that lands where Python cannot raise it (a weakref callback inside the import
# machinery, a __del__) is "ignored" with a four-line traceback on stderr and the
# command goes on. The CLI's hook keeps it quiet and remembers it: the command ends
# with 130 and one line once it is done (cli.entry).
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
