"""The ``place`` pass: an offset in one arena for every storage group.

Runs the placement algorithm ``--placement`` names
(:func:`graphmem.passes.placement.algorithm.for_option`) on the groups' items: by
default the best of the strategies of :mod:`graphmem.passes.placement` (the smallest
arena, the first in ``STRATEGIES`` order on ties, so it is deterministic), then hill
climbing; ``placement="optimal"`` the exact placement (CP-SAT), warm-started by the
best of them.

Best fit looks at the pairs of buffers live at the same time. Where there are more
than ``items.PAIR_LIMIT`` of them (tens of thousands of buffers live at once, as in a
model whose every node output is a graph output), the pass places without pairs: sweep
best fit (``placement/sweep.py``: the groups in time order, each in the smallest free
range at its birth) and the storage blocks of the ``share`` pass one above another
(made here if ``share`` did not run), the smaller arena kept: memory stays
O(n log n) in the graph, and where every buffer is live at once the stacked blocks
are the smallest anyway.
"""
from __future__ import annotations

from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context, aligned_total
from graphmem.planning.contract import Pass, PassOptions
from graphmem.planning.groups import ID, group_records, group_roots
from graphmem.planning.writer import finish_layout
from graphmem.passes.share import DEFAULT_MATCH_RANGE, share_blocks
from graphmem.passes.placement import capacity
from graphmem.passes.placement.algorithm import for_option
from graphmem.passes.placement.items import TooManyPairs, items
from graphmem.passes.placement.search import max_live
from graphmem.passes.placement.sweep import sweep_fit


def run(ctx: Context, a: Assignment, options: PassOptions) -> tuple[Assignment, dict]:
    try:
        recs, pairs = items(ctx, a)
    except TooManyPairs as exc:
        return _blocks_stacked(ctx, a, *exc.args, options.capacity)
    algorithm = for_option(options.placement, options.time_limit, recs, options.capacity)
    offsets, total, used, tried, proof = algorithm(recs, pairs, ctx.alignment)
    roots = group_roots(ctx, a.groups)
    root_offsets = dict.fromkeys(roots, 0)  # zero-sized groups sit at 0
    placed = list(map(ID, recs))
    root_offsets.update(zip(map(roots.__getitem__, placed), map(offsets.__getitem__, placed)))
    detail = {"strategy": used, "tried": tried, **(proof or {})}
    if a.storage_bytes is not None:
        detail["share_bytes"] = aligned_total(a.storage_bytes, ctx.alignment)
    return a.with_(offsets=root_offsets, arena_bytes=total, strategy=used), detail


def _blocks_stacked(ctx: Context, a: Assignment, parts: int, limit: int,
                    cap: int | None = None) -> tuple[Assignment, dict]:
    """Placement without pairs (see the module docstring): sweep best fit over the
    groups as whole records, or the storage blocks one above another, whichever arena
    is smaller (the blocks on ties). The blocks are those of ``share``, or, where it did
    not run, blocks made here for the stacking alone (this pass provides the offsets,
    not the storage). With a capacity ``cap``, whether the arena fits it (no search
    here: past the floor and above the arena, undecided)."""
    recs = group_records(ctx, a.groups)[0]
    roots = group_roots(ctx, a.groups)
    blocks = a
    if a.storage is None:
        block_of, block_bytes = share_blocks(recs, DEFAULT_MATCH_RANGE)
        blocks = a.with_(storage={roots[r.id]: block_of[r.id] for r in recs},
                         storage_bytes=tuple(block_bytes))
    placed = finish_layout(ctx, blocks.with_(offsets=None, arena_bytes=None))
    swept, swept_total = sweep_fit([r for r in recs if r.bytes > 0])
    tried = {"storage_blocks": placed.arena_bytes, "sweep_best_fit": swept_total}
    reason = f"{parts:,} buffers overlap in time in more than {limit:,} pairs"
    if swept_total < placed.arena_bytes:
        offsets = dict.fromkeys(roots, 0)  # zero-sized groups sit at 0
        offsets.update((roots[g], off) for g, off in swept.items())
        detail = {"strategy": "sweep_best_fit", "tried": tried, "reason": reason,
                  **_fits(recs, swept_total, cap)}
        return a.with_(offsets=offsets, arena_bytes=swept_total,
                       strategy="sweep_best_fit"), detail
    detail = {"strategy": "storage_blocks", "tried": tried, "reason": reason,
              **_fits(recs, placed.arena_bytes, cap)}
    return a.with_(offsets=placed.offsets, arena_bytes=placed.arena_bytes,
                   strategy="storage_blocks"), detail


def _fits(recs, arena: int, cap: int | None) -> dict:
    """The ``capacity`` verdict of a placement without search (as ``algorithm.within``'s)."""
    if cap is None:
        return {}
    floor = max_live(recs)
    status, by = ((capacity.FITS, "placement") if arena <= cap else
                  (capacity.NO_FIT, "floor") if floor > cap else (capacity.UNDECIDED, "search"))
    return {"capacity": {"bytes": cap, "status": status, "proven": status != capacity.UNDECIDED,
                         "by": by, "floor": floor, "nodes": 0}}


PASS = Pass("place", "layout", reads=("groups",), uses=("storage",), provides=("offsets",),
            run=run,
            summary="offsets in one arena: the best of the best-fit orderings, then "
                    "hill climbing (or the exact CP-SAT placement with --placement optimal)")
