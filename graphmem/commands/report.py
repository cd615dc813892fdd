"""``graphmem report MODEL``: where the memory and the compute go, and what-ifs."""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from graphmem.analysis import breakdown as analysis
from graphmem.analysis import footprint
from graphmem.errors import GraphmemError
from graphmem.frontend.reader import read_model
from graphmem.analysis.whatif import Batcher, batch_axis, float_dtype, sweep
from graphmem.frontend.zoo import resolve
from graphmem.commands.common import (add_model_args, add_pass_args, add_runtime_args,
                                      console, exported_arena, input_paths, model_path,
                                      parse_dims, plan_options, shown)
from graphmem.commands.export import planned_view
from graphmem.commands.footprint_text import print_footprints
from graphmem.commands.progress import Progress
from graphmem.commands.report_html import add_html_args, write_page
from graphmem.export.html_parts import page_sections
from graphmem.commands.sizes import parse_bytes
from graphmem.plan.io import check_output
from graphmem.plan.view import layer_label


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
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--no-layers", action="store_true", help="leave the per-layer table out")
    add_html_args(p)
    p.set_defaults(func=run)


def add_device_args(p) -> None:
    p.add_argument("--device", metavar="PRESET", default=None,
                   help=f"roofline device: {', '.join(analysis.DEVICES)} "
                        f"(default {analysis.DEFAULT_DEVICE})")
    p.add_argument("--device-flops", type=float, metavar="F",
                   help="peak FLOP/s of a custom device, e.g. 1e13 (with --device-bw)")
    p.add_argument("--device-bw", type=float, metavar="B",
                   help="peak memory bandwidth in bytes/s, e.g. 9e11 (with --device-flops)")


def device_from_args(args, graph):
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
    budget = parse_bytes(args.budget, "--budget") if args.budget else None
    if args.html:  # before the work: a bad output fails at once
        check_output(args.html, input_paths(args))
    batches = parse_list(args.batch, "batch", int) if args.batch else None
    if batches and min(batches) < 1:
        raise GraphmemError("--batch: every batch must be at least 1")
    dtypes = parse_list(args.dtype, "dtype") if args.dtype else None
    with Progress("report") as progress:
        progress("reading the model")
        source = batch_source(args)
        bind_batch(args, batches, source)
        view, graph = planned_view(args)  # plans, or checks a saved --plan against the model
        progress("the breakdown per layer")
        dev = device_from_args(args, graph)
        out = analysis.report(graph, view.plan, dev)
        out["dtype"] = float_dtype(graph)
        if view.plan.bounds:  # issue 53: the sizes planned at their bounds
            from graphmem.plan.bounded import summary
            out["bounds"] = summary(view.plan)
        optimized = getattr(args, "optimized", None)
        if optimized is not None:  # --ort-optimize: the model as exported, planned the same way
            progress("the model as exported, for comparison")
            exported = exported_arena(args, plan_options(args))
            out["runtime"] = {"ort_optimize": optimized.level, "provider": optimized.provider,
                              "optimize_seconds": round(optimized.seconds, 3),
                              "arena_bytes": view.plan.arena_bytes,
                              "exported_arena_bytes": exported["arena_bytes"],
                              "exported_nodes": exported["nodes"],
                              "nodes": len(view.plan.order)}
            if "error" in exported:
                out["runtime"]["exported_error"] = exported["error"]
        batch = model_batch(args, source)
        if batch is not None:
            out["batch"] = batch
        out["footprint"] = footprint.inference(
            out["totals"], title=f"{view.plan.model}, inference"
                                 f"{'' if batch is None else f', batch {batch}'}, {out['dtype']}")
        if budget is not None:
            out["budget_bytes"] = budget
        if batches or dtypes:
            path = model_path(args)  # planned_view has said which file it is
            batcher = Batcher(read_model(path), parse_dims(args.dim), model_path=str(path),
                              dim_default=args.dim_default)
            out["batch"] = batcher.axis.size
            out["whatif"] = sweep(batcher, batches or [batcher.axis.size],
                                  dtypes or [out["dtype"]], progress=progress.callback(),
                                  **plan_options(args))
        if args.html:
            progress("writing the page")
            write_page(args.html, view, graph, input_paths(args), sections=page_sections(
                out["footprint"], out.get("whatif"), out.get("batch"), budget))
    return out


def batch_source(args):
    """The model whose batch axis the report binds and names, read once (None for a
    saved --plan, or a file that does not read: planning then says why in its words)."""
    if getattr(args, "plan", None):
        return None  # a saved plan carries its bindings
    try:
        return read_model(resolve(args.model, quiet=True))
    except GraphmemError:
        return None


def bind_batch(args, batches: list[int] | None, source) -> None:
    """Bind a symbolic batch dimension that no ``--dim`` binds, as ``fit`` and ``train``
    do: to the first ``--batch`` (without one, to 1 unless ``--dim-default`` binds
    it). A model without a batch axis is left as it is; ``source``: see
    :func:`batch_source`."""
    if source is None:
        return
    dims = parse_dims(args.dim)
    try:
        axis = batch_axis(source, dims)
    except GraphmemError:
        return  # no batch axis: nothing to bind (the what-ifs say so themselves)
    if axis.symbol is None or axis.symbol in dims:
        return
    if batches:
        args.dim = [*args.dim, f"{axis.symbol}={batches[0]}"]
    elif args.dim_default is None:
        args.dim = [*args.dim, f"{axis.symbol}=1"]


def model_batch(args, source) -> int | None:
    """The batch the report's plan is at: its batch axis's bound or fixed size (None for
    a model without one, or for a saved --plan)."""
    if source is None:
        return None
    try:
        return batch_axis(source, parse_dims(args.dim)).size
    except GraphmemError:
        return None


