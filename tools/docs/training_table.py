"""Build, plan, recompute and offload the training step of the nine zoo graphs.

    python -m tools.docs.training_table                 # print the Markdown table (batch 32)
    python -m tools.docs.training_table --doc           # also rewrite it in docs/training.md
    python -m tools.docs.training_table --batch 8 resnet50 vgg19

Every figure comes from graphmem.training: the onnx-ad training graph with our rewrites,
planned with the default passes (file order or sunk helpers, whichever is smaller) as
`train` plans it (cheap values recomputed in backward where that plans smaller:
selective.py), recomputation as `train --recompute sqrt` (no checkpoints, Chen's
sqrt(n) cuts or the balanced cuts, whichever plans smallest, then as few segments
recomputed whole as keep the arena), offload with --host-bw 25e9 and
--device-flops 1e13 (storages of saved activations of 64 KiB and more, each moved once).
"kept for backward" is `train`'s: arena storage made before backward starts in the
plan's order and read after it.
"""
from __future__ import annotations

import argparse
import sys
import time

import onnx

from graphmem.errors import GraphmemError
from graphmem.training.build import build_training
from graphmem.training.offload import offload_plan
from graphmem.training.recompute import recompute_planned
from graphmem.training.selective import selective_planned
from graphmem.frontend.zoo import ZOO, zoo_path

MIB = 2 ** 20
HEADER = ["| model | nodes | weights MiB | gradients MiB | Adam state MiB "
          "| folded constants MiB | kept for backward MiB | all tensors naive MiB | planned arena MiB "
          "| recompute: kept for backward MiB | recompute: arena MiB | recompute: extra MACs % fwd+bwd "
          "| offload: arena MiB | offload: moved each way MiB | offload: stall ms | build+plan s |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def row(name: str, batch: int) -> str:
    try:
        return _row(name, batch)
    except GraphmemError as exc:
        return f"| {name} | failed: {exc} |" + " |" * 14


def _row(name: str, batch: int) -> str:
    t0 = time.perf_counter()
    tg = build_training(onnx.load(str(zoo_path(name))), batch)
    marked, plain, _ = selective_planned(tg, "adam", batch)
    graph, result, base = plain.graph, plain.result, plain.report
    off = offload_plan(graph, result, 25e9, 1e13, 1 << 16)
    rc = recompute_planned(marked, "adam", batch, plain=plain).report
    seconds = time.perf_counter() - t0
    extra = 100 * rc.recompute_macs / max(base.forward_macs + base.backward_macs, 1)
    naive = result.plan.stats["naive_bytes"]
    m = lambda b: f"{b / MIB:,.1f}"  # noqa: E731
    return (f"| {name} | {base.nodes} | {m(base.weight_bytes)} | {m(base.gradient_bytes)} "
            f"| {m(base.optimizer_bytes)} | {m(base.constant_bytes)} "
            f"| {m(base.extra['kept_for_backward_bytes'])} | {m(naive)} "
            f"| **{m(base.arena_bytes)}** | {m(rc.extra['kept_for_backward_bytes'])} "
            f"| {m(rc.arena_bytes)} | {extra:.1f} | {m(off['offload_arena_bytes'])} "
            f"| {m(off['offload_bytes'])} | {1e3 * off['stall_seconds']:.2f} | {seconds:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(ZOO))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--doc", action="store_true", help="rewrite the table in docs/training.md")
    args = ap.parse_args()
    lines = list(HEADER)
    for name in args.models:
        lines.append(row(name, args.batch))
        print(lines[-1], file=sys.stderr, flush=True)
    table = f"Batch {args.batch}.\n\n" + "\n".join(lines)
    print(table)
    if args.doc:
        from tools import ROOT
        from tools.docs.sections import write_doc
        write_doc(ROOT / "docs" / "training.md", "training-table", table)


if __name__ == "__main__":
    main()
