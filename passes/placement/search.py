"""The best arena over the strategies: each greedy ordering through best fit, then seeded
hill climbing from their orders while the arena is above the max-live floor, within
work budgets that keep planning about linear on large graphs."""
from __future__ import annotations

import random
from typing import Callable, Sequence

import numpy as np

from graphmem.planning.groups import BYTES, FIRST, LAST, Record
from graphmem.passes.placement import (by_area, by_breadth, by_duration, by_end, by_size,
                                       in_order, kept_first)
from graphmem.passes.placement.placed import Placed
from graphmem.passes.placement.best_fit import BestFit, best_fit
from graphmem.passes.placement.items import PartPairs, Tied, part_pairs

_MODULES = (by_size, by_breadth, by_area, by_duration, in_order, by_end, kept_first)
# name -> how records are ordered before best-fit insertion; ties go to the first
STRATEGIES: dict[str, Callable[[Sequence], list]] = {s.NAME: s.order for s in _MODULES}
# ... and its short name in tables (tools/bench/zoo.py, tools/bench/exact.py): the name
# without "greedy_" and "by_" ("size", "in order", "kept first")
SHORT: dict[str, str] = {
    s.NAME: s.NAME.removeprefix("greedy_").removeprefix("by_").replace("_", " ")
    for s in _MODULES}

# "best" runs every strategy on inputs of up to this much work (parts plus
# time-overlapping part pairs, what one best-fit run visits), fewer above it: after
# the first, a strategy runs only while the runs so far stay within the budget.
STRATEGY_WORK = 3_000_000

# Hill climbing re-runs best fit up to CLIMB_MAX_RUNS / CLIMB_STARTS times from each
# strategy's order (the best placed first; 7 of them: 560 runs at most in all), fewer
# for large inputs (each run costs about n^2 steps), so planning time stays bounded.
# The budget is shared by CLIMB_STARTS starts, fewer than the strategies: the best
# starts get the larger share.
CLIMB_WORK = 20_000_000
CLIMB_MAX_RUNS = 400
CLIMB_STARTS = 5


def max_live(recs: Sequence[Record | Tied]) -> int:
    """The largest total of record bytes live at one step: no placement can be smaller."""
    plain = [r for r in recs if type(r) is not Tied]
    if len(plain) < len(recs):
        plain += [p for r in recs if type(r) is Tied for _, p in r.parts]
    n = len(plain)
    return peak_live(np.fromiter(map(BYTES, plain), np.int64, n),
                     np.fromiter(map(FIRST, plain), np.int64, n),
                     np.fromiter(map(LAST, plain), np.int64, n))


def peak_live(nbytes: np.ndarray, first: np.ndarray, last: np.ndarray) -> int:
    """:func:`max_live` of records given as columns."""
    if not len(nbytes):
        return 0
    lo = int(first.min())
    if int(last.max()) - lo > 4 * len(nbytes):  # a sparse timeline: its points only
        points = np.unique(np.concatenate((first, last + 1)))
        delta = np.zeros(len(points) + 1, dtype=nbytes.dtype)
        np.add.at(delta, np.searchsorted(points, first), nbytes)
        np.add.at(delta, np.searchsorted(points, last + 1), -nbytes)
        return max(int(np.cumsum(delta).max()), 0)
    delta = np.zeros(int(last.max()) - lo + 2, dtype=nbytes.dtype)
    np.add.at(delta, first - lo, nbytes)
    np.add.at(delta, last - lo + 1, -nbytes)
    return max(int(np.cumsum(delta).max()), 0)


def hill_climb(ordered: Sequence[Record], alignment: int, floor: int, runs: int,
               seed: int = 0, pairs: PartPairs | None = None,
               ) -> tuple[dict[int, int], int, list[Record], int]:
    """Improve a best-fit order: move a record that reaches the arena's top earlier.

    Accepts moves that do not grow the arena, stops at ``floor`` or after ``runs``
    best-fit runs. Seeded, so the result is the same every time (as TVM's hill_climb).
    Returns (offsets, total, order, runs used).
    """
    rng = random.Random(seed)
    order = list(ordered)
    if pairs is None:
        pairs = part_pairs(order)
    fit = BestFit(pairs, alignment)
    seq = fit.positions(order)  # the order as the items' positions in pairs
    size = np.zeros(len(pairs.ids), dtype=np.int64)  # each item's bytes, by position
    size[seq] = [r.bytes for r in order]
    base, total = fit.run(seq)
    used = 0
    while used < runs and total > floor:
        top = np.flatnonzero((base + size)[seq] == total).tolist()
        i = rng.choice(top)
        j = rng.randrange(i) if i > 0 else 0
        # the record at i moved to j (j <= i)
        cand = seq.copy()
        cand[j + 1:i + 1] = seq[j:i]
        cand[j] = seq[i]
        new_base, new_total = fit.run(cand)
        used += 1
        if new_total <= total:
            seq, base, total = cand, new_base, new_total
            order.insert(j, order.pop(i))
    return fit.offsets(base), total, order, used


def place_records(recs: Sequence[Record], strategy: str = "best", alignment: int = 1,
                  pairs: PartPairs | None = None) -> Placed:
    """Offsets for records by one strategy, or by the best of all (``"best"``).

    ``"best"`` runs the strategies in order until one reaches the max-live floor
    (no later one could beat it) or the next would exceed ``STRATEGY_WORK`` (large
    inputs: see there), then, while the arena is above the floor, hill-climbs from
    each strategy's order (best first) within a work budget.
    ``pairs``: :func:`part_pairs` of ``recs``, made here if not given.
    Returns the offsets, the arena, the strategy used and {strategy: total} for each
    tried, as a :class:`~graphmem.passes.placement.placed.Placed`.
    """
    names = list(STRATEGIES) if strategy == "best" else [strategy]
    if any(n not in STRATEGIES for n in names):
        raise ValueError(f"unknown placement strategy {strategy!r}; "
                         f"choose from best, {', '.join(STRATEGIES)}")
    tried: dict[str, int] = {}
    best = None
    starts = []
    if pairs is None:
        pairs = part_pairs(recs)
    floor = peak_live(pairs.nbytes, pairs.first, pairs.last) if strategy == "best" else None
    work = len(pairs.rel) + len(pairs.a)
    for name in names:
        if floor is not None and best is not None and best[1] <= floor:
            break  # at the floor already: a later strategy could only tie, and ties keep the first
        if best is not None and (len(tried) + 1) * work > STRATEGY_WORK:
            break  # a large input: the first strategies only (see STRATEGY_WORK)
        ordered = STRATEGIES[name](recs)
        offsets, total = best_fit(ordered, alignment, pairs)
        tried[name] = total
        starts.append((total, len(starts), name, ordered))
        if best is None or total < best[1]:
            best = (offsets, total, name)
    if strategy == "best" and recs:
        budget = min(CLIMB_MAX_RUNS, CLIMB_WORK // (len(recs) ** 2))
        per_start = budget // CLIMB_STARTS
        for _, _, name, ordered in sorted(starts, key=lambda s: (s[0], s[1])):
            if best[1] <= floor or per_start == 0:
                break
            offsets, total, _, _ = hill_climb(ordered, alignment, floor, per_start, pairs=pairs)
            if total < best[1]:
                best = (offsets, total, f"{name}+hill_climb")
                tried[best[2]] = total
    return Placed(best[0], best[1], best[2], tried)
