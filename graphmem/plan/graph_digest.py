"""The digest of a graph's structure that a plan records (its ``graph`` field): which
graph, node for node, the plan was made for (docs/plan-format.md).

A plan's ``order`` lists node indices and its tensors carry live ranges counted in that
order, so a plan means something only for the very graph it was made for: the same
nodes in another sequence, another export of the model, or ONNX Runtime's graph
optimized another way would read the same numbers as other nodes. Every command that
reads a plan compares its digest with the graph's before it judges anything
(:func:`check_graph`): a mismatch is bad input (:class:`PlanForAnotherGraph`, exit 2),
never a verdict on the plan.

What the digest covers, in the graph's node sequence: each running node's index,
domain, op type, inputs, outputs and the outer names its bodies read; the indices of
the folded nodes; the graph's inputs and outputs; the element type and shape (at the
plan's bindings) of every graph input and node output, the tensors a plan places; and
each control-flow body the same way. Not covered: node names (ONNX Runtime renames the
nodes it inserts from one session to the next, and no plan refers to them), attributes
and weights (what they decide for a plan, its tensors' types and shapes, is covered).
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter

import numpy as np

from graphmem.core.ir import Graph
from graphmem.errors import GraphmemError

PREFIX = "sha256:"
# field, record and list separators of the text hashed (never in an ONNX name, which is
# printable text: graphmem refuses control characters in names)
_F, _R, _L = "\x1f", "\x1e", "\x1d"


class PlanForAnotherGraph(GraphmemError):
    """A plan checked against a graph other than the one it was made for."""


def graph_digest(graph: Graph) -> str:
    """``sha256:`` and the hex SHA-256 of ``graph``'s structure (see the module), as
    loaded: the workspaces the plan of its bodies adds are not part of it."""
    from graphmem.core.scopes import without_workspaces
    graph = without_workspaces(graph)
    h = _sha256(b"graphmem.graph/1\n")
    for chunk in _text(graph, ""):
        h.update(chunk.encode("utf-8", "surrogatepass"))
    return PREFIX + h.hexdigest()


def _text(graph: Graph, where: str):
    """The text the digest hashes, in pieces, column by column (each a C-level join):
    the graph's inputs and outputs, the folded nodes, the nodes' indices, domains, op
    types, inputs, outputs and outer reads, then the element type and shape of each
    graph input and node output in that order (every tensor a plan places is one of
    them), then the bodies."""
    nodes = graph.nodes

    def column(attr: str):
        return map(attrgetter(attr), nodes)

    yield f"scope{_F}{where}\n"
    yield "in" + _F + _L.join(graph.inputs) + "\n"
    yield "out" + _F + _L.join(graph.outputs) + "\n"
    yield "folded" + _F + _L.join(map(str, graph.folded_nodes)) + "\n"
    yield "index" + _F + np.fromiter(column("index"), np.int64, len(nodes)).tobytes().hex() + "\n"
    yield "domain" + _F + _L.join(column("domain")) + "\n"
    yield "op" + _F + _L.join(column("op_type")) + "\n"
    for attr in ("inputs", "outputs", "implicit_inputs"):
        yield attr + _F + _R.join(map(_L.join, column(attr))) + "\n"
    tensors = graph.tensors
    names = chain(graph.inputs, filter(None, chain.from_iterable(column("outputs"))))
    try:  # every one of them is typed in a loaded graph
        found = list(map(tensors.__getitem__, names))
    except KeyError:
        found = [tensors.get(name, _UNTYPED) for name in chain(graph.inputs, filter(
            None, chain.from_iterable(column("outputs"))))]
    yield "dtype" + _F + _L.join(map(attrgetter("dtype"), found)) + "\n"
    yield "shape" + _F + _L.join(map(_ShapeTexts().__getitem__, map(attrgetter("shape"), found)))
    yield "\n"
    for index in sorted(graph.scopes):
        for s in graph.scopes[index]:
            yield from _text(s.graph, f"{where}/{index}.{s.attr}")


class _ShapeTexts(dict):
    """A shape's text (``2,3,224,224``), each distinct shape's made once."""

    def __missing__(self, shape) -> str:
        text = self[shape] = ",".join(map(str, shape))
        return text


class _Untyped:
    """The type text of a name the graph does not type (none in a loaded graph)."""
    dtype = "-"
    shape = ("-",)


_UNTYPED = _Untyped()


def _sha256(data: bytes):
    """SHA-256 by Python's own module where there is one, as ``graphmem.core.ops``
    hashes its tables (``import hashlib`` loads OpenSSL: milliseconds of a small plan)."""
    try:
        from _sha256 import sha256  # CPython 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # CPython 3.12+
        except ImportError:
            from hashlib import sha256
    return sha256(data)


def check_graph(plan, graph: Graph) -> None:
    """Raise :class:`PlanForAnotherGraph` (one line) when ``plan`` records the digest of
    another graph than ``graph``; a plan without one (written before graphmem recorded
    it) is not checked here."""
    made_for = plan.graph
    if made_for is None:
        return
    this = graph_digest(graph)
    if made_for != this:
        raise PlanForAnotherGraph(
            f"this plan was made for another graph: it records graph {_short(made_for)}, "
            f"and {_named(graph)} at the plan's bindings is {_short(this)} (another export "
            f"or optimization of the model, or its nodes in another sequence); plan this "
            f"graph, or check the plan against the graph it was made for (`graphmem plan "
            f"--save-graph` writes it)")


def _short(digest: str) -> str:
    return digest[:len(PREFIX) + 16] if digest.startswith(PREFIX) else repr(digest[:40])


def _named(graph: Graph) -> str:
    from pathlib import Path
    return f"{Path(graph.model_path).name!r}" if graph.model_path else "this graph"
