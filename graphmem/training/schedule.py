"""Execution orders for training graphs.

onnx_ad emits helper nodes (seed ``Expand``s, shape arithmetic on constants) early, and
:mod:`.recompute` inserts recomputation nodes right after the forward pass; in file order
their outputs would sit in memory across the backward pass. Any topological order is a
valid plan order, so :func:`sink_floating` moves those *floating* nodes to just before
their first reader and keeps every other node in file order. (Sinking every node would
postpone weight-gradient convolutions to the end of the step, keeping their large
inputs alive: only nodes that read no activation, or that recompute, float.)
"""
from __future__ import annotations

from graphmem.core.ir import Graph
from graphmem.training.rewrites import SEED


def floating_nodes(graph: Graph) -> set[int]:
    """Recompute nodes (``r:``), and nodes that read only weights, constants, the loss
    seed, or other such nodes' outputs."""
    static = set(graph.weights) | set(graph.constants) | {SEED}
    floating: set[int] = set()
    helper_out: set[str] = set()
    for n in graph.nodes:
        if n.name.startswith("r:"):
            floating.add(n.index)
        elif all(t in static or t in helper_out for t in n.reads):
            floating.add(n.index)
            helper_out.update(t for t in n.outputs if t)
    return floating


def sink_floating(graph: Graph) -> list[int]:
    """File order, with each floating node moved to just before its earliest reader.

    Keys: an anchored node at file position p is ``(p, 1)``; a floating node whose
    earliest reader has key ``k`` gets ``k[:-1] + (0, p, 1)``, which sorts before that
    reader, after every earlier anchor, and among its siblings by file position.
    """
    floating = floating_nodes(graph)
    position = {n.index: k for k, n in enumerate(graph.nodes)}
    readers: dict[str, list[int]] = {}
    for n in graph.nodes:
        for t in dict.fromkeys(n.reads):
            readers.setdefault(t, []).append(n.index)
    key: dict[int, tuple] = {}
    for n in reversed(graph.nodes):  # file order is topological: readers come later
        p = position[n.index]
        if n.index not in floating:
            key[n.index] = (p, 1)
            continue
        rs = [key[r] for t in n.outputs if t for r in readers.get(t, ()) if r != n.index]
        key[n.index] = (p, 1) if not rs else min(rs)[:-1] + (0, p, 1)
    return sorted((n.index for n in graph.nodes), key=key.__getitem__)
