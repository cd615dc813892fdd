"""``graphmem train MODEL --batch N``: build a training step and plan its memory."""
from __future__ import annotations

import json
import sys
from argparse import Namespace
from dataclasses import replace
from typing import TYPE_CHECKING

from graphmem.errors import GraphmemError
from graphmem.commands.sizes import parse_bytes
from graphmem.commands.common import (ModelSource, add_model_args, console, model_source,
                                      shown)
from graphmem.commands.progress import Progress
from graphmem.plan.io import check_output
from graphmem.training.precision import PRECISIONS

# rich, onnx and the planner are imported where they are used: building the parser
# (``graphmem train --help``) needs none of them
if TYPE_CHECKING:
    from rich.console import Console

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
    add_step_args(p)
    add_recompute_args(p)
    add_trainable_args(p)
    add_device_args(p)
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
    p.add_argument("--html", metavar="PATH",
                   help="write the self-contained HTML report of the step: the whole "
                        "footprint, the arena's timeline and layout, the layers")
    p.add_argument("--inference", action="store_true",
                   help="also plan inference at the same batch (and precision) and show "
                        "its footprint beside the step's (text, JSON and --html)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def add_step_args(p) -> None:
    """What a training step is counted with: the optimizer and the precision (``train``
    and ``fit --train``)."""
    p.add_argument("--optimizer", default="adam", choices=["sgd", "momentum", "adam"],
                   help="optimizer whose state is counted: 0, 1 or 2 copies of the weights")
    p.add_argument("--precision", default="fp32", choices=list(PRECISIONS),
                   help="fp32 (default); fp16 or bf16: every floating tensor of the step "
                        "and the optimizer state in half; mixed: the step in float16 "
                        "(activations, gradients, a weight copy) with float32 master "
                        "weights and float32 optimizer state")


def add_recompute_args(p) -> None:
    """What the step recomputes in backward (``train`` and ``fit --train``)."""
    from graphmem.commands.option_names import SELECTIVE_CHOICES as CHOICES
    p.add_argument("--recompute", choices=["none", "sqrt", "optimal"], default=None,
                   help="none: nothing recomputed (no checkpoints and no cheap values: "
                        "the step as written). sqrt: Chen et al. 2016 checkpoints, "
                        "sqrt(n) segments, or the balanced cuts, whichever plans smaller, "
                        "the rest recomputed in backward; then as few segments recomputed "
                        "whole as keep the planned arena (the others keep their "
                        "Conv/Gemm/MatMul outputs). optimal: also the cuts of a "
                        "mixed-integer program (HiGHS) over the segment schedules, planned "
                        "beside them; the smallest wins. Default: no checkpoints, cheap "
                        "values recomputed as --selective says")
    p.add_argument("--selective", choices=list(CHOICES), default=None,
                   help="cheap forward values recomputed in backward instead of kept: "
                        "none, the element-wise ops, or those and the normalisations; "
                        "auto (the default): whichever plans the smallest arena. "
                        "--recompute none means none")


def add_trainable_args(p) -> None:
    """Which parameters train (``train`` and ``fit --train``)."""
    p.add_argument("--trainable", action="append", default=[], metavar="PATTERN",
                   help="only the parameters whose initializer name matches this glob "
                        "pattern train (repeatable); the others are frozen: read, with no "
                        "gradient and no optimizer state")
    p.add_argument("--frozen", action="append", default=[], metavar="PATTERN",
                   help="the parameters whose name matches this glob pattern are frozen "
                        "(repeatable)")
    p.add_argument("--lora", type=int, metavar="RANK",
                   help="add LoRA adapters of this rank to the matrix products (MatMul, "
                        "Gemm) and train only them; the base weights are frozen")
    p.add_argument("--lora-targets", nargs="+", default=[], metavar="PATTERN",
                   help="with --lora: only the products whose weight or node name matches "
                        "one of these glob patterns (default: all)")


def add_device_args(p) -> None:
    """Data parallelism and ZeRO (``train`` and ``fit --train``)."""
    p.add_argument("--devices", type=int, default=1, metavar="N",
                   help="data-parallel devices: --batch is each device's batch, and the "
                        "figures per device are shown (default 1)")
    p.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3],
                   help="ZeRO stage: 1 shards the optimizer state (and master weights), 2 "
                        "also the gradients (the arena planned with one shard kept), 3 "
                        "also the weights (default 0: nothing sharded)")
    p.add_argument("--offload-optimizer", action="store_true",
                   help="ZeRO-Offload: the optimizer state and master weights on the host")


