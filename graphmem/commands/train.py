"""``graphmem train MODEL --batch N``: build a training step and plan its memory."""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from graphmem.errors import GraphmemError
from graphmem.frontend.reader import read_model
from graphmem.commands.sizes import parse_bytes
from graphmem.commands.common import add_model_args, model_path, parse_dims
from graphmem.plan.io import check_output

def add_parser(sub) -> None:
    p = sub.add_parser("train", help="build a training graph (loss, backward, gradients) and "
                                     "plan its memory",
                       description="Build the forward+backward graph of MODEL with onnx-ad, "
                                   "plan it, and account for weights, gradients, optimizer "
                                   "state and the activations kept for backward.")
    add_model_args(p)
    p.add_argument("--batch", type=int, default=None,
                   help="batch size: the first axis of every data input (default: what "
                        "--dim binds that axis to, else 1)")
    p.add_argument("--loss", default="auto", choices=["auto", "xent", "sum", "mean"],
                   help="loss: cross-entropy against a one-hot label (auto when the output "
                        "is a Softmax), or the sum or mean of the output")
    p.add_argument("--output", metavar="NAME",
                   help="the graph output the loss is taken of, for a model with several "
                        "(default: the first; the others and what only they need are "
                        "dropped)")
    p.add_argument("--bn", default="training", choices=["training", "inference"],
                   help="BatchNormalization: training (default) normalizes with the batch's "
                        "statistics and outputs the updated running mean and variance; "
                        "inference keeps the frozen running statistics")
    p.add_argument("--optimizer", default="adam", choices=["sgd", "momentum", "adam"],
                   help="optimizer whose state is counted: 0, 1 or 2 copies of the weights")
    p.add_argument("--recompute", choices=["none", "sqrt", "optimal"], default="none",
                   help="sqrt: Chen et al. 2016 checkpoints, sqrt(n) segments, or the "
                        "balanced cuts, whichever plans smaller, the rest recomputed in "
                        "backward; then as few segments recomputed whole as keep the "
                        "planned arena (the others keep their Conv/Gemm/MatMul outputs). "
                        "optimal: also the cuts of a mixed-integer program (HiGHS) over "
                        "the segment schedules, planned beside them; the smallest wins")
    p.add_argument("--budget", metavar="BYTES",
                   help="pick recomputation checkpoints so that the whole step (weights, "
                        "optimizer state, arena) fits, e.g. 2GiB")
    p.add_argument("--offload", action="store_true",
                   help="vDNN: copy saved activations to host after their last forward use "
                        "and back before their first backward use")
    p.add_argument("--host-bw", type=float, default=25e9, metavar="B/S",
                   help="host link bandwidth in bytes/s, each way (default 25e9)")
    p.add_argument("--device-flops", type=float, default=1e13, metavar="FLOP/S",
                   help="device peak FLOP/s for the transfer timeline (default 1e13)")
    p.add_argument("--offload-min", default="64KiB", metavar="BYTES",
                   help="offload only saved activations at least this big (default 64KiB)")
    p.add_argument("--save", metavar="PATH", help="write the built training model (.onnx)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from graphmem.training.build import build_training, running_stat_outputs
    from graphmem.training.offload import offload_plan
    from graphmem.training.recompute import fit_budget, recompute_planned
    from graphmem.training.report import account
    from graphmem.training.selective import selective_planned

    if args.budget and args.recompute != "none":
        raise GraphmemError("--budget chooses its own recomputation: give --budget or "
                            "--recompute, not both")
    if args.batch is not None and args.batch <= 0:
        raise GraphmemError(f"--batch must be positive, not {args.batch}")
    budget = parse_bytes(args.budget) if args.budget else None
    if args.host_bw <= 0 or args.device_flops <= 0:
        raise GraphmemError("--host-bw and --device-flops must be positive")
    if args.save:  # before the work: a bad output fails at once
        check_output(args.save, [model_path(args)])
    model = read_model(model_path(args), load_weights=True)
    args.batch = bind_training_dims(model, parse_dims(args.dim), args.batch, args.dim_default)
    tg = build_training(model, args.batch, loss=args.loss, output=args.output, bn=args.bn)
    # cheap values recomputed in backward where that plans smaller (selective.py)
    base, plain, selected = selective_planned(tg, args.optimizer, args.batch)
    baseline = None
    if args.recompute != "none" or budget is not None:
        baseline = plain[4]
        if budget is not None:
            tg, graph, result, order, info = fit_budget(base, budget, args.optimizer,
                                                         args.batch, plain=plain)
        else:
            tg, graph, result, order, info = recompute_planned(
                base, args.optimizer, args.batch, optimal=args.recompute == "optimal",
                plain=plain)
        report = account(tg, graph, result, order, args.batch, args.optimizer)
    else:
        info = {}
        tg, graph, result, order, report = plain
    report.extra.update(selected)
    report.extra.update(info)
    report.extra["bn"] = args.bn
    report.extra["running_stat_bytes"] = sum(graph.tensors[t].bytes for t in
                                             running_stat_outputs(tg.model).values())
    if baseline is not None:
        report.extra["baseline_saved_activation_bytes"] = baseline.saved_activation_bytes
        report.extra["baseline_arena_bytes"] = baseline.arena_bytes
    if args.offload:
        report.extra.update(offload_plan(graph, result, args.host_bw, args.device_flops,
                                         parse_bytes(args.offload_min, "--offload-min")))
    if args.save:
        from graphmem.plan.io import write_atomic
        write_atomic(args.save, tg.model.SerializeToString(), inputs=[model_path(args)])
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), indent=1) + "\n")
    else:
        print_report(Console(), args.model, report)
    return 0


