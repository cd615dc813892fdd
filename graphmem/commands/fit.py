"""``graphmem fit MODEL --budget 12GiB``: the largest batch whose planned memory fits;
``--train``: the largest batch whose planned training step fits."""
from __future__ import annotations

import json
import sys
from argparse import Namespace

from graphmem.commands.sizes import parse_bytes
from graphmem.commands.common import (add_model_args, add_pass_args, add_runtime_args,
                                      model_source, plan_options)
from graphmem.commands.progress import Progress
from graphmem.commands import ranges


def add_parser(sub) -> None:
    p = sub.add_parser("fit", help="the largest batch whose weights + arena (+ workspace) "
                                   "fit; --train: whose training step fits",
                       description="Search over real plans: each probed batch is "
                                   "re-planned. The total is weights + planned arena + the "
                                   "convolution workspace (--workspace: by default the rule "
                                   "of --provider's kernels; --no-workspace leaves it out). "
                                   "With --train the total is `graphmem train`'s step total "
                                   "at each batch (weights, optimizer state, folded "
                                   "constants, arena), for --optimizer, --precision and "
                                   "--recompute.")
    add_model_args(p)
    add_pass_args(p)
    add_runtime_args(p)
    p.add_argument("--budget", metavar="SIZE",
                   help="memory budget: 12GiB, 4GB, 512MiB or bytes (GB = 10^9, GiB = 2^30)")
    from graphmem.commands.capacity_args import FIT_HELP, add_capacity_arg
    add_capacity_arg(p, FIT_HELP)
    p.add_argument("--dtype", metavar="TYPE",
                   help="element type for the floating tensors (default: the model's own)")
    from graphmem.commands.workspace_args import add_workspace_args
    add_workspace_args(p)
    p.add_argument("--no-workspace", action="store_true",
                   help="leave the workspace out of the total: --workspace none")
    t = p.add_argument_group("training (--train)")
    t.add_argument("--train", action="store_true",
                   help="fit the training step (`graphmem train` at each batch): the "
                        "largest batch whose step total fits")
    from graphmem.commands.train import (add_device_args, add_recompute_args, add_step_args,
                                         add_trainable_args)
    add_step_args(t)
    add_recompute_args(t)
    add_trainable_args(t)
    add_device_args(t)
    t.add_argument("--loss", default="auto", choices=["auto", "xent", "sum", "mean"],
                   help="loss, as `train --loss`")
    t.add_argument("--bn", default="training", choices=["training", "inference"],
                   help="BatchNormalization form, as `train --bn`")
    t.add_argument("--output", metavar="NAME", help="the output the loss is taken of")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def search(args) -> dict:
    """The fit answer as ``fit --json`` prints it."""
    from graphmem.analysis.whatif import Batcher, fit, float_dtype, footprint, with_float_dtype
    from graphmem.commands.capacity_args import capacity_of, fit_answer, one_limit
    cap = capacity_of(args)
    one_limit(args, cap)
    budget = parse_bytes(args.budget, "--budget") if cap is None else cap
    if args.train:
        return search_training(args, budget)
    source = model_source(args)
    batcher = Batcher(source.read_model(), source.dims, model_path=str(source.path),
                      dim_default=source.dim_default, bounds=source.bounds)
    dtype = args.dtype or float_dtype(batcher.base)
    from graphmem.commands.workspace_args import workspace_from_args
    rule, threads = workspace_from_args(args)
    options = {**plan_options(args), "workspace_rule": rule, "threads": threads}
    parts: dict[int, dict] = {}

    with Progress("fit", stages=1) as progress:
        progress("the largest batch under the budget, each batch planned")
        part = progress.callback()

        def total_at(batch: int) -> int:
            part(search_part(batch, {b: p["total_bytes"] for b, p in parts.items()}, budget))
            parts[batch] = footprint(with_float_dtype(batcher.graph(batch), dtype), **options)
            return parts[batch]["total_bytes" if cap is None else "arena_bytes"]

        answer = fit(total_at, budget)
    if cap is not None:  # --capacity: the arena alone
        return fit_answer(answer, parts, cap, dtype)
    at = parts[max(answer["batch"], 1)]
    return {"batch": answer["batch"], "total_bytes": answer["total_bytes"],
            "budget_bytes": budget, "next_total_bytes": answer["next_total_bytes"],
            "weight_bytes": at["weight_bytes"], "arena_bytes": at["arena_bytes"],
            "workspace_bytes": at["workspace_bytes"], "workspace_rule": rule,
            "workspace_threads": threads,
            "includes_workspace": rule != "none", "dtype": dtype,
            "probed": answer["probed"]}


def search_part(batch: int, totals: dict[int, int], budget: int) -> str:
    """The search's progress while it plans ``batch`` (``totals``: the batches planned
    so far): ``planning batch 96, plan 6 of about 8 (64 fits, 128 does not)``; while
    it doubles, the plans left are not known yet."""
    import math
    fits = max((b for b, t in totals.items() if t <= budget), default=0)
    over = min((b for b, t in totals.items() if t > budget), default=None)
    done = len(totals)
    if over is None:
        return (f"planning batch {batch}, plan {done + 1} (doubling the batch"
                + (f": {fits} fits)" if fits else ")"))
    total = done + max(1, math.ceil(math.log2(max(over - fits, 1))))
    return (f"planning batch {batch}, plan {done + 1} of about {total} ({fits} fits, "
            f"{over} does not)")


