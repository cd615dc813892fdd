"""``graphmem report MODEL``: where the memory and the compute go, and what-ifs."""
from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from graphmem.errors import GraphmemError
from graphmem.frontend.zoo import resolve
from graphmem.commands.common import (add_model_args, add_pass_args, add_runtime_args,
                                      console, exported_arena, input_paths, model_source,
                                      parse_dims, plan_options, shown)
from graphmem.commands import capacity_args, ranges
from graphmem.commands.progress import Progress
from graphmem.commands.report_html import add_html_args, write_page
from graphmem.commands.workspace_args import add_workspace_args, workspace_from_args
from graphmem.export.html_parts import fit_sentence, page_sections
from graphmem.commands.sizes import parse_bytes
from graphmem.analysis.footprint import format_bytes
from graphmem.plan.io import check_output

# rich, onnx and the planner are imported where they are used: building the parser
# (``graphmem report --help``) needs none of them
if TYPE_CHECKING:
    from rich.console import Console

    from graphmem.analysis.whatif import Batcher


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="memory and compute breakdown, per layer, with what-ifs",
                       description="Weights, activations (naive and planned), im2col "
                                   "workspace, MACs and a roofline per layer; --batch and "
                                   "--dtype re-plan the model at other sizes.")
    add_model_args(p)
    add_pass_args(p)
    add_runtime_args(p)
    p.add_argument("--batch", metavar="LIST",
                   help="what-if batch sizes, e.g. 1,8,32 (each one re-planned); a symbolic "
                        "batch dimension no --dim binds is bound to the first, as fit and "
                        "train bind it")
    p.add_argument("--dtype", metavar="LIST",
                   help="what-if element types for the floating tensors, e.g. "
                        "float32,float16,int8 (each one re-planned)")
    p.add_argument("--budget", metavar="SIZE",
                   help="a memory budget (12GiB, 4GB, 512MiB, bytes) drawn on the footprint "
                        "and the what-if plot, each what-if marked fits or over")
    add_device_args(p)
    add_workspace_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--no-layers", action="store_true", help="leave the per-layer table out")
    add_html_args(p)
    ranges.add_range_args(p)
    capacity_args.add_capacity_arg(p)
    p.set_defaults(func=run)


def add_device_args(p) -> None:
    from graphmem.analysis.devices import DEFAULT_DEVICE, DEVICES
    p.add_argument("--device", metavar="PRESET", default=None,
                   help=f"roofline device: {', '.join(DEVICES)} (default {DEFAULT_DEVICE})")
    p.add_argument("--device-flops", type=float, metavar="F",
                   help="peak FLOP/s of a custom device, e.g. 1e13 (with --device-bw)")
    p.add_argument("--device-bw", type=float, metavar="B",
                   help="peak memory bandwidth in bytes/s, e.g. 9e11 (with --device-flops)")


def device_from_args(args, graph):
    from graphmem.analysis import breakdown as analysis
    if (args.device_flops is not None or args.device_bw is not None) and args.device:
        raise GraphmemError("give either --device or --device-flops/--device-bw, not both")
    return analysis.device(args.device, flops=args.device_flops, bandwidth=args.device_bw,
                           compute=analysis.compute_class(graph))


def parse_list(text: str, what: str, convert=str) -> list:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise GraphmemError(f"--{what}: give a comma-separated list")
    try:
        return [convert(t) for t in items]
    except ValueError:
        raise GraphmemError(f"--{what} {text!r}: not a list of integers") from None