def bind_training_dims(model, dims: dict[str, int], batch: int | None,
                       default: int | None) -> int:
    """Bind the model's symbolic dims in place (as ``plan --dim`` does) and return the
    batch. The first axis of every data input is the batch: a symbolic name there is
    bound to ``batch`` unless ``--dim`` binds it, and the two must agree."""
    from graphmem.frontend.reader import bind_dims
    g = model.graph
    inits = {t.name for t in g.initializer}
    first = {}
    for vi in g.input:
        dims_of = vi.type.tensor_type.shape.dim
        if vi.name not in inits and dims_of and dims_of[0].dim_param:
            first.setdefault(dims_of[0].dim_param, vi.name)
    bound = {dims[p] for p in first if p in dims}
    if batch is not None:
        for p, name in first.items():
            if p in dims and dims[p] != batch:
                raise GraphmemError(f"--dim {p}={dims[p]} and --batch {batch} disagree: "
                                    f"{p!r} is the first (batch) axis of input {name!r}")
    elif len(bound) > 1:
        raise GraphmemError("--dim binds the first (batch) axes of the inputs to different "
                            f"values ({', '.join(map(str, sorted(bound)))}); pass --batch N")
    else:
        batch = bound.pop() if bound else 1
    for p in first:
        dims.setdefault(p, batch)
    bind_dims(model, dims, default)
    return batch


def mib(n: int) -> str:
    return f"{n / 2**20:,.2f}"


