"""The structure of a model as :mod:`graphmem.wire` reads it: names checked, what each
node reads, the nodes in a topological order, with one-line errors naming the node and
tensor where the checker only says "not topologically sorted".

Works on the wire records (``graphmem.wire.Node``, ``Attribute``, ``Initializer``,
``Value``) and the graph dicts that hold them; no onnx.
"""
from __future__ import annotations

import heapq
from itertools import repeat

from graphmem import wire
from graphmem.errors import GraphmemError

GRAPH_ATTRS = (5, 10)  # AttributeProto.GRAPH, GRAPHS
EXTERNAL = 1  # TensorProto.EXTERNAL


def subgraphs(node) -> list[dict]:
    """The graphs of a node's GRAPH and GRAPHS attributes."""
    return [sub for a in node.attrs for sub in a.subgraphs]


def external_locations(g: wire.Graph):
    """(name, location) of every external-data initializer, subgraphs included."""
    for t in g.initializers:
        if t.data_location == EXTERNAL:
            yield t.name, next((v for k, v in t.external_data if k == "location"), "")
    for node in g.nodes:
        if node.attrs:
            for sub in subgraphs(node):
                yield from external_locations(sub)


def invalid_name(g: wire.Graph, where: str = "graph") -> str | None:
    """The first tensor or op name that is not valid UTF-8 (the parser hands those over
    as bytes), checked on every load: a walk over names only."""
    for kind in ("inputs", "outputs", "value_info", "initializers"):
        for entry in getattr(g, kind):
            if entry.name.__class__ is bytes:
                return f"the name of {where} {kind.rstrip('s')} {entry.name!r}"
            shape = entry.type[2] if kind != "initializers" and entry.type else None
            for axis, dim in enumerate(shape or ()):
                if dim.__class__ is bytes:  # a dim_param, bound by name with --dim
                    return (f"dim_param {dim!r} (axis {axis} of {where} "
                            f"{kind.rstrip('s')} {entry.name!r})")
    for idx, n in enumerate(g.nodes):
        if (n.name.__class__ is bytes or n.op_type.__class__ is bytes
                or n.domain.__class__ is bytes):
            text = next(t for t in (n.name, n.op_type, n.domain) if t.__class__ is bytes)
            return f"{text!r} in {where} node {idx}"
        for text in n.inputs + n.outputs:
            if text.__class__ is bytes:
                return f"{text!r} in {where} node {idx}"
        for sub in subgraphs(n):
            if (found := invalid_name(sub, f"a subgraph of node {idx}")) is not None:
                return found
    return None


def check_names(g: wire.Graph) -> dict[str, int]:
    """Refuse a name defined twice (:func:`name_clash` words it); return the index of
    the node that writes each node output."""
    init_names = [t.name for t in g.initializers]
    defined: dict[str, int] = dict.fromkeys(init_names, -1)
    input_names = [vi.name for vi in g.inputs if vi.name not in defined]
    if len(defined) != len(init_names) or len(set(input_names)) != len(input_names):
        name_clash(g, -1)
    defined.update(dict.fromkeys(input_names, -1))
    defined[""] = -1  # blanks (omitted optional outputs) may repeat
    for idx, n in enumerate(g.nodes):
        outs = n.outputs
        before = len(defined)
        defined.update(zip(outs, repeat(idx)))
        if len(defined) - before != len(outs) and (
                len(defined) - before != len(outs) - outs.count("")):
            name_clash(g, idx)
    defined.pop("")
    return {name: by for name, by in defined.items() if by >= 0}


def name_clash(g: wire.Graph, upto: int) -> None:
    """Raise for the first name defined twice (two initializers, two graph inputs, or a
    node output already defined), looking at the nodes up to ``upto``."""
    defined: dict[str, str] = {}
    for init in g.initializers:
        if init.name in defined:
            raise GraphmemError(f"duplicate tensor name {init.name!r}: two initializers")
        defined[init.name] = "an initializer"
    for vi in g.inputs:
        if vi.name in defined and defined[vi.name] != "an initializer":
            raise GraphmemError(f"duplicate tensor name {vi.name!r}: two graph inputs")
        defined.setdefault(vi.name, "a graph input")
    for idx, n in enumerate(g.nodes[:upto + 1]):
        for out in n.outputs:
            if not out:
                continue
            if out in defined:
                raise GraphmemError(
                    f"duplicate tensor name {out!r}: node {idx} ({n.op_type}) writes it, "
                    f"but it is already {defined[out]}")
            defined[out] = f"the output of node {idx} ({n.op_type})"


