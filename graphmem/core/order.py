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
    ``index``: the graph's :class:`~graphmem.core.index.GraphIndex`, built if not given.
    With it, an order that lists every running node once is told so in numpy, without
    a mapping of the nodes (a million-node order in milliseconds)."""
    rows = permutation_rows(index, order) if index is not None else None
    if rows is not None:
        return _dependency_problems(graph, order, index, rows)
    problems = []
    by_index = {n.index: n for n in graph.nodes}
    seen = set(order)
    if len(seen) == len(order) == len(by_index) and seen == by_index.keys():
        return _dependency_problems(graph, order, index)  # a permutation of the nodes
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
    return problems or _dependency_problems(graph, order, index)


def permutation_rows(topo: GraphIndex, order) -> np.ndarray | None:
    """The index rows of ``order`` if it lists every running node of ``topo`` once, as
    integers (3.0 names node 3, as ``3.0 == 3``); None otherwise, or when it cannot
    tell (check_order's loop then words what is wrong)."""
    try:
        at = np.asarray(order) if len(order) else np.zeros(0, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        return None
    if at.ndim != 1 or len(at) != len(topo.node_index):
        return None
    if at.dtype.kind == "f" and (np.abs(at) < 2 ** 62).all() and (at == np.round(at)).all():
        at = at.astype(np.int64)
    if at.dtype.kind not in "iu":
        return None
    if len(at) and (int(at.min()) < 0 or int(at.max()) >= len(topo.row_of)):
        return None
    rows = topo.row_of[at]
    if not bool((rows >= 0).all()):
        return None
    seen = np.zeros(len(topo.node_index), dtype=bool)
    seen[rows] = True
    return rows if bool(seen.all()) else None


def _dependency_problems(graph: Graph, order: list[int], index: GraphIndex | None,
                         rows: np.ndarray | None = None) -> list[str]:
    """The first node of a permutation ``order`` (its index ``rows``, if known) that runs
    before a producer of its input (numpy over the graph's index)."""
    topo = index if index is not None else index_graph(graph)
    if rows is None:
        rows = topo.rows(order)
    made = np.full(len(topo.names), -1, dtype=np.int64)  # latest position writing each id
    np.maximum.at(made, *edges_in_order(topo.write_start, topo.writes, rows))
    t, rpos = edges_in_order(topo.read_start, topo.reads, rows)
    bad = np.flatnonzero((t >= 0) & (made[np.maximum(t, 0)] >= rpos))
    if not len(bad):
        return []
    k = int(bad[0])  # the edges are in order: the earliest position, then read order
    pos, p = int(rpos[k]), int(made[t[k]])
    node = graph.nodes[int(rows[pos])]
    return [f"order: node {order[pos]} ({node.op_type}) runs at position "
            f"{pos} before node {order[p]}, the producer of its input {topo.names[t[k]]!r}"]