def build(args) -> dict:
    """The report object (what ``--json`` prints)."""
    from graphmem.analysis import breakdown as analysis
    from graphmem.analysis import footprint
    from graphmem.analysis.whatif import float_dtype, sweep
    budget = parse_bytes(args.budget, "--budget") if args.budget else None
    if args.html:  # before the work: a bad output fails at once
        check_output(args.html, input_paths(args))
    batches = parse_list(args.batch, "batch", int) if args.batch else None
    if batches and min(batches) < 1:
        raise GraphmemError("--batch: every batch must be at least 1")
    dtypes = parse_list(args.dtype, "dtype") if args.dtype else None
    from graphmem.commands import bound_whatif  # issue 53: --bound NAME=10,100,1000
    args.bound, bound_sweep = bound_whatif.split(getattr(args, "bound", None) or [])
    rule, threads = workspace_from_args(args)
    stages = 2 + sum(map(bool, (getattr(args, "ort_optimize", None), budget is not None,
                                batches or dtypes, args.html)))
    with Progress("report", stages=stages) as progress:
        progress("reading the model")
        source = batch_source(args)
        model = model_source(args, batch_dims(args, batches, source))
        # plans (within --capacity), or checks a saved --plan against it
        view, graph, fits = capacity_args.planned_view(args, model)
        progress("the breakdown per layer")
        dev = device_from_args(args, graph)
        out = analysis.report(graph, view.plan, dev, rule, threads)
        out["dtype"] = float_dtype(graph)
        if fits is not None:
            out["capacity"] = fits
        if view.plan.bounds:  # issue 53: the sizes planned at their bounds
            from graphmem.plan.bounded import summary
            out["bounds"] = summary(view.plan)
        notes = provider_notes(args, graph)
        if notes:
            out["notes"] = notes
        optimized = model.optimized
        if optimized is not None:  # --ort-optimize: the model as exported, planned the same way
            progress("the model as exported, for comparison")
            exported = exported_arena(model, plan_options(args))
            out["runtime"] = {"ort_optimize": optimized.level, "provider": optimized.provider,
                              "optimize_seconds": round(optimized.seconds, 3),
                              "arena_bytes": view.plan.arena_bytes,
                              "exported_arena_bytes": exported["arena_bytes"],
                              "exported_nodes": exported["nodes"],
                              "nodes": len(view.plan.order)}
            if "error" in exported:
                out["runtime"]["exported_error"] = exported["error"]
        batch = model_batch(model, source)
        if batch is not None:
            out["batch"] = batch
        out["footprint"] = footprint.inference(
            out["totals"], title=f"{view.plan.model}, inference"
                                 f"{'' if batch is None else f', batch {batch}'}, {out['dtype']}")
        batcher = None
        if budget is not None:
            out["budget_bytes"] = budget
            if batch is not None:
                try:
                    batcher = make_batcher(model)
                    progress("the largest batch under the budget, each batch planned")
                    out["fit"] = largest_batch(batcher, out["dtype"], budget,
                                               progress.callback(),
                                               workspace_rule=rule, threads=threads,
                                               **plan_options(args))
                except GraphmemError as exc:  # no batch to grow: the report stands
                    batcher = None
                    out["fit"] = {"batch": None, "budget_bytes": budget, "error": str(exc)}
        if batches or dtypes:
            progress("what if: each batch and dtype planned")
            batcher = batcher or make_batcher(model)
            out["batch"] = batcher.axis.size
            out["whatif"] = sweep(batcher, batches or [batcher.axis.size],
                                  dtypes or [out["dtype"]], progress=progress.callback(),
                                  workspace_rule=rule, threads=threads, **plan_options(args))
        if bound_sweep:
            out["bound_whatif"] = bound_whatif.sweep_bounds(
                model, dict(model.bounds or {}), *bound_sweep, progress=progress.callback(),
                options={"workspace_rule": rule, "threads": threads, **plan_options(args)})
        if args.html:
            progress("writing the page")
            write_page(args.html, view, graph, input_paths(args), sections=page_sections(
                out["footprint"], out.get("whatif"), out.get("batch"), budget, out.get("fit"))
                + (bound_whatif.html_section(out["bound_whatif"]) if bound_sweep else ""),
                footprint=out["footprint"])
    return out


def make_batcher(model) -> Batcher:
    """The what-ifs' and the budget's batcher over ``model`` (the command's
    :class:`~graphmem.commands.common.ModelSource`: the file planned, its bindings)."""
    from graphmem.analysis.whatif import Batcher
    return Batcher(model.read_model(), model.dims, model_path=str(model.path),
                   dim_default=model.dim_default, bounds=model.bounds)


def largest_batch(batcher: Batcher, dtype: str, budget: int, progress, **options) -> dict:
    """The largest batch whose total (weights + arena + workspace, each batch planned)
    fits ``budget``: ``fit``'s search, with the report's options."""
    from graphmem.analysis.whatif import fit, footprint, with_float_dtype
    from graphmem.commands.fit import search_part
    totals: dict[int, int] = {}

    def total_at(b: int) -> int:
        progress(search_part(b, totals, budget))
        totals[b] = footprint(with_float_dtype(batcher.graph(b), dtype),
                              **options)["total_bytes"]
        return totals[b]

    answer = fit(total_at, budget)
    return {"batch": answer["batch"], "total_bytes": answer["total_bytes"],
            "next_total_bytes": answer["next_total_bytes"], "budget_bytes": budget,
            "plans": len(totals)}