def sharding_choice(args):
    """The :class:`~graphmem.training.sharding.Sharding` of ``--devices``, ``--zero``
    and ``--offload-optimizer``."""
    from graphmem.training.sharding import Sharding
    return Sharding(args.devices, args.zero, args.offload_optimizer)


def trainable_choice(args):
    """``(trains, lora)`` for :func:`graphmem.training.build.build_training` from
    ``--trainable``, ``--frozen``, ``--lora`` and ``--lora-targets``."""
    from fnmatch import fnmatchcase

    from graphmem.training.lora import Lora
    if args.lora_targets and args.lora is None:
        raise GraphmemError("--lora-targets needs --lora RANK")
    if args.lora is not None:
        if args.trainable or args.frozen:
            raise GraphmemError("--lora trains only its adapters: give --lora or "
                                "--trainable/--frozen, not both")
        return None, Lora(args.lora, tuple(args.lora_targets))
    if not args.trainable and not args.frozen:
        return None, None
    keep, freeze = tuple(args.trainable), tuple(args.frozen)

    def trains(name: str) -> bool:
        return ((not keep or any(fnmatchcase(name, p) for p in keep))
                and not any(fnmatchcase(name, p) for p in freeze))
    return trains, None


def recompute_choice(args) -> tuple[str, str]:
    """``(checkpoints, selective)`` from ``--recompute`` and ``--selective``:
    ``--recompute none`` recomputes nothing, so it takes no cheap values either."""
    if args.recompute == "none":
        if args.selective not in (None, "none"):
            raise GraphmemError(f"--recompute none recomputes nothing: it cannot take "
                                f"--selective {args.selective}")
        return "none", "none"
    return args.recompute or "none", args.selective or "auto"


def run(args) -> int:
    from graphmem.commands.footprint_text import print_footprints
    recompute_choice(args)  # the options' conflicts, before the work
    trainable_choice(args)
    sharding_choice(args)
    if args.budget and args.recompute is not None:
        raise GraphmemError("--budget chooses its own recomputation: give --budget or "
                            "--recompute, not both")
    if args.batch is not None and args.batch <= 0:
        raise GraphmemError(f"--batch must be positive, not {args.batch}")
    budget = parse_bytes(args.budget) if args.budget else None
    if args.host_bw <= 0 or args.device_flops <= 0:
        raise GraphmemError("--host-bw and --device-flops must be positive")
    offload_min = parse_bytes(args.offload_min, "--offload-min")
    source = model_source(args)
    for out in (args.save, args.html):  # before the work: a bad output fails at once
        if out:
            check_output(out, [source.path])
    if args.save and args.html and args.save == args.html:
        raise GraphmemError("--save and --html name the same file")
    with Progress("train", stages=train_stages(args)) as progress:
        step = train_step(args, progress, budget, offload_min, source=source)
        report = step["report"]
        inference = None
        if args.inference:
            progress(f"planning inference at batch {report.batch}")
            inference = inference_footprint(source, report.batch, args.precision)
        if args.html:
            progress("writing the page")
            write_training_page(args.html, args, step, inference, source)
    if args.save:
        from graphmem.plan.io import write_atomic
        from graphmem.training.schedule import in_planned_order
        saved = in_planned_order(step["tg"].model, step["result"].plan.order)
        write_atomic(args.save, saved.SerializeToString(), inputs=[source.path])
    data = training_json(report, step)
    if inference is not None:
        data["inference_footprint"] = inference
    if args.html:
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
    else:
        out = console()
        print_report(out, args.model, report, step["names"])
        print_footprints(out, [f for f in (inference, data["footprint"]) if f], budget)
    return 0


def train_stages(args) -> int:
    """How many stages ``train`` names in its progress line (:func:`train_step`'s and
    its own)."""
    return 3 + sum(map(bool, (args.recompute not in (None, "none") or args.budget,
                              getattr(args, "devices", 1) not in (None, 1)
                              or getattr(args, "zero", 0),
                              args.offload, args.inference, args.html)))


