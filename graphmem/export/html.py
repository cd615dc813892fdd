"""The HTML memory report: one self-contained file, no network at view time.

The plan's data is embedded as JSON in a ``<script type="application/json">`` tag and
drawn by inline JavaScript into SVG (no library, no CDN): the memory timeline, the
arena layout, the sortable per-layer table. The headline numbers, the pass savings and
the tensors live at the peak step are also written as plain HTML, so they read without
JavaScript too. Mouse handling is delegated (one listener per SVG, not per rectangle)
so that densenet121's ~700 rectangles and 1,000 table rows stay responsive.

Script errors are written into ``<pre id="errors">`` (``window.onerror``), and
``<body data-drawn="1">`` is set once everything is drawn: the browser test reads both.
"""
from __future__ import annotations

import html
import json

from graphmem import __version__
from graphmem.analysis.breakdown import (dequantized_bytes, layer_table, param_count,
                                         running_stat_count, weight_bytes)
from graphmem.analysis.footprint import format_bytes
from graphmem.analysis.macs import mac_totals
from graphmem.core.ir import Graph
from graphmem.export.html_parts import CSS as PARTS_CSS
from graphmem.plan.view import PlanView, layer_label

_ESC = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


def report_data(view: PlanView, layers: list[dict] | None = None) -> dict:
    """The JSON the page draws from (plain lists, compact for large graphs).

    ``layers`` (``analysis.layer_table`` rows, in plan order) adds MACs, parameter
    counts and bytes moved per step to the layer table.
    """
    plan = view.plan
    cost = [[r.get("macs"), r.get("params"), r.get("bytes_moved")] for r in layers] \
        if layers else [[None, None, None] for _ in view.steps]
    step_of_node = {s.node: s.step for s in view.steps}
    index = {r.name: i for i, r in enumerate(view.tensors)}
    return {
        "model": plan.model, "format": plan.format, "alignment": plan.alignment,
        "arena": plan.arena_bytes, "stats": dict(plan.stats),
        "passes": [{"name": p.get("name"), "bytes_saved": p.get("bytes_saved")}
                   for p in plan.passes],
        "bindings": dict(plan.bindings), "steps": len(plan.order),
        "live": view.live, "live_unaliased": view.live_unaliased,
        "peak_step": view.peak_step, "peak": [index[t] for t in view.peak_tensors],
        # per step: [node index, op type, node name, MACs (null: no cost rule), params,
        # bytes moved]
        "ops": [[s.node, s.op, s.name, *cost[s.step]] for s in view.steps],
        # per tensor: name, kind, bytes, offset, first, last, storage, alias_of, alias,
        # slice_of, dtype, shape, producer op, producer name, producer step (-1: input)
        "t": [[r.name, r.kind, r.bytes, r.offset, r.first, r.last, r.storage, r.alias_of,
               r.alias, r.slice_of, r.dtype, "x".join(map(str, r.shape)) or "scalar",
               r.producer_op, r.producer_name,
               step_of_node.get(r.producer, -1) if r.producer is not None else -1]
              for r in view.tensors],
    }


def page(view: PlanView, graph: Graph, sections: str = "", title: str | None = None,
         footprint: dict | None = None) -> str:
    """The report page of a plan for its graph, with the per-layer table and the MAC
    total: what ``graphmem report --html`` and ``graphmem export --html`` write.
    ``sections``: more HTML sections placed after the headline
    (:mod:`graphmem.export.html_parts`: the whole footprint, the what-ifs, a training
    step's figures). ``footprint`` (:mod:`graphmem.analysis.footprint`): the one the
    page draws; the headline's weights card shows its ``weights`` part, so that the
    page names one figure "weights" (a training step's graph also reads folded
    constants and frozen weights, which its footprint lists apart)."""
    weights = (weight_bytes(graph), dequantized_bytes(graph))
    params, stats = param_count(graph), running_stat_count(graph)
    note = (f"{params:,} trainable parameters"
            + (f" and {stats:,} running statistics (BatchNorm mean and variance)"
               if stats else "") + ", as stored, read by the running nodes")
    part = next((p for p in (footprint or {}).get("parts", ()) if p["key"] == "weights"), None)
    if part is not None:
        weights = (part["bytes"], weights[1] if footprint["kind"] == "inference" else 0)
        if footprint["kind"] != "inference":
            note = part["note"]
    return render(view, layer_table(graph, view.plan), mac_totals(graph),
                  weights, sections, title, weights_note=note)


