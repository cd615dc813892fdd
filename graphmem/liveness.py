"""Liveness: for an execution order, each arena tensor's first and last use.

Positions are indices into ``order``; ``-1`` is "before the first node" (graph
inputs) and ``len(order)`` is "after the last node" (graph outputs stay alive).
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

import numpy as np

from .ir import Graph


class Interval(NamedTuple):
    """Inclusive positions of a tensor's first and last use (a tuple: cheap to make)."""

    first: int
    last: int

    def overlaps(self, other: "Interval") -> bool:
        return self.first <= other.last and other.first <= self.last


def liveness(graph: Graph, order: list[int]) -> dict[str, Interval]:
    """``{tensor: Interval(first, last)}`` for every arena tensor, inclusive.

    A tensor nobody reads lives at its producer's step only; a graph output lives
    to ``len(order)``; a graph input starts at ``-1``.
    """
    by_index = {n.index: n for n in graph.nodes}
    arena = graph.arena_tensors()
    arena_set = set(arena)
    first: dict[str, int] = {t: -1 for t in graph.inputs if t in arena_set}
    last: dict[str, int] = dict(first)
    for pos, idx in enumerate(order):
        node = by_index[idx]
        for t in node.reads:
            if t in last:
                last[t] = pos
        for t in node.outputs:
            if t and t not in first and t in arena_set:
                first[t] = last[t] = pos
    end = len(order)
    for t in graph.outputs:
        if t in last:
            last[t] = end
    make = Interval._make
    return {t: make((first[t], last[t])) for t in arena if t in first}


def overlapping_pairs(first: np.ndarray, last: np.ndarray, chunk: int = 1 << 22
                      ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every pair of inclusive ranges that share a step, each pair once, in chunks.

    Yields index arrays ``(a, b)`` (about ``chunk`` pairs at a time, so memory stays
    bounded however many pairs there are). Sorted by first step, range ``i`` meets
    exactly the ranges after it that start by its last step: a contiguous run found
    by one binary search, so all of it is O(n log n + pairs) numpy work.
    """
    n = len(first)
    by_first = np.argsort(first, kind="stable")
    f = np.asarray(first)[by_first]
    upto = np.searchsorted(f, np.asarray(last)[by_first], side="right")
    count = np.maximum(upto - np.arange(1, n + 1), 0)
    ends = np.cumsum(count)
    lo = 0
    while lo < n:
        done = int(ends[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(ends, done + chunk, side="right")), lo + 1)
        c = count[lo:hi]
        a = np.repeat(np.arange(lo, hi), c)
        b = np.arange(len(a)) - np.repeat(np.cumsum(c) - c, c) + a + 1
        if len(a):
            yield by_first[a], by_first[b]
        lo = hi
