"""The ``live`` range of every tensor for a plan's order (docs/plan-format.md), as the
validator reads it from the graph: columns computed from the graph index's writes and
reads in the order's rows, numpy throughout, no mapping of a million names made.

This is the validator's own reading of the format, apart from the planner's
(:func:`graphmem.core.liveness.liveness`); tests/test_validate_built.py compares them.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from graphmem.core.index import GraphIndex, edges_in_order


class LiveRanges(NamedTuple):
    """Per arena tensor of the index: its first and last position, and whether it has
    a live range at all (a node of the order writes it, or it is a graph input)."""

    first: np.ndarray
    last: np.ndarray
    present: np.ndarray


def live_ranges(topo: GraphIndex, order: Sequence[int]) -> LiveRanges:
    """The live ranges of ``order``, a valid order of the graph (``check_order``)."""
    n, steps = topo.arena, len(order)
    rows = topo.rows(order)
    first = np.full(n, steps + 1, dtype=np.int64)
    t, pos = edges_in_order(topo.write_start, topo.writes, rows)
    arena = t < n
    np.minimum.at(first, t[arena], pos[arena])  # the producer's position
    first[topo.inputs] = -1  # a graph input: before the first node
    present = first <= steps
    last = first.copy()  # a tensor nobody reads lives at its producer's step
    t, pos = edges_in_order(topo.read_start, topo.reads, rows)
    arena = (t >= 0) & (t < n)  # -1: a weight
    t, pos = t[arena], pos[arena]
    later = pos > first[t]  # a read before the first write extends nothing
    np.maximum.at(last, t[later], pos[later])  # the last consumer's position
    outs = topo.outputs[topo.outputs < n]
    last[outs[present[outs]]] = steps  # a graph output: to len(order)
    return LiveRanges(first, last, present)
