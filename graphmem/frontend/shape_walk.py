"""The shape walk: one pass over a model's nodes in file order that sizes what the
declared types, the contrib rules (:mod:`graphmem.frontend.contrib_rules`) and onnx's
per-node inference give, computing the shape arithmetic it meets on the way
(:class:`WalkValues`, the walk's value cache), so that a Reshape to a computed shape is
sized in the same pass. No sympy, no ONNX Runtime, and onnx's Python package is not
imported: the walk reads the model's bytes with :mod:`graphmem.wire` and calls onnx's
compiled per-node inference directly (:mod:`graphmem.frontend.onnx_c`).
"""
from __future__ import annotations

from typing import Optional

from graphmem import wire
from graphmem.frontend import attributes, onnx_c
from graphmem.frontend.building import attribute_value
from graphmem.frontend.contrib_rules import Call, Value, is_dim, rule_for
from graphmem.frontend.protowire import (ELEM_TYPES, EXTERNAL, NotDecoded, static_type,
                                         tensor_array, tensor_bytes, tensor_header,
                                         type_bytes)
from graphmem.frontend.splice import INITIALIZER, NODE, entry_message
from graphmem.frontend.structure import GRAPH_ATTRS


def propagate(model, view: wire.Model | None = None) -> dict[str, Value]:
    """(element type, static shape) of every value of ``model``'s top-level graph that the
    declared types, the rules and onnx's per-node inference give, in one pass over the
    nodes in file order (ORT saves its graphs sorted). A node whose inputs are not all
    known is passed over, and so are control-flow nodes: the loader sizes their bodies.

    ``model``: the serialized ModelProto (or a ModelProto); ``view``: the wire view of
    those bytes, when the caller has it (else they are parsed here). The walk reads the bytes
    with :mod:`graphmem.wire` and calls onnx's compiled per-node inference directly
    (:mod:`graphmem.frontend.onnx_c`): onnx's Python package is not imported."""
    if not isinstance(model, (bytes, bytearray, memoryview)):
        model = model.SerializeToString()
    parsed = view if view is not None else wire.parse_model(model)
    g = parsed.graph
    known: dict[str, Value] = {}
    for vi in (*g.inputs, *g.value_info, *g.outputs):
        v = _static(vi.type)
        if v is not None:
            known[vi.name] = v
    small: dict[str, int] = {}  # name -> index among the initializers
    for i, t in enumerate(g.initializers):
        known[t.name] = (t.data_type, tuple(t.dims))
        if t.data_location != EXTERNAL and t.raw_bytes <= WalkValues.SMALL_BYTES:
            small[t.name] = i
    values = WalkValues(model, g, small, known)
    opsets = {d or "": v for d, v in parsed.opsets}
    opsets.setdefault("", opsets.get("ai.onnx", 0))
    ir_version = max(parsed.ir_version, 3)
    defs = onnx_c.core().defs
    types: dict[Value, bytes] = {}  # (elem, shape) -> its serialized TypeProto, made once
    statics: dict[bytes, Optional[Value]] = {}  # serialized TypeProto -> static_type
    for k, node in enumerate(g.nodes):
        outs = [o for o in node.outputs if o]
        standard = node.domain in ("", "ai.onnx")
        done = all(o in known for o in outs)
        if standard and all(not t or t in known for t in node.inputs):
            if done:  # its values are computed where something reads them
                values.defer(node)
                continue
            for name, value in values.compute(node).items():
                known.setdefault(name, (ELEM_TYPES[value.dtype.type], value.shape))
            done = all(o in known for o in outs)
        if done:
            continue
        found = rule_for(node.domain, node.op_type)
        if found is not None:
            call = Call(inputs=[known.get(t) for t in node.inputs],
                        attrs={a.name: attribute_value(a) for a in node.attrs},
                        outputs=len(node.outputs), given=[bool(t) for t in node.inputs],
                        values=lambda i, node=node: values.get(node.inputs[i]))
            try:
                results = found(call)
            except Exception:  # malformed attributes: the outputs stay unknown
                continue
            for name, v in zip(node.outputs, results):
                if name and v is not None and v[0] and all(is_dim(d) for d in v[1]):
                    known[name] = (v[0], tuple(v[1]))
            continue
        if not standard or any(a.type in GRAPH_ATTRS for a in node.attrs):
            continue
        if any(t and t not in known for t in node.inputs):
            continue
        try:
            schema = defs.get_schema(node.op_type, opsets[""], "")
            inferred = schema._infer_node_outputs(
                entry_message(model, g, NODE, k),
                {t: types[known[t]] if known[t] in types else
                 types.setdefault(known[t], type_bytes(*known[t])) for t in node.inputs if t},
                values.tensors(node.inputs), {}, opsets, ir_version)
        except Exception:  # no schema at this opset, or inference refused: unknown
            continue
        for name, tp in inferred.items():
            # a transformer's tensors share a few types: each parsed once
            v = statics[tp] if tp in statics else statics.setdefault(tp, static_type(tp))
            if v is not None:
                known[name] = v
    return known


