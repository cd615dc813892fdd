"""Execution orders, as lists of node indices (``Node.index``)."""
from __future__ import annotations

from .ir import Graph


def file_order(graph: Graph) -> list[int]:
    """The order the loader kept: the file's, or a stable topological sort of it."""
    return [n.index for n in graph.nodes]


def check_order(graph: Graph, order: list[int]) -> list[str]:
    """Problems with ``order`` for ``graph`` (empty when it is a valid schedule)."""
    problems = []
    by_index = {n.index: n for n in graph.nodes}
    seen: set[int] = set()
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
    if problems:
        return problems
    producer = {t: n.index for n in graph.nodes for t in n.outputs if t}
    position = {idx: pos for pos, idx in enumerate(order)}
    for pos, idx in enumerate(order):
        for t in by_index[idx].reads:
            p = producer.get(t)
            if p is not None and position[p] >= pos:
                problems.append(f"order: node {idx} ({by_index[idx].op_type}) runs at position "
                                f"{pos} before node {p}, the producer of its input {t!r}")
                return problems
    return problems
