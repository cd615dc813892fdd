"""``python -m graphmem``: see graphmem.cli.entry (a Ctrl-C or SIGTERM at any point
exits 130 or 143 with one line).

SIGINT and SIGTERM are held back (recorded, not raised) while the CLI's modules load:
from graphmem/__init__.py's first statements, which runpy runs before this file (its
list is taken over here), or from this file's first statements where the package was
imported otherwise. ``_signal`` is compiled into the interpreter, so nothing is read
from a file before they are held. cli.main delivers what was held once its handlers are
in place, inside the block that answers it in one line.
"""
import _signal
import sys

held = getattr(sys.modules.get("graphmem"), "_held", None)
if held is None:
    held = []

    def _hold(signum, frame) -> None:
        held.append(signum)

    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _hold)
    if _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL:
        _signal.signal(_signal.SIGTERM, _hold)

from graphmem import interrupts  # noqa: E402 (after the signals are held)

interrupts.catch_unraisable()
from graphmem.cli import entry  # noqa: E402

entry(held)