def render(view: PlanView, layers: list[dict] | None = None,
           macs: dict | None = None, weights: tuple[int, int] | None = None,
           sections: str = "", title: str | None = None,
           weights_note: str | None = None) -> str:
    """The whole report page as one HTML string (``layers``: see :func:`report_data`;
    ``macs``: :func:`~graphmem.analysis.macs.mac_totals`, ``weights``: the stored and the
    dequantized weight bytes; each a card when given; ``sections``, ``title``: see
    :func:`page`; ``weights_note``: the weights card's note, in place of "as stored")."""
    plan, s = view.plan, view.plan.stats
    e = html.escape
    data = json.dumps(report_data(view, layers), separators=(",", ":")).translate(_ESC)
    naive = s.get("naive_bytes", 0)
    cards = [
        ("arena", plan.arena_bytes, "one buffer holds every activation"),
        ("aliased peak", s.get("aliased_peak_bytes", 0), "most bytes live at one step, "
                                                           "shared storage counted once"),
        ("unaliased peak", s.get("unaliased_peak_bytes", 0),
         "most bytes live at one step, every tensor counted alone: no bound (the arena is "
         "smaller where tensors alias)"),
        ("naive", naive, "one buffer per tensor"),
    ]
    card_html = "".join(
        f'<div class="card"><div class="k">{e(k)}</div><div class="v">{_mib(v)}</div>'
        f'<div class="n">{v:,} bytes</div><div class="n">{e(note)}</div></div>'
        for k, v, note in cards)
    if weights is not None:
        stored, dequantized = weights
        note = ((weights_note or "as stored, read by the running nodes")
                + (f"; dequantized to {_mib(dequantized)} of float weights"
                   if dequantized else ""))
        card_html += (f'<div class="card" id="weights"><div class="k">weights</div>'
                      f'<div class="v">{_mib(stored)}</div><div class="n">{stored:,} bytes'
                      f'</div><div class="n">{e(note)}</div></div>')
    if macs is not None:
        least = macs["macs_at_least"]
        note = (f"at least: no MAC rule for {', '.join(macs['macs_unknown_ops'])}" if least
                else "Conv, Gemm, MatMul, attention, ...")
        card_html += (f'<div class="card" id="macs"><div class="k">MACs, matrix ops</div>'
                      f'<div class="v">{"&ge; " if least else ""}'
                      f'{_count(macs["matrix_macs"])}</div>'
                      f'<div class="n">{macs["matrix_macs"]:,}</div>'
                      f'<div class="n">{e(note)}</div></div>')
    saving = f"{(1 - plan.arena_bytes / naive) * 100:.1f}%" if naive else "n/a"
    pass_rows = "".join(
        f"<tr><td class=name>{e(str(p.get('name')))}</td><td class=r>{int(p.get('bytes_saved') or 0):,}"
        f"</td><td class=r>{_mib(int(p.get('bytes_saved') or 0))}</td>"
        f'<td><div class="bar" style="width:{_pct(p.get("bytes_saved"), naive)}%"></div></td>'
        f"</tr>" for p in plan.passes) or "<tr><td colspan=4>no passes ran</td></tr>"
    peak_rows = "".join(
        f'<tr><td class=name title="{e(r.name)}">{e(r.name)}</td>'
        f'<td class=name>{e(r.producer_op)}</td><td class=r>{r.bytes:,}</td>'
        f"<td class=r>{r.offset:,}</td><td>{r.first}..{r.last}</td>"
        f'<td class=name title="{e(_share(r))}">{e(_share(r))}</td></tr>'
        for r in sorted((t for t in view.tensors if t.name in set(view.peak_tensors)),
                        key=lambda t: (-t.bytes, t.name)))
    peak_op = next((layer_label(st.op, st.name, st.step, st.node) for st in view.steps
                    if st.step == view.peak_step),
                   "before the first node" if view.peak_step < 0 else "after the last node")
    bindings = ", ".join(f"{k}={v}" for k, v in plan.bindings.items()) or "none"
    return _PAGE.format(
        title=e(f"graphmem: {title or plan.model}"), model=e(title or plan.model),
        version=e(__version__), sections=sections,
        fmt=e(plan.format), steps=len(plan.order), file_nodes=view.file_nodes,
        folded=view.folded_nodes, ntensors=len(plan.tensors),
        alignment=plan.alignment, bindings=e(bindings), cards=card_html, saving=saving,
        pass_rows=pass_rows, peak_step=view.peak_step, peak_op=e(peak_op),
        peak_live=_mib(view.live[view.peak_step + 1]), npeak=len(view.peak_tensors),
        peak_rows=peak_rows, data=data, css=_CSS + PARTS_CSS, js=_JS)


