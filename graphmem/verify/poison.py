"""Which arena bytes the verifier poisons before each node, in time linear in the run.

Before a node runs, every byte that was written since it was last poisoned and that no
tensor owns at that position (written before it, read at or after it) is filled with
poison again: a plan that lets a tensor's bytes be reused too early then shows as a
NaN. Bytes nobody wrote since are still poison and are left alone.

The arena is cut at every tensor's first and last byte into segments; each segment
keeps how many tensors own it now and whether it was written since its last poisoning.
Written bytes that are owned stay written; they can become free only when an owner
leaves, so the only candidates at a step are the segments of the tensors that left
and of the outputs written at the step before. A step costs what changes at it, not
the number of tensors live across it (the verifier once merged and scanned every live
range at every step: minutes on a fan-out of 40,000 graph outputs, all live to the end).
"""
from __future__ import annotations

from typing import Iterable

import numpy as np


class PoisonSchedule:
    """Tracks ownership and written bytes over the positions of a plan's order.

    ``spans``: each tensor's ``(start, end)`` bytes in the arena; ``owned``: the tensors
    that own their bytes, as ``name -> (first, last)`` positions at which they do
    (inclusive). Use: :meth:`written` for what the feeds and then each node write, and
    :meth:`step` once per position, in order, for the ranges to poison there.
    """

    def __init__(self, arena_bytes: int, spans: dict[str, tuple[int, int]],
                 owned: dict[str, tuple[int, int]]):
        names = list(spans)
        lo = np.fromiter((spans[n][0] for n in names), np.int64, len(names))
        hi = np.fromiter((spans[n][1] for n in names), np.int64, len(names))
        self.bounds = np.unique(np.concatenate(([0, arena_bytes], lo, hi)))
        first = np.searchsorted(self.bounds, lo).tolist()
        last = np.searchsorted(self.bounds, hi).tolist()
        self.segments = dict(zip(names, zip(first, last)))
        n = max(len(self.bounds) - 1, 0)
        self.owners = np.zeros(n, dtype=np.int32)
        self.dirty = np.zeros(n, dtype=bool)
        self.enter: dict[int, list[tuple[int, int]]] = {}
        self.leave: dict[int, list[tuple[int, int]]] = {}
        for name, (a, b) in owned.items():
            seg = self.segments[name]
            if seg[1] > seg[0]:
                self.enter.setdefault(a, []).append(seg)
                self.leave.setdefault(b + 1, []).append(seg)
        self._candidates: list[tuple[int, int]] = []

    def written(self, names: Iterable[str]) -> None:
        """The bytes of ``names`` were written."""
        for name in names:
            a, b = self.segments[name]
            if b > a:
                self.dirty[a:b] = True
                self._candidates.append((a, b))

    def step(self, pos: int) -> list[tuple[int, int]]:
        """The byte ranges to poison before the node at ``pos`` runs (sorted, merged)."""
        for a, b in self.enter.get(pos, ()):
            self.owners[a:b] += 1
        for a, b in self.leave.get(pos, ()):
            self.owners[a:b] -= 1
            self._candidates.append((a, b))
        if not self._candidates:
            return []
        if len(self._candidates) == 1:
            a, b = self._candidates[0]
            seg = np.arange(a, b)
        else:
            seg = np.unique(np.concatenate([np.arange(a, b) for a, b in self._candidates]))
        self._candidates = []
        hit = seg[self.dirty[seg] & (self.owners[seg] == 0)]
        if not len(hit):
            return []
        self.dirty[hit] = False
        # consecutive segments are one range of bytes
        cut = np.flatnonzero(np.diff(hit) != 1) + 1
        starts = hit[np.concatenate(([0], cut))]
        ends = hit[np.concatenate((cut - 1, [len(hit) - 1]))] + 1
        return list(zip(self.bounds[starts].tolist(), self.bounds[ends].tolist()))
