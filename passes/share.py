"""MXNet-style storage sharing: a free pool of blocks keyed by size.

Follows ``src/nnvm/plan_memory.cc``: walking the order, each storage group asks
the pool for a block in ``[size / match_range, size * match_range)``, larger
blocks first (the smallest that is large enough), then the largest of the
smaller ones (which then grows); a group's block returns to the pool after its
last use. As with ``NNVM_AUTO_SEARCH_MATCH_RANGE``, match ranges 1, 2, 4, 8 and
16 are tried and the smallest total kept (on large graphs only 16, MXNet's default:
see ``MATCH_SEARCH_WORK``). The result is storage blocks, not offsets: the layout is
the sum of the block sizes.

The pool is compiled (``graphmem.fitloops.share``); its specification, in plain Python,
is ``tests/reference_share.py``, and the tests run both on the same records.
"""
from __future__ import annotations

import numpy as np

from graphmem import fitloops
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions
from graphmem.planning.groups import (BYTES, FIRST, ID, LAST, Record, group_records,
                                      group_roots)
from graphmem.passes.placement.search import peak_live

MATCH_RANGES = (1, 2, 4, 8, 16)
DEFAULT_MATCH_RANGE = 16  # MXNet's NNVM_EXEC_MATCH_RANGE default
# The search over MATCH_RANGES runs while records x ranges stays within this; above
# it (over 40,000 storage groups) one run at the default range.
MATCH_SEARCH_WORK = 200_000


def run(ctx: Context, a: Assignment, options: PassOptions) -> tuple[Assignment, dict]:
    recs, cols = group_records(ctx, a.groups)
    walk = _walk_order(*cols)
    floor = peak_live(*walk[1:])
    ranges = (MATCH_RANGES if len(recs) * len(MATCH_RANGES) <= MATCH_SEARCH_WORK
              else (DEFAULT_MATCH_RANGE,))
    best = None
    for match_range in ranges:
        block_of, block_bytes = _pool(*walk, match_range)
        total = sum(block_bytes)
        if best is None or total < best[0]:
            best = (total, match_range, block_of, block_bytes)
        if best[0] <= floor:
            break  # blocks live at one step are distinct: no range can go below max live
    total, match_range, block_of, block_bytes = best
    roots = group_roots(ctx, a.groups)
    storage = {roots[r.id]: block_of[r.id] for r in recs}
    new = a.with_(storage=storage, storage_bytes=tuple(block_bytes))
    return new, {"blocks": len(block_bytes), "match_range": match_range, "total_bytes": total}


def share_blocks(recs: list[Record], match_range: int) -> tuple[dict[int, int], list[int]]:
    """Assign each record a block id: ({record id: block}, block sizes)."""
    n = len(recs)
    cols = (np.fromiter(map(f, recs), np.int64, n) for f in (ID, BYTES, FIRST, LAST))
    return _pool(*_walk_order(*cols), match_range)


def _walk_order(ids, nbytes, first, last) -> tuple[np.ndarray, ...]:
    """Record columns sorted as the pool walks the records: by (first, id)."""
    order = np.lexsort((ids, first))
    return ids[order], nbytes[order], first[order], last[order]


def _pool(ids, nbytes, first, last, match_range) -> tuple[dict[int, int], list[int]]:
    """The compiled pool over record columns in walk order."""
    block = np.empty(len(ids), dtype=np.int64)
    block_bytes = np.empty(len(ids), dtype=np.int64)
    blocks = fitloops.share(first, last, nbytes, match_range, block, block_bytes)
    return dict(zip(ids.tolist(), block.tolist())), block_bytes[:blocks].tolist()

PASS = Pass("share", "layout", reads=("groups",), provides=("storage",), run=run,
            summary="MXNet's storage pool: blocks reused by size (match ranges 1-16)")
