"""Sweep best fit: placement without pairs, for inputs whose buffers overlap in time in
more pairs than best fit can index (``items.PAIR_LIMIT``).

One sweep takes records in time order (by first step, larger first, then id), as an
allocator would see them, but knowing each one's size and life: at each step the
records that died before it are freed (their range merged with free neighbours), and
each record born there takes the smallest free range that holds it (the lowest on
ties), else the top of the arena. Memory and time are O(n log n) in the records plus
the free ranges kept sorted: no pair of records is ever listed.

A sweep from the first step leaves holes at the peak, where the arena is decided. The
split sweep starts at the peak instead (the step with the most bytes live): the
records live there are stacked without a gap (the max-live floor), and two sweeps go
out from it, one forward in time over the records born after the peak, one backward
over those that died before it (time reversed: a life ends where it began). A stacked
record frees its range in the forward sweep at its last step and in the backward one
at its first, so the stack is ordered for both: at the bottom the records that end
sooner after the peak than they began before it (by last step), above them the
others (by first step, the latest born at the top). Each sweep then frees the stack
from one end, in one run, and fills it with few holes. ``weight`` moves the line
between the two groups; :func:`sweep_fit` tries a few and the forward sweep (as many
as ``SWEEP_WORK`` allows), and keeps the smallest arena.
"""
from __future__ import annotations

import bisect
import heapq
from typing import Sequence

import numpy as np

from graphmem.planning.groups import BYTES, FIRST, LAST, Record

# the split sweep's weights (the stack's line between its groups: a record goes to the
# bottom when its life after the peak is shorter than ``weight`` times its life before
# it), tried in turn while the arena is above SWEEP_CLOSE times the floor; the forward
# sweep alone is the last candidate
WEIGHTS = (1.0, 0.5, 2.0)
SWEEP_CLOSE = 1.005
# the candidates' work: sweeps over all the records, at most SWEEP_WORK records swept in
# all, one sweep at least (past 200k records the split sweep alone, about as costly as
# the one forward sweep before it: the 1M-node random DAG's 494k records 1.3 s against
# 1.1 s; 100k or fewer: every candidate)
SWEEP_WORK = 400_000