def node_reads(node) -> tuple[str, ...]:
    """Every tensor a node reads: its inputs without blanks, then what its subgraphs
    read from enclosing scopes (sorted)."""
    subs = subgraphs(node) if node.attrs else ()
    ins = node.inputs
    if not subs and "" not in ins:
        return ins
    reads = [t for t in ins if t]
    for sub in subs:
        reads.extend(sorted(t for t in subgraph_reads(sub) if t not in reads))
    return tuple(reads)


def all_reads(g: wire.Graph) -> list[tuple[str, ...]]:
    return list(map(node_reads, g.nodes))


def subgraph_reads(graph: wire.Graph) -> set[str]:
    """Names a subgraph reads from enclosing scopes."""
    defined = {vi.name for vi in graph.inputs} | {t.name for t in graph.initializers}
    outer: set[str] = set()
    for n in graph.nodes:
        for t in node_reads(n):
            if t not in defined:
                outer.add(t)
        defined.update(o for o in n.outputs if o)
    for o in graph.outputs:
        if o.name not in defined:
            outer.add(o.name)
    return outer


def topological_order(g: wire.Graph, reads: list[tuple[str, ...]],
                      producer: dict[str, int]) -> list[int]:
    """Node indices in file order when that is topological, else a stable sort;
    ``producer``: the node that writes each node output."""
    nodes = g.nodes
    available = {vi.name for vi in g.inputs} | {t.name for t in g.initializers}
    sorted_ = True
    for idx, rs in enumerate(reads):
        for t in rs:
            p = producer.get(t)
            if p is None:
                if t not in available:
                    raise GraphmemError(
                        f"node {idx} ({nodes[idx].op_type}) reads tensor {t!r}, which no node "
                        "produces and which is not a graph input or initializer")
            elif p >= idx:
                sorted_ = False
    for o in g.outputs:
        if o.name not in available and o.name not in producer:
            raise GraphmemError(f"graph output {o.name!r} is produced by no node")
    if sorted_:
        return list(range(len(nodes)))
    deps = [{producer[t] for t in rs if t in producer} for rs in reads]
    users: dict[int, list[int]] = {}
    indegree = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for p in d:
            users.setdefault(p, []).append(i)
    ready = [i for i, k in enumerate(indegree) if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, []):
            indegree[u] -= 1
            if indegree[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):
        raise GraphmemError(f"the graph has a cycle: {find_cycle(nodes, set(order), deps, reads)}")
    return order


def find_cycle(nodes, done: set[int], deps: list[set[int]], reads) -> str:
    """A cycle among the nodes a topological sort could not place, as readable text."""
    # Every unplaced node has an unplaced producer, so walking producers from any of
    # them must come back to a node already seen: that loop is a cycle.
    node = min(set(range(len(nodes))) - done)
    path: list[int] = []
    while node not in path:
        path.append(node)
        node = min(d for d in deps[node] if d not in done)
    loop = path[path.index(node):][::-1]  # producer before consumer
    steps = []
    for a, b in zip(loop, loop[1:] + loop[:1]):
        tensor = next(t for t in reads[b] if t in nodes[a].outputs)
        steps.append(f"node {a} ({nodes[a].op_type}) -> {tensor!r} -> ")
    return "".join(steps) + f"node {loop[0]} ({nodes[loop[0]].op_type})"


def nearest_upstream(g, name: str, known, matches) -> tuple[int, object] | None:
    """``(index, node)`` of the nearest node upstream of tensor ``name`` (breadth first,
    through tensors not in ``known``) for which ``matches(index, node)`` holds; None
    where there is none. ``g``: a wire graph (its ``nodes``)."""
    nodes = g.nodes
    producer = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    queue, seen = [name], {name}
    while queue:
        i = producer.get(queue.pop(0))
        if i is None:
            continue
        n = nodes[i]
        if matches(i, n):
            return i, n
        for x in n.inputs:
            if x and x not in seen and x not in known:
                seen.add(x)
                queue.append(x)
    return None
