"""Execution orders, as lists of node indices (``Node.index``)."""
from __future__ import annotations

import numpy as np

from graphmem.core.ir import Graph
from graphmem.core.index import GraphIndex, edges_in_order, index_graph


def file_order(graph: Graph) -> list[int]:
    """The order the loader kept: the file's, or a stable topological sort of it."""
    return [n.index for n in graph.nodes]


def check_order(graph: Graph, order: list[int], index: GraphIndex | None = None) -> list[str]:
    """Problems with ``order`` for ``graph`` (empty when it is a valid schedule).
    ``index``: the graph's :class:`~graphmem.core.index.GraphIndex`, built if not given."""
    problems = []
    by_index = {n.index: n for n in graph.nodes}
    seen = set(order)
    if len(seen) == len(order) == len(by_index) and seen == by_index.keys():
        return _dependency_problems(graph, by_index, order, index)  # a permutation of the nodes
    seen = set()
    for pos, idx in enumerate(order):
        if idx in seen:
            problems.append(f"order: node {idx} appears twice")
        elif idx not in by_index:
            problems.append(f"order: {idx} is not a node that runs (folded or out of range)")
        seen.add(idx)
    missing = sorted(set(by_index) - seen)
    if missing:
        problems.append(f"order: node {missing[0]} ({by_index[missing[0]].op_type}) is missing"
                        + (f", and {len(missing) - 1} more" if len(missing) > 1 else ""))
    return problems or _dependency_problems(graph, by_index, order, index)


def _dependency_problems(graph: Graph, by_index: dict, order: list[int],
                         index: GraphIndex | None) -> list[str]:
    """The first node of a permutation ``order`` that runs before a producer of its input
    (numpy over the graph's index)."""
    topo = index if index is not None else index_graph(graph)
    rows = topo.rows(order)
    made = np.full(len(topo.names), -1, dtype=np.int64)  # latest position writing each id
    np.maximum.at(made, *edges_in_order(topo.write_start, topo.writes, rows))
    t, rpos = edges_in_order(topo.read_start, topo.reads, rows)
    bad = np.flatnonzero((t >= 0) & (made[np.maximum(t, 0)] >= rpos))
    if not len(bad):
        return []
    k = int(bad[0])  # the edges are in order: the earliest position, then read order
    pos, p = int(rpos[k]), int(made[t[k]])
    idx = order[pos]
    return [f"order: node {idx} ({by_index[idx].op_type}) runs at position "
            f"{pos} before node {order[p]}, the producer of its input {topo.names[t[k]]!r}"]
