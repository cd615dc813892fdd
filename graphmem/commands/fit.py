"""``graphmem fit MODEL --budget 12GiB``: the largest batch whose planned memory fits."""
from __future__ import annotations

import json
import sys

from graphmem.frontend.reader import read_model
from graphmem.commands.sizes import parse_bytes
from graphmem.analysis.whatif import Batcher, fit, float_dtype, footprint, with_float_dtype
from graphmem.commands.common import (add_model_args, add_pass_args, add_runtime_args,
                                      model_path, parse_dims, plan_options)


def add_parser(sub) -> None:
    p = sub.add_parser("fit", help="the largest batch whose weights + arena (+ workspace) fit",
                       description="Binary search over real plans: each probed batch is "
                                   "re-planned. The total is weights + planned arena + the "
                                   "im2col workspace estimate (--no-workspace leaves it out).")
    add_model_args(p)
    add_pass_args(p)
    add_runtime_args(p)
    p.add_argument("--budget", required=True, metavar="SIZE",
                   help="memory budget: 12GiB, 4GB, 512MiB or bytes (GB = 10^9, GiB = 2^30)")
    p.add_argument("--dtype", metavar="TYPE",
                   help="element type for the floating tensors (default: the model's own)")
    p.add_argument("--no-workspace", action="store_true",
                   help="leave the im2col workspace estimate out of the total")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def search(args) -> dict:
    """The fit answer as ``fit --json`` prints it."""
    budget = parse_bytes(args.budget, "--budget")
    path = model_path(args)
    batcher = Batcher(read_model(path), parse_dims(args.dim), model_path=str(path),
                      dim_default=args.dim_default)
    dtype = args.dtype or float_dtype(batcher.base)
    options = plan_options(args)
    parts: dict[int, dict] = {}

    def total_at(batch: int) -> int:
        parts[batch] = footprint(with_float_dtype(batcher.graph(batch), dtype), **options)
        p = parts[batch]
        return p["total_bytes"] - (p["workspace_bytes"] if args.no_workspace else 0)

    answer = fit(total_at, budget)
    at = parts[max(answer["batch"], 1)]
    return {"batch": answer["batch"], "total_bytes": answer["total_bytes"],
            "budget_bytes": budget, "next_total_bytes": answer["next_total_bytes"],
            "weight_bytes": at["weight_bytes"], "arena_bytes": at["arena_bytes"],
            "workspace_bytes": 0 if args.no_workspace else at["workspace_bytes"],
            "includes_workspace": not args.no_workspace, "dtype": dtype,
            "probed": answer["probed"]}


def run(args) -> int:
    out = search(args)
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    gib = 2 ** 30
    parts = "weights + arena" + (" + im2col workspace" if out["includes_workspace"] else "")
    if out["batch"] == 0:
        print(f"even batch 1 does not fit: {parts} = {out['total_bytes']:,} bytes "
                      f"({out['total_bytes'] / gib:.3f} GiB) > budget {out['budget_bytes']:,} "
                      f"bytes ({out['budget_bytes'] / gib:.3f} GiB)")
        return 0
    print(
        f"batch {out['batch']} fits ({out['dtype']}): {parts} = "
        f"{out['weight_bytes']:,} + {out['arena_bytes']:,}"
        + (f" + {out['workspace_bytes']:,}" if out["includes_workspace"] else "")
        + f" = {out['total_bytes']:,} bytes ({out['total_bytes'] / gib:.3f} GiB) "
        f"<= {out['budget_bytes']:,} ({out['budget_bytes'] / gib:.3f} GiB)")
    print(f"batch {out['batch'] + 1} would need {out['next_total_bytes']:,} bytes "
                  f"({out['next_total_bytes'] / gib:.3f} GiB); {len(out['probed'])} plans made")
    return 0
