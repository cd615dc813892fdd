"""Make an inference ONNX model ready for reverse mode: real weights, opset 17, batch N.

The Model Zoo graphs carry their weights as ``ConstantOfShape`` nodes (no values),
``ir_version`` 3, opset 9, every initializer repeated in ``graph.input`` and a
``Reshape`` before the classifier that hard-codes batch 1. Each is fixed here.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from graphmem.frontend.folding import constant_value
from graphmem.errors import GraphmemError
from graphmem.frontend.function_budget import check_functions
from graphmem.frontend.reader import check_model, onnx_opset
from graphmem.isolated import convert_version

TARGET_OPSET = 17


def prepare_inference(model: onnx.ModelProto, batch: int | None = None, *,
                      seed: int = 0) -> onnx.ModelProto:
    """A copy of ``model`` with initializers for every weight, at opset 17, batch ``batch``.

    ``ConstantOfShape`` weights get random values (scaled by fan-in; BN variances
    positive): memory work needs shapes, gradient checks need non-degenerate values.
    """
    if onnx_opset(model) < TARGET_OPSET:
        # checked as plan checks it before onnx's version converter sees it (it crashes
        # on a wrong-typed attribute, and runs in a bounded process besides)
        check_model(model)
    elif model.functions:  # the step's shape inference inlines them: their budget first
        calls = onnx.ModelProto()
        calls.functions.extend(model.functions)
        calls.graph.node.extend(model.graph.node)  # the calls, not the weights
        check_functions(calls.SerializeToString())
    m = onnx.ModelProto()
    m.CopyFrom(model)
    rng = np.random.default_rng(seed)
    _drop_initializer_inputs(m)
    if batch is not None:
        _set_batch(m, batch)
    m.ir_version = max(m.ir_version, 7)
    opset = onnx_opset(m)
    if opset < TARGET_OPSET:
        m = _converted(m, opset)
        m.ir_version = max(m.ir_version, 8)
    # After the conversion: it copies the model, which is cheap while weights are shapes.
    _materialize_constant_of_shape(m, rng)
    _drop_initializer_inputs(m)
    return m


# Initializers with more raw data than this travel to the converter's process without
# it, and get it back by name after (the converter keeps initializers as they are)
STRIP_BYTES = 1 << 16


def _converted(m: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``m`` converted to TARGET_OPSET by onnx's version converter, run in a bounded
    process (:mod:`graphmem.isolated`): its large weights' data stays here."""
    kept: dict[str, bytes] = {}
    for t in m.graph.initializer:
        if len(t.raw_data) > STRIP_BYTES and t.name not in kept:
            kept[t.name] = t.raw_data
            t.ClearField("raw_data")
    try:
        data = m.SerializeToString()
    finally:
        for t in m.graph.initializer:
            if t.name in kept:
                t.raw_data = kept[t.name]
    out = onnx.ModelProto.FromString(
        convert_version(data, TARGET_OPSET, f"the model from opset {opset}"))
    for t in out.graph.initializer:
        if t.name in kept and not t.HasField("raw_data") and not t.external_data:
            t.raw_data = kept[t.name]
    return out


def _materialize_constant_of_shape(m: onnx.ModelProto, rng) -> None:
    """Replace ConstantOfShape nodes fed by initializers with random initializers."""
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    variance_inputs = {n.input[4] for n in g.node
                       if n.op_type == "BatchNormalization" and len(n.input) > 4}
    keep, used_shapes = [], set()
    for n in g.node:
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            keep.append(n)
            continue
        shape = [int(d) for d in numpy_helper.to_array(inits[n.input[0]]).reshape(-1)]
        used_shapes.add(n.input[0])
        name = n.output[0]
        if name in variance_inputs:
            value = 1.0 + 0.1 * rng.random(shape, dtype=np.float32)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else max(shape[0], 1)
            value = (2 * rng.random(shape, dtype=np.float32) - 1) / np.float32(np.sqrt(fan_in))
        g.initializer.append(numpy_helper.from_array(value, name))
    del g.node[:]
    g.node.extend(keep)
    # The shape tensors are dead once their ConstantOfShape is gone.
    still_read = {t for n in g.node for t in n.input}
    dead = [i for i in g.initializer if i.name in used_shapes and i.name not in still_read]
    for i in dead:
        g.initializer.remove(i)


def _drop_initializer_inputs(m: onnx.ModelProto) -> None:
    """Drop graph inputs that repeat an initializer's name, and inputs nothing reads."""
    g = m.graph
    inits = {i.name for i in g.initializer}
    read = {t for n in g.node for t in n.input}
    keep = [i for i in g.input if i.name not in inits and i.name in read]
    del g.input[:]
    g.input.extend(keep)
    unused = [i for i in g.initializer if i.name not in read]
    for i in unused:
        g.initializer.remove(i)


def _set_batch(m: onnx.ModelProto, batch: int) -> None:
    """Set the first dimension of every data input to ``batch``, and of Reshape targets.

    A Reshape of an activation whose constant target shape starts with the old batch
    (the zoo's ``[1, 2048]`` before the classifier, shufflenet's channel shuffles) gets
    its first entry rewritten too.
    """
    if batch <= 0:
        raise GraphmemError(f"--batch must be positive, not {batch}")
    g = m.graph
    old = None
    for i in g.input:
        dims = i.type.tensor_type.shape.dim
        if not dims:
            continue
        if dims[0].HasField("dim_value"):
            old = dims[0].dim_value if old is None else old
        dims[0].Clear()
        dims[0].dim_value = batch
    for o in g.output:
        dims = o.type.tensor_type.shape.dim
        if dims:
            dims[0].Clear()
            dims[0].dim_value = batch
    del g.value_info[:]
    inits = {i.name: i for i in g.initializer}
    # Reshape targets written as Constant nodes (PyTorch's exporters) as well as
    # initializers (the zoo)
    constants = {o: n for n in g.node if n.op_type == "Constant" for o in n.output}
    activations = {i.name for i in g.input}
    # One rewritten target per original: an exporter shares one shape constant across
    # several Reshapes (GPT-2's dynamo export reads one from twelve).
    rewritten: dict[str, str] = {}
    taken = set(inits) | set(constants) | {t for n in g.node for t in n.output}
    for n in g.node:  # nodes are in topological order in the zoo files
        if any(t in activations for t in n.input):
            activations.update(n.output)
        if (n.op_type == "Reshape" and n.input[0] in activations and len(n.input) > 1
                and (n.input[1] in inits or n.input[1] in constants)):
            if n.input[1] in rewritten:
                n.input[1] = rewritten[n.input[1]]
                continue
            target = constant_value(n.input[1], inits, constants)
            if target is None:
                continue
            target = target.copy()
            if target.size and target[0] == (old or 1):
                target[0] = batch
                name = n.input[1] + f"__batch{batch}"
                while name in taken:
                    name += "'"
                taken.add(name)
                g.initializer.append(numpy_helper.from_array(target.astype(np.int64), name))
                rewritten[n.input[1]] = name
                n.input[1] = name
