"""Sweep best fit: placement without pairs, for inputs whose buffers overlap in time in
more pairs than best fit can index (``items.PAIR_LIMIT``).

The records are taken in time order (by first step, larger first, then id), as an
allocator would see them, but knowing each one's size and life: at each step the
records that died before it are freed (their range merged with free neighbours), and
each record born there takes the smallest free range that holds it (the lowest on
ties), else the top of the arena. Memory and time are O(n log n) in the records plus
the free ranges kept sorted: no pair of records is ever listed.
"""
from __future__ import annotations

import bisect
import heapq
from typing import Sequence

from graphmem.planning.groups import Record


def sweep_fit(recs: Sequence[Record]) -> tuple[dict[int, int], int]:
    """({record id: offset}, arena bytes) for records of aligned, positive sizes (offsets
    are sums of sizes, so aligned too)."""
    starts: list[int] = []  # free ranges below the current top, by start
    end_of: dict[int, int] = {}
    by_size: list[tuple[int, int]] = []  # the same ranges as (size, start)
    top = arena = 0  # every byte from top up is free
    dying: list[tuple[int, int, int]] = []  # (last step, offset, size) of live records
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

    for r in sorted(recs, key=lambda r: (r.first, -r.bytes, r.id)):
        while dying and dying[0][0] < r.first:
            _, off, size = heapq.heappop(dying)
            add(off, off + size)
        size = r.bytes
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
        offsets[r.id] = off
        heapq.heappush(dying, (r.last, off, size))
    return offsets, arena
