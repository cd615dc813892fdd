"""The IR :class:`~graphmem.core.ir.Graph` of a loaded model: its running nodes (made
column by column: a million nodes), every tensor's type, and how the loader sized them."""
from __future__ import annotations

from pathlib import Path

from graphmem import wire
from graphmem.core.ir import Graph, Node, Sizing, from_columns, standard_domain
from graphmem.frontend import attributes
from graphmem.frontend.constant_nodes import Folding
from graphmem.frontend.lazy import helper, onnx
from graphmem.frontend.protos import one_line
from graphmem.frontend.stored_weights import DEQUANTIZE_OPS, dequantized_sources
from graphmem.frontend.structure import GRAPH_ATTRS


def attribute_value(attr, lost: list[str] | None = None) -> object:
    """A node attribute's value as the IR keeps it (a subgraph or tensor as a label).
    One that onnx cannot read either is None, and ``lost`` (when given) says which."""
    kind, raw = attr.type, attr.raw
    if kind in GRAPH_ATTRS:
        return "<subgraph>"
    value = attributes.decode(kind, raw)  # a tensor comes back as its label
    if value is attributes.NOT_DECODED:
        try:
            value = helper.get_attribute_value(onnx.AttributeProto.FromString(raw))
        except Exception as exc:  # protobuf's DecodeError, onnx's "Unsupported attribute"
            if lost is not None:
                lost.append(f"attribute {attr.name!r} ({one_line(exc)})")
            return None
        if isinstance(value, onnx.TensorProto):
            value = f"<tensor {list(value.dims)}>"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value


def ir_node(idx: int, n, outer_reads: tuple[str, ...] = ()) -> Node:
    return ir_nodes([idx], [n], [outer_reads])[0]


def ir_nodes(indices: list[int], ns: list, outer_reads: list[tuple[str, ...]],
             lost: list[str] | None = None) -> list[Node]:
    """IR nodes of the wire nodes ``ns`` (made column by column: a million nodes)."""
    # a model's layers repeat their attributes (a ResNet's Convs: a few distinct
    # kernel_shape, pads and strides): each distinct one is decoded once, and a list
    # is each node's own copy
    decoded: dict[tuple[int, bytes], object] = {}

    def value(a):
        key = (a.type, a.raw)
        found = decoded.get(key)
        if found is None:
            found = attribute_value(a, lost)
            if found is not None:  # None: not kept (what onnx could not read is noted each time)
                decoded[key] = found
        return list(found) if found.__class__ is list else found

    return from_columns(
        Node, len(ns), index=indices, name=[n.name for n in ns],
        op_type=[n.op_type for n in ns], domain=[n.domain for n in ns],
        inputs=[n.inputs for n in ns], outputs=[n.outputs for n in ns],
        attrs=[{a.name: value(a) for a in n.attrs} if n.attrs else {} for n in ns],
        implicit_inputs=outer_reads)


def build(parsed: wire.Model, g: wire.Graph, order, tensors, reads, folding: Folding,
          model_path: str | None, bindings, scopes=None, sizing: tuple[Sizing, ...] = (),
          notes: list[str] | None = None,
          sparse: dict[str, tuple[str, ...]] | None = None) -> Graph:
    """The Graph of the model's running nodes (``order`` less what folds); ``notes``
    gains a line for attributes no reader could decode (their values are None).
    ``sparse``: each densified sparse initializer's stored values and indices
    (:mod:`graphmem.frontend.sparse`), which the weights count instead of it."""
    nodes_in = g.nodes
    folded, constants = folding.nodes, folding.constants
    inits = frozenset(t.name for t in g.initializers)
    indices = [idx for idx in order if idx not in folded] if folded else list(order)
    rows = [nodes_in[idx] for idx in indices]
    implicit = [() if rs is n.inputs else tuple(t for t in rs if t not in n.inputs)
                for n, rs in zip(rows, (reads[idx] for idx in indices))]
    lost: list[str] = []
    nodes = ir_nodes(indices, rows, implicit, lost)
    notes = list(notes or ())
    if lost:
        more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
        notes.append(f"{lost[0]}{more} could not be decoded; its value is left out")
    opset = max((v for d, v in parsed.opsets if standard_domain(d)), default=0)
    folded_rows = [nodes_in[idx] for idx in order if idx in folded] if folded else []
    stored_as = dequantized_sources((n.op_type, n.domain, n.inputs, n.outputs)
                                    for n in folded_rows) \
        if any(n.op_type in DEQUANTIZE_OPS for n in folded_rows) else {}
    if sparse:
        stored_as = {**stored_as, **sparse}
    return Graph(
        name=g.name or (Path(model_path).stem if model_path else "model"),
        nodes=tuple(nodes), tensors=tensors,
        inputs=tuple(vi.name for vi in g.inputs if vi.name not in inits),
        outputs=tuple(o.name for o in g.outputs),
        weights=inits, constants=tuple(constants),
        folded_nodes=tuple(sorted(folded)), opset=opset, model_path=model_path,
        node_count=len(nodes_in), bindings=dict(bindings), scopes=scopes or {},
        sizing=sizing, load_notes=tuple(notes), stored_as=stored_as)
