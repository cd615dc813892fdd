"""The largest batch whose total fits a budget, in few plans: memory grows about
linearly with the batch, so a line through what was measured predicts where the budget
is crossed, and each prediction is planned and checked.

Every probe is a real plan; the answer is a batch that was planned and fits, and the
next batch was planned and does not (the answer's proof). Totals are assumed to grow
with the batch. Each step plans the line's prediction inside the bracket known so far
(the largest batch that fits, the smallest that does not); when a prediction fails to
halve the bracket the next step bisects it, so the search never needs more plans than
bisection would (about twice at worst) and on an affine total needs four: batch 1, 2,
the prediction and the one after it.
"""
from __future__ import annotations

from typing import Callable

from graphmem.errors import GraphmemError

MAX_BATCH = 1 << 31


def largest_fitting(total_at: Callable[[int], int], budget: int,
                    on_probe: Callable[[int, int, int], None] | None = None) -> dict:
    """``batch`` (0 when batch 1 does not fit), ``total_bytes`` (at it; at batch 1 when 0),
    ``next_total_bytes`` (at batch + 1, planned, over the budget) and ``probed``: every
    ``[batch, total]`` planned, in order. ``on_probe(k, batch, total)`` is told of each."""
    totals: dict[int, int] = {}
    probed: list[list[int]] = []

    def total(b: int) -> int:
        if b not in totals:
            totals[b] = int(total_at(b))
            probed.append([b, totals[b]])
            if on_probe is not None:
                on_probe(len(probed), b, totals[b])
        return totals[b]

    if total(1) > budget:
        return {"batch": 0, "total_bytes": totals[1], "next_total_bytes": totals[1],
                "probed": probed}
    lo, hi = 1, None  # lo fits; hi (when known) does not
    if total(2) <= budget:
        lo = 2
    else:
        hi = 2
    bisect_next = False
    while hi is None or hi - lo > 1:
        if hi is None:
            guess = _extend(totals, lo, budget)
        elif bisect_next:
            guess = (lo + hi) // 2
        else:
            guess = _between(totals, lo, hi, budget)
        width = None if hi is None else hi - lo
        if total(guess) <= budget:
            lo = guess
        else:
            hi = guess
        # a prediction that did not halve the bracket: bisect next time
        bisect_next = width is not None and hi is not None and (hi - lo) * 2 > width
        if hi is None and lo >= MAX_BATCH:
            raise GraphmemError(f"the step fits the budget at batch {lo}; its memory does "
                                "not seem to grow with the batch")
    return {"batch": lo, "total_bytes": totals[lo], "next_total_bytes": totals[hi],
            "probed": probed}


def _extend(totals: dict[int, int], lo: int, budget: int) -> int:
    """The last batch the line through the two largest probes predicts to
    fit (at least ``lo + 1``; at most ``64 * lo``, in case the line is far off)."""
    a, b = sorted(totals)[-2:]
    slope = (totals[b] - totals[a]) / (b - a)
    if slope <= 0:
        return min(2 * lo, MAX_BATCH)
    crossing = b + (budget - totals[b]) / slope  # where the line meets the budget
    guess = int(crossing)  # the last batch the line says fits
    if guess <= lo:
        return lo + 1
    return min(guess, 64 * lo, MAX_BATCH)


def _between(totals: dict[int, int], lo: int, hi: int, budget: int) -> int:
    """The last batch in (lo, hi) the line from lo to hi says fits, or the one after it
    when that is lo (so that each probe narrows the bracket)."""
    slope = (totals[hi] - totals[lo]) / (hi - lo)
    guess = lo + int((budget - totals[lo]) / slope) if slope > 0 else (lo + hi) // 2
    return max(lo + 1, min(guess, hi - 1))
