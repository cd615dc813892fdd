"""The ``place`` pass: an offset in one arena for every storage group.

Runs the strategies of :mod:`graphmem.passes.placement` on the groups' records and
keeps the smallest arena (the first in ``STRATEGIES`` order on ties), so it is
deterministic; ``placement="optimal"`` solves the exact MIP for this order, warm-started
by the best of them.
"""
from __future__ import annotations

from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context, aligned_total
from graphmem.planning.contract import Pass, PassOptions
from graphmem.planning.groups import ID, group_records, group_roots
from graphmem.passes.placement.items import Tied, items
from graphmem.passes.placement.optimal import place_optimal
from graphmem.passes.placement.search import place_records


def run(ctx: Context, a: Assignment, options: PassOptions) -> tuple[Assignment, dict]:
    recs, pairs = items(ctx, a)
    if options.placement == "optimal":  # the MIP, warm-started by "best"
        # the MIP knows plain records only: a group with Concat slices is placed as
        # one whole-life record there, and the best heuristic with slices competes
        exact = place_optimal(group_records(ctx, a.groups)[0], ctx.alignment,
                              options.time_limit)
        offsets, total, used = exact.offsets, exact.total, "optimal"
        tried = {exact.heuristic: exact.heuristic_total, "optimal": exact.total}
        extra = {"proven_optimal": exact.optimal, "lower_bound": exact.lower_bound,
                 "gap": round(exact.gap, 6)}
        if any(isinstance(r, Tied) for r in recs):
            h_offsets, h_total, h_used, _ = place_records(recs, "best", ctx.alignment, pairs)
            tried[h_used + " (with slices)"] = h_total
            if h_total < total:
                offsets, total, used = h_offsets, h_total, h_used
                extra["proven_optimal"] = False
    else:
        offsets, total, used, tried = place_records(recs, options.placement, ctx.alignment,
                                                    pairs)
        extra = {}
    roots = group_roots(ctx, a.groups)
    root_offsets = dict.fromkeys(roots, 0)  # zero-sized groups sit at 0
    placed = list(map(ID, recs))
    root_offsets.update(zip(map(roots.__getitem__, placed), map(offsets.__getitem__, placed)))
    detail = {"strategy": used, "tried": tried, **extra}
    if a.storage_bytes is not None:
        detail["share_bytes"] = aligned_total(a.storage_bytes, ctx.alignment)
    return a.with_(offsets=root_offsets, arena_bytes=total, strategy=used), detail

PASS = Pass("place", "layout", reads=("groups", "storage"), provides=("offsets",), run=run,
            summary="offsets in one arena: the best of five best-fit orderings, then "
                    "hill climbing (or the exact MIP with --placement optimal)")
