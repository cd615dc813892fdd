"""The lines the commands print for sizes that depend on the data (issue 53)."""
from __future__ import annotations

from graphmem.commands.common import shown


# the most symbol counts and bounded tensors verify lists
ROWS = 12


def print_bounded(console, report) -> None:
    """verify's counts: each symbol's value at run time against its bound (every one:
    a detector has tens, and each is what the run proved of its bound), and the largest
    bounded tensors' elements against those planned."""
    if not report.bounded and not report.symbol_counts:
        return
    for line in report.symbol_counts:
        console.print(f"count         {shown(line)}", highlight=False, soft_wrap=True)
    if not report.bounded:  # (a body's symbols alone: its node's outputs are static)
        return
    console.print(f"bounded       {len(report.bounded)} tensors ran with the sizes the "
                  "data gave, each in the first bytes of its slot:")
    # the largest planned first: where the bounds cost the most
    largest = sorted(report.bounded, key=lambda c: -c.planned)
    for c in largest[:ROWS]:
        symbols = ", ".join(c.symbols[:3]) + (f", +{len(c.symbols) - 3}"
                                              if len(c.symbols) > 3 else "")
        console.print(f"  {shown(c.tensor)}: {c.elements:,} of {c.planned:,} elements "
                      f"planned {list(c.shape)} ({symbols})",
                      highlight=False, soft_wrap=True)
    if len(largest) > ROWS:
        within = ", all within their slots" if report.overflow is None else ""
        console.print(f"  ... and {len(largest) - ROWS:,} more bounded tensors{within}",
                      highlight=False)


def where(v: dict) -> str:
    """A symbol's node in words: ``node 6``, or ``node 6 in the else_branch of node 7``
    for a body's symbol."""
    scope = v.get("scope")
    return f"node {v['node']}" + (f" in the {scope['attr']} of node {scope['node']}"
                                  if isinstance(scope, dict) else "")


def bounded_row(plan) -> tuple[str, str, str, str]:
    """plan's summary row: the arena bytes that hold a bounded tensor at some step, the
    symbols and their bounds, and how many tensors each governs."""
    from graphmem.plan.bounded import summary
    s = summary(plan)
    shown_at_most = 6
    items = list(s["symbols"].items())
    symbols = "; ".join(f"{name} <= {v['bound']:,} ({v['op']} {where(v)}, "
                        f"{len(v['tensors'])} tensors)" for name, v in items[:shown_at_most])
    if len(items) > shown_at_most:
        by_op: dict[str, list[int]] = {}
        for _, v in items[shown_at_most:]:
            by_op.setdefault(v["op"], []).append(v["bound"])
        symbols += "; and " + ", ".join(
            f"{len(b)} {op} (<= {min(b):,}..{max(b):,})" if min(b) != max(b) else
            f"{len(b)} {op} (each <= {b[0]:,})" for op, b in by_op.items())
    share = 100 * s["arena_bytes_covered"] / plan.arena_bytes if plan.arena_bytes else 0.0
    covered = s["arena_bytes_covered"]
    from graphmem.analysis.footprint import format_bytes
    return ("bounded", f"{covered:,}", format_bytes(covered),
            shown(f"{share:.1f}% of the arena holds one of {s['tensors']} tensors planned at "
                  f"a bound ({s['slot_bytes']:,} B of slots): {symbols}"))


def print_bounds(console, s: dict, arena_bytes: int) -> None:
    """report's table of the bounded symbols: each one's bound, what proves it, the
    tensors it governs; and the arena bytes that hold a bounded tensor."""
    from rich.table import Table
    share = 100 * s["arena_bytes_covered"] / arena_bytes if arena_bytes else 0.0
    table = Table(title=f"sizes that depend on the data: {len(s['symbols'])} bounds; "
                        f"{s['arena_bytes_covered']:,} B ({share:.1f}%) of the arena hold one "
                        f"of {s['tensors']} tensors planned at a bound",
                  header_style="bold")
    for col in ("symbol", "op", "node", "bound", "proven", "tensors governed"):
        table.add_column(col, justify="right" if col in ("node", "bound", "proven") else "left")
    items = list(s["symbols"].items())
    for name, v in items[:ROWS]:
        governed = v["tensors"]
        names = ", ".join(governed[:3]) + (f", +{len(governed) - 3}" if len(governed) > 3
                                           else "")
        proven = "--bound" if v.get("proven") is None else f"{v['proven']:,}"
        table.add_row(shown(name), v["op"], where(v).removeprefix("node "), f"{v['bound']:,}",
                      proven,
                      f"{len(governed)}: {shown(names)}")
    if len(items) > ROWS:
        table.add_row(f"... {len(items) - ROWS} more", "", "", "", "", "")
    console.print(table)
