"""``report MODEL --dim seq=1..4096 --html PAGE``: memory against a free dim, one line
per category (weights, graph inputs, graph outputs, the aliased peak, the range plan's
arena, the total), the budget as a dashed line when given, and the formulas."""
from __future__ import annotations

import html
import math

from graphmem.ranges.evaluate import evaluate
from graphmem.ranges.rangeplan import RangePlan
from graphmem.ranges.serving import probe_values

COLOURS = ("#1f77b4", "#ff7f0e", "#8c564b", "#2ca02c", "#d62728", "#9467bd")


def series(rp: RangePlan, dim: str, others: dict, count: int = 24) -> list[dict]:
    """Each category's bytes at ``count`` values of ``dim`` (others fixed), evaluated."""
    rows = []
    for v in probe_values(*rp.dims[dim], count=count):
        b = {**others, dim: v}
        plan = evaluate(rp, b)
        weights = rp.weights_bytes.at(b)
        rows.append({dim: v, "weights": weights,
                     "graph inputs": sum(
                         t.bytes for t in plan.tensors.values() if t.kind == "input"),
                     "graph outputs": sum(
                         t.bytes for t in plan.tensors.values() if t.kind == "output"),
                     "aliased peak": plan.stats["aliased_peak_bytes"],
                     "arena (range plan)": plan.arena_bytes,
                     "total (weights + arena)": weights + plan.arena_bytes})
    return rows


def page(rp: RangePlan, formulas: dict, budget: int | None = None) -> str:
    """The whole page: one plot per free dim (the others at their upper ends), then the
    formulas of every segment."""
    e = html.escape
    plots = []
    for dim in rp.dims:
        others = {n: hi for n, (lo, hi) in rp.dims.items() if n != dim}
        plots.append(_plot(series(rp, dim, others), dim, others, budget))
    rows = [("weights", formulas["weights_bytes"]), ("graph inputs", formulas["input_bytes"]),
            ("graph outputs", formulas["output_bytes"])]
    for s in formulas["segments"]:
        where = ", ".join(f"{n}={a}..{b}" for n, (a, b) in s["dims"].items())
        rows += [(f"aliased peak, {where}", s["aliased_peak_bytes"] or "evaluated per binding"),
                 (f"arena, {where}", s["arena_bytes"] or "evaluated per binding")]
    table = "".join(f"<tr><td>{e(k)}</td><td><code>{e(v)}</code></td></tr>" for k, v in rows)
    box = ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in rp.dims.items())
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>graphmem: "
            f"{e(rp.model)} over {e(box)}</title><style>body{{font:14px sans-serif;margin:20px}}"
            f"td{{padding:2px 8px;vertical-align:top}}code{{white-space:pre-wrap}}"
            f".legend i{{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}}"
            f"</style></head><body><h1>{e(rp.model)}: memory over {e(box)}</h1>"
            f"{''.join(plots)}<h2>Formulas (bytes)</h2><table>{table}</table></body></html>\n")


def _plot(rows: list[dict], dim: str, others: dict, budget: int | None) -> str:
    e = html.escape
    keys = [k for k in rows[0] if k != dim]
    xs = [r[dim] for r in rows]
    top = max([r[k] for r in rows for k in keys] + [budget or 0, 1]) * 1.08
    w, h, ml, mr, mt, mb = 760, 300, 90, 16, 14, 36
    lo, hi = xs[0], xs[-1]
    # a linear axis: memory that grows linearly with the dim reads as a straight line
    # (on a log axis it looked explosive)

    def x(v: float) -> float:
        if hi == lo:
            return (ml + w - mr) / 2
        return ml + (v - lo) / (hi - lo) * (w - ml - mr)

    def y(v: float) -> float:
        return h - mb - v * (h - mt - mb) / top
    ticks = _ticks(lo, hi)
    parts = [f'<text x="{x(v):.1f}" y="{h - mb + 16}" text-anchor='
             f'"{"end" if v == hi and len(ticks) > 1 else "middle"}">{v:,}</text>'
             for v in ticks]
    for v in _size_ticks(top):
        parts.append(f'<line x1="{ml}" x2="{w - mr}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#eee"/><text x="{ml - 6}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{_axis_size(v, top)}</text>')
    if budget:
        parts.append(f'<line x1="{ml}" x2="{w - mr}" y1="{y(budget):.1f}" y2="{y(budget):.1f}" '
                     f'stroke="#c0392b" stroke-dasharray="6 3"/><text x="{ml + 4}" '
                     f'y="{y(budget) - 4:.1f}" style="fill:#c0392b">budget</text>')
    legend = []
    for i, k in enumerate(keys):
        c = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{'M' if j == 0 else 'L'}{x(r[dim]):.1f},{y(r[k]):.1f}"
                        for j, r in enumerate(rows))
        parts.append(f'<path d="{path}" fill="none" stroke="{c}" stroke-width="2"><title>'
                     f'{e(k)}</title></path>')
        legend.append(f'<i style="background:{c}"></i>{e(k)}')
    fixed = ", ".join(f"{n}={v}" for n, v in others.items())
    return (f"<h2>bytes against {e(dim)}"
            f"{f' at {e(fixed)}' if fixed else ''}</h2><div class='legend'>{''.join(legend)}"
            f"</div><svg width='{w}' height='{h}' role='img' aria-label='memory against "
            f"{e(dim)}'>{''.join(parts)}</svg>")


def _ticks(lo: int, hi: int, most: int = 6) -> list[int]:
    """Round values from ``lo`` to ``hi`` for a linear axis: the ends and the multiples
    of a round step between them."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / (most - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = max(1, int(next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)))
    inner = range((lo // step + 1) * step, hi, step)
    return [lo, *[v for v in inner if (v - lo) > step / 3 and (hi - v) > step / 3], hi]


def _size_ticks(top: float) -> list[float]:
    """Round sizes from 0 up to ``top`` for the bytes axis, in its unit."""
    scale = next((s for s in (2 ** 30, 2 ** 20, 2 ** 10) if top >= s), 1)
    raw = top / scale / 5
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw) * scale
    return [k * step for k in range(int(top // step) + 1)]


def _axis_size(v: float, top: float) -> str:
    """An axis label in the unit of the axis's top (every label of an axis in one)."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if top >= scale:
            return f"{v / scale:,.3g} {unit}"
    return f"{v:,.0f} B"
