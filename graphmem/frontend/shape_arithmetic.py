"""The shape arithmetic exporters write (Shape -> Gather -> Unsqueeze -> Concat ->
Reshape, a Range of a computed length, ...), computed in numpy as onnx's reference
evaluator computes it, for the loader's small constants: the reference evaluator costs
its import and a session per batch (a third of a second on a TorchScript export of
ViT-B/16, which folds 600 Constants and 300 such nodes). An op this module does not know, or
an input it does not expect (a dtype mismatch, an empty index), raises
:class:`Unsupported`, and the caller hands the nodes to the reference evaluator as
before: every value computed here is the reference evaluator's, bit for bit (the same
numpy calls on the same dtypes; tests/test_shape_arithmetic.py compares the two)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from graphmem import wire
from graphmem.frontend import attributes
from graphmem.frontend.protowire import NUMPY_TYPES, NotDecoded, tensor_array


class Unsupported(Exception):
    """The nodes are not all computed here: the reference evaluator computes them."""


def _attrs(node) -> dict:
    if isinstance(node, wire.Node):
        return _wire_attrs(node.attrs)
    out = {}
    for a in node.attribute:
        if a.type == a.INT:
            out[a.name] = a.i
        elif a.type == a.INTS:
            out[a.name] = list(a.ints)
        elif a.type == a.FLOAT:
            out[a.name] = a.f
        elif a.type == a.FLOATS:
            out[a.name] = list(a.floats)
        elif a.type == a.TENSOR:
            out[a.name] = a.t.SerializeToString()
        else:
            raise Unsupported(f"attribute {a.name!r} of type {a.type}")
    return out


def _wire_attrs(attrs) -> dict:
    """The attributes of a :class:`graphmem.wire.Node` (a tensor as its bytes)."""
    out = {}
    for a in attrs:
        if a.type not in (attributes.INT, attributes.INTS, attributes.FLOAT,
                          attributes.FLOATS, attributes.TENSOR):
            raise Unsupported(f"attribute {a.name!r} of type {a.type}")
        value = attributes.decode(a.type, a.raw, tensor_label=False)
        if value is attributes.NOT_DECODED:
            raise Unsupported(f"attribute {a.name!r}")
        out[a.name] = value
    return out


def _tensor(data: bytes) -> np.ndarray:
    try:
        return tensor_array(data)
    except NotDecoded as exc:
        raise Unsupported(f"tensor: {exc}") from None


def _constant(node, a: dict) -> np.ndarray:
    if "value" in a:
        return _tensor(a["value"])
    if "value_float" in a:
        return np.array(a["value_float"], dtype=np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], dtype=np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], dtype=np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], dtype=np.int64)
    raise Unsupported("Constant")


def _binary(fn):
    def run(a, b):
        if a.dtype != b.dtype:
            raise Unsupported("input dtypes differ")
        out = np.asarray(fn(a, b))
        if out.dtype != a.dtype:
            raise Unsupported("output dtype")
        return out
    return run


def _div(x, y):
    if issubclass(x.dtype.type, np.integer):  # truncated toward zero, as C++ divides
        q = np.floor_divide(x, y)
        r = np.remainder(x, y)
        return q + ((r != 0) & ((x < 0) ^ (y < 0))).astype(q.dtype)
    return np.divide(x, y)


def _compare(fn):
    def run(a, b):
        if a.dtype != b.dtype:
            raise Unsupported("input dtypes differ")
        return np.asarray(fn(a, b))
    return run


def _unary(fn):
    def run(x):
        out = np.asarray(fn(x))
        if out.dtype != x.dtype:
            raise Unsupported("output dtype")
        return out
    return run


_BINARY = {"Add": _binary(np.add), "Sub": _binary(np.subtract), "Mul": _binary(np.multiply),
           "Div": _binary(_div), "Equal": _compare(np.equal), "Greater": _compare(np.greater),
           "GreaterOrEqual": _compare(np.greater_equal), "Less": _compare(np.less),
           "LessOrEqual": _compare(np.less_equal), "And": _compare(np.logical_and),
           "Or": _compare(np.logical_or), "Xor": _compare(np.logical_xor)}
_UNARY = {"Neg": _unary(np.negative), "Abs": _unary(np.absolute), "Log": _unary(np.log),
          "Exp": _unary(np.exp), "Sqrt": _unary(np.sqrt), "Cos": _unary(np.cos),
          "Sin": _unary(np.sin), "Floor": _unary(np.floor), "Ceil": _unary(np.ceil),
          "Not": _unary(np.logical_not), "Identity": lambda x: x}


def _axes(node, a: dict, ins: list, at: int):
    if "axes" in a:
        return tuple(a["axes"])
    if len(ins) > at and ins[at] is not None:
        return tuple(int(v) for v in ins[at])
    return None


def _run(node, ins: list) -> list[np.ndarray]:
    op, a = node.op_type, _attrs(node)
    if op in _BINARY and len(ins) == 2:
        return [_BINARY[op](*ins)]
    if op in _UNARY and len(ins) == 1:
        return [_UNARY[op](ins[0])]
    if op == "Constant":
        return [_constant(node, a)]
    if op in ("Max", "Min") and ins and all(x.dtype == ins[0].dtype for x in ins):
        fn = np.maximum if op == "Max" else np.minimum
        out = ins[0].copy()
        for x in ins[1:]:
            out = fn(out, x)
        return [np.asarray(out)]
    if op == "Mod" and len(ins) == 2:
        return [np.asarray(np.fmod(*ins) if a.get("fmod", 0) == 1 else np.mod(*ins))]
    if op == "Cast":
        to = NUMPY_TYPES.get(a.get("to"))
        if to is None:
            raise Unsupported("Cast's type")
        return [ins[0].astype(to)]
    if op == "Shape":
        rank = ins[0].ndim
        start, end = a.get("start", 0), a.get("end", rank)
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        return [np.array(ins[0].shape[start:end], dtype=np.int64)]
    if op == "Size":
        return [np.array(ins[0].size, dtype=np.int64)]
    if op == "Gather" and len(ins) == 2:
        x, idx = ins
        if idx.size == 0 or not issubclass(idx.dtype.type, np.integer):
            raise Unsupported("Gather's indices")
        if not x.flags["C_CONTIGUOUS"]:  # (never on a 0-d array: ascontiguousarray
            x = np.ascontiguousarray(x)  # gives those a dimension)
        if not idx.flags["C_CONTIGUOUS"]:
            idx = np.ascontiguousarray(idx)
        return [np.take(x, idx, axis=a.get("axis", 0))]
    if op == "Unsqueeze":
        axes = _axes(node, a, ins, 1)
        if not axes:
            raise Unsupported("Unsqueeze's axes")
        if "axes" in a:  # opset < 13: one axis after another
            out = ins[0]
            for ax in axes:
                out = np.expand_dims(out, axis=ax)
            return [out]
        return [np.expand_dims(ins[0], axis=axes)]
    if op == "Squeeze":
        axes = _axes(node, a, ins, 1)
        if "axes" in a:  # opset < 13: one axis after another; none given, all
            out = ins[0]
            if not axes:
                return [np.squeeze(out)]
            for ax in reversed(axes):
                out = np.squeeze(out, axis=ax)
            return [out]
        return [np.squeeze(ins[0], axis=axes) if axes is not None else np.squeeze(ins[0])]
    if op == "Concat":
        if any(x.ndim == 0 for x in ins) or "axis" not in a:
            raise Unsupported("Concat of a scalar")
        return [np.concatenate(ins, a["axis"])]
    if op == "Range" and len(ins) == 3 and "stash_type" not in a:
        start, limit, delta = ins
        return [np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)]
    if op == "ConstantOfShape":
        value = np.array(0, dtype=np.float32)
        if "value" in a:
            v = _tensor(a["value"])
            if v.size != 1:
                raise Unsupported("ConstantOfShape's value")
            value = v.flat[0]
        return [np.full(tuple(ins[0]), value)]
    if op == "Reshape" and len(ins) == 2:
        data, shape = ins
        new = np.copy(shape)
        if a.get("allowzero", 0) != 1:
            zeros = np.where(shape == 0)
            new[zeros] = np.array(data.shape)[zeros]
        return [np.reshape(data, new)]
    if op == "Expand" and len(ins) == 2:
        return [ins[0] * np.ones(ins[1], dtype=ins[0].dtype)]
    if op == "Where" and len(ins) == 3:
        if ins[1].dtype != ins[2].dtype:
            raise Unsupported("Where's dtypes")
        return [np.where(*ins).astype(ins[1].dtype)]
    if op == "Slice" and 3 <= len(ins) <= 5 and "starts" not in a:
        data, starts, ends = ins[:3]
        axes = ins[3] if len(ins) > 3 else None
        steps = ins[4] if len(ins) > 4 else None
        if starts.ndim == 0:
            starts = np.array([starts])
        if ends.ndim == 0:
            ends = np.array([ends])
        if axes is None:
            slices = [slice(s, e) if steps is None else slice(s, e, d) for s, e, d in
                      zip(starts, ends, steps if steps is not None else starts)]
        else:
            slices = [slice(0, n) for n in data.shape]
            for k, (s, e, ax) in enumerate(zip(starts, ends, axes)):
                slices[ax] = slice(s, e) if steps is None else slice(s, e, steps[k])
        return [data[tuple(slices)]]
    if op == "DequantizeLinear" and 2 <= len(ins) <= 3:
        return [_dequantize(ins, a)]
    raise Unsupported(op)


def _dequantize(ins: list, a: dict) -> np.ndarray:
    """DequantizeLinear of an integer tensor, per tensor or per axis (a quantized
    embedding row the exporter gathered with constant indices: the position and token
    type embeddings of quantize_dynamic's BERT), as the reference evaluator computes it:
    in float32, then the scale's type. Blocks, float8 and 4-bit types are left to it."""
    x, scale = ins[0], ins[1]
    zero = ins[2] if len(ins) > 2 else None
    if (x.dtype.kind not in "iu" or x.dtype.itemsize > 4 or a.get("block_size", 0)
            or "output_dtype" in a or scale.dtype not in (np.float32, np.float16)
            or scale.ndim > 1 or (zero is not None and zero.dtype != x.dtype)):
        raise Unsupported("DequantizeLinear's form")

    def along_axis(v):
        if v.ndim == 0:
            return v
        if v.size == 1:
            return v[0]
        dims = [1] * x.ndim
        dims[a.get("axis", 1)] = v.size
        return v.reshape(dims)
    dx = x.astype(np.float32)
    if zero is not None:
        dx = dx - along_axis(zero)
    return (dx * along_axis(scale)).astype(scale.dtype)


def evaluate(nodes, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs of ``nodes`` (a topological list of NodeProtos or of
    :class:`graphmem.wire.Node`), their inputs taken from ``values``;
    :class:`Unsupported` when one is not computed here (nothing is then kept: the
    caller runs them all on the reference evaluator)."""
    known = dict(values)
    out: dict[str, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for node in nodes:
            if node.domain not in ("", "ai.onnx"):
                raise Unsupported(node.domain)
            inputs, outputs = ((node.inputs, node.outputs) if isinstance(node, wire.Node)
                               else (node.input, node.output))
            try:
                ins = [known[t] if t else None for t in inputs]
            except KeyError:
                raise Unsupported("an input without a value") from None
            while ins and ins[-1] is None:
                ins.pop()
            if any(x is None for x in ins):
                raise Unsupported("an input left out")
            try:
                results = _run(node, ins)
            except Unsupported:
                raise
            except Exception as exc:  # what numpy refuses, the reference evaluator may say
                raise Unsupported(str(exc)) from None
            outs = list(outputs)
            if len([o for o in outs if o]) != len(results) or any(not o for o in outs):
                raise Unsupported("outputs")
            for name, value in zip(outs, results):
                known[name] = out[name] = np.asarray(value)
    return out
