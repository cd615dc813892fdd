"""The context every pass reads: one graph, its index, one execution order and its liveness.

A :class:`Context` is made once per execution order by :meth:`Context.for_order`, which
checks the order and the graph's size first, so that every pass may take for granted:

- ``intervals`` lists every arena tensor, in the index's order: a tensor's position
  there is its id in ``index`` (``index.ids``), and ``first``/``last``/``nbytes`` are
  columns over those positions;
- every size, and the sum of all of them aligned, stays below ``MAX_PLAN_BYTES``, so no
  offset, sum or difference in numpy or in the compiled loops can overflow int64.
"""
from __future__ import annotations

from functools import cached_property
from typing import Callable, Sequence

import numpy as np

from graphmem.core.index import GraphIndex, index_graph
from graphmem.core.ir import Graph
from graphmem.core.liveness import Intervals, liveness
from graphmem.core.ops import DEFAULT_TABLE, INPLACE_TABLES, AliasEdges, alias_edges
from graphmem.core.order import check_order
from graphmem.errors import GraphmemError

# The most bytes a graph's arena tensors may hold together (one aligned buffer each)
# for graphmem to plan it: half the signed 64-bit range, so that no offset, sum or
# difference in the array and compiled code can overflow. No device comes near it.
MAX_PLAN_BYTES = 2 ** 62


def align_up(n, alignment: int):
    """``n`` rounded up to a multiple of ``alignment`` (element-wise for a numpy array)."""
    return -(-n // alignment) * alignment


def aligned_total(sizes, alignment: int) -> int:
    """``sum(align_up(b, alignment) for b in sizes)`` of sizes that a context admits."""
    return int(align_up(np.asarray(sizes, dtype=np.int64), alignment).sum())


def _quiet(stage: str) -> None:
    """The default ``stage`` callback: say nothing."""


class Context:
    """What the passes read for one execution order. Made by :meth:`for_order`.

    ``edges`` (the order's view and overwrite pairs) is computed when first asked for:
    the in-place pass and the plan's validation read it, a plan without aliasing
    passes never does.
    """

    def __init__(self, graph: Graph, index: GraphIndex, order: Sequence[int],
                 intervals: Intervals, alignment: int, table: str = DEFAULT_TABLE):
        self.graph, self.index, self.alignment = graph, index, alignment
        self.table = table  # the provider whose overwrite table the passes trust
        self.order = tuple(order)
        self.intervals = intervals  # tensor -> Interval, every arena tensor in id order
        self.first, self.last = intervals.columns  # per position: its first and last step
        self.nbytes: np.ndarray = index.nbytes  # per position: the tensor's bytes

    @classmethod
    def for_order(cls, graph: Graph, order: Sequence[int], alignment: int = 64,
                  index: GraphIndex | None = None,
                  stage: Callable[[str], None] = _quiet,
                  table: str = DEFAULT_TABLE) -> "Context":
        """Check ``order`` (a permutation of the running nodes that keeps every
        dependency) and the graph's size, then compute liveness; ``index`` is built if
        not given; ``table``: the provider whose overwrite table to trust
        (:data:`~graphmem.core.ops.INPLACE_TABLES`). Raises :class:`GraphmemError`
        naming the first problem."""
        if table not in INPLACE_TABLES:
            raise GraphmemError(f"no in-place table for provider {table!r}; choose "
                                f"{', '.join(t for t in INPLACE_TABLES if '@' not in t)}")
        if alignment <= 0:
            raise GraphmemError(f"alignment must be positive, not {alignment}")
        stage("order check")
        index = index if index is not None else index_graph(graph)
        bad = check_order(graph, list(order), index)
        if bad:
            raise GraphmemError(bad[0])
        _check_size(graph, index, alignment)
        stage("liveness")
        return cls(graph, index, order, liveness(graph, list(order), index), alignment, table)

    @property
    def names(self) -> list[str]:
        """Tensor name per position."""
        return self.index.arena_names()

    @cached_property
    def naive_layout(self) -> int:
        """One aligned buffer per tensor: the arena before any pass."""
        return aligned_total(self.nbytes, self.alignment)

    @cached_property
    def edges(self) -> AliasEdges:
        """The view and overwrite pairs of this order (:func:`~graphmem.core.ops.alias_edges`)."""
        return alias_edges(self.graph, self.order, self.index, self.table)


def _check_size(graph: Graph, index: GraphIndex, alignment: int) -> None:
    """Refuse a graph whose tensors, one aligned buffer each, reach ``MAX_PLAN_BYTES``."""
    nb = index.nbytes
    if nb is not None and (not len(nb) or (int(nb.max()) + alignment) * len(nb) < MAX_PLAN_BYTES):
        return  # no sum of these can reach the limit
    names = index.arena_names()
    sizes = [graph.tensors[t].bytes for t in names]  # Python integers: no overflow
    total = sum(align_up(b, alignment) for b in sizes)
    if total < MAX_PLAN_BYTES:
        return
    size, name = max(zip(sizes, names), key=lambda sn: sn[0])
    raise GraphmemError(f"the graph's tensors need {total} bytes together (the largest, "
                        f"{name!r}, {size}): past the 2**62 bytes graphmem can plan")