def _count(n: float) -> str:
    """A count in the unit that reads best: ``4.09 G``, ``278.53 k``, ``60``."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f}"


def _mib(n: int) -> str:
    return format_bytes(n)


def _pct(part, whole) -> str:
    return f"{max(0.0, min(100.0, 100 * (part or 0) / whole)):.2f}" if whole else "0"


def _share(r) -> str:
    if r.alias_of:
        return f"{r.alias} of {r.alias_of}"
    if r.slice_of:
        return f"slice of {r.slice_of}"
    return ""


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;
 color:#222;background:#fafafa}
header{background:#243447;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px}header .sub{opacity:.8;font-size:13px}
main{padding:12px 24px;max-width:1600px}
section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:12px 16px;margin:12px 0}
h2{font-size:16px;margin:0 0 8px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:170px;background:#fcfcfc}
.card .k{font-size:12px;text-transform:uppercase;color:#666}.card .v{font-size:22px;font-weight:600}
.card .n{font-size:12px;color:#666}
table{border-collapse:collapse;font-size:13px}td,th{padding:2px 8px;border-bottom:1px solid #eee;
 text-align:left;white-space:nowrap}td.r,th.r{text-align:right}
th[data-k]{cursor:pointer;user-select:none;background:#f3f3f3;position:sticky;top:0}
th[data-k]:hover{background:#e6e6e6}
.scroll{max-height:480px;overflow:auto;border:1px solid #eee}
.bar{height:10px;background:#4e79a7;min-width:1px}
svg{display:block;background:#fff}svg text{font-size:11px;fill:#444}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;font-size:12px;padding:6px 8px;
 border-radius:4px;display:none;max-width:520px;white-space:pre;z-index:10}
#layout rect.t:hover{stroke:#000;stroke-width:1.5}
#layout rect.sel{stroke:#000;stroke-width:2.5;fill-opacity:1}
#layers-body tr{cursor:pointer}#layers-body tr:hover{background:#f0f6ff}
#status{font-size:12px;color:#444;min-height:18px}
#errors{color:#b00;white-space:pre-wrap}#errors:empty{display:none}
td.name{max-width:34ch;overflow:hidden;text-overflow:ellipsis}#layers td.name{max-width:20ch}
td.note{white-space:normal;min-width:24ch;max-width:80ch;overflow-wrap:anywhere}
.lines span{display:inline-block;margin-right:16px;font-size:12px}
.lines svg{display:inline-block;vertical-align:-1px;margin-right:4px;background:none}
"""

