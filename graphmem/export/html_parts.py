"""Sections of the HTML report beyond the arena: the whole footprint as stacked bars,
the batch/dtype what-ifs as a plot, a training step's figures.

Each is plain HTML and inline SVG written here (no script), so the numbers read in the
page's text with or without JavaScript, and a browser test finds them in the rendered
text. :func:`graphmem.export.html.render` places them after the headline.
"""
from __future__ import annotations

import html
import math

from graphmem.analysis.footprint import format_bytes

MIB = 2 ** 20
# one colour per part, in stack order (the arena's own colour last kept for the arena)
PART_COLOURS = {"weights": "#4e79a7", "frozen_weights": "#a0cbe8", "master_weights": "#76b7b2",
                "optimizer": "#b07aa1",
                "constants": "#9c755f", "workspace": "#edc948", "arena": "#59a14f",
                "kept": "#59a14f", "gradients": "#e15759", "backward": "#f28e2b",
                "arena_rest": "#bab0ac"}
LINE_COLOURS = ("#4e79a7", "#e15759", "#59a14f", "#b07aa1", "#f28e2b", "#76b7b2")


def _mib(n: int | float) -> str:
    return format_bytes(n)


INFERENCE_CAPTION = ("Weights as the file stores them, the working buffer the largest "
                     "convolution's kernel takes (the workspace rule is in its label), and "
                     "the planned activation arena: what one inference holds.")


def page_sections(fp: dict, whatif: list | None = None, batch: int | None = None,
                  budget: int | None = None, fit: dict | None = None) -> str:
    """The report page's sections beyond the arena: the whole footprint ``fp``
    (:mod:`graphmem.analysis.footprint`), the largest batch under the budget (``fit``,
    what ``report --json`` gives as ``fit``), the what-ifs as a plot when there are any."""
    html_text = footprint_section([fp], budget, INFERENCE_CAPTION, fit_sentence(fit))
    if whatif:
        html_text += whatif_section(whatif, budget, batch,
                                    largest=(fit or {}).get("batch") or None)
    return html_text


def fit_sentence(fit: dict | None) -> str:
    """The largest batch under a budget in words (``report``'s ``fit``), or ""."""
    if not fit:
        return ""
    if fit.get("error"):
        return f"No largest batch under the budget: {fit['error']}."
    if fit["batch"] == 0:
        return (f"Even batch 1 does not fit the budget of {_mib(fit['budget_bytes'])}: "
                f"it needs {_mib(fit['total_bytes'])}.")
    return (f"The largest batch that fits the budget of {_mib(fit['budget_bytes'])} is "
            f"{fit['batch']:,} ({_mib(fit['total_bytes'])}); batch {fit['batch'] + 1:,} "
            f"needs {_mib(fit['next_total_bytes'])}, "
            f"{fit['next_total_bytes'] - fit['budget_bytes']:,} bytes over "
            f"({fit['plans']} plans made).")


def inference_sections(view, graph, workspace_rule: str = "mlas", threads: int = 1) -> str:
    """:func:`page_sections` for a plan of ``graph`` alone (``export --html``), the
    workspace under ``workspace_rule`` (:mod:`graphmem.analysis.workspace`)."""
    from graphmem.analysis.breakdown import totals
    from graphmem.analysis.footprint import inference
    return page_sections(inference(totals(graph, view.plan, workspace_rule, threads),
                                   title=f"{view.plan.model}, inference"))


