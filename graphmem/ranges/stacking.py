"""Offsets as a stacking order: every block sits on top of the blocks below it in the
order that share a step with it, its offset the largest top among them (0 with none).

Evaluating a stacking at a binding is one pass over the order, and gives a placement in
which no two blocks that share a step overlap, whatever the sizes: a later block starts
at or above the top of every earlier one it shares a step with. Only the blocks a block
must clear are listed (``below``): an earlier block another listed one already clears
(reachable through the lists) can sit no higher, so it is left out.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def stacking_from_offsets(offsets: Sequence[int], sizes: Sequence[int], first: Sequence[int],
                          last: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """The stacking of a placement: blocks by offset (a block of no bytes before one it
    shares the offset with), each with the earlier blocks it shares a step with, reduced.
    At the sizes of the placement, the stacking's offsets are at most its offsets."""
    n = len(offsets)
    stack = sorted(range(n), key=lambda b: (offsets[b], sizes[b], b))
    return stack, reduced_below(stack, first, last)


def overlapping_earlier(stack: Sequence[int], first: Sequence[int], last: Sequence[int]):
    """For each position of ``stack``, the blocks earlier in it that share a step with
    the block there (a boolean row per position, over the earlier positions)."""
    f = np.asarray(first, dtype=np.int64)[list(stack)]
    l = np.asarray(last, dtype=np.int64)[list(stack)]
    for j in range(len(stack)):
        yield j, np.flatnonzero((f[:j] <= l[j]) & (f[j] <= l[:j]))


def reduced_below(stack: Sequence[int], first: Sequence[int], last: Sequence[int]
                  ) -> list[list[int]]:
    """``below[j]``: the positions (in ``stack``) of the earlier blocks the block at ``j``
    shares a step with and that no other of them already clears."""
    reach: list[int] = []  # bitset over positions: every block cleared, transitively
    below: list[list[int]] = []
    for j, earlier in overlapping_earlier(stack, first, last):
        covered = 0
        for i in earlier.tolist():
            covered |= reach[i]
        kept = [i for i in earlier.tolist() if not (covered >> i) & 1]
        r = covered
        for i in kept:
            r |= 1 << i
        reach.append(r)
        below.append(kept)
    return below


def stacked_offsets(stack: Sequence[int], below: Sequence[Sequence[int]], sizes: Sequence[int],
                    alignment: int) -> tuple[list[int], int]:
    """(offset of each block, by block id; arena): the linear pass a runtime makes.
    ``below`` holds positions in ``stack``; a block's top is its offset plus its bytes
    rounded up to ``alignment``."""
    tops = [0] * len(stack)
    offsets = [0] * len(stack)
    for j, b in enumerate(stack):
        off = max((tops[i] for i in below[j]), default=0)
        offsets[b] = off
        tops[j] = off + align_up(sizes[b], alignment)
    return offsets, max(tops, default=0)


def unordered_pairs(stack: Sequence[int], below: Sequence[Sequence[int]],
                    first: Sequence[int], last: Sequence[int], limit: int = 5
                    ) -> list[tuple[int, int]]:
    """Pairs of blocks (by id) that share a step and that the stacking does not order
    (neither reaches the other through ``below``): none in a valid stacking."""
    reach: list[int] = []
    bad: list[tuple[int, int]] = []
    n = len(stack)
    for j, earlier in overlapping_earlier(stack, first, last):
        r = 0
        for i in below[j]:
            if not 0 <= i < j:
                raise ValueError(f"position {j} of the stacking lists {i}, not an earlier one")
            r |= reach[i] | (1 << i)
        reach.append(r)
        for i in earlier.tolist():
            if not (r >> i) & 1:
                bad.append((stack[i], stack[j]))
                if len(bad) >= limit:
                    return bad
    assert len(reach) == n
    return bad
