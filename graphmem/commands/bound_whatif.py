"""``report --bound NAME=A,B,C`` (issue 53): the model re-planned with one data-dependent
size at several bounds ("memory at 10, 100 and 1,000 detections"), each its own plan,
in report's text, JSON (``bound_whatif``) and HTML."""
from __future__ import annotations

import html

from graphmem.errors import GraphmemError


def split(items: list[str]) -> tuple[list[str], tuple[str, list[int]] | None]:
    """report's ``--bound`` items: those of one value (the report's own plan), and the
    one ``NAME=A,B,...`` of several (the what-ifs), refused in one line where two
    symbols have lists or a value is not a count."""
    plain, sweep = [], None
    for item in items:
        name, _, values = item.partition("=")
        if "," not in values:
            plain.append(item)
            continue
        if sweep is not None:
            raise GraphmemError(f"--bound {item!r}: what-ifs for one symbol at a time "
                                f"({sweep[0]} has a list already)")
        try:
            counts = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise GraphmemError(f"--bound {item!r}: not a list of counts, e.g. "
                                "--bound NonZero_3=10,100,1000") from None
        if not name.strip() or not counts or min(counts) < 0:
            raise GraphmemError(f"--bound {item!r}: give NAME=N1,N2,... with counts of at "
                                "least 0, e.g. --bound NonZero_3=10,100,1000")
        sweep = (name.strip(), counts)
    return plain, sweep


def sweep_bounds(source, given: dict[str, int], name: str, values: list[int], options: dict,
                 progress=None) -> list[dict]:
    """One footprint per value of ``name`` (the other bounds as ``given``), each from its
    own plan of ``source`` (the command's ModelSource): the bound asked, the bound
    planned (the graph's where the one asked is looser), arena and total bytes."""
    from graphmem.analysis.whatif import footprint
    rows = []
    for i, v in enumerate(values):
        if progress is not None:
            progress(f"what-if {name}={v:,} ({i + 1} of {len(values)})")
        graph = source.load(bounds={**given, name: v})
        record = graph.data_bounds
        if name not in record.symbols and name not in record.body_symbols:
            known = ", ".join(sorted(record.symbols)[:6]) or "none"
            raise GraphmemError(f"--bound {name}: the model has no data-dependent size of "
                                f"that name (its symbols: {known})")
        sym = record.symbols.get(name) or record.body_symbols[name]
        fp = footprint(graph, **options)
        rows.append({"symbol": name, "asked": v, "bound": sym.bound, "proven": sym.proven,
                     "bounds": {s: x.bound for s, x in record.symbols.items()},
                     **{k: fp[k] for k in ("arena_bytes", "weight_bytes", "workspace_bytes",
                                           "total_bytes")}})
    return rows


def print_rows(console, rows: list[dict]) -> None:
    from rich.table import Table
    name = rows[0]["symbol"]
    table = Table(title=f"what-if --bound {name}: each bound its own plan", header_style="bold")
    for col in (name, "planned at", "arena", "total (weights + arena + workspace)"):
        table.add_column(col, justify="right")
    for r in rows:
        at = f"{r['bound']:,}" + (" (the graph's)" if r["bound"] < r["asked"] else "")
        table.add_row(f"{r['asked']:,}", at, f"{r['arena_bytes']:,} B",
                      f"{r['total_bytes']:,} B")
    console.print(table)


def html_section(rows: list[dict]) -> str:
    """The what-ifs as a table of the report page."""
    e = html.escape
    name = rows[0]["symbol"]
    body = "".join(
        f"<tr><td>{r['asked']:,}</td><td>{r['bound']:,}</td><td>{r['arena_bytes']:,}</td>"
        f"<td>{r['arena_bytes'] / 2**20:,.2f}</td><td>{r['total_bytes']:,}</td></tr>"
        for r in rows)
    return (f'<section id="bound-whatif"><h2>What-if: {e(name)} at {len(rows)} bounds</h2>'
            f"<div>Each row is its own plan, with the data-dependent size {e(name)} at most "
            "the count asked (the graph's own bound where that is tighter).</div>"
            f"<table><thead><tr><th>{e(name)} asked</th><th>planned at</th><th>arena B</th>"
            "<th>arena MiB</th><th>total B</th></tr></thead><tbody>"
            f"{body}</tbody></table></section>")