def run(args) -> int:
    data = build(args)
    if args.html:
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        return 0
    out = console()
    print_breakdown(out, data)
    if "bounds" in data:  # issue 53
        from graphmem.commands.bounds_text import print_bounds
        print_bounds(out, data["bounds"], data["totals"]["arena_bytes"])
    print_footprints(out, [data["footprint"]], data.get("budget_bytes"))
    print_peak(out, data)
    print_by_op(out, data)
    if not args.no_layers:
        print_layers(out, data)
    if "whatif" in data:
        print_whatif(out, data)
    return 0


def mib(n: int) -> str:
    return f"{n / 2**20:,.2f}"


def count(n: float) -> str:
    """1.23 G, 45.6 M, 7.8 k: short counts for MACs and params."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f}"


# What the runtime makes of quantized weights: measured with ONNX Runtime 1.31's CPU
# provider on a QDQ network (its optimized model saved at each level): from level
# extended on (the default is all) QDQ Conv/MatMul become QLinearConv/QLinearMatMul on
# the int8 weights, and no float weight is made; at level basic every DequantizeLinear
# stays and runs at each inference.
DEQUANTIZED_NOTE = ("the float weights the stored ones dequantize to; not in the total: "
                    "ONNX Runtime CPU (default level) runs QDQ Conv/MatMul on the int8 "
                    "weights; at level basic each DequantizeLinear runs per inference")


def print_breakdown(console: Console, data: dict) -> None:
    t = data["totals"]
    table = Table(title=f"graphmem report: {shown(data['model'])} ({data['dtype']})",
                  header_style="bold")
    for col, justify in (("", "left"), ("bytes", "right"), ("MiB", "right"), ("note", "left")):
        table.add_column(col, justify=justify)
    kinds = ", ".join(f"{dtype} {mib(n)} MiB" for dtype, n in t["weight_bytes_by_dtype"].items())
    table.add_row("weights", f"{t['weight_bytes']:,}", mib(t["weight_bytes"]),
                  f"{t['params']:,} parameters read by the running nodes, as stored"
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
    where = "no convolution needs one" if t["workspace_node"] is None else \
        "largest at " + next((layer_label(r["op"], r["name"], r["step"], r["node"])
                              for r in data["layers"] if r["node"] == t["workspace_node"]),
                             f"node {t['workspace_node']}")
    table.add_row("workspace (im2col)", f"{t['workspace_bytes']:,}", mib(t["workspace_bytes"]),
                  f"one unfolded image of one conv, reused; {where}")
    table.add_row("[bold]total", f"[bold]{t['total_bytes']:,}", f"[bold]{mib(t['total_bytes'])}",
                  "weights + arena + workspace")
    # an op without a MAC rule makes every MAC total, and the roofline time, a lower bound
    least = "at least " if t.get("macs_at_least") else ""
    table.add_row("MACs", f"{'>= ' if least else ''}{t['matrix_macs']:,}", "",
                  f"{least}{count(t['matrix_macs'])}MAC in matrix ops (Conv, Gemm, MatMul, "
                  "attention, ...: PyTorch's FlopCounterMode / 2)")
    table.add_row("  all ops", f"{'>= ' if least else ''}{t['macs']:,}", "",
                  f"{least}{count(t['macs'])}MAC with element-wise, pooling, normalisation")
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


def print_peak(console: Console, data: dict, most: int = 8) -> None:
    p = data["peak"]
    if p["node"] is None:
        return
    title = f"peak: {mib(p['live_bytes'])} MiB live at {shown(p['layer'])}"
    table = Table(title=title, header_style="bold", min_width=len(title))
    for col in ("tensor", "shape", "MiB", "offset"):
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
    layers = data["layers"]
    total_macs = sum(r["macs"] or 0 for r in layers) or 1
    total_time = sum(r["time_s"] for r in layers) or 1
    table = Table(title="by op type", header_style="bold")
    for col in ("op", "nodes", "MACs", "% MACs", "MiB moved", "% time"):
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
    layers = data["layers"]
    title = "per layer (plan order)"
    if len(layers) > MAX_LAYER_ROWS:
        slowest = sorted(range(len(layers)), key=lambda k: -layers[k]["time_s"])
        layers = [layers[k] for k in sorted(slowest[:MAX_LAYER_ROWS])]
        title = (f"per layer (plan order): the {MAX_LAYER_ROWS} slowest of "
                 f"{len(data['layers'])}; --json lists all")
    table = Table(title=title, header_style="bold")
    cols = ("step", "node", "layer", "op", "output shape", "params", "param MiB", "act MiB",
            "live MiB", "MACs", "MiB moved", "MAC/B", "bound")
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
    table = Table(title=f"what-if: re-planned per batch and dtype (the model's batch is "
                        f"{data['batch']})", header_style="bold")
    budget = data.get("budget_bytes")
    for col in ("batch", "dtype", "weights MiB", "naive act MiB", "arena MiB", "workspace MiB",
                "total MiB", "MACs") + (("budget",) if budget else ()):
        table.add_column(col, justify="right")
    for r in data["whatif"]:
        table.add_row(str(r["batch"]), r["dtype"], mib(r["weight_bytes"]),
                      mib(r["activation_bytes_naive"]), mib(r["arena_bytes"]),
                      mib(r["workspace_bytes"]), mib(r["total_bytes"]),
                      (">= " if r["macs_at_least"] else "") + count(r["matrix_macs"]),
                      *((("fits" if r["total_bytes"] <= budget else "[red]over"),)
                        if budget else ()))
    console.print(table)
