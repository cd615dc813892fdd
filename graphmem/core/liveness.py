"""Liveness: for an execution order, each arena tensor's first and last use.

Positions are indices into ``order``; ``-1`` is "before the first node" (graph
inputs) and ``len(order)`` is "after the last node" (graph outputs stay alive).
"""
from __future__ import annotations

from functools import partial
from typing import Iterator, NamedTuple

import numpy as np

from graphmem.core.ir import Graph
from graphmem.core.index import GraphIndex, edges_in_order, index_graph


class Interval(NamedTuple):
    """Inclusive positions of a tensor's first and last use (a tuple: cheap to make)."""

    first: int
    last: int

    def overlaps(self, other: "Interval") -> bool:
        return self.first <= other.last and other.first <= self.last


class Intervals(dict):
    """What :func:`liveness` returns: ``{tensor: Interval}``, a plain dict that also
    keeps the first and last steps as int64 arrays in its key order (``columns``), so
    that the passes need not read a million Intervals back into arrays. Treat it as
    read-only, as every planner stage does: the columns are not updated."""

    __slots__ = ("columns",)


def liveness(graph: Graph, order: list[int], index: GraphIndex | None = None) -> Intervals:
    """``{tensor: Interval(first, last)}`` for every arena tensor, inclusive.

    A tensor nobody reads lives at its producer's step only; a graph output lives
    to ``len(order)``; a graph input starts at ``-1``. Only the nodes in ``order``
    count (a tensor no node of it writes is left out), and a read before the
    tensor's first write does not extend its life. Computed on the arrays of the
    graph's :class:`~graphmem.core.index.GraphIndex` (``index``, built if not given),
    in the arena tensors' order.
    """
    topo = index if index is not None else index_graph(graph)
    n = topo.arena
    rows = topo.rows(order)
    unset = len(order) + 1
    first = np.full(n, unset, dtype=np.int64)
    # the first write of each arena tensor by a node of the order
    t, wpos = edges_in_order(topo.write_start, topo.writes, rows)
    keep = t < n
    np.minimum.at(first, t[keep], wpos[keep])
    first[topo.inputs] = -1
    last = first.copy()
    # reads after the first write (or of an input) extend the life
    t, rpos = edges_in_order(topo.read_start, topo.reads, rows)
    keep = (t >= 0) & (t < n)
    t, rpos = t[keep], rpos[keep]
    later = rpos > first[t]
    np.maximum.at(last, t[later], rpos[later])
    present = first != unset
    outs = topo.outputs[topo.outputs < n]
    last[outs[present[outs]]] = len(order)
    make = partial(tuple.__new__, Interval)  # Interval._make, without a Python call
    names = topo.arena_names()
    if not present.all():
        keep = np.flatnonzero(present)
        names, first, last = [names[k] for k in keep.tolist()], first[keep], last[keep]
    out = Intervals(zip(names, map(make, zip(first.tolist(), last.tolist()))))
    out.columns = (first, last)
    return out


def count_overlapping_pairs(first: np.ndarray, last: np.ndarray) -> int:
    """How many pairs :func:`overlapping_pairs` yields, without making them."""
    n = len(first)
    f = np.sort(np.asarray(first))
    upto = np.searchsorted(f, np.asarray(last)[np.argsort(first, kind="stable")], side="right")
    return int(np.maximum(upto - np.arange(1, n + 1), 0).sum())


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
