"""``python -m graphmem``: see graphmem.cli.entry (a Ctrl-C at any point exits 130)."""
import sys

try:
    from graphmem import interrupts
    interrupts.catch_unraisable()
    from graphmem.cli import entry
except KeyboardInterrupt:  # while the CLI's first modules load
    sys.stderr.write("graphmem: interrupted\n")
    sys.exit(130)
entry()
