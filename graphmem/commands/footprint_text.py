"""The whole footprint in the terminal: one stacked bar per footprint, a row per part.

Each part's bar starts where the one above it ended, so the rows read as one stack;
the total row spans them all. Several footprints (inference beside a training step)
share one scale. Every part has its own fill character, so the picture reads without
colour too (a file, a pipe)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from graphmem.commands.common import shown
from graphmem.analysis.footprint import format_bytes

BAR = 48  # characters of the largest total
FILLS = ("█", "▓", "▒", "░", "▚", "▞", "▙", "▟")
COLOURS = ("blue", "magenta", "green", "yellow", "cyan", "red", "bright_blue", "white")


def mib(n: int) -> str:
    """A size in the unit that reads best (:func:`~graphmem.commands.sizes.format_bytes`)."""
    return format_bytes(n)


def print_footprints(console: Console, footprints: list[dict],
                     budget: int | None = None) -> None:
    """One table per footprint (:mod:`graphmem.analysis.footprint`), all drawn to the
    scale of the largest total (or of ``budget``, if larger: its mark closes the bar)."""
    scale = max([f["total_bytes"] for f in footprints] + [budget or 0, 1])
    for f in footprints:
        table = Table(title=f"whole footprint: {shown(f['title'])}, "
                            f"{mib(f['total_bytes'])}", header_style="bold")
        for col, justify in (("part", "left"), ("size", "right"), ("%", "right"),
                             ("", "left"), ("what it is", "left")):
            table.add_column(col, justify=justify, no_wrap=col == "")
        start = 0.0
        for k, p in enumerate(f["parts"]):
            width = BAR * p["bytes"] / scale
            lead = round(start)
            cells = max(1 if p["bytes"] else 0, round(start + width) - lead)
            fill, colour = FILLS[k % len(FILLS)], COLOURS[k % len(COLOURS)]
            table.add_row(shown(p["label"]), mib(p["bytes"]),
                          f"{100 * p['bytes'] / max(f['total_bytes'], 1):.1f}",
                          " " * lead + f"[{colour}]{fill * cells}[/]", shown(p["note"]))
            start += width
        total_bar = "".join(f"[{COLOURS[k % len(COLOURS)]}]"
                            f"{FILLS[k % len(FILLS)] * max(1 if p['bytes'] else 0, round(BAR * p['bytes'] / scale))}[/]"
                            for k, p in enumerate(f["parts"]))
        if budget:
            mark = round(BAR * budget / scale)
            total_bar += " " * max(0, mark - round(BAR * f["total_bytes"] / scale)) + "|"
        table.add_row("[bold]total", f"[bold]{mib(f['total_bytes'])}", "100.0", total_bar,
                      f"budget {mib(budget)}: the '|'" if budget else "")
        console.print(table)