def sweep_fit(recs: Sequence[Record]) -> tuple[dict[int, int], int]:
    """({record id: offset}, arena bytes) for records of aligned, positive sizes (offsets
    are sums of sizes, so aligned too). The records fall into time partitions (no
    record lives across the steps between two), each placed apart from 0 up by
    :func:`_sweep_part`; the arena is the highest."""
    if not recs:
        return {}, 0
    first = np.fromiter(map(FIRST, recs), np.int64, len(recs))
    last = np.fromiter(map(LAST, recs), np.int64, len(recs))
    nbytes = np.fromiter(map(BYTES, recs), np.int64, len(recs))
    # the steps where a life begins or one has just ended, each standing for the steps
    # up to the next (steps far apart in a sparse timeline cost nothing)
    points = np.sort(np.concatenate((first, last + 1)))  # (a sort: faster than unique)
    points = points[np.concatenate(([True], points[1:] != points[:-1]))]
    at_first = np.searchsorted(points, first)
    delta = np.zeros(len(points) + 1, dtype=np.int64)
    np.add.at(delta, at_first, nbytes)
    np.add.at(delta, np.searchsorted(points, last + 1), -nbytes)
    live = np.cumsum(delta)[:-1]  # bytes live from points[k] to points[k + 1]
    part = np.cumsum(live == 0)[at_first]  # the partition of each record, by its birth
    offsets: dict[int, int] = {}
    arena = 0
    runs = max(1, SWEEP_WORK // len(recs))
    order = np.argsort(part, kind="stable")
    bounds = np.flatnonzero(np.diff(part[order])) + 1
    for chunk in np.split(order, bounds):
        members = [recs[i] for i in chunk.tolist()]
        p_lo = int(at_first[chunk].min())
        p_hi = int(np.searchsorted(points, last[chunk].max() + 1))
        k = p_lo + int(np.argmax(live[p_lo:p_hi]))
        got, top = _sweep_part(members, int(points[k]), int(live[k]), runs)
        offsets.update(got)
        arena = max(arena, top)
    return offsets, arena


def _sweep_part(recs: Sequence[Record], peak: int, floor: int, runs: int = 4
                ) -> tuple[dict[int, int], int]:
    """One time partition's placement: the smallest of the split sweeps (see the module
    docstring) and the forward sweep from the first step, at most ``runs`` of them.
    ``peak``: a step where the most bytes are live, ``floor`` of them."""
    best = None
    for weight in WEIGHTS[:runs]:
        got = split_sweep(recs, peak, weight)
        if best is None or got[1] < best[1]:
            best = got
        if best[1] <= floor * SWEEP_CLOSE:
            return best
    if runs <= len(WEIGHTS):
        return best
    got = sweep_from([(r.first, r.last, r.bytes, r.id) for r in recs], ())
    return got if got[1] < best[1] else best


def split_sweep(recs: Sequence[Record], peak: int, weight: float = 1.0
                ) -> tuple[dict[int, int], int]:
    """The split sweep at step ``peak`` (see the module docstring)."""
    at = [r for r in recs if r.first <= peak <= r.last]
    bottom = sorted((r for r in at if r.last - peak < weight * (peak - r.first)),
                    key=lambda r: (r.last, r.first, r.id))
    above = sorted((r for r in at if not r.last - peak < weight * (peak - r.first)),
                   key=lambda r: (r.first, -r.last, r.id))
    stack, top = [], 0
    for r in bottom + above:
        stack.append((top, r))
        top += r.bytes
    forward, f_top = sweep_from([(r.first, r.last, r.bytes, r.id) for r in recs if r.first > peak],
                            [(off, r.bytes, r.last) for off, r in stack])
    backward, b_top = sweep_from([(-r.last, -r.first, r.bytes, r.id) for r in recs
                              if r.last < peak],
                             [(off, r.bytes, -r.first) for off, r in stack])
    offsets = {r.id: off for off, r in stack}
    offsets.update(forward)
    offsets.update(backward)
    return offsets, max(top, f_top, b_top)


def sweep_from(arrivals: list[tuple[int, int, int, int]], fixed
           ) -> tuple[dict[int, int], int]:
    """One sweep over ``arrivals`` (first, last, bytes, id), above the ranges ``fixed``
    (offset, bytes, last step) live when it starts: ({id: offset}, the highest top)."""
    starts: list[int] = []  # free ranges below the current top, by start
    end_of: dict[int, int] = {}
    by_size: list[tuple[int, int]] = []  # the same ranges as (size, start)
    dying: list[tuple[int, int, int]] = []  # (last step, offset, size) of live records
    top = 0
    for off, size, end in fixed:
        dying.append((end, off, size))
        top = max(top, off + size)
    heapq.heapify(dying)
    arena = top  # every byte from top up is free
    offsets: dict[int, int] = {}

    def remove(start: int) -> int:
        end = end_of.pop(start)
        del starts[bisect.bisect_left(starts, start)]
        del by_size[bisect.bisect_left(by_size, (end - start, start))]
        return end

    def add(start: int, end: int) -> None:
        nonlocal top
        # merge with the free range ending at start, and the one starting at end
        i = bisect.bisect_left(starts, start)
        if i > 0 and end_of[starts[i - 1]] == start:
            start = starts[i - 1]
            remove(start)
        if end in end_of:
            end = remove(end)
        if end >= top:  # the top of the live records comes down
            top = start
            return
        bisect.insort(starts, start)
        end_of[start] = end
        bisect.insort(by_size, (end - start, start))

    arrivals.sort(key=lambda a: (a[0], -a[2], a[3]))
    for first, last, size, rid in arrivals:
        while dying and dying[0][0] < first:
            _, off, freed = heapq.heappop(dying)
            add(off, off + freed)
        i = bisect.bisect_left(by_size, (size, -1))
        if i < len(by_size):
            free, at = by_size[i]
            end = remove(at)
            if free > size:
                add(at + size, end)
            off = at
        else:
            off = top
            if starts and end_of[starts[-1]] == top:  # a free range just below the top
                off = starts[-1]
                remove(off)
            top = off + size
            arena = max(arena, top)
        offsets[rid] = off
        heapq.heappush(dying, (last, off, size))
    return offsets, arena