def print_report(console: Console, model: str, r) -> None:
    t = Table(title=f"graphmem train: {model}, batch {r.batch}", header_style="bold")
    t.add_column("")
    t.add_column("MiB", justify="right")
    t.add_column("note")
    t.add_row("weights (trainable)", mib(r.weight_bytes), "")
    t.add_row("gradients", mib(r.gradient_bytes), "graph outputs: inside the arena")
    t.add_row("optimizer state", mib(r.optimizer_bytes), "")
    t.add_row("activations kept for backward", mib(r.saved_activation_bytes),
              f"{r.saved_activations} forward tensors read by backward")
    e = r.extra
    if "plan_saved_activation_bytes" in e:
        t.add_row("  held across the boundary (plan)", mib(e["plan_saved_activation_bytes"]),
                  f"{e['plan_saved_activations']} tensors made before backward starts in "
                  "the plan's order and read after")
    if "baseline_saved_activation_bytes" in e:
        b = e["baseline_saved_activation_bytes"]
        t.add_row("  without recomputation", mib(b),
                  f"{b / max(r.saved_activation_bytes, 1):.2f}x more")
        t.add_row("  arena without recomputation", mib(e["baseline_arena_bytes"]), "")
    if e.get("bn") == "training" and e.get("running_stat_bytes"):
        t.add_row("  BN running statistics", mib(e["running_stat_bytes"]),
                  "updated mean and variance: graph outputs in the arena (--bn training)")
    elif e.get("bn") == "inference":
        t.add_row("  BatchNormalization", "", "inference form: frozen statistics (--bn inference)")
    t.add_row("[green]planned arena", f"[green]{mib(r.arena_bytes)}",
              f"{r.nodes} nodes, {r.order} order")
    if e.get("selective") not in (None, "none"):
        t.add_row("  cheap values recomputed", "",
                  f"{e['selective_recomputed']} forward values of {e['selective']} ops "
                  f"recomputed in backward from kept ones (arena without: "
                  f"{mib(e['selective_arena_bytes']['none'])} MiB)")
    peak = e.get("peak") or {}
    if peak.get("position") is not None:
        kinds = peak["bytes_by_kind"]
        t.add_row("  at the peak", mib(peak["live_bytes"]),
                  f"step {peak['position']} ({peak['op']} {peak['node']}; backward starts at "
                  f"{peak['first_backward_position']}): saved {mib(kinds['saved'])}, gradients "
                  f"{mib(kinds['gradients'])}, backward {mib(kinds['backward'])} MiB")
        for h in peak["helpers"]:
            t.add_row(f"    {h['name']}", mib(h["bytes"]),
                      f"{h['op']} {h['node']} {'x'.join(map(str, h['shape']))}")
    t.add_row("folded constants", mib(r.constant_bytes),
              "computed from weights/constants only (transposes, zero fills)")
    total = r.weight_bytes + r.optimizer_bytes + r.constant_bytes + r.arena_bytes
    t.add_row("step total", mib(total), "weights + optimizer state + constants + arena")
    fb = r.forward_macs + r.backward_macs
    t.add_row("MACs forward / backward", "", f"{r.forward_macs:,} / {r.backward_macs:,}")
    if r.recompute_macs:
        t.add_row("MACs recomputed", "", f"{r.recompute_macs:,} = "
                  f"{100 * r.recompute_macs / max(r.forward_macs, 1):.1f}% of forward, "
                  f"{100 * r.recompute_macs / max(fb, 1):.1f}% of forward+backward")
    if e.get("choice") == "none":
        t.add_row("checkpoints", "", "none: every choice of cuts planned larger than no "
                  f"checkpoints (Chen's {mib(e['chen_arena_bytes'])} MiB)"
                  if "chen_arena_bytes" in e else "none: no checkpoints needed")
    elif "checkpoints" in e:
        t.add_row("checkpoints", "", f"{e['checkpoints']} tensors kept at cuts "
                  f"({e.get('candidates')} candidate cuts), {e.get('segments')} segments, "
                  f"{e.get('whole_segments')} recomputed whole, "
                  f"{e.get('matrix_outputs_kept', 0)} matrix-op outputs kept"
                  + (f"; {e['choice']} cuts" if e.get("choice") else ""))
    if "optimal" in e:
        o = e["optimal"]
        t.add_row("  mixed-integer program", mib(o["optimal_arena_bytes"]),
                  f"its cuts' planned arena (balanced cuts "
                  f"{mib(o.get('balanced_arena_bytes', 0))} MiB); modelled peak {mib(o['modelled_peak_bytes'])} MiB over "
                  f"{o['cuts_modelled']} cuts, {o['solve_seconds']} s, {o['status']}")
    if "offload_bytes" in e:
        t.add_row("offloaded each way", mib(e["offload_bytes"]),
                  f"{e['offloaded']} tensors; arena with offload {mib(e['offload_arena_bytes'])}")
        t.add_row("transfer stalls", "", f"{e['stall_seconds'] * 1e3:.3f} ms over "
                  f"{e['compute_seconds'] * 1e3:.3f} ms of compute")
    console.print(t)
