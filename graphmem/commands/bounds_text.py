"""The lines the commands print for sizes that depend on the data (issue 53)."""
from __future__ import annotations

from graphmem.commands.common import shown


def print_bounded(console, report) -> None:
    """verify's counts: each symbol's value at run time against its bound, and each
    bounded tensor's elements against those planned."""
    if not report.bounded:
        return
    for line in report.symbol_counts:
        console.print(f"count         {shown(line)}", highlight=False, soft_wrap=True)
    console.print(f"bounded       {len(report.bounded)} tensors ran with the sizes the "
                  "data gave, each in the first bytes of its slot:")
    for c in report.bounded:
        console.print(f"  {shown(c.tensor)}: {c.elements:,} of {c.planned:,} elements "
                      f"planned {list(c.shape)} ({', '.join(c.symbols)})",
                      highlight=False, soft_wrap=True)