def search_training(args, budget: int) -> dict:
    """The largest training batch whose step total (``train``'s, at that batch, with the
    same options) fits ``budget``: :func:`~graphmem.analysis.fitsearch.largest_fitting`
    over real training plans. ``tried`` lists every batch planned and its total."""
    from graphmem.analysis.fitsearch import largest_fitting
    from graphmem.commands.train import step_total, train_step
    from graphmem.errors import GraphmemError
    if args.dtype:
        raise GraphmemError("--dtype is for inference; with --train give --precision")
    if args.workspace or args.no_workspace:
        raise GraphmemError("--workspace is for inference: a training step's total has no "
                            "convolution workspace")
    reports: dict[int, object] = {}
    source = model_source(args)  # once: each batch's step is built from the same file
    with Progress("fit", stages=1) as progress:
        progress("the largest training batch under the budget, each step planned")

        def total_at(batch: int) -> int:
            step_args = Namespace(**{**vars(args), "batch": batch, "offload": False})
            # the step's own stages are named in this command's progress line
            step = train_step(step_args, progress.callback(
                f"batch {batch} (plan {len(reports) + 1}): "), None, 0, source=source)
            reports[batch] = step["report"]
            return step_total(step["report"])

        answer = largest_fitting(total_at, budget)
    r = reports[max(answer["batch"], 1)]
    return {"train": True, "batch": answer["batch"], "total_bytes": answer["total_bytes"],
            "budget_bytes": budget, "next_total_bytes": answer["next_total_bytes"],
            "optimizer": args.optimizer, "precision": args.precision,
            "recompute": args.recompute or "none", "selective": r.extra.get("selective"),
            "loss": r.extra.get("loss"),
            "weight_bytes": r.weight_bytes, "master_weight_bytes": r.master_weight_bytes,
            "optimizer_bytes": r.optimizer_bytes, "constant_bytes": r.constant_bytes,
            "arena_bytes": r.arena_bytes,
            "tried": [{"batch": b, "step_bytes": t, "fits": t <= budget}
                      for b, t in answer["probed"]],
            "probed": [b for b, _ in answer["probed"]]}


def run(args) -> int:
    from graphmem.commands.capacity_args import refuse_with_ranges
    refuse_with_ranges(args)
    if ranges.wanted(args):  # --dim past_seq=1..8192: from the range plan's formulas
        return ranges.run_fit(args)
    out = search(args)
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    if out.get("train"):
        print_training(out)
        return 0
    if "capacity_bytes" in out:
        from graphmem.commands.capacity_args import print_fit
        print_fit(out)
        return 0
    from graphmem.analysis.footprint import format_bytes as size
    parts = "weights + arena" + (f" + workspace ({out['workspace_rule']})"
                                 if out["includes_workspace"] else "")
    if out["batch"] == 0:
        print(f"even batch 1 does not fit: {parts} = {out['total_bytes']:,} bytes "
              f"({size(out['total_bytes'])}) > budget {out['budget_bytes']:,} bytes "
              f"({size(out['budget_bytes'])})")
        return 0
    print(
        f"batch {out['batch']} fits ({out['dtype']}): {parts} = "
        f"{out['weight_bytes']:,} + {out['arena_bytes']:,}"
        + (f" + {out['workspace_bytes']:,}" if out["includes_workspace"] else "")
        + f" = {out['total_bytes']:,} bytes ({size(out['total_bytes'])}) "
        f"<= {out['budget_bytes']:,} ({size(out['budget_bytes'])})")
    print(f"batch {out['batch'] + 1} would need {out['next_total_bytes']:,} bytes "
          f"({size(out['next_total_bytes'])}, "
          f"{out['next_total_bytes'] - out['budget_bytes']:,} bytes over); "
          f"{len(out['probed'])} plans made")
    return 0


def print_training(out: dict) -> None:
    from graphmem.analysis.footprint import format_bytes as size
    what = (f"{out['optimizer']}, {out['precision']}, recompute {out['recompute']}, "
            f"loss {out['loss']}")
    print("tried (each batch a planned training step):")
    for t in out["tried"]:
        print(f"  batch {t['batch']:>6}: step total {t['step_bytes']:>16,} bytes "
              f"({size(t['step_bytes'])}) {'fits' if t['fits'] else 'over'}")
    if out["batch"] == 0:
        print(f"even batch 1 does not fit ({what}): step total {out['total_bytes']:,} bytes "
              f"({size(out['total_bytes'])}) > budget {out['budget_bytes']:,} bytes")
        return
    master = f" + {out['master_weight_bytes']:,}" if out["master_weight_bytes"] else ""
    print(f"training batch {out['batch']} fits ({what}): weights{' + master weights' if master else ''}"
          f" + optimizer state + constants + arena = {out['weight_bytes']:,}{master} + "
          f"{out['optimizer_bytes']:,} + {out['constant_bytes']:,} + {out['arena_bytes']:,} "
          f"= {out['total_bytes']:,} bytes ({size(out['total_bytes'])}) <= "
          f"{out['budget_bytes']:,}")
    print(f"batch {out['batch'] + 1} would need {out['next_total_bytes']:,} bytes "
          f"({size(out['next_total_bytes'])}); {len(out['tried'])} steps planned")
