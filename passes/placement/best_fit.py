"""Best fit: insert items in a given order, each in the best-fitting free gap.

The loop is compiled (``graphmem.fitloops.run``, in ``graphmem/fitloops.c``); its
specification, in plain Python, is ``tests/reference_place.py``, and the tests run
both on the same items.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from graphmem import fitloops
from graphmem.planning.context import MAX_PLAN_BYTES
from graphmem.planning.groups import ID, Record
from graphmem.passes.placement.items import PartPairs, Tied, part_pairs


def best_fit(ordered: Sequence[Record | Tied], alignment: int = 1,
             pairs: PartPairs | None = None) -> tuple[dict[int, int], int]:
    """Place records in the given order, each in the best-fitting free gap.

    The gap is searched among the already placed records whose lives overlap: the
    smallest gap large enough, the lowest offset on ties, else on top of them all.
    A :class:`Tied` set is placed whole at the lowest offset where all its parts fit.
    Returns ({record id: offset}, arena size). Record sizes are expected aligned and
    positive. ``pairs`` is :func:`part_pairs` of the same items in any order (computed
    if omitted; pass it to share the work between runs): each part then looks only at
    the parts placed before it that overlap it in time, so a run costs O(E log w),
    not O(n^2).
    """
    if pairs is None:
        pairs = part_pairs(ordered)
    fit = BestFit(pairs, alignment)
    base, total = fit.run(fit.positions(ordered))
    return fit.offsets(base), total


class BestFit:
    """:func:`best_fit` over the items of ``pairs``, its checks and index made once for
    many runs in other orders (hill climbing's): an order is an array of the items'
    positions in ``pairs``, a result the base offset of each item by position."""

    def __init__(self, pairs: PartPairs, alignment: int):
        # every offset and bound the loop computes is at most the parts stacked one on
        # another, each padded to the alignment: that must stay in signed 64 bits
        # (a context refuses such graphs; this guards direct calls)
        reach = int(pairs.nbytes.sum()) + int(pairs.rel.max(initial=0))
        if reach + (len(pairs.rel) + 2) * alignment >= MAX_PLAN_BYTES:
            raise ValueError("best_fit: the records are too large for 64-bit offsets")
        self.pairs, self.alignment = pairs, alignment
        self.index = dict(zip(pairs.ids, range(len(pairs.ids))))

    def positions(self, ordered: Sequence[Record | Tied]) -> np.ndarray:
        """The items' positions in ``pairs``, in the given order."""
        return np.fromiter(map(self.index.__getitem__, map(ID, ordered)), np.int64,
                           len(ordered))

    def run(self, seq: np.ndarray) -> tuple[np.ndarray, int]:
        """(base offset per item position, arena size) placing the items in ``seq``'s order."""
        pairs = self.pairs
        base = np.zeros(len(pairs.ids), dtype=np.int64)
        total = fitloops.run(seq, pairs.tied, pairs.start, pairs.rel, pairs.nbytes, pairs.owner,
                             pairs.a, pairs.b, self.alignment, base)
        return base, total

    def offsets(self, base: np.ndarray) -> dict[int, int]:
        """{record id: offset} of a run's result."""
        return dict(zip(self.pairs.ids, base.tolist()))
