"""stdout and stderr faults answered once: a full device, a closed descriptor, a reader
that went away (``graphmem report | head``).

:func:`guard` puts each standard stream behind :class:`Guarded`, which passes writes
through until one fails with an OSError (ENOSPC on /dev/full, EPIPE, EIO, EBADF) or the
stream was closed when the process started (``>&-``): from then on it takes what is
written and drops it, and says which fault it met. The command runs to its end (its
files are written, verify reaches its verdict) and the CLI answers the fault in one line
with exit status :data:`OUTPUT_FAILED` (verify keeps its verdict's 0/1/2). The
descriptor of a failed stream is pointed at /dev/null, so that what Python or a library
still holds in a buffer flushes there, not into a traceback at exit; a descriptor
closed at start gets /dev/null too, so that no file graphmem opens takes its number.
"""
from __future__ import annotations

import errno
import io
import os
import sys

# sysexits.h's EX_IOERR: the command could not write its output
OUTPUT_FAILED = 74


class Guarded(io.TextIOBase):
    """A text stream in front of ``stream`` that turns its first OSError into
    :attr:`fault` and drops every write after it."""

    def __init__(self, stream, fd: int, fault: str | None = None):
        self._stream = stream
        self._fd = fd
        self.fault = fault
        self.written = False  # anything was written (a closed stdout is a fault then)
        self.before_first_write = None  # called once, before the first text is written

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            self.fault = "its reader closed the pipe"
        elif isinstance(exc, OSError) and exc.errno is not None:
            self.fault = os.strerror(exc.errno).lower()
        else:
            self.fault = "it is closed"
        _to_null(self._fd)

    def write(self, text) -> int:
        if text and not self.written:
            self.written = True
            if self.before_first_write is not None:
                self.before_first_write()
        if self.fault is None:
            try:
                self._stream.write(text)
            except (OSError, ValueError) as exc:
                self._failed(exc)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.fault is None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as exc:
                self._failed(exc)

    def isatty(self) -> bool:
        return self.fault is None and _call(self._stream, "isatty", False)

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8")

    @property
    def errors(self):
        return getattr(self._stream, "errors", "strict")

    @property
    def buffer(self):
        return getattr(self._stream, "buffer", None)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _call(stream, name, default):
    try:
        return getattr(stream, name)()
    except (OSError, ValueError, AttributeError):
        return default


def _to_null(fd: int) -> None:
    """Point descriptor ``fd`` at /dev/null (best effort)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    if null != fd:
        try:
            os.dup2(null, fd)
        except OSError:
            pass
        os.close(null)


def _open(fd: int):
    """``fd`` is open: None; closed: /dev/null put in its place, and the fault."""
    try:
        os.fstat(fd)
        return None
    except OSError:
        _to_null(fd)
        return "it is closed"


class _Guard:
    def __init__(self):
        self.saved = (sys.stdout, sys.stderr)
        self.stdout = self._wrap(sys.stdout, 1)
        self.stderr = self._wrap(sys.stderr, 2)
        sys.stdout, sys.stderr = self.stdout, self.stderr

    @staticmethod
    def _wrap(stream, fd: int) -> Guarded:
        if isinstance(stream, Guarded):
            return stream
        if stream is None:  # the process started with the descriptor closed
            _open(fd)
            return Guarded(open(fd, "w", closefd=False, errors="backslashreplace"), fd,
                           "it is closed")
        return Guarded(stream, fd, _open(fd) if _fd_of(stream) == fd else None)

    def restore(self) -> None:
        sys.stdout, sys.stderr = self.saved
        for s in (self.stdout, self.stderr):
            s.flush()


def _fd_of(stream) -> int | None:
    if stream is None:
        return None
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None


def guard() -> _Guard:
    """Put sys.stdout and sys.stderr behind :class:`Guarded` until ``restore()``."""
    return _Guard()
