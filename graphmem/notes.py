"""Notes a command prints on stderr besides its result ("--dim-default 1 bound batch=1",
"squeezenet is not a file: using onnx's light copy of the Model Zoo graph ..."). They are held while the
command works and printed before its first output (:func:`release`: the CLI calls it
on the first write to stdout, and a progress line through a pipe does), or when it
ends (:func:`flush`); dropped when it stops on bad input before any output, so that an
exit code of 2 comes with exactly one ``graphmem:`` line. Outside the CLI (the Python
API) a note is printed at once.
"""
from __future__ import annotations

import sys
import threading

from graphmem.errors import printable

_held: list[str] | None = None
_said: set[str] = set()  # the held notes already printed by release()
_lock = threading.Lock()


def clear() -> None:
    """Start holding notes (the CLI, at the start of a command)."""
    global _held
    with _lock:
        _held = []
        _said.clear()


def note(text: str) -> None:
    """``graphmem: text`` on stderr, now or when the command's output starts (a held
    note said twice is printed once: a command may resolve its model in several
    places)."""
    line = printable(f"graphmem: {text}")
    with _lock:
        if _held is None:
            print(line, file=sys.stderr)
        elif line not in _held and line not in _said:
            _held.append(line)


def release() -> None:
    """Print the notes held so far, before the command's first output, and go on
    holding later ones."""
    with _lock:
        if not _held:
            return
        lines = list(_held)
        _said.update(lines)
        _held.clear()
    for line in lines:
        print(line, file=sys.stderr, flush=True)


def flush() -> None:
    """Print the held notes and stop holding."""
    global _held
    with _lock:
        held, _held = _held or [], None
        _said.clear()
    for line in held:
        print(line, file=sys.stderr)


def drop() -> None:
    """Forget the held notes and stop holding (a command that stopped on bad input, was
    interrupted or failed: later notes, an API caller's in the same process, print at
    once again)."""
    global _held
    with _lock:
        _held = None
        _said.clear()
