"""GraphML of a planned graph, via networkx: operators as nodes, tensors as edges.

Nodes: one per operator that runs, id ``n<index>`` (its index in the file's
``graph.node``), with ``op_type``, ``name``, ``domain``, ``index``, ``step`` (position in
the order), ``live_bytes`` and ``live_bytes_unaliased`` at that step. Graph inputs,
graph outputs and tensors that nothing reads get endpoint nodes ``input:<tensor>``,
``output:<tensor>`` and ``unused:<tensor>`` (``op_type`` "(input)", "(output)",
"(unused)"), so every arena tensor is at least one edge.

Edges: a ``MultiDiGraph`` edge from the producer to each consumer, keyed by the
tensor name, with ``tensor``, ``kind``, ``bytes``, ``offset``, ``first``, ``last``,
``storage`` (tensors with one id share bytes), ``dtype``, ``shape`` ("1x64x56x56"), and
``alias_of``/``alias``/``slice_of`` where set. Weights and folded constants are not
arena tensors and are not edges; a node's ``weight_bytes`` sums the ones it reads.

Graph attributes: ``model``, ``format``, ``arena_bytes``, the plan's stats,
``peak_step`` and ``passes``.

Names are data: a character XML 1.0 cannot hold (control characters such as NUL or
ESC) is written as the text ``\\xNN``, so every file is well-formed XML.
"""
from __future__ import annotations

import re

import networkx as nx

from graphmem.core.ir import Graph
from graphmem.plan.format import FORMAT
from graphmem.plan.view import PlanView


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_safe(text: str) -> str:
    """``text`` with every character XML 1.0 cannot hold written as ``\\xNN``."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def to_networkx(view: PlanView, graph: Graph) -> nx.MultiDiGraph:
    """The plan as a networkx MultiDiGraph with only GraphML-safe attribute values."""
    plan = view.plan
    g = nx.MultiDiGraph()
    g.graph.update(model=xml_safe(plan.model), format=FORMAT, arena_bytes=plan.arena_bytes,
                   alignment=plan.alignment, peak_step=view.peak_step,
                   passes=",".join(p.get("name", "?") for p in plan.passes) or "none",
                   **{k: v for k, v in plan.stats.items() if k != "arena_bytes"})
    static = graph.weights | set(graph.constants)
    steps = {s.node: s for s in view.steps}
    by_index = {n.index: n for n in graph.nodes}
    for idx in plan.order:
        n, s = by_index[idx], steps[idx]
        g.add_node(f"n{idx}", op_type=xml_safe(n.op_type), name=xml_safe(n.name),
                   domain=xml_safe(n.domain), index=idx,
                   step=s.step, live_bytes=s.live_bytes,
                   live_bytes_unaliased=s.live_bytes_unaliased,
                   weight_bytes=sum(graph.tensors[t].bytes for t in set(n.reads)
                                    if t in static and t in graph.tensors))
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    for r in view.tensors:
        name = xml_safe(r.name)
        attrs = dict(tensor=name, kind=r.kind, bytes=r.bytes, offset=r.offset,
                     first=r.first, last=r.last, storage=r.storage, dtype=r.dtype,
                     shape="x".join(map(str, r.shape)) or "scalar")
        for key in ("alias_of", "alias", "slice_of"):
            if getattr(r, key) is not None:
                attrs[key] = xml_safe(getattr(r, key))
        if r.producer is None:
            src = f"input:{name}"
            g.add_node(src, op_type="(input)", name=name)
        else:
            src = f"n{r.producer}"
        targets = [f"n{c.index}" for c in consumers.get(r.name, [])]
        if r.name in outputs:
            targets.append(f"output:{name}")
            g.add_node(f"output:{name}", op_type="(output)", name=name)
        if not targets:
            targets.append(f"unused:{name}")
            g.add_node(f"unused:{name}", op_type="(unused)", name=name)
        for dst in targets:
            g.add_edge(src, dst, key=name, **attrs)
    return g


def graphml_text(view: PlanView, graph: Graph) -> str:
    """The GraphML document (UTF-8 text) for :func:`to_networkx`'s graph."""
    return "\n".join(nx.generate_graphml(to_networkx(view, graph))) + "\n"