class WalkValues:
    """The values of the small tensors :func:`propagate` meets: small initializers, and
    the shape arithmetic (Shape of a sized tensor, Gather, Concat, ...) computed as it
    walks (:mod:`graphmem.frontend.shape_arithmetic`, the loader's own), so that a
    Reshape to a computed shape is sized in the same pass: a contrib op in every layer
    whose output the next layer's shape arithmetic reads (the transformer optimizer's
    ViT-B/16) needs no round per layer.

    The arithmetic of a node whose outputs are sized already (on a graph onnx's own
    inference has been through: nearly all of it) is deferred until a value is read,
    by a rule, by onnx's inference of a node left open, or by the arithmetic after it:
    most of it is never read. What is computed is computed once per distinct (op,
    attributes, input values): every layer computes the same shapes."""

    LIMIT = 4096  # elements: shape-like values only
    SMALL_BYTES = 4096  # an initializer's raw data: its value is read

    def __init__(self, data: bytes, g: wire.Graph, small: dict[str, int], known: dict):
        self.data, self.g, self.small, self.known = data, g, small, known
        self.arrays: dict[str, object] = {}
        self.pending: dict[str, object] = {}  # output name -> its deferred node
        self.made: dict[tuple, tuple] = {}  # (op, attributes, inputs) -> output values

    def defer(self, node) -> None:
        """Compute ``node``'s values (shape arithmetic, inputs sized) when one is read."""
        if node.op_type in _ARITHMETIC:
            for o in node.outputs:
                if o:
                    self.pending[o] = node

    def _force(self, name: str) -> None:
        """Compute the deferred node of ``name``, after the deferred ones it reads (in
        post-order, without recursion: a chain of arithmetic can be long)."""
        stack, entered = [name], set()
        while stack:
            node = self.pending.get(stack[-1])
            if node is None:
                stack.pop()
                continue
            reads = () if node.op_type in ("Shape", "Size") or id(node) in entered else [
                t for t in node.inputs if t in self.pending]
            entered.add(id(node))  # a second visit computes it (a malformed cycle ends)
            if reads:
                stack.extend(reads)
                continue
            stack.pop()
            for o in node.outputs:
                self.pending.pop(o, None)
            self.compute(node)

    def initializer(self, name: str):
        """A small initializer's value (None: not one, or not read here)."""
        if name not in self.small:
            return None
        if name not in self.arrays:
            try:
                self.arrays[name] = tensor_array(self._message(name))
            except NotDecoded:
                self.arrays[name] = None
        return self.arrays[name]

    def _message(self, name: str) -> bytes:
        return entry_message(self.data, self.g, INITIALIZER, self.small[name])

    def get(self, name: str):
        found = self.arrays.get(name)
        if found is not None:
            return found
        if name in self.pending:
            self._force(name)
            return self.arrays.get(name)
        return self.initializer(name)

    def compute(self, node) -> dict:
        """The values of ``node``'s outputs where they are shape arithmetic on inputs
        whose values are known (a Shape needs only its input's static shape)."""
        import numpy as np
        op = node.op_type
        if op not in _ARITHMETIC or any(a.type in GRAPH_ATTRS for a in node.attrs):
            return {}
        if op in ("Shape", "Size"):
            if not node.inputs or node.inputs[0] not in self.known:
                return {}
            # a zero-stride array of the static shape: its shape, no bytes
            shape = self.known[node.inputs[0]][1]
            ins = {node.inputs[0]: np.lib.stride_tricks.as_strided(
                np.zeros(1, np.bool_), shape, (0,) * len(shape))}
        else:
            ins = {}
            for t in node.inputs:  # an input without a value ends it: none decoded after
                if t:
                    ins[t] = self.get(t)
                    if ins[t] is None:
                        return {}
        # every layer computes the same shapes: each distinct computation is made once
        # (an int4 Whisper encoder: 216 evaluations, 26 distinct)
        key = (op, tuple((a.name, a.type, bytes(a.raw)) for a in node.attrs),
               tuple(None if not t else (ins[t].dtype.str, ins[t].shape,
                                         b"" if op in ("Shape", "Size") else ins[t].tobytes())
                     for t in node.inputs))
        made = self.made.get(key)
        if made is None:
            made = self.made[key] = self._evaluate(node, ins)
        out = {name: v for name, v in zip(node.outputs, made) if name and v is not None}
        self.arrays.update(out)
        return out

    def _evaluate(self, node, ins: dict) -> tuple:
        """The values of ``node``'s outputs on ``ins`` by position (None: not computed)."""
        from graphmem.frontend.shape_arithmetic import Unsupported, evaluate
        if node.op_type not in ("Shape", "Size") and not self._small_result(
                node, [ins[t] if t else None for t in node.inputs]):
            return ()
        try:
            out = evaluate([node], ins)
        except Unsupported:
            return ()
        return tuple(v if v is not None and v.size <= self.LIMIT
                     and v.dtype.type in ELEM_TYPES else None
                     for v in map(out.get, node.outputs))

    def _small_result(self, node, ins: list) -> bool:
        """Whether ``node``'s result on ``ins`` stays within :data:`LIMIT` elements,
        known before computing it: a Constant holding a weight, a ConstantOfShape,
        Expand or Range of a computed size (a causal mask at a long sequence) or a
        broadcast of two vectors could be weight-sized; it is left to the loader's
        other strategies."""
        import numpy as np
        op = node.op_type
        present = [x for x in ins if x is not None]
        try:
            if op == "Constant":
                size = 0
                for a in node.attrs:
                    if a.type == attributes.TENSOR:
                        dims, _ = tensor_header(attributes.decode(a.type, a.raw,
                                                                  tensor_label=False))
                        size = int(np.prod(dims)) if dims else 1
                    elif a.type in (attributes.INTS, attributes.FLOATS):
                        size = len(attributes.decode(a.type, a.raw))
                    elif a.type != attributes.STRINGS:
                        size = 1
                    else:
                        size = self.LIMIT + 1
            elif op == "ConstantOfShape":
                size = int(np.prod(ins[0])) if ins[0].size else 1
            elif op == "Expand":
                size = int(np.prod(np.broadcast_shapes(ins[0].shape, tuple(ins[1]))))
            elif op == "Range":
                start, limit, delta = (float(x) for x in ins[:3])
                size = int(np.ceil((limit - start) / delta)) if delta else self.LIMIT + 1
            elif op == "Concat":
                size = sum(x.size for x in present)
            elif op == "Gather":
                size = ins[0].size * max(ins[1].size, 1)
            elif op in ("Reshape", "Squeeze", "Unsqueeze", "Slice", "Cast", "Neg", "Abs"):
                size = ins[0].size
            else:  # element-wise: the broadcast of the inputs
                size = int(np.prod(np.broadcast_shapes(*(x.shape for x in present))))
        except (ValueError, TypeError, OverflowError, IndexError, NotDecoded):
            return False
        return size <= self.LIMIT

    def tensors(self, names) -> dict[str, bytes]:
        """Serialized TensorProtos of the values among ``names``, for onnx's per-node
        inference."""
        out = {}
        for t in names:
            if t in self.small:
                out[t] = self._message(t)
            elif t:
                value = self.get(t)
                if value is not None:
                    out[t] = tensor_bytes(value, t)
        return out


# what WalkValues computes: the shape arithmetic exporters write between a Shape and the
# Reshape, Expand, Range or ConstantOfShape that reads it
_ARITHMETIC = frozenset((
    "Shape", "Size", "Constant", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Slice",
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Max", "Min", "Mod", "Equal", "Less",
    "Greater", "Where", "Range", "Reshape", "Expand", "ConstantOfShape"))


def _static(t) -> Optional[Value]:
    """(elem, shape) of a :class:`graphmem.wire.ValueType` of a tensor whose every dim is
    a number (else None)."""
    if t is None or t.kind != "tensor" or not t.elem_type or t.shape is None:
        return None
    if not all(type(d) is int and d >= 0 for d in t.shape):
        return None
    return (t.elem_type, tuple(t.shape))
