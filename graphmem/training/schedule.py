"""Execution orders for training graphs.

onnx_ad emits helper nodes (seed ``Expand``s, shape arithmetic on constants, masks and
transposed copies of forward tensors) where its rules run, and :mod:`.recompute` inserts
recomputation nodes right after the forward pass; in file order, or moved into the
forward pass by the planner's reorder pass, their outputs sit in memory across the
backward pass. Any topological order is a valid plan order:

- :func:`sink_floating` moves *floating* nodes to just before their first reader and
  keeps every other node in file order;
- :func:`training_order` does that for a wider class (every backward node that does not
  depend on the loss seed: masks, transposed and reshaped copies of forward tensors for
  weight gradients, recomputation) and runs *early* the boolean masks that let a
  forward tensor die in forward (ReLU6's ``Less``/``Greater``/``And`` on the Clip's
  input, which nothing else in backward reads: one byte an element is kept instead of
  four).

(Sinking every node would postpone weight-gradient convolutions to the end of the step,
keeping their large inputs alive: only nodes that read no adjoint float.)
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
    """File order, with each floating node moved to just before its earliest reader."""
    return _sunk(graph, floating_nodes(graph), set())


def helper_nodes(graph: Graph) -> tuple[set[int], set[int]]:
    """``(floating, early)``: backward and recompute nodes that do not depend on the loss
    seed (or read only constants and the seed), and among them the boolean helpers that
    should run as soon as their inputs exist.

    A boolean helper is early when some forward tensor it reads is read in backward by
    boolean helpers only (computing them early lets that tensor die in forward), or when
    it reads only early helpers' outputs (the ``Not``/``And``/``Unsqueeze`` after them).
    """
    static = set(graph.weights) | set(graph.constants)
    floating = floating_nodes(graph)
    adjoint = {SEED}
    for n in graph.nodes:
        if n.name.startswith(("f:", "r:")):
            continue
        if any(t in adjoint for t in n.reads):
            adjoint.update(t for t in n.outputs if t)  # seed fills stay floating
        else:
            floating.add(n.index)
    forward_out = {t for n in graph.nodes if n.name.startswith("f:") for t in n.outputs if t}
    readers: dict[str, list] = {}
    for n in graph.nodes:
        if not n.name.startswith("f:"):
            for t in dict.fromkeys(n.reads):
                readers.setdefault(t, []).append(n)

    def boolean(n) -> bool:
        return n.index in floating and bool(n.outputs) and all(
            graph.tensors[t].dtype == "bool" for t in n.outputs if t)

    early: set[int] = set()
    early_out: set[str] = set()
    for n in graph.nodes:
        if not boolean(n) or n.name.startswith("r:"):
            continue
        frees = any(t in forward_out and all(boolean(r) for r in readers[t]) for t in n.reads)
        inner = all(t in early_out or t in static for t in n.reads)
        if frees or inner:
            early.add(n.index)
            early_out.update(t for t in n.outputs if t)
    return floating - early, early


def training_order(graph: Graph) -> list[int]:
    """File order with :func:`helper_nodes`' floating nodes just before their first
    reader and its early nodes just after their last input is made."""
    floating, early = helper_nodes(graph)
    return _sunk(graph, floating, early)


def _sunk(graph: Graph, floating: set[int], early: set[int]) -> list[int]:
    """Every other node in file order, each pulling in the floating nodes it reads (and
    theirs) just before it; an early node runs as soon as its last input is made."""
    producer = {t: n for n in graph.nodes for t in n.outputs if t}
    order: list[int] = []
    done: set[int] = set()
    waiting: dict[str, list] = {}  # tensor -> early nodes waiting for it
    missing: dict[int, int] = {}
    for n in graph.nodes:
        if n.index in early:
            deps = {t for t in n.reads if t in producer}
            missing[n.index] = len(deps)
            for t in deps:
                waiting.setdefault(t, []).append(n)

    def run(n) -> None:
        # Iterative: a recomputed segment can be hundreds of nodes deep.
        stack = [(n, False)]
        while stack:
            m, ready = stack.pop()
            if m.index in done:
                continue
            deps = [producer[t] for t in m.reads if t in producer
                    and producer[t].index not in done]
            if deps and not ready:
                stack.append((m, True))
                stack.extend((d, False) for d in reversed(deps))
                continue
            done.add(m.index)
            order.append(m.index)
            for t in m.outputs:
                for w in waiting.pop(t, ()) if t else ():
                    missing[w.index] -= 1
                    if missing[w.index] == 0:
                        stack.append((w, True))

    for n in graph.nodes:
        if n.index not in floating and n.index not in early:
            run(n)
    for n in graph.nodes:  # floating nodes nobody reads, early nodes never ready
        run(n)
    return order


def in_planned_order(model, order: list[int]):
    """A copy of ``model`` (a ModelProto) whose top-level nodes run in ``order`` (node
    indices of ``model``, as a plan's ``order`` lists them): what ``train --save``
    writes, so planning the saved file starts from the order the step was planned in.
    Nodes the order leaves out (folded: they read constants only) come first, in file
    order."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(model.graph.node)
    listed = set(order)
    if len(listed) != len(order) or not listed <= set(range(len(nodes))):
        raise ValueError("the order must list distinct node indices of the model")
    del out.graph.node[:]
    out.graph.node.extend([n for i, n in enumerate(nodes) if i not in listed]
                          + [nodes[i] for i in order])
    return out
