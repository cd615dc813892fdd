"""Notes a command prints on stderr besides its result ("--dim-default 1 bound batch=1",
"squeezenet is not a file; using the Model Zoo graph ..."). They are held until the
command ends: printed when it succeeds (or finds a plan wrong), dropped when it stops on
bad input, so that an exit code of 2 always comes with exactly one ``graphmem:`` line.
Outside the CLI (the Python API) a note is printed at once.
"""
from __future__ import annotations

import sys

from graphmem.errors import printable

_held: list[str] | None = None


def clear() -> None:
    """Start holding notes (the CLI, at the start of a command)."""
    global _held
    _held = []


def note(text: str) -> None:
    """``graphmem: text`` on stderr, now or when the command ends (a held note said
    twice is printed once: a command may resolve its model in several places)."""
    line = printable(f"graphmem: {text}")
    if _held is None:
        print(line, file=sys.stderr)
    elif line not in _held:
        _held.append(line)


def flush() -> None:
    """Print the held notes and stop holding."""
    global _held
    held, _held = _held or [], None
    for line in held:
        print(line, file=sys.stderr)


def drop() -> None:
    """Forget the held notes and stop holding (a command that stopped on bad input, was
    interrupted or failed: later notes, an API caller's in the same process, print at
    once again)."""
    global _held
    _held = None
