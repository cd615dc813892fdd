"""Sizes read from a model's values, checked before anything is allocated from them.

A few ops size their output from the *values* of an input: Reshape's target shape,
Expand's shape, ConstantOfShape's input, Tile's repeats, Range's start, limit and delta,
OneHot's depth, Pad's pads, Resize's sizes.
A file can put any number there (a Reshape target of 2.3e18 in a 139 KB BERT export made
onnx's shape inference grow past 21 GB, through a ConstantOfShape of the Shape of that
Reshape's output). Before the loader hands computed values to onnx's inference, and
before it evaluates a constant node, :func:`check` names the node whose output would
hold more than graphmem can plan, in one line; the constant evaluation skips a node whose
output would be larger than it may compute (:func:`output_elements`).
"""
from __future__ import annotations

from math import prod
from typing import Mapping

import numpy as np

from graphmem.errors import GraphmemError

# The most bytes a plan can place: planning.context.MAX_PLAN_BYTES (tests check they
# agree; the frontend does not import the planner).
MAX_TENSOR_BYTES = 2 ** 62

# op -> the inputs whose values size its output
SIZING_INPUTS = {"Reshape": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Tile": (1,),
                 "Range": (0, 1, 2), "OneHot": (1,), "Pad": (1,)}
# Resize's sizes are its fourth input (its scales, the third, need the input's shape)
RESIZE_SIZES = 3


def output_elements(op: str, inputs: tuple[str, ...], values: Mapping[str, np.ndarray],
                    shape_of=lambda name: None) -> int | None:
    """How many elements the output of an ``op`` node reading ``inputs`` holds, from the
    values its size comes from (``values``: name -> array), or None when they are not
    all known. ``shape_of(name)`` gives an input's static shape where known (Expand and
    Tile multiply it in). Only positive dims count for Reshape (0 copies an input dim,
    -1 is inferred)."""
    idx = SIZING_INPUTS.get(op)
    if op in ("Resize", "Upsample"):
        idx = (RESIZE_SIZES,) if op == "Resize" and len(inputs) > RESIZE_SIZES \
            and inputs[RESIZE_SIZES] else None
    if idx is None or len(inputs) <= max(idx) or any(not inputs[i] or inputs[i] not in values
                                                     for i in idx):
        return None
    try:
        if op == "Range":
            start, limit, delta = (float(np.asarray(values[inputs[i]]).reshape(-1)[0])
                                   for i in idx)
            if delta == 0 or not all(np.isfinite((start, limit, delta))):
                return None  # onnx's inference refuses it in one line
            return max(int(np.ceil((limit - start) / delta)), 0)
        dims = [int(d) for d in np.asarray(values[inputs[idx[0]]]).reshape(-1)]
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    if op == "Reshape":
        return prod(d for d in dims if d > 0)
    if op in ("ConstantOfShape", "Resize"):
        return prod(max(d, 0) for d in dims)
    data = shape_of(inputs[0])
    if op == "OneHot":  # the indices' elements times the depth
        return max(dims[0] if dims else 0, 0) * (prod(data) if data is not None else 1)
    if op == "Pad":  # each dim grown by its two pads (pads may shrink it too)
        if data is None or len(dims) != 2 * len(data):
            return None
        rank = len(data)
        return prod(max(d + dims[i] + dims[rank + i], 0) for i, d in enumerate(data))
    if op == "Expand":
        if data is None:
            return prod(max(d, 0) for d in dims)
        rank = max(len(dims), len(data))
        a = [1] * (rank - len(dims)) + dims
        b = [1] * (rank - len(data)) + list(data)
        return prod(max(x, y, 0) for x, y in zip(a, b))
    # Tile: the input's elements times the repeats
    return prod(max(d, 0) for d in dims) * (prod(data) if data is not None else 1)


def check(nodes, values: Mapping[str, np.ndarray], tensor_of=lambda name: None,
          label=lambda index, node: f"node {index} ({node.op_type})") -> None:
    """Refuse, naming it, the first node whose output the known ``values`` size past what
    graphmem can plan. ``nodes``: (index, :class:`graphmem.wire.Node`); ``tensor_of(name)``: the
    :class:`~graphmem.core.ir.Tensor` of an input, where sized (its shape and element
    size count; an element is one byte where not known)."""
    def shape_of(name):
        t = tensor_of(name)
        return t.shape if t is not None else None

    for index, node in nodes:
        n = output_elements(node.op_type, node.inputs, values, shape_of)
        if n is None:
            continue
        if node.op_type == "ConstantOfShape":
            size = _value_size(node)
        else:
            data = tensor_of(node.inputs[0]) if node.op_type not in ("Range", "OneHot") else None
            size = max(data.bits // 8, 1) if data is not None else 1
        if n * size > MAX_TENSOR_BYTES:
            sizing = SIZING_INPUTS.get(node.op_type, (RESIZE_SIZES,))
            what = ", ".join(f"{name!r} = {_shown(values[name])}"
                             for name in (node.inputs[i] for i in sizing))
            raise GraphmemError(f"{label(index, node)}: its output would hold {n} elements "
                                f"of {size} bytes (from {what}), past the 2**62 bytes "
                                "graphmem can plan")


def _value_size(node) -> int:
    """The bytes of an element of a ConstantOfShape node's output (its ``value``'s type,
    float32 without one; one byte for a type not known here)."""
    from graphmem.core.dtypes import dtype_of
    from graphmem.frontend import attributes
    from graphmem.frontend.protowire import NotDecoded, tensor_header
    value = next((a for a in node.attrs if a.name == "value"), None)
    if value is None:
        return 4
    try:
        _, data_type = tensor_header(attributes.decode(value.type, value.raw,
                                                       tensor_label=False))
        return max(dtype_of(data_type, "value")[1] // 8, 1)
    except (NotDecoded, TypeError, GraphmemError):  # not a tensor's bytes, or no size
        return 1


def _shown(value: np.ndarray) -> str:
    flat = np.asarray(value).reshape(-1)
    text = "[" + ", ".join(str(v) for v in flat[:8].tolist())
    return text + (", ...]" if flat.size > 8 else "]")
