"""``graphmem report MODEL``: where the memory and the compute go, and what-ifs."""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from graphmem.analysis import breakdown as analysis
from graphmem.errors import GraphmemError
from graphmem.frontend.reader import read_model
from graphmem.analysis.whatif import Batcher, float_dtype, sweep
from graphmem.frontend.zoo import resolve
from graphmem.commands.common import (add_model_args, add_pass_args, input_paths, parse_dims,
                                      plan_options, shown)
from graphmem.commands.export import planned_view
from graphmem.commands.report_html import add_html_args, write_page
from graphmem.plan.io import check_output


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="memory and compute breakdown, per layer, with what-ifs",
                       description="Weights, activations (naive and planned), im2col "
                                   "workspace, MACs and a roofline per layer; --batch and "
                                   "--dtype re-plan the model at other sizes.")
    add_model_args(p)
    add_pass_args(p)
    p.add_argument("--batch", metavar="LIST",
                   help="what-if batch sizes, e.g. 1,8,32 (each one re-planned)")
    p.add_argument("--dtype", metavar="LIST",
                   help="what-if element types for the floating tensors, e.g. "
                        "float32,float16,int8 (each one re-planned)")
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
    if args.html:  # before the work: a bad output fails at once
        check_output(args.html, input_paths(args))
    view, graph = planned_view(args)  # plans, or checks a saved --plan against the model
    if args.html:
        write_page(args.html, view, graph, input_paths(args))
    dev = device_from_args(args, graph)
    out = analysis.report(graph, view.plan, dev)
    out["dtype"] = float_dtype(graph)
    if args.batch or args.dtype:
        batches = parse_list(args.batch, "batch", int) if args.batch else None
        dtypes = parse_list(args.dtype, "dtype") if args.dtype else [out["dtype"]]
        if batches and min(batches) < 1:
            raise GraphmemError("--batch: every batch must be at least 1")
        path = resolve(args.model, quiet=True)  # load_graph has said which file it is
        batcher = Batcher(read_model(path), parse_dims(args.dim), model_path=str(path),
                      dim_default=args.dim_default)
        out["batch"] = batcher.axis.size
        out["whatif"] = sweep(batcher, batches or [batcher.axis.size], dtypes,
                              **plan_options(args))
    return out


def run(args) -> int:
    data = build(args)
    if args.html:
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        return 0
    console = Console(width=None if sys.stdout.isatty() else 160)
    print_breakdown(console, data)
    print_peak(console, data)
    print_by_op(console, data)
    if not args.no_layers:
        print_layers(console, data)
    if "whatif" in data:
        print_whatif(console, data)
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
    where = f"largest at node {t['workspace_node']}" if t["workspace_node"] is not None else \
        "no convolution needs one"
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
    table = Table(title=f"peak: {mib(p['live_bytes'])} MiB live at node {p['node']} "
                        f"({shown(p['op'])})", header_style="bold")
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
    cols = ("node", "op", "output shape", "params", "param MiB", "act MiB", "live MiB", "MACs",
            "MiB moved", "MAC/B", "bound")
    for col in cols:
        table.add_column(col, justify="left" if col in ("op", "output shape", "bound") else "right")
    for r in layers:
        shapes = " ".join("x".join(map(str, s)) for s in r["output_shapes"])
        table.add_row(str(r["node"]), shown(r["op"]), shapes, count(r["params"]),
                      mib(r["param_bytes"]),
                      mib(r["activation_bytes"]), mib(r["live_bytes"]),
                      "?" if r["macs"] is None else count(r["macs"]), mib(r["bytes_moved"]),
                      "-" if r["intensity"] is None else f"{r['intensity']:.2f}", r["bound"])
    console.print(table)


def print_whatif(console: Console, data: dict) -> None:
    table = Table(title=f"what-if: re-planned per batch and dtype (the model's batch is "
                        f"{data['batch']})", header_style="bold")
    for col in ("batch", "dtype", "weights MiB", "naive act MiB", "arena MiB", "workspace MiB",
                "total MiB", "MACs"):
        table.add_column(col, justify="right")
    for r in data["whatif"]:
        table.add_row(str(r["batch"]), r["dtype"], mib(r["weight_bytes"]),
                      mib(r["activation_bytes_naive"]), mib(r["arena_bytes"]),
                      mib(r["workspace_bytes"]), mib(r["total_bytes"]),
                      (">= " if r["macs_at_least"] else "") + count(r["matrix_macs"]))
    console.print(table)
