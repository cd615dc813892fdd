"""What a plan's own tensors say about it: naive bytes, the unaliased peak, the aliased
peak and the live bytes at every step.

The unaliased peak (``unaliased_peak_bytes``; ``lower_bound_bytes`` in older plans,
read under the new name: :data:`graphmem.plan.format.RENAMED_STATS`, docs/plan-format.md)
is the most bytes live at one step with every tensor counted on its own: views, in-place
outputs and Concat slices count again though they share their storage, so it is no
bound on the arena, which is usually smaller. The aliased peak counts shared storage
once: no arena for this order and these aliases can be smaller."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from graphmem.core.regions import NO_SPAN, byte_regions
from graphmem.plan.columns import BYTES, PlanColumns, columns
from graphmem.plan.format import Plan


def built_stats(plan: Plan, index: Mapping[str, int] | None) -> tuple[dict[str, int], PlanColumns]:
    """:func:`plan_stats` for the planner's just-built plan, with the plan's columns
    (``index`` as there) to hand on to ``validate.validate_built``."""
    cols = columns(plan, index)
    return stats_of(plan, cols), cols



def plan_stats(plan: Plan, *, index: Mapping[str, int] | None = None) -> dict[str, int]:
    """naive, unaliased peak, aliased peak and arena bytes, computed from a plan's tensors.

    ``index``: tensor -> its position in ``plan.tensors``, if the caller has it."""
    return stats_of(plan, columns(plan, index))


def stats_of(plan: Plan, cols: PlanColumns) -> dict[str, int]:
    aliased, unaliased = _timelines(cols, len(plan.order))
    return {"naive_bytes": sum(map(BYTES, cols.ts)),
            "unaliased_peak_bytes": int(unaliased.max()),
            "aliased_peak_bytes": int(aliased.max()),  # never empty: steps + 2 positions
            "arena_bytes": plan.arena_bytes}


def live_timelines(plan: Plan) -> tuple[list[int], list[int]]:
    """Live bytes at positions -1 .. len(order) (index 0 is position -1): (aliased, unaliased).

    Aliased counts each storage group once (split into byte regions where Concat
    slices make parts of it live at different times); unaliased counts every tensor.
    """
    aliased, unaliased = _timelines(columns(plan), len(plan.order))
    return aliased.tolist(), unaliased.tolist()


def _timelines(cols: PlanColumns, steps: int) -> tuple[np.ndarray, np.ndarray]:
    first, last, size, offset, gid = cols.first, cols.last, cols.size, cols.offset, cols.group
    unaliased = _sweep(first, last, size, steps)
    # storage groups of the tensors with bytes: per group the earliest first use, the
    # latest last use and its size, where all members cover the same bytes; a group
    # whose members cover different bytes (Concat slices) is split in regions
    index = np.flatnonzero(size > 0)
    index = index[np.argsort(gid[index], kind="stable")]
    if len(index) == 0:
        return unaliased, unaliased
    g = gid[index]
    starts = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
    uniform = ((np.minimum.reduceat(offset[index], starts)
                == np.maximum.reduceat(offset[index], starts))
               & (np.minimum.reduceat(size[index], starts)
                  == np.maximum.reduceat(size[index], starts)))
    spans = [np.minimum.reduceat(first[index], starts)[uniform],
             np.maximum.reduceat(last[index], starts)[uniform],
             np.maximum.reduceat(size[index], starts)[uniform]]
    if not uniform.all():
        # members on different bytes: cut at every member's start and end, and count
        # each region covered by a member from the first to the last use on it
        members = index[np.repeat(~uniform, np.diff(np.concatenate((starts, [len(index)]))))]
        grp = gid[members]
        lo, hi = offset[members], offset[members] + size[members]
        _, r_lo, r_hi, r_first, r_last = byte_regions(
            np.concatenate((grp, grp)), np.concatenate((lo, hi)), grp, lo, hi,
            first[members], last[members])
        covered = r_first != NO_SPAN
        spans = [np.concatenate((spans[0], r_first[covered])),
                 np.concatenate((spans[1], r_last[covered])),
                 np.concatenate((spans[2], (r_hi - r_lo)[covered]))]
    return _sweep(*spans, steps), unaliased


def _sweep(first: np.ndarray, last: np.ndarray, nbytes: np.ndarray, steps: int) -> np.ndarray:
    """Sum of bytes over (first, last, bytes) spans at each position -1..steps."""
    delta = np.zeros(steps + 3, dtype=np.int64)
    np.add.at(delta, first + 1, nbytes)
    np.add.at(delta, last + 2, -nbytes)
    return np.cumsum(delta[:-1])
