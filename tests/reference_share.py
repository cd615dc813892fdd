"""The specification of the share pass's storage pool (MXNet's ``plan_memory.cc``), as a
plain Python loop. tests/test_share_reference.py checks that the compiled pool the
pass runs (``graphmem.fitloops.share`` through ``passes/share.py``) assigns the same blocks.
Do not optimise this file: it is the specification.
"""
from __future__ import annotations

import bisect
import heapq

from graphmem.planning.groups import Record


def share_blocks(recs: list[Record], match_range: int) -> tuple[dict[int, int], list[int]]:
    """Assign each record a block id; returns ({record id: block}, block sizes).

    Walking the records by (first, id), each takes from the pool of free blocks the
    smallest in ``[size, size * match_range)`` or else the largest in
    ``[size / match_range, size)`` (which grows to fit), or a new block; a block
    returns to the pool after its owner's last step."""
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