# The page's script: draws from the JSON, one delegated listener per interactive area.
_JS = r"""
"use strict";
const T0 = performance.now();
const D = JSON.parse(document.getElementById("data").textContent);
const MiB = 1048576;
// a size in the binary unit that reads best, as graphmem.analysis.footprint.format_bytes
const UNITS = [["GiB", 1073741824], ["MiB", MiB], ["KiB", 1024]];
const fmtMiB = b => {
  const u = UNITS.find(([, s]) => Math.abs(b) >= s);
  return u ? (b / u[1]).toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2}) + " " + u[0]
           : fmtInt(Math.round(b)) + " B";
};
// the unit an axis up to max bytes is labelled in
const axisUnit = max => UNITS.find(([, s]) => max >= s) || ["B", 1];
const fmtInt = b => b.toLocaleString("en-US");
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
const COLORS = {input:"#4e79a7", output:"#e15759", activation:"#59a14f", view:"#b07aa1",
                inplace:"#f28e2b", slice:"#edc948"};
const T = D.t.map((r, i) => ({i, name:r[0], kind:r[1], bytes:r[2], offset:r[3], first:r[4],
  last:r[5], storage:r[6], alias_of:r[7], alias:r[8], slice_of:r[9], dtype:r[10], shape:r[11],
  op:r[12], node:r[13], step:r[14]}));
const cat = t => t.alias ? t.alias : (t.slice_of ? "slice" : t.kind);
const share = t => t.alias_of ? t.alias + " of " + t.alias_of : (t.slice_of ? "slice of " + t.slice_of : "");
const NS = "http://www.w3.org/2000/svg";
const M = {l:70, r:16, t:12, b:28};

function xScale(w) {  // positions -1 .. steps map onto the plot width
  const n = D.steps + 2;
  return p => M.l + (p + 1) * (w - M.l - M.r) / n;
}
function niceTicks(max, count) {
  const raw = max / count, mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw) || raw;
  const out = []; for (let v = 0; v <= max + 1e-9; v += step) out.push(v); return out;
}
function axes(w, h, ymax, yOf, label) {
  let s = "";
  const [unit, scale] = axisUnit(ymax);
  label = label.replace("MiB", unit);
  for (const v of niceTicks(ymax / scale, 5)) {
    const y = yOf(v * scale);
    s += `<line x1="${M.l}" x2="${w - M.r}" y1="${y}" y2="${y}" stroke="#eee"/>` +
         `<text x="${M.l - 6}" y="${y + 4}" text-anchor="end">${+v.toPrecision(6)}</text>`;
  }
  const x = xScale(w);
  for (const p of niceTicks(D.steps, 8)) {
    s += `<text x="${x(p) }" y="${h - 8}" text-anchor="middle">${p}</text>`;
  }
  s += `<text x="4" y="${h - 8}">${label}</text>`;
  return s;
}

// the timeline's lines are named in a legend above the plot, each with its value (the
// arena, the unaliased and the aliased peak are often within a few pixels of each
// other: labels on the lines would land on each other); only the peak's step is
// written in the plot, in the margin above every line
const TOP = 26;
function lineKey(color, dash, text) {
  return `<span><svg width="22" height="10"><line x1="0" x2="22" y1="5" y2="5" stroke="${color}" ` +
    `stroke-width="2" stroke-dasharray="${dash}"/></svg>${text}</span>`;
}
function drawTimeline() {
  const svg = document.getElementById("timeline");
  const w = svg.parentNode.clientWidth || 1000, h = 290;
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  const x = xScale(w);
  const lb = D.stats.unaliased_peak_bytes || 0, ap = D.stats.aliased_peak_bytes || 0;
  const ymax = Math.max(D.arena, lb, ...D.live_unaliased, 1) * 1.08;
  const y = b => h - M.b - b * (h - TOP - M.b) / ymax;
  const path = arr => {
    let d = `M${x(-1)},${y(0)}`;
    arr.forEach((b, i) => { d += `V${y(b).toFixed(1)}H${x(i).toFixed(1)}`; });
    return d + `V${y(0)}`;
  };
  const hline = (b, color, dash) =>
    `<line x1="${M.l}" x2="${w - M.r}" y1="${y(b)}" y2="${y(b)}" stroke="${color}" stroke-width="1.5" stroke-dasharray="${dash}"/>`;
  const showAliased = ap && ap !== D.arena;
  document.getElementById("timeline-lines").innerHTML =
    lineKey("#c0392b", "", `arena ${fmtMiB(D.arena)}`) +
    lineKey("#e08214", "6 3", `unaliased peak ${fmtMiB(lb)}`) +
    (showAliased ? lineKey("#2171b5", "2 2", `aliased peak ${fmtMiB(ap)}`) : "") +
    `<span><i style="background:#9ecae1"></i>live, shared storage once</span>` +
    `<span><i style="background:#dde5ee"></i>live, every tensor alone</span>`;
  const px = x(D.peak_step) + (x(D.peak_step + 1) - x(D.peak_step)) / 2;
  svg.innerHTML = axes(w, h, ymax, y, "MiB") +
    `<path d="${path(D.live_unaliased)}" fill="#dde5ee" stroke="#9fb3c8" stroke-width="1"/>` +
    `<path d="${path(D.live)}" fill="#9ecae1" fill-opacity="0.6" stroke="#2171b5" stroke-width="1.2" class="live"/>` +
    hline(lb, "#e08214", "6 3") +
    (showAliased ? hline(ap, "#2171b5", "2 2") : "") +
    hline(D.arena, "#c0392b", "") +
    `<line x1="${px}" x2="${px}" y1="${TOP - 8}" y2="${h - M.b}" stroke="#c0392b" stroke-dasharray="2 2"/>` +
    `<circle cx="${px}" cy="${y(D.live[D.peak_step + 1])}" r="4" fill="#c0392b" class="peak"/>` +
    (px > 0.6 * w
      ? `<text x="${px - 6}" y="${TOP - 12}" text-anchor="end" style="fill:#c0392b">peak at step ${D.peak_step}: ${fmtMiB(D.live[D.peak_step + 1])} live</text>`
      : `<text x="${px + 6}" y="${TOP - 12}" style="fill:#c0392b">peak at step ${D.peak_step}: ${fmtMiB(D.live[D.peak_step + 1])} live</text>`) +
    `<line id="cursor" x1="0" x2="0" y1="${TOP}" y2="${h - M.b}" stroke="#333" visibility="hidden"/>`;
  svg.dataset.w = w;
}

// a layer as every view names it (graphmem.plan.view.layer_label): Conv 'conv1' (step 12, node 251)
const layerLabel = p => (D.ops[p][2] ? `${D.ops[p][1]} '${D.ops[p][2]}'` : D.ops[p][1]) +
  ` (step ${p}, node ${D.ops[p][0]})`;
function stepText(p) {
  const live = D.live[p + 1], lu = D.live_unaliased[p + 1];
  const where = p < 0 ? `step ${p} (graph inputs)` : (p >= D.steps ? `step ${p} (graph outputs)` :
    layerLabel(p));
  return `${where}: live ${fmtMiB(live)} (${fmtInt(live)} bytes), ` +
         `unaliased ${fmtMiB(lu)}`;
}

function hookTimeline() {
  const svg = document.getElementById("timeline"), status = document.getElementById("status");
  svg.addEventListener("mousemove", ev => {
    const w = +svg.dataset.w, r = svg.getBoundingClientRect();
    const n = D.steps + 2, fx = (ev.clientX - r.left - M.l) / ((w - M.l - M.r) / n);
    const p = Math.max(-1, Math.min(D.steps, Math.floor(fx) - 1));
    const c = document.getElementById("cursor"), x = xScale(w);
    c.setAttribute("x1", x(p) + 0.5); c.setAttribute("x2", x(p) + 0.5);
    c.setAttribute("visibility", "visible");
    status.textContent = stepText(p);
  });
  svg.addEventListener("mouseleave", () => {
    document.getElementById("cursor").setAttribute("visibility", "hidden");
  });
}

function drawLayout() {
  const svg = document.getElementById("layout");
  const w = svg.parentNode.clientWidth || 1000, h = 440;
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  const x = xScale(w), top = Math.max(D.arena, 1);
  const y = b => M.t + b * (h - M.t - M.b) / top;  // offset 0 at the top
  let s = axes(w, h, top, b => y(b), "offset MiB");
  // owners first, then aliases and slices on top of the bytes they share
  const sized = T.filter(t => t.bytes > 0);
  const order = sized.filter(t => cat(t) === t.kind).concat(sized.filter(t => cat(t) !== t.kind));
  const parts = [];
  for (const t of order) {
    const x0 = x(t.first), x1 = x(t.last + 1), y0 = y(t.offset);
    const hh = Math.max(1, y(t.offset + t.bytes) - y0);
    const alias = cat(t) !== t.kind;
    parts.push(`<rect class="t" data-i="${t.i}" x="${x0.toFixed(1)}" y="${y0.toFixed(1)}" ` +
      `width="${Math.max(1, x1 - x0).toFixed(1)}" height="${hh.toFixed(1)}" fill="${COLORS[cat(t)]}" ` +
      `fill-opacity="${alias ? 0.55 : 0.85}" stroke="#fff" stroke-width="0.3"/>`);
  }
  s += `<g id="rects">${parts.join("")}</g>`;
  s += `<line x1="${M.l}" x2="${w - M.r}" y1="${y(D.arena)}" y2="${y(D.arena)}" stroke="#c0392b"/>`;
  const px = x(D.peak_step) + (x(D.peak_step + 1) - x(D.peak_step)) / 2;
  s += `<line x1="${px}" x2="${px}" y1="${M.t}" y2="${h - M.b}" stroke="#c0392b" stroke-dasharray="2 2"/>`;
  svg.innerHTML = s;
}

function hookLayout() {
  const svg = document.getElementById("layout"), tip = document.getElementById("tip");
  svg.addEventListener("mouseover", ev => {
    const i = ev.target.getAttribute && ev.target.getAttribute("data-i");
    if (i === null || i === undefined) { tip.style.display = "none"; return; }
    const t = T[+i];
    tip.textContent = `${t.name}\nproduced by ${t.op}${t.node ? " " + t.node : ""}` +
      (t.step >= 0 ? ` (step ${t.step})` : "") +
      `\n${t.dtype}[${t.shape}]  ${fmtInt(t.bytes)} bytes (${fmtMiB(t.bytes)})` +
      `\noffset ${fmtInt(t.offset)}  live ${t.first}..${t.last}  storage ${t.storage}  ${t.kind}` +
      (share(t) ? `\n${share(t)}` : "");
    tip.style.display = "block";
  });
  svg.addEventListener("mousemove", ev => {
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  });
  svg.addEventListener("mouseleave", () => { tip.style.display = "none"; });
}

function legend() {
  document.getElementById("legend").innerHTML = Object.entries(COLORS).map(([k, c]) =>
    `<span><i style="background:${c}"></i>${k}</span>`).join("");
}

// per-layer table: one row per tensor a node produces
const ROWS = T.filter(t => t.step >= 0).map(t => ({step:t.step, node:t.node, op:t.op,
  tensor:t.name, shape:t.shape, bytes:t.bytes, offset:t.offset, live:t.first, last:t.last,
  alias:share(t) || "-", macs:D.ops[t.step][3] ?? -1, params:D.ops[t.step][4] ?? -1,
  moved:D.ops[t.step][5] ?? -1, i:t.i}));
const fmtCost = v => v < 0 ? "" : fmtInt(v);
let sortKey = "step", sortDir = 1;
function drawTable() {
  const k = sortKey, dir = sortDir;
  ROWS.sort((a, b) => (a[k] < b[k] ? -dir : a[k] > b[k] ? dir : a.step - b.step));
  document.getElementById("layers-body").innerHTML = ROWS.map(r =>
    `<tr data-i="${r.i}"><td class=r>${r.step}</td><td class=name title="${esc(r.node)}">${esc(r.node)}</td>` +
    `<td class=name title="${esc(r.op)}">${esc(r.op)}</td>` +
    `<td class=name title="${esc(r.tensor)}">${esc(r.tensor)}</td><td class=name>${r.shape}</td><td class=r>${fmtInt(r.bytes)}</td>` +
    `<td class=r>${fmtInt(r.offset)}</td><td>${r.live}..${r.last}</td><td class=name title="${esc(r.alias)}">${esc(r.alias)}</td>` +
    `<td class=r>${fmtCost(r.macs)}</td><td class=r>${fmtCost(r.params)}</td>` +
    `<td class=r>${r.moved < 0 ? "" : fmtMiB(r.moved)}</td></tr>`).join("");
  for (const th of document.querySelectorAll("#layers th[data-k]")) {
    th.textContent = th.dataset.label + (th.dataset.k === k ? (dir > 0 ? " \u25b2" : " \u25bc") : "");
  }
}
function hookTable() {
  for (const th of document.querySelectorAll("#layers th[data-k]")) th.dataset.label = th.textContent;
  document.querySelector("#layers thead").addEventListener("click", ev => {
    const k = ev.target.dataset && ev.target.dataset.k;
    if (!k) return;
    sortDir = k === sortKey ? -sortDir : 1; sortKey = k; drawTable();
  });
}

// clicking a table row outlines that tensor in the layout (one listener for all rows)
function hookSelect() {
  document.getElementById("layers-body").addEventListener("click", ev => {
    const tr = ev.target.closest("tr[data-i]");
    if (!tr) return;
    for (const el of document.querySelectorAll("#layout rect.sel")) el.classList.remove("sel");
    const rect = document.querySelector(`#layout rect[data-i="${tr.dataset.i}"]`);
    if (rect) { rect.classList.add("sel"); rect.parentNode.appendChild(rect); }
    document.getElementById("layout").scrollIntoView({block: "nearest"});
  });
}

function drawAll() { drawTimeline(); drawLayout(); }
let resizeTimer = null;
window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(drawAll, 150); });
legend(); drawAll(); hookTimeline(); hookLayout(); hookTable(); hookSelect(); drawTable();
document.body.dataset.drawMs = (performance.now() - T0).toFixed(1);
document.body.dataset.drawn = "1";

// file:///report.html#selftest: drive the delegated handlers once and record what they
// showed, for the headless-browser test (which can read the DOM but cannot move a mouse)
if (location.hash === "#selftest") {
  const out = {};
  const tl = document.getElementById("timeline"), r = tl.getBoundingClientRect();
  const x = xScale(+tl.dataset.w);
  const px = x(D.peak_step) + 0.5 * (x(D.peak_step + 1) - x(D.peak_step));
  tl.dispatchEvent(new MouseEvent("mousemove", {clientX: r.left + px, clientY: r.top + 50, bubbles: true}));
  out.status = document.getElementById("status").textContent;
  const rect = document.querySelector("#layout rect.t");
  rect.dispatchEvent(new MouseEvent("mouseover", {bubbles: true, clientX: 10, clientY: 10}));
  out.tip_for = T[+rect.getAttribute("data-i")].name;
  out.tip = document.getElementById("tip").textContent;
  const th = document.querySelector('#layers th[data-k="bytes"]');
  th.click(); th.click();  // ascending, then descending
  out.first_row_bytes = document.querySelector("#layers-body tr td:nth-child(6)").textContent;
  out.rows = document.querySelectorAll("#layers-body tr").length;
  const row = document.querySelector("#layers-body tr");
  row.querySelector("td").click();
  const sel = document.querySelector("#layout rect.sel");
  out.selected = sel ? T[+sel.getAttribute("data-i")].name : null;
  out.first_row_tensor = T[+row.dataset.i].name;
  const pre = document.createElement("pre");
  pre.id = "selftest"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<script>
// Any script error lands in #errors, where a reader (and the browser test) sees it.
window.onerror = function (msg, src, line, col) {{
  var el = document.getElementById("errors");
  if (el) el.textContent += msg + " (line " + line + ":" + col + ")\\n";
}};
window.addEventListener("unhandledrejection", function (ev) {{ window.onerror(String(ev.reason), "", 0, 0); }});
(function () {{ var orig = console.error; console.error = function () {{
  var el = document.getElementById("errors");
  if (el) el.textContent += Array.prototype.join.call(arguments, " ") + "\\n";
  return orig.apply(console, arguments); }}; }})();
</script>
<style>{css}</style></head>
<body>
<header><h1>graphmem memory report: {model}</h1>
<div class="sub">{fmt} &middot; {steps} steps ({file_nodes:,} nodes in the file, {folded:,} folded
into constants) &middot; {ntensors} arena tensors &middot;
alignment {alignment} &middot; dims {bindings} &middot; graphmem {version}</div></header>
<main>
<pre id="errors"></pre>
<noscript><p>The charts and the layer table need JavaScript; the numbers below do not.</p></noscript>
<section id="headline"><h2>Headline</h2><div class="cards">{cards}</div>
<p>The arena is {saving} smaller than one buffer per tensor. Peak at {peak_op}:
{peak_live} live.</p></section>
{sections}

<section><h2>Memory timeline</h2>
<div>Live bytes per step: dark, what the arena must hold (storage shared by views, in-place
ops and concat slices counted once); light, every tensor counted on its own. Lines: the
unaliased peak (every tensor counted alone; no bound: aliases share bytes) and the arena.</div>
<div class="lines legend" id="timeline-lines"></div>
<div class="plot"><svg id="timeline" role="img" aria-label="memory timeline"></svg></div>
<div id="status">Move the mouse over the timeline to read a step.</div></section>

<section><h2>Arena layout</h2>
<div>Each tensor is a rectangle: across, its live range (steps); down, its bytes in the
arena from offset 0. Hover for details. <span class="legend" id="legend"></span></div>
<div class="plot"><svg id="layout" role="img" aria-label="arena layout"></svg></div></section>

<section id="passes"><h2>Passes</h2>
<table><thead><tr><th>pass</th><th class=r>bytes saved</th><th class=r>size</th>
<th style="width:300px">of naive</th></tr></thead><tbody>{pass_rows}</tbody></table></section>

<section id="peak"><h2>Tensors live at the peak (step {peak_step}, {npeak} tensors)</h2>
<div class="scroll"><table><thead><tr><th>tensor</th><th>producer</th><th class=r>bytes</th>
<th class=r>offset</th><th>live</th><th>shares</th></tr></thead>
<tbody>{peak_rows}</tbody></table></div></section>

<section><h2>Layers</h2><div>One row per tensor a node produces; click a heading to sort, a row to
outline its tensor in the layout.</div>
<div class="scroll"><table id="layers"><thead><tr><th data-k="step" class=r>step</th>
<th data-k="node">layer</th><th data-k="op">op</th><th data-k="tensor">output</th>
<th data-k="shape">shape</th><th data-k="bytes" class=r>bytes</th>
<th data-k="offset" class=r>offset</th><th data-k="live">live</th>
<th data-k="alias">in-place / view</th><th data-k="macs" class=r>MACs</th>
<th data-k="params" class=r>params</th><th data-k="moved" class=r>moved</th></tr></thead>
<tbody id="layers-body"></tbody></table>
</div></section>
</main>
<div id="tip"></div>
<script type="application/json" id="data">{data}</script>
<script>{js}</script>
</body></html>
"""