def footprint_section(footprints: list[dict], budget: int | None = None,
                      caption: str = "", answer: str = "") -> str:
    """The whole footprint: one stacked bar per footprint, all to one scale, each with
    its parts listed (label, bytes, share, what it is) and the total."""
    e = html.escape
    scale = max([f["total_bytes"] for f in footprints] + [budget or 0, 1])
    blocks = []
    for f in footprints:
        bar = "".join(
            f'<div class="seg" style="width:{100 * p["bytes"] / scale:.3f}%;'
            f'background:{PART_COLOURS.get(p["key"], "#999")}" '
            f'title="{e(p["label"])}: {_mib(p["bytes"])}"></div>' for p in f["parts"])
        if budget:
            bar += (f'<div class="budget" style="left:{100 * budget / scale:.3f}%" '
                    f'title="budget {_mib(budget)}"></div>')
        rows = "".join(
            f'<tr data-part="{e(p["key"])}"><td class=name title="{e(p["label"])}">'
            f'<i style="background:{PART_COLOURS.get(p["key"], "#999")}"></i>'
            f'{e(p["label"])}</td>'
            f'<td class=r>{_mib(p["bytes"])}</td><td class=r>{p["bytes"]:,}</td>'
            f'<td class=r>{100 * p["bytes"] / max(f["total_bytes"], 1):.1f}%</td>'
            f'<td class=note>{e(p["note"])}</td></tr>' for p in f["parts"])
        over = ""
        if budget:
            word = "fits" if f["total_bytes"] <= budget else "does not fit"
            over = f" &middot; {word} the budget of {_mib(budget)}"
        blocks.append(
            f'<div class="footprint" data-kind="{e(f["kind"])}"><h3>{e(f["title"])}: '
            f'<span class="total">{_mib(f["total_bytes"])}</span> '
            f'({f["total_bytes"]:,} bytes){over}</h3>'
            f'<div class="stack">{bar}</div>'
            f'<table class="parts"><thead><tr><th>part</th><th class=r>size</th>'
            f'<th class=r>bytes</th><th class=r>share</th><th>what it is</th></tr></thead>'
            f'<tbody>{rows}<tr class="sum"><td><b>total</b></td>'
            f'<td class=r><b>{_mib(f["total_bytes"])}</b></td>'
            f'<td class=r>{f["total_bytes"]:,}</td><td class=r>100%</td><td></td></tr>'
            f'</tbody></table></div>')
    answer = f'<p id="fit"><b>{e(answer)}</b></p>' if answer else ""
    return (f'<section id="footprint"><h2>Whole footprint</h2>'
            f'<div>{e(caption)}</div>{answer}{"".join(blocks)}</section>')


