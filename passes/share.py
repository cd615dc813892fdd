"""MXNet-style storage sharing: a free pool of blocks keyed by size.

Follows ``src/nnvm/plan_memory.cc``: walking the order, each storage group asks
the pool for a block in ``[size / match_range, size * match_range)``, larger
blocks first (the smallest that is large enough), then the largest of the
smaller ones (which then grows); a group's block returns to the pool after its
last use. As with ``NNVM_AUTO_SEARCH_MATCH_RANGE``, match ranges 1, 2, 4, 8 and
16 are tried and the smallest total kept (on large graphs only 16, MXNet's default:
see ``SEARCH_WORK``). The result is storage blocks, not
offsets: ``layout_bytes`` is the sum of the block sizes.
"""
from __future__ import annotations

import bisect
import heapq
from operator import attrgetter

import numpy as np

from graphmem.planning.assignment import (MAX_PLAN_BYTES, Assignment, Context, Record,
                                 group_records, group_roots)

from graphmem.passes.place import _fit, max_live, peak_live

_ID, _BYTES, _FIRST, _LAST = (attrgetter("id"), attrgetter("bytes"), attrgetter("first"),
                               attrgetter("last"))

MATCH_RANGES = (1, 2, 4, 8, 16)
DEFAULT_MATCH_RANGE = 16  # MXNet's NNVM_EXEC_MATCH_RANGE default
# The search over MATCH_RANGES runs while records x ranges stays within this; above
# it (over 40,000 storage groups) one run at the default range.
SEARCH_WORK = 200_000


def run(ctx: Context, a: Assignment) -> tuple[Assignment, dict]:
    recs, cols = group_records(ctx, a)
    if cols is not None:
        cols = _walk_order(*cols)
    best = None
    floor = max_live(recs) if cols is None else peak_live(*cols[1:])
    ranges = (MATCH_RANGES if len(recs) * len(MATCH_RANGES) <= SEARCH_WORK
              else (DEFAULT_MATCH_RANGE,))
    for match_range in ranges:
        if NATIVE and _fit is not None and cols is not None and recs:
            block_of, block_bytes = _share_native(*cols, match_range)
        else:
            block_of, block_bytes = share_blocks(recs, match_range)
        total = sum(block_bytes)
        if best is None or total < best[0]:
            best = (total, match_range, block_of, block_bytes)
        if best[0] <= floor:
            break  # blocks live at one step are distinct: no range can go below max live
    total, match_range, block_of, block_bytes = best
    roots = group_roots(ctx, a)
    storage = {roots[r.id]: block_of[r.id] for r in recs}
    new = a.with_(storage=storage, storage_bytes=tuple(block_bytes))
    return new, {"blocks": len(block_bytes), "match_range": match_range, "total_bytes": total}


def share_blocks(recs: list[Record], match_range: int) -> tuple[dict[int, int], list[int]]:
    """Assign each record a block id; returns ({record id: block}, block sizes).

    Runs compiled (``graphmem._fit.share``) where that extension was built and the
    sizes fit its 64-bit integers; the Python loop below is its specification."""
    if NATIVE and _fit is not None and recs and match_range >= 0:
        cols = _columns(recs)
        if cols is not None:
            return _share_native(*cols, match_range)
    block_bytes: list[int] = []
    block_of: dict[int, int] = {}
    free: list[tuple[int, int, int]] = []  # (block bytes, release sequence, block id)
    seq = 0
    releases: list[tuple[int, int]] = []  # heap of (last step, block)
    for r in sorted(recs, key=lambda r: (r.first, r.id)):
        # release every block whose owner died before this record is produced
        while releases and releases[0][0] < r.first:
            _, block = heapq.heappop(releases)
            bisect.insort(free, (block_bytes[block], seq, block))
            seq += 1
        block = _take(free, r.bytes, match_range)
        if block is None:
            block = len(block_bytes)
            block_bytes.append(r.bytes)
        else:
            block_bytes[block] = max(block_bytes[block], r.bytes)
        block_of[r.id] = block
        heapq.heappush(releases, (r.last, block))
    return block_of, block_bytes


# share_blocks runs the compiled loop when graphmem._fit was built (tests switch it off
# to check the Python loop against the same records)
NATIVE = True


def _columns(recs: list[Record]) -> tuple[np.ndarray, ...] | None:
    """(ids, bytes, first, last) of the records sorted by (first, id), as int64 arrays;
    None where a value does not fit the compiled loop's integers."""
    n = len(recs)
    try:
        ids = np.fromiter(map(_ID, recs), np.int64, n)
        nbytes = np.fromiter(map(_BYTES, recs), np.int64, n)
        first = np.fromiter(map(_FIRST, recs), np.int64, n)
        last = np.fromiter(map(_LAST, recs), np.int64, n)
    except OverflowError:
        return None
    if int(nbytes.max()) >= MAX_PLAN_BYTES or int(nbytes.min()) < 0:
        return None
    return _walk_order(ids, nbytes, first, last)


def _walk_order(ids, nbytes, first, last) -> tuple[np.ndarray, ...]:
    """Record columns sorted as share_blocks walks the records: by (first, id)."""
    order = np.lexsort((ids, first))
    return ids[order], nbytes[order], first[order], last[order]


def _share_native(ids, nbytes, first, last, match_range) -> tuple[dict[int, int], list[int]]:
    block = np.empty(len(ids), dtype=np.int64)
    block_bytes = np.empty(len(ids), dtype=np.int64)
    blocks = _fit.share(first, last, nbytes, match_range, block, block_bytes)
    return dict(zip(ids.tolist(), block.tolist())), block_bytes[:blocks].tolist()


def _take(free: list[tuple[int, int, int]], size: int, match_range: int) -> int | None:
    if match_range == 0 or not free:
        return None
    mid = bisect.bisect_left(free, (size, -1, -1))
    hi = bisect.bisect_right(free, (size * match_range, float("inf"), 0))
    if mid < hi:  # the smallest block that is large enough
        return free.pop(mid)[2]
    lo = bisect.bisect_left(free, (size // match_range, -1, -1))
    if lo < mid:  # the largest of the smaller blocks; it grows to fit
        return free.pop(mid - 1)[2]
    return None
