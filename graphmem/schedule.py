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
    seen = set(order)
    if len(seen) == len(order) == len(by_index) and seen == by_index.keys():
        return _dependency_problems(by_index, order)  # a permutation of the nodes
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
    return problems or _dependency_problems(by_index, order)


def _dependency_problems(by_index: dict, order: list[int]) -> list[str]:
    """The first node of a permutation ``order`` that runs before a producer of its input."""
    made_at = {t: pos for pos, idx in enumerate(order) for t in by_index[idx].outputs if t}
    for pos, idx in enumerate(order):
        for t in by_index[idx].reads:
            p = made_at.get(t)
            if p is not None and p >= pos:
                return [f"order: node {idx} ({by_index[idx].op_type}) runs at position "
                        f"{pos} before node {order[p]}, the producer of its input {t!r}"]
    return []