def whatif_section(rows: list[dict], budget: int | None = None, model_batch: int | None = None,
                   key: str = "total_bytes", title: str = "What-ifs: memory against batch",
                   largest: int | None = None) -> str:
    """The what-ifs as a plot: total bytes against batch, one line per dtype, the budget
    as a dashed line when given, the largest batch that fits it (``largest``) as a
    vertical line where it lies in the plot; then the rows as a table."""
    e = html.escape
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    batches = sorted({r["batch"] for r in rows})
    top = max([r[key] for r in rows] + [budget or 0, 1]) * 1.08
    w, h, ml, mr, mt, mb = 760, 300, 74, 16, 14, 36

    def x(b: float) -> float:  # linear: memory grows linearly with the batch, and looks it
        lo, hi = 0, batches[-1]
        return ml + (b - lo) / max(hi - lo, 1) * (w - ml - mr)

    def y(v: float) -> float:
        return h - mb - v * (h - mt - mb) / top

    parts = []
    unit, scale = next(((u, sc) for u, sc in (("GiB", 2 ** 30), ("MiB", MIB), ("KiB", 1024))
                        if top >= sc), ("B", 1))
    step = _nice(top / scale / 5)
    v = 0.0
    while v * scale <= top:
        parts.append(f'<line x1="{ml}" x2="{w - mr}" y1="{y(v * scale):.1f}" '
                     f'y2="{y(v * scale):.1f}" stroke="#eee"/><text x="{ml - 6}" '
                     f'y="{y(v * scale) + 4:.1f}" text-anchor="end">{v:,.6g}</text>')
        v += step
    xstep = next(m * 10 ** e for e in range(12) for m in (1, 2, 5)
                 if m * 10 ** e >= batches[-1] / 8)  # whole batches
    tick = 0.0
    while tick <= batches[-1] + 1e-9:
        parts.append(f'<text x="{x(tick):.1f}" y="{h - mb + 16}" text-anchor="middle">'
                     f'{tick:,.6g}</text>')
        tick += xstep
    parts.append(f'<text x="{(ml + w - mr) / 2:.0f}" y="{h - 4}" text-anchor="middle">batch'
                 f'</text><text x="6" y="{mt + 4}">{unit}</text>')
    if budget:
        parts.append(f'<line class="budget" x1="{ml}" x2="{w - mr}" y1="{y(budget):.1f}" '
                     f'y2="{y(budget):.1f}" stroke="#c0392b" stroke-dasharray="6 3"/>'
                     f'<text x="{ml + 4}" y="{y(budget) - 4:.1f}" style="fill:#c0392b">budget '
                     f'{_mib(budget)}</text>')
    if largest and largest <= batches[-1]:
        parts.append(f'<line class="largest" x1="{x(largest):.1f}" x2="{x(largest):.1f}" '
                     f'y1="{mt}" y2="{h - mb}" stroke="#2e7d32" stroke-dasharray="4 3"/>'
                     f'<text x="{x(largest) - 4:.1f}" y="{mt + 12}" text-anchor="end" '
                     f'style="fill:#2e7d32">largest batch that fits: {largest:,}</text>')
    legend = []
    for k, dt in enumerate(dtypes):
        colour = LINE_COLOURS[k % len(LINE_COLOURS)]
        pts = sorted((r["batch"], r[key]) for r in rows if r["dtype"] == dt)
        path = " ".join(f"{'M' if i == 0 else 'L'}{x(b):.1f},{y(v):.1f}"
                        for i, (b, v) in enumerate(pts))
        parts.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{x(b):.1f}" cy="{y(v):.1f}" r="3.5" fill="{colour}">'
                  f'<title>{e(dt)}, batch {b}: {_mib(v)}</title></circle>' for b, v in pts]
        legend.append(f'<span><i style="background:{colour}"></i>{e(dt)}</span>')
    svg = (f'<svg id="whatif-plot" width="{w}" height="{h}" role="img" '
           f'aria-label="memory against batch">{"".join(parts)}</svg>')
    cols = [("batch", "batch"), ("dtype", "dtype"), ("weight_bytes", "weights"),
            ("arena_bytes", "arena"), ("workspace_bytes", "workspace"),
            ("total_bytes", "total")]
    cols = [(k, label) for k, label in cols if all(k in r for r in rows)]
    head = "".join(f'<th{" class=r" if k not in ("dtype",) else ""}>{e(label)}</th>'
                   for k, label in cols)
    if budget:
        head += "<th>budget</th>"
    body = ""
    for r in rows:
        cells = "".join(
            f"<td{' class=r' if k != 'dtype' else ''}>"
            f"{e(str(r[k])) if not k.endswith('_bytes') else _mib(r[k])}</td>"
            for k, _ in cols)
        if budget:
            cells += f"<td>{'fits' if r[key] <= budget else 'over'}</td>"
        body += f"<tr>{cells}</tr>"
    note = f" The model as given has batch {model_batch}." if model_batch else ""
    return (f'<section id="whatif"><h2>{e(title)}</h2><div>Each point is its own plan: '
            f'the model rewritten to that batch (and dtype) and planned again.{note}</div>'
            f'<div class="legend">{"".join(legend)}</div><div class="plot">{svg}</div>'
            f'<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>')


def training_section(rows: list[tuple[str, int | None, str]], title: str) -> str:
    """A training step's figures as a table: (label, bytes or None, note) rows."""
    e = html.escape
    body = "".join(
        f'<tr><td class=name title="{e(label)}">{e(label)}</td>'
        f"<td class=r>{'' if b is None else _mib(b)}</td>"
        f"<td class=r>{'' if b is None else f'{b:,}'}</td><td class=note>{e(note)}</td></tr>"
        for label, b, note in rows)
    return (f'<section id="training"><h2>{e(title)}</h2><table><thead><tr><th></th>'
            f'<th class=r>size</th><th class=r>bytes</th><th>note</th></tr></thead>'
            f'<tbody>{body}</tbody></table></section>')


def _nice(raw: float) -> float:
    """A round step of about ``raw`` (1, 2, 2.5 or 5 times a power of ten)."""
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


CSS = """
.stack{position:relative;display:flex;height:26px;border:1px solid #ccc;background:#f6f6f6;
 margin:6px 0;max-width:1000px}
.stack .seg{height:100%}.stack .budget{position:absolute;top:-4px;bottom:-4px;width:0;
 border-left:2px dashed #c0392b}
.footprint h3{font-size:14px;margin:10px 0 2px}
table.parts i,.legend i{display:inline-block;width:12px;height:12px;margin-right:6px;
 vertical-align:-2px}
table.parts tr.sum td{border-top:1px solid #999}
"""