def provider_notes(args, graph) -> list[str]:
    """Where the provider runs the graph in another form than the plan's: float16
    convolutions on the CPU provider run in float32 behind Casts it inserts."""
    from graphmem.analysis.workspace import float16_convs
    convs = float16_convs(graph)
    if not convs or getattr(args, "provider", "cpu") != "cpu":
        return []
    return [f"ONNX Runtime's CPU provider has no float16 Conv kernel for x86: it runs these "
            f"{convs} float16 convolutions in float32, behind Casts it inserts, so what runs "
            "holds float32 copies this plan of the graph as exported does not; "
            "--ort-optimize basic plans the graph it runs"]


def batch_source(args):
    """The model whose batch axis the report binds and names, read once (None for a
    saved --plan, or a file that does not read: planning then says why in its words)."""
    from graphmem.frontend.reader import read_model
    if getattr(args, "plan", None):
        return None  # a saved plan carries its bindings
    try:
        return read_model(resolve(args.model, quiet=True))
    except GraphmemError:
        return None


def batch_dims(args, batches: list[int] | None, source) -> dict[str, int]:
    """The ``--dim`` bindings, and a symbolic batch dimension that none binds bound as
    ``fit`` and ``train`` bind it: to the first ``--batch`` (without one, to 1 unless
    ``--dim-default`` binds it). A model without a batch axis is left as it is;
    ``source``: see :func:`batch_source`."""
    from graphmem.analysis.whatif import batch_axis
    dims = parse_dims(args.dim)
    if source is None:
        return dims
    try:
        axis = batch_axis(source, dims)
    except GraphmemError:
        return dims  # no batch axis: nothing to bind (the what-ifs say so themselves)
    if axis.symbol is None or axis.symbol in dims:
        return dims
    if batches:
        return {**dims, axis.symbol: batches[0]}
    if args.dim_default is None:
        return {**dims, axis.symbol: 1}
    return dims


def model_batch(model, source) -> int | None:
    """The batch the report's plan is at: its batch axis's bound or fixed size (None for
    a model without one, or for a saved --plan); ``model``: the command's
    :class:`~graphmem.commands.common.ModelSource`."""
    from graphmem.analysis.whatif import batch_axis
    if source is None:
        return None
    try:
        return batch_axis(source, dict(model.dims)).size
    except GraphmemError:
        return None


def run(args) -> int:
    from graphmem.commands.footprint_text import print_footprints
    capacity_args.refuse_with_ranges(args)
    if ranges.wanted(args):  # --dim seq=1..4096: memory as formulas of the dims
        return ranges.run_report(args)
    capacity_args.capacity_of(args)  # a bad --capacity fails before the work
    data = build(args)
    if args.html:
        print(f"wrote {args.html}", file=sys.stderr)
    status = capacity_args.report_status(data, args.model)
    if args.json:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        return status
    out = console()
    print_breakdown(out, data)
    if "bounds" in data:  # issue 53
        from graphmem.commands.bounds_text import print_bounds
        print_bounds(out, data["bounds"], data["totals"]["arena_bytes"])
    print_footprints(out, [data["footprint"]], data.get("budget_bytes"))
    sentence = fit_sentence(data.get("fit"))
    if sentence:
        out.print(sentence, markup=False)
    print_peak(out, data)
    print_by_op(out, data)
    if not args.no_layers:
        print_layers(out, data)
    if "whatif" in data:
        print_whatif(out, data)
    if "bound_whatif" in data:  # issue 53
        from graphmem.commands.bound_whatif import print_rows
        print_rows(out, data["bound_whatif"])
    return status


def mib(n: int) -> str:
    """A size in the unit that reads best (:func:`~graphmem.commands.sizes.format_bytes`)."""
    return format_bytes(n)