def train_step(args, progress, budget: int | None, offload_min: int, *,
               source: ModelSource | None = None) -> dict:
    """Build, plan (with the recomputation asked for) and account for the step of
    ``source`` (default: the command's model, :func:`model_source`): ``report`` (a
    TrainingReport, its ``batch`` the batch bound), ``tg``, ``graph``, ``result``,
    ``names`` (node name -> the name a user reads) and ``layers``."""
    from graphmem.training.build import build_training, running_stat_outputs
    from graphmem.training.names import layer_names, loss_kind, node_names
    from graphmem.training.offload import offload_plan
    from graphmem.training.recompute import fit_budget, recompute_planned
    from graphmem.training.selective import selective_planned

    progress("reading the model")
    source = source if source is not None else model_source(args)
    if source.bounds:  # issue 53
        raise GraphmemError("--bound is not taken by train: the training step plans each size "
                            "that depends on the data at the bound the graph proves (plan, "
                            "verify, report and fit take --bound)")
    model = source.read_model(load_weights=True, check=True)  # as plan checks it
    batch = bind_training_dims(model, dict(source.dims), args.batch, source.dim_default)
    args = Namespace(**{**vars(args), "batch": batch})  # the caller's namespace is its own
    progress(f"building the training step (onnx-ad), batch {args.batch}")
    trains, lora = trainable_choice(args)
    tg = build_training(model, args.batch, loss=args.loss, output=args.output, bn=args.bn,
                        trains=trains, lora=lora)
    tg = replace(tg, precision=args.precision)
    # cheap values recomputed in backward where that plans smaller (selective.py)
    checkpoints, cheap = recompute_choice(args)
    progress("planning the step, with and without cheap values recomputed in backward")
    base, plain, selected = selective_planned(tg, args.optimizer, args.batch, cheap)
    baseline, planned, info = None, plain, {}
    if checkpoints != "none" or budget is not None:
        baseline = plain.report
        if budget is not None:
            progress("choosing recomputation to fit the budget (each choice planned)")
            chosen = fit_budget(base, budget, args.optimizer, args.batch, plain=plain)
        else:
            progress(f"planning --recompute {checkpoints} (each choice planned)")
            chosen = recompute_planned(base, args.optimizer, args.batch,
                                       optimal=checkpoints == "optimal", plain=plain)
        planned, info = chosen.step, chosen.info
    tg, graph, result = planned.tg, planned.graph, planned.result
    # the figures shown: the planned step's own, with what the command adds beside them
    report = replace(planned.report, extra=dict(planned.report.extra))
    report.extra.update(selected)
    report.extra.update(info)
    report.extra["bn"] = args.bn
    report.extra["trained_weight_tensors"] = len(tg.weights)
    report.extra["frozen_weight_tensors"] = len(tg.frozen)
    if lora is not None:
        report.extra["lora"] = {"rank": lora.rank, "targets": list(lora.targets),
                                "adapters": len(tg.weights) // 2}
    report.extra["running_stat_bytes"] = sum(graph.tensors[t].bytes for t in
                                             running_stat_outputs(tg.model).values())
    if baseline is not None:
        report.extra["baseline_saved_activation_bytes"] = baseline.saved_activation_bytes
        report.extra["baseline_kept_for_backward_bytes"] = \
            baseline.extra["kept_for_backward_bytes"]
        report.extra["baseline_arena_bytes"] = baseline.arena_bytes
    sharding = sharding_choice(args)
    if not sharding.plain:
        from graphmem.training.sharding import per_device
        progress(f"the step per device: {sharding.devices} devices, ZeRO-{sharding.stage}")
        report.extra["per_device"] = per_device(planned, sharding)
    if args.offload:
        progress("planning with the saved activations offloaded")
        report.extra.update(offload_plan(graph, result, args.host_bw, args.device_flops,
                                         offload_min))
    report.extra["loss"] = loss_kind(tg)
    peak = report.extra.get("peak") or {}
    if peak.get("position") is not None:
        peak["node_index"] = result.plan.order[peak["position"]]
    names = node_names(graph, layer_names(tg, model))
    return {"report": report, "tg": tg, "graph": graph, "result": result, "names": names}


def step_total(r) -> int:
    """The step total as the device holds it: with ``--offload``, the arena is the one
    planned with the offloaded activations away; with ``--devices``/``--zero``, what
    one device holds."""
    e = r.extra
    if "per_device" in e:
        return e["per_device"]["total_bytes"]
    if "offload_arena_bytes" in e:
        return r.step_bytes - r.arena_bytes + e["offload_arena_bytes"]
    return r.step_bytes


def training_json(r, step: dict) -> dict:
    """``train --json``: the report's figures, the step total, what it counted (the
    optimizer, the loss, the precision), the order in words and the footprint."""
    from graphmem.training.footprint import training
    from graphmem.training.names import LOSS_WORDS, ORDER_WORDS
    d = r.to_json()
    d["step_bytes"] = step_total(r)
    if "offload_arena_bytes" in r.extra:
        d["step_bytes_without_offload"] = r.step_bytes
    d["loss_words"] = LOSS_WORDS.get(d.get("loss"), d.get("loss"))
    d["order_words"] = ORDER_WORDS.get(r.order, r.order)
    peak = d.get("peak") or {}
    if peak.get("node") is not None:
        peak["layer"] = _peak_layer(peak, step["names"])
        for h in peak.get("helpers", []):
            h["layer"] = _named(h["op"], h["node"], step["names"])
    d["footprint"] = training(r, title=_title(step))
    return d


def _title(step: dict) -> str:
    r = step["report"]
    return f"training step, batch {r.batch}, {r.precision}, {r.optimizer}"


def _named(op, node, names: dict) -> str:
    from graphmem.plan.view import layer_label
    return layer_label(op or "?", names.get(node, node) if node else "")


def _peak_layer(peak: dict, names: dict) -> str:
    from graphmem.plan.view import layer_label
    return layer_label(peak["op"], names.get(peak["node"], peak["node"]), peak["position"],
                       peak.get("node_index"))


def inference_footprint(source: ModelSource, batch: int, precision: str) -> dict:
    """The inference footprint of ``source`` at ``batch`` (in half for a half or mixed
    precision), planned with the default passes."""
    from graphmem.analysis.footprint import inference
    from graphmem.analysis.whatif import Batcher, footprint, with_float_dtype
    from graphmem.training.precision import STEP_DTYPE
    batcher = Batcher(source.read_model(), source.dims, model_path=str(source.path),
                      dim_default=source.dim_default)
    graph = with_float_dtype(batcher.graph(batch), STEP_DTYPE[precision])
    return inference(footprint(graph),
                     title=f"inference, batch {batch}, {STEP_DTYPE[precision]}")


def write_training_page(path: str, args, step: dict, inference: dict | None,
                        source: ModelSource) -> None:
    """The HTML report of the step: the whole footprint (inference beside it when
    asked), the figures, then the arena's timeline, layout and layers, every node under
    the name a user reads."""
    from graphmem.export.html import page
    from graphmem.export.html_parts import footprint_section, training_section
    from graphmem.plan.io import write_atomic
    from graphmem.plan.view import build
    from graphmem.training.footprint import training
    from graphmem.training.names import with_names
    r = step["report"]
    graph = with_names(step["graph"], step["names"])
    view = build(step["result"].plan, graph)
    fps = [f for f in (inference, training(r, title=_title(step))) if f]
    # the headline's weights card names the whole model's, as the figures' table does;
    # a per-device footprint lists its shard under another name
    whole = replace(r, extra={k: v for k, v in r.extra.items() if k != "per_device"})
    budget = parse_bytes(args.budget) if args.budget else None
    sections = footprint_section(
        fps, budget, "The step holds its weights, the optimizer's state and the folded "
        "constants beside one planned arena; the arena is split where it is fullest, "
        "into the activations kept for backward, the gradients made by then, backward's "
        "own tensors and the bytes left free." + (
            " Inference at the same batch is planned on its own, drawn to the same scale."
            if inference else ""))
    sections += training_section(report_rows(r, step["names"]),
                                 f"Training step, batch {r.batch}")
    write_atomic(path, page(view, graph, sections,
                            title=f"{args.model} training step, batch {r.batch}",
                            footprint=training(whole)),
                 inputs=[source.path])


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
    """A size in the unit that reads best (``452.05 MiB``, ``103.75 KiB``)."""
    from graphmem.analysis.footprint import format_bytes
    return format_bytes(n)


def report_rows(r, names: dict) -> list[tuple[str, int | None, str]]:
    """The step's figures as (label, bytes or None, note) rows: the text table and the
    HTML page print the same."""
    from graphmem.training.names import LOSS_WORDS, ORDER_WORDS
    from graphmem.training.report import OPTIMIZER_STATE
    from graphmem.training.precision import STEP_DTYPE
    e = r.extra
    rows: list[tuple[str, int | None, str]] = []
    add = lambda label, b, note="": rows.append((label, b, note))  # noqa: E731
    half = r.precision != "fp32"
    add("weights (trainable)", r.weight_bytes,
        f"{STEP_DTYPE[r.precision]}, as the step reads them" if half else "")
    if r.frozen_weight_bytes:
        add("weights (frozen)", r.frozen_weight_bytes,
            f"{e.get('frozen_weight_tensors', 0)} weight tensors read and not trained: "
            f"no gradient, no optimizer state")
    if r.master_weight_bytes:
        add("master weights", r.master_weight_bytes,
            "float32 copy the optimizer updates (mixed precision)")
    add("gradients", r.gradient_bytes, "the step's outputs, planned inside the arena")
    copies = OPTIMIZER_STATE.get(r.optimizer, 0)
    add("optimizer state", r.optimizer_bytes,
        f"{r.optimizer}: {copies} cop{'y' if copies == 1 else 'ies'} of the "
        f"{'master ' if r.master_weight_bytes else ''}weights")
    if "kept_for_backward_bytes" in e:
        add("kept for backward", e["kept_for_backward_bytes"],
            f"{e['kept_for_backward']} tensors made before backward starts in the plan's "
            f"order and read after it (inside the arena, live together there)")
    over = r.saved_activation_bytes > r.arena_bytes
    add("  forward tensors backward reads", r.saved_activation_bytes,
        f"{r.saved_activations} tensors, each counted alone wherever the plan runs it"
        + (": more than the arena, as tensors sharing storage (an in-place op over its "
           "input, a view) count once each and some are freed before others are made"
           if over else ""))
    if "baseline_kept_for_backward_bytes" in e:
        b = e["baseline_kept_for_backward_bytes"]
        kept = e.get("kept_for_backward_bytes", 0)
        add("  kept without recomputation", b, f"{b / max(kept, 1):.2f}x more")
        add("  arena without recomputation", e["baseline_arena_bytes"])
    if e.get("bn") == "training" and e.get("running_stat_bytes"):
        add("  BN running statistics", e["running_stat_bytes"],
            "updated mean and variance: graph outputs in the arena (--bn training)")
    elif e.get("bn") == "inference":
        add("  BatchNormalization", None, "inference form: frozen statistics (--bn inference)")
    add("planned arena", r.arena_bytes,
        f"{r.nodes:,} nodes; order: {ORDER_WORDS.get(r.order, r.order)}")
    if e.get("selective") not in (None, "none"):
        add("  cheap values recomputed", None,
            f"{e['selective_recomputed']} forward values of "
            f"{e['selective'].replace('+', ' and ')} ops recomputed in backward from kept "
            f"ones (arena without: "
            f"{mib(e['selective_arena_bytes']['none'])})")
    none = e.get("unrecomputed")
    if none and (e.get("selective") not in (None, "none") or r.recompute_macs
                 or none["arena_bytes"] != r.arena_bytes):
        add("  nothing recomputed", none["arena_bytes"],
            f"the step as written (--recompute none): arena; step total "
            f"{mib(none['step_bytes'])}, kept for backward "
            f"{mib(none['kept_for_backward_bytes'])}")
    peak = e.get("peak") or {}
    if peak.get("position") is not None:
        kinds = peak["bytes_by_kind"]
        add("  at the peak", peak["live_bytes"],
            f"{_peak_layer(peak, names)}; backward starts at step "
            f"{peak['first_backward_position']}: kept {mib(kinds['saved'])}, gradients "
            f"{mib(kinds['gradients'])}, backward's tensors {mib(kinds['backward'])}")
        if kinds["gradients"] < r.gradient_bytes:
            add("    weight gradients", None,
                f"{mib(r.gradient_bytes - kinds['gradients'])} of them are made after "
                f"the peak, as the order defers them: this holds for an optimizer that "
                f"steps once after backward; accumulating gradients over micro-batches "
                f"keeps all {mib(r.gradient_bytes)} live through the step")
        for h in peak["helpers"]:
            add(f"    {_named(h['op'], h['node'], names)}", h["bytes"],
                f"a helper of backward, live at the peak: shape "
                f"{'x'.join(map(str, h['shape']))}")
    add("folded constants", r.constant_bytes,
        "computed from weights/constants only (transposes, zero fills)")
    if "offload_bytes" in e:
        add("arena with offload", e["offload_arena_bytes"],
            f"{e['offloaded']} storages ({e.get('offloaded_tensors', e['offloaded'])} "
            f"saved activations; a view and its base are one) copied to the host after "
            f"their last forward use and back before backward: "
            f"{mib(e['offload_bytes'])} each way")
        add("transfer stalls", None, f"{e['stall_seconds'] * 1e3:.3f} ms over "
            f"{e['compute_seconds'] * 1e3:.3f} ms of compute")
    parts = ["weights"] + (["frozen weights"] if r.frozen_weight_bytes else []) + \
        (["master weights"] if r.master_weight_bytes else []) + \
        ["optimizer state", "constants", "arena with offload" if "offload_bytes" in e
         else "arena"]
    words = f"; {r.optimizer}, loss: {LOSS_WORDS.get(e.get('loss'), e.get('loss'))}, " \
        f"{r.precision}"
    if "per_device" in e:
        d = e["per_device"]
        add("step total", step_total(r), f"what one of the {d['devices']} devices holds "
            f"(per device, below); the figures above are the whole model's" + words)
    else:
        add("step total", step_total(r), " + ".join(parts) + words)
    fb = r.forward_macs + r.backward_macs
    add("MACs forward / backward", None, f"{r.forward_macs:,} / {r.backward_macs:,}")
    if r.recompute_macs:
        add("MACs recomputed", None, f"{r.recompute_macs:,} = "
            f"{100 * r.recompute_macs / max(r.forward_macs, 1):.1f}% of forward, "
            f"{100 * r.recompute_macs / max(fb, 1):.1f}% of forward+backward")
    if e.get("choice") == "none":
        add("checkpoints", None, "none: every choice of cuts planned larger than no "
            f"checkpoints (Chen's {mib(e['chen_arena_bytes'])})"
            if "chen_arena_bytes" in e else "none: no checkpoints needed")
    elif "checkpoints" in e:
        add("checkpoints", None, f"{e['checkpoints']} tensors kept at cuts "
            f"({e.get('candidates')} candidate cuts), {e.get('segments')} segments, "
            f"{e.get('whole_segments')} recomputed whole, "
            f"{e.get('matrix_outputs_kept', 0)} matrix-op outputs kept"
            + (f"; {e['choice']} cuts" if e.get("choice") else ""))
    if "optimal" in e:
        o = e["optimal"]
        add("  mixed-integer program", o["optimal_arena_bytes"],
            f"its cuts' planned arena (balanced cuts "
            f"{mib(o.get('balanced_arena_bytes', 0))}); modelled peak "
            f"{mib(o['modelled_peak_bytes'])} over {o['cuts_modelled']} cuts, "
            f"{o['solve_seconds']} s, {o['status']}")
    if "per_device" in e:
        d = e["per_device"]
        add(f"per device ({d['devices']} devices, ZeRO-{d['zero']})", d["total_bytes"],
            "what one device holds, its batch as given"
            + ("; optimizer state and master weights on the host" if d["offload_optimizer"]
               else ""))
        # named apart from the whole model's rows above: "on each device"
        for label, key, note in (
                ("  weights on each device", "weight_bytes",
                 "sharded (ZeRO-3)" if d["zero"] >= 3 else ""),
                ("  frozen weights on each device", "frozen_weight_bytes",
                 "sharded (ZeRO-3)" if d["zero"] >= 3 else ""),
                ("  gathered weight", "gathered_weight_bytes",
                 "the largest weight, gathered whole while its layer runs"),
                ("  master weights on each device", "master_weight_bytes", ""),
                ("  optimizer state on each device", "optimizer_bytes",
                 "sharded" if d["zero"] >= 1 else ""),
                ("  gradients kept on each device", "gradient_bytes",
                 "this device's shard, the rest freed as it is reduced (in the arena)"
                 if d["zero"] >= 2 else "all of them (in the arena)"),
                ("  arena on each device", "arena_bytes",
                 "planned again with one gradient shard kept" if d["zero"] >= 2
                 else "the planned arena"),
                ("  on the host", "host_bytes", "optimizer state and master weights")):
            if d[key] or key in ("gradient_bytes", "arena_bytes"):
                add(label, d[key], note)
    if "budget_bytes" in e:
        add("budget", e["budget_bytes"], ("fits" if e.get("fits_budget") else "does not fit")
            + f" after {e.get('budget_trials')} plans")
    return rows


def print_report(console: Console, model: str, r, names: dict | None = None) -> None:
    from rich.table import Table
    t = Table(title=f"graphmem train: {shown(model)}, batch {r.batch}", header_style="bold")
    t.add_column("")
    t.add_column("size", justify="right")
    t.add_column("note")
    for label, b, note in report_rows(r, names or {}):
        style = "[green]" if label == "planned arena" else \
            "[bold]" if label == "step total" else ""
        t.add_row(f"{style}{shown(label)}", "" if b is None else f"{style}{mib(b)}",
                  shown(note))
    console.print(t)
