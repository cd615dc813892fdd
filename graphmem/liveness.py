"""Liveness: for an execution order, each arena tensor's first and last use.

Positions are indices into ``order``; ``-1`` is "before the first node" (graph
inputs) and ``len(order)`` is "after the last node" (graph outputs stay alive).
"""
from __future__ import annotations

from typing import NamedTuple

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