def count(n: float) -> str:
    """1.23 G, 45.6 M, 7.8 k: short counts for MACs and params."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f}"


def macs_text(n: float) -> str:
    """4.09 GMAC, 60 MAC."""
    c = count(n)
    return f"{c}MAC" if c[-1].isalpha() else f"{c} MAC"


# What the runtime makes of quantized weights: measured with ONNX Runtime 1.31's CPU
# provider on a QDQ network (its optimized model saved at each level): from level
# extended on (the default is all) QDQ Conv/MatMul become QLinearConv/QLinearMatMul on
# the int8 weights, and no float weight is made; at level basic every DequantizeLinear
# stays and runs at each inference.
DEQUANTIZED_NOTE = ("the float weights the stored ones dequantize to; not in the total: "
                    "ONNX Runtime CPU (default level) runs QDQ Conv/MatMul on the int8 "
                    "weights; at level basic each DequantizeLinear runs per inference")


def print_breakdown(console: Console, data: dict) -> None:
    from rich.table import Table
    from graphmem.analysis import footprint
    from graphmem.plan.view import layer_label
    t = data["totals"]
    table = Table(title=f"graphmem report: {shown(data['model'])} ({data['dtype']})",
                  header_style="bold")
    for col, justify in (("", "left"), ("bytes", "right"), ("size", "right"), ("note", "left")):
        table.add_column(col, justify=justify)
    kinds = ", ".join(f"{dtype} {mib(n)}" for dtype, n in t["weight_bytes_by_dtype"].items())
    table.add_row("weights", f"{t['weight_bytes']:,}", mib(t["weight_bytes"]),
                  f"{t['params']:,} trainable parameters"
                  + (f" and {t['running_stats']:,} running statistics (BatchNorm mean and "
                     "variance)" if t.get("running_stats") else "")
                  + " read by the running nodes, as stored"
                  + (f" ({kinds})" if len(t["weight_bytes_by_dtype"]) > 1 else ""))
    if t["weight_bytes_dequantized"]:
        table.add_row("  dequantized", f"{t['weight_bytes_dequantized']:,}",
                      mib(t["weight_bytes_dequantized"]), DEQUANTIZED_NOTE)
    table.add_row("activations, naive", f"{t['activation_bytes_naive']:,}",
                  mib(t["activation_bytes_naive"]), "one buffer per tensor")
    table.add_row("[green]activations, arena", f"[green]{t['arena_bytes']:,}",
                  f"[green]{mib(t['arena_bytes'])}",
                  f"planned; {t['activation_bytes_naive'] / max(t['arena_bytes'], 1):.1f}x "
                  "smaller than naive")
    rt = data.get("runtime")
    if rt:
        above = (f"the one above is the graph ONNX Runtime runs ({rt['nodes']} nodes, level "
                 f"{rt['ort_optimize']}, {rt['provider']}, made in "
                 f"{rt['optimize_seconds']:.2f} s)")
        if rt["exported_arena_bytes"] is None:
            table.add_row("  as exported", "", "", f"the model as given does not plan "
                          f"({shown(rt['exported_error'])}); {above}")
        else:
            table.add_row("  as exported", f"{rt['exported_arena_bytes']:,}",
                          mib(rt["exported_arena_bytes"]),
                          f"the arena of the model as given ({rt['exported_nodes']} nodes); "
                          f"{above}")
    where = "no kernel takes one" if t["workspace_node"] is None else \
        "largest at " + next((layer_label(r["op"], r["name"], r["step"], r["node"])
                              for r in data["layers"] if r["node"] == t["workspace_node"]),
                             f"node {t['workspace_node']}")
    table.add_row(f"workspace ({t['workspace_rule']})", f"{t['workspace_bytes']:,}",
                  mib(t["workspace_bytes"]),
                  footprint.workspace_note(t)
                  + ("" if t["workspace_rule"] == "none" else f"; {where}"))
    table.add_row("[bold]total", f"[bold]{t['total_bytes']:,}", f"[bold]{mib(t['total_bytes'])}",
                  "weights + arena + workspace")
    # an op without a MAC rule makes every MAC total, and the roofline time, a lower bound
    least = "at least " if t.get("macs_at_least") else ""
    table.add_row("MACs", f"{'>= ' if least else ''}{t['matrix_macs']:,}", "",
                  f"{least}{macs_text(t['matrix_macs'])} in matrix ops (Conv, Gemm, MatMul, "
                  "attention, ...: PyTorch's FlopCounterMode / 2)")
    table.add_row("  all ops", f"{'>= ' if least else ''}{t['macs']:,}", "",
                  f"{least}{macs_text(t['macs'])} with element-wise, pooling, normalisation")
    if t["macs_unknown_ops"]:
        table.add_row("  no MAC rule", "", "",
                      f"{', '.join(map(shown, t['macs_unknown_ops']))}: the MACs and the "
                      "roofline time are lower bounds")
    d = data["device"]
    table.add_row("roofline time", "", "",
                  f"{least}{t['time_s'] * 1e3:.3g} ms on {d['name']} "
                  f"({d['flops'] / 1e12:g} TFLOP/s, "
                  f"{d['bandwidth'] / 1e9:g} GB/s, ridge {d['ridge_macs_per_byte']:.1f} MAC/B)")
    console.print(table)
    for note in data.get("notes", ()):
        console.print(f"note: {note}", markup=False)


def print_peak(console: Console, data: dict, most: int = 8) -> None:
    from rich.table import Table
    p = data["peak"]
    if p["node"] is None:
        return
    title = f"peak: {mib(p['live_bytes'])} live at {shown(p['layer'])}"
    table = Table(title=title, header_style="bold", min_width=len(title))
    for col in ("tensor", "shape", "size", "offset"):
        table.add_column(col, justify="left" if col in ("tensor", "shape") else "right")
    for t in p["tensors"][:most]:
        shares = f" (+{len(t['shares_with'])} sharing it)" if t["shares_with"] else ""
        table.add_row(shown(t["name"]) + shares, "x".join(map(str, t["shape"])), mib(t["bytes"]),
                      f"{t['offset']:,}")
    if len(p["tensors"]) > most:
        rest = sum(t["bytes"] for t in p["tensors"][most:])
        table.add_row(f"... {len(p['tensors']) - most} more", "", mib(rest), "")
    console.print(table)


def print_by_op(console: Console, data: dict) -> None:
    from rich.table import Table
    from graphmem.analysis import breakdown as analysis
    layers = data["layers"]
    total_macs = sum(r["macs"] or 0 for r in layers) or 1
    total_time = sum(r["time_s"] for r in layers) or 1
    table = Table(title="by op type", header_style="bold")
    for col in ("op", "nodes", "MACs", "% MACs", "moved", "% time"):
        table.add_column(col, justify="left" if col == "op" else "right")
    for op, s in analysis.by_op(layers).items():
        macs = ("?" if not s["macs"] else f">= {count(s['macs'])}") if s["unknown"] else \
            count(s["macs"])
        table.add_row(shown(op), str(s["count"]), macs,
                      f"{100 * s['macs'] / total_macs:.1f}",
                      mib(s["bytes_moved"]), f"{100 * s['time_s'] / total_time:.1f}")
    console.print(table)


# The per-layer table shows at most this many rows (the layers that take the most time
# by the roofline, in plan order); --json has them all.
MAX_LAYER_ROWS = 200


def print_layers(console: Console, data: dict) -> None:
    from rich.table import Table
    layers = data["layers"]
    title = "per layer (plan order)"
    if len(layers) > MAX_LAYER_ROWS:
        slowest = sorted(range(len(layers)), key=lambda k: -layers[k]["time_s"])
        layers = [layers[k] for k in sorted(slowest[:MAX_LAYER_ROWS])]
        title = (f"per layer (plan order): the {MAX_LAYER_ROWS} slowest of "
                 f"{len(data['layers'])}; --json lists all")
    table = Table(title=title, header_style="bold")
    cols = ("step", "node", "layer", "op", "output shape", "params", "param size", "output size",
            "live", "MACs", "moved", "MAC/B", "bound")
    for col in cols:
        table.add_column(col, justify="left" if col in ("layer", "op", "output shape", "bound")
                         else "right")
    for r in layers:
        shapes = " ".join("x".join(map(str, s)) for s in r["output_shapes"])
        table.add_row(str(r["step"]), str(r["node"]), shown(r["name"]), shown(r["op"]), shapes,
                      count(r["params"]),
                      mib(r["param_bytes"]),
                      mib(r["activation_bytes"]), mib(r["live_bytes"]),
                      "?" if r["macs"] is None else count(r["macs"]), mib(r["bytes_moved"]),
                      "-" if r["intensity"] is None else f"{r['intensity']:.2f}", r["bound"])
    console.print(table)


def print_whatif(console: Console, data: dict) -> None:
    from rich.table import Table
    table = Table(title=f"what-if: re-planned per batch and dtype (the model's batch is "
                        f"{data['batch']})", header_style="bold")
    budget = data.get("budget_bytes")
    for col in ("batch", "dtype", "weights", "naive activations", "arena", "workspace",
                "total", "MACs") + (("budget",) if budget else ()):
        table.add_column(col, justify="right")
    for r in data["whatif"]:
        table.add_row(str(r["batch"]), r["dtype"], mib(r["weight_bytes"]),
                      mib(r["activation_bytes_naive"]), mib(r["arena_bytes"]),
                      mib(r["workspace_bytes"]), mib(r["total_bytes"]),
                      (">= " if r["macs_at_least"] else "") + count(r["matrix_macs"]),
                      *((("fits" if r["total_bytes"] <= budget else "[red]over"),)
                        if budget else ()))
    console.print(table)
