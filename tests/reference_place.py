"""The specification of placement: best fit as a plain O(n^2) Python loop (as it was
before the overlap index of issue 10), breadth, hill climbing and the best of all.

tests/test_place_reference.py checks that the compiled loop the pass runs
(passes/placement/best_fit.py over graphmem/fitloops.c) gives the same offsets for the
same order. Do not optimise this file: it is the specification.
"""
from __future__ import annotations

import bisect
import random
from typing import Callable, Sequence

# The six plain orderings and the climbing budget are the pass's own: only best fit,
# breadth and the loops around them are restated here.
from graphmem.passes.placement import (by_area, by_duration, by_end, by_size, in_order,
                                       kept_first)
from graphmem.passes.placement.items import Tied
from graphmem.passes.placement.search import CLIMB_MAX_RUNS, CLIMB_STARTS, CLIMB_WORK
from graphmem.planning.context import align_up
from graphmem.planning.groups import Record


def _breadth(recs: Sequence[Record]) -> dict[int, int]:
    """For each record, the largest total live at any step of its life."""
    if not recs:
        return {}
    lo = min(r.first for r in recs)
    hi = max(r.last for r in recs)
    delta = [0] * (hi - lo + 2)
    for r in recs:
        delta[r.first - lo] += r.bytes
        delta[r.last - lo + 1] -= r.bytes
    live, running = [], 0
    for d in delta[:-1]:
        running += d
        live.append(running)
    return {r.id: max(live[r.first - lo:r.last - lo + 1]) for r in recs}


def _by_breadth(recs):
    b = _breadth(recs)
    return sorted(recs, key=lambda r: (-b[r.id], -r.bytes, r.first, r.id))


# name -> how records are ordered before best-fit insertion
STRATEGIES: dict[str, Callable[[Sequence[Record]], list[Record]]] = {
    "greedy_by_size": by_size.order,
    "greedy_by_breadth": _by_breadth,
    "greedy_by_area": by_area.order,
    "greedy_by_duration": by_duration.order,
    "greedy_in_order": in_order.order,
    "greedy_by_end": by_end.order,
    "greedy_kept_first": kept_first.order,
}


def best_fit(ordered: Sequence[Record | Tied], alignment: int = 1) -> tuple[dict[int, int], int]:
    """Place records in the given order, each in the best-fitting free gap; a Tied set
    whole, at the lowest aligned base where none of its parts meets a placed record.

    Returns ({record id: offset}, arena size). Record sizes are expected aligned.
    """
    placed: list[tuple[int, int, int, int]] = []  # (first, last, offset, end) sorted by first
    offsets: dict[int, int] = {}
    total = 0
    for r in ordered:
        if isinstance(r, Tied):
            base = fit_tied(placed, r, alignment)
            offsets[r.id] = base
            for rel, p in r.parts:
                total = max(total, base + rel + p.bytes)
                bisect.insort(placed, (p.first, p.last, base + rel, base + rel + p.bytes))
            continue
        # records placed so far whose life overlaps r's
        busy = sorted((off, end) for first, last, off, end in placed
                      if first <= r.last and r.first <= last)
        best_gap, best_off, top = None, None, 0
        for off, end in busy:
            gap = off - top
            if gap >= r.bytes and (best_gap is None or gap < best_gap):
                best_gap, best_off = gap, top
            top = max(top, end)
        offset = best_off if best_off is not None else align_up(top, alignment)
        offsets[r.id] = offset
        total = max(total, offset + r.bytes)
        bisect.insort(placed, (r.first, r.last, offset, offset + r.bytes))
    return offsets, total


def fit_tied(placed, t: Tied, alignment: int) -> int:
    """The obvious fixpoint: move the base past any placed record a part meets."""
    base, moved = 0, True
    while moved:
        moved = False
        for rel, p in t.parts:
            for first, last, off, end in placed:
                live = first <= p.last and p.first <= last
                if live and off < base + rel + p.bytes and base + rel < end:
                    base = -(-(end - rel) // alignment) * alignment
                    moved = True
                    break
            if moved:
                break
    return base


def max_live(recs: Sequence[Record]) -> int:
    """The largest total of record bytes live at one step: no placement can be smaller."""
    b = _breadth(recs)
    return max(b.values(), default=0)


def hill_climb(ordered: Sequence[Record], alignment: int, floor: int, runs: int,
               seed: int = 0) -> tuple[dict[int, int], int, list[Record], int]:
    """Improve a best-fit order: move a record that reaches the arena's top earlier.

    Accepts moves that do not grow the arena, stops at ``floor`` or after ``runs``
    best-fit runs. Seeded, so the result is the same every time (as TVM's hill_climb).
    Returns (offsets, total, order, runs used).
    """
    rng = random.Random(seed)
    order = list(ordered)
    offsets, total = best_fit(order, alignment)
    used = 0
    while used < runs and total > floor:
        top = [i for i, r in enumerate(order) if offsets[r.id] + r.bytes == total]
        i = rng.choice(top)
        j = rng.randrange(i) if i > 0 else 0
        candidate = order[:]
        candidate.insert(j, candidate.pop(i))
        new_offsets, new_total = best_fit(candidate, alignment)
        used += 1
        if new_total <= total:
            order, offsets, total = candidate, new_offsets, new_total
    return offsets, total, order, used


def place_records(recs: Sequence[Record], strategy: str = "best",
                  alignment: int = 1) -> tuple[dict[int, int], int, str, dict[str, int]]:
    """Offsets for records by one strategy, or by the best of all (``"best"``).

    ``"best"`` runs every strategy, then, while the arena is above the max-live
    floor, hill-climbs from each strategy's order (best first) within a work budget.
    Returns (offsets, total, the strategy used, {strategy: total} for each tried).
    """
    names = list(STRATEGIES) if strategy == "best" else [strategy]
    if any(n not in STRATEGIES for n in names):
        raise ValueError(f"unknown placement strategy {strategy!r}; "
                         f"choose from best, {', '.join(STRATEGIES)}")
    tried: dict[str, int] = {}
    best = None
    starts = []
    for name in names:
        ordered = STRATEGIES[name](recs)
        offsets, total = best_fit(ordered, alignment)
        tried[name] = total
        starts.append((total, len(starts), name, ordered))
        if best is None or total < best[1]:
            best = (offsets, total, name)
    if strategy == "best" and recs:
        floor = max_live(recs)
        budget = min(CLIMB_MAX_RUNS, CLIMB_WORK // (len(recs) ** 2))
        per_start = budget // CLIMB_STARTS
        for _, _, name, ordered in sorted(starts, key=lambda s: (s[0], s[1])):
            if best[1] <= floor or per_start == 0:
                break
            offsets, total, _, _ = hill_climb(ordered, alignment, floor, per_start)
            if total < best[1]:
                best = (offsets, total, f"{name}+hill_climb")
                tried[best[2]] = total
    return best[0], best[1], best[2], tried

