"""Memory per device under data parallelism and ZeRO: graphmem's planned step beside
DeepSpeed's model-state estimators, on zoo graphs.

    python -m tools.training.zero_table                  # print the Markdown table
    python -m tools.training.zero_table --doc            # also write it into docs/training.md
    python -m tools.training.zero_table --models resnet50 --batch 8 --devices 8

Each model's training step is built and planned once at the per-device batch as `train
--precision mixed --optimizer adam --recompute none` plans it
(graphmem.training.sharding.per_device gives every stage; stages 2 and 3 plan the arena
again with one gradient shard kept). DeepSpeed's columns are its estimators' formulas
for mixed-precision Adam, model states only, without offload
(``estimate_zero2_model_states_mem_needs``: 4 P + 16 P / N bytes;
``estimate_zero3_model_states_mem_needs``: 4 L + 18 P / N, L the largest layer's
parameters, here the largest weight tensor), with P the parameters graphmem trains.
"""
from __future__ import annotations

import argparse
import sys

import onnx

from graphmem.frontend.zoo import zoo_path
from graphmem.training.build import build_training
from graphmem.training.report import plan_step
from graphmem.training.sharding import Sharding, per_device
from tools import ROOT
from tools.docs.sections import write_doc

DOC = ROOT / "docs" / "training.md"
SECTION = "zero-table"
MIB = 2 ** 20
HEADER = ("| model | batch / device | stage | weights | gradients kept | optimizer + master "
          "| model states | arena | per device | DeepSpeed model states |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def deepspeed_estimate(stage: int, params: int, largest: int, devices: int) -> int | None:
    """DeepSpeed's estimate of one GPU's model states (mixed-precision Adam, no offload);
    None for the stages its estimators do not cover."""
    if stage == 2:
        return 4 * params + int(16 * params / devices)
    if stage == 3:
        return 4 * largest + int(18 * params / devices)
    return None


def rows(name: str, batch: int, devices: int) -> list[str]:
    """The table's rows of one zoo model: one per ZeRO stage."""
    from dataclasses import replace
    tg = replace(build_training(onnx.load(str(zoo_path(name))), batch), precision="mixed")
    step = plan_step(tg, "adam", batch)
    graph = step.graph
    params = sum(graph.tensors[w].numel for w in tg.weights)
    largest = max(graph.tensors[w].numel for w in tg.weights)
    m = lambda b: f"{b / MIB:,.1f}"  # noqa: E731
    out = []
    for stage in (0, 1, 2, 3):
        d = per_device(step, Sharding(devices, stage))
        states = (d["weight_bytes"] + d["frozen_weight_bytes"] + d["gathered_weight_bytes"]
                  + d["gradient_bytes"] + d["optimizer_bytes"] + d["master_weight_bytes"])
        ds = deepspeed_estimate(stage, params, largest, devices)
        out.append(f"| {name} | {batch} | {stage} | {m(d['weight_bytes'])} "
                   f"| {m(d['gradient_bytes'])} "
                   f"| {m(d['optimizer_bytes'] + d['master_weight_bytes'])} | {m(states)} "
                   f"| {m(d['arena_bytes'])} | **{m(d['total_bytes'])}** "
                   f"| {'-' if ds is None else m(ds)} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.training.zero_table",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "vgg19"])
    ap.add_argument("--batch", type=int, default=8, help="per-device batch (default 8)")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--doc", action="store_true", help="write the table into docs/training.md")
    args = ap.parse_args(argv)
    lines = list(HEADER)
    for name in args.models:
        lines += rows(name, args.batch, args.devices)
        print(lines[-1], file=sys.stderr, flush=True)
    body = (f"{args.devices} devices, mixed precision, Adam, nothing recomputed; MiB per "
            f"device (`{' '.join(['python -m tools.training.zero_table', *(argv or sys.argv[1:])])}`). "
            "Model states: weights (the gathered one under ZeRO-3 included), gradients kept, "
            "optimizer state and master weights; per device adds the folded constants and "
            "the planned arena (the gradients kept are inside it).\n\n" + "\n".join(lines))
    print(body)
    if args.doc:
        write_doc(DOC, SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
