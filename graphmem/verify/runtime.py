"""Opening ONNX Runtime sessions on models of any IR version the installed onnx writes.

onnx 1.23 writes IR version 14 by default; onnxruntime 1.31 reads at most 13. A model
whose IR version is above the runtime's but that uses nothing the newer versions added
(a data type, an Opaque type: the opsets are versioned apart from the IR, and ONNX
Runtime judges them itself) runs unchanged with its IR
version lowered in memory: :func:`usable_ir_version` says which version to give a
model (and, asked to, says in one note that it lowered it), :func:`open_session` opens
one at that version. Otherwise one line names both versions.
"""
from __future__ import annotations

import functools
import re
from typing import Iterable

import onnx

from graphmem.errors import GraphmemError

_OPAQUE = -1  # an Opaque type, made available outside ONNX-ML in IR 14
# the IR version that introduced each element type (onnx.proto's Version comments)
_IR_OF_ELEM_TYPE = {17: 9, 18: 9, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 12,
                    25: 13, 26: 13, 27: 14, 28: 14, _OPAQUE: 14}
_MAX_IR = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")


@functools.cache
def runtime_max_ir() -> int:
    """The highest IR version the installed onnxruntime reads (asked of it once)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "ir_probe",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 1000
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 4  # fatal only: the refusal comes back as the exception
        ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # the message names the highest version it reads
        found = _MAX_IR.search(str(exc))
        if found:
            return int(found.group(2))
    return onnx.IR_VERSION  # it read IR 1000: assume it reads whatever onnx writes


def needed_ir_version(model: onnx.ModelProto) -> tuple[int, str]:
    """(the lowest IR version that can hold ``model``, what needs it)."""
    need, why = 3, "the base format"
    for elem, where in _elem_types(model):
        ir = _IR_OF_ELEM_TYPE.get(elem, 3)
        if ir > need:
            name = "an Opaque type" if elem == _OPAQUE else \
                f"element type {onnx.TensorProto.DataType.Name(elem)}"
            need, why = ir, f"{name}, {where}"
    return need, why


def usable_ir_version(model: onnx.ModelProto, what: str = "the model", *,
                      say: bool = False) -> int:
    """The IR version to give ``model`` (or a one-node model cut from it) for this
    onnxruntime: its own, or the runtime's highest when the model needs nothing newer
    (with ``say``, a note says so); GraphmemError naming both versions when it does."""
    have = max(model.ir_version, 3)
    top = runtime_max_ir()
    if have <= top:
        return have
    need, why = needed_ir_version(model)
    if need > top:
        import onnxruntime as ort
        raise GraphmemError(f"{what} is IR version {have} and needs IR {need} ({why}); the "
                            f"installed onnxruntime {ort.__version__} reads IR versions up "
                            f"to {top}")
    if say:
        from graphmem.notes import note
        note(f"{what} is IR version {have}; the installed onnxruntime reads up to {top} "
             f"and nothing in it needs more, so it runs as IR {top} (in memory; the file "
             "is unchanged)")
    return top


def with_usable_ir(model: onnx.ModelProto, what: str = "the model") -> onnx.ModelProto:
    """``model`` itself, or a copy at the IR version :func:`usable_ir_version` gives."""
    ir = usable_ir_version(model, what)
    if ir == model.ir_version:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.ir_version = ir
    return copy


def open_session(model: onnx.ModelProto, options, providers: list[str], what: str = "the model"):
    """An ``InferenceSession`` on ``model`` at an IR version this onnxruntime reads (no
    note: the caller says it once, with :func:`usable_ir_version`'s ``say``). ONNX
    Runtime's own errors propagate (callers word them)."""
    import onnxruntime as ort
    return ort.InferenceSession(with_usable_ir(model, what).SerializeToString(), options,
                                providers=providers)


def _elem_types(model: onnx.ModelProto) -> Iterable[tuple[int, str]]:
    """Every element type named in ``model``: its value types, initializers, Cast targets,
    tensor attributes, in every subgraph and function."""
    graphs = [model.graph]
    for f in model.functions:
        for node in f.node:
            yield from _node_types(node, graphs, f"function {f.name}")
    while graphs:
        g = graphs.pop()
        for vi in (*g.input, *g.output, *g.value_info):
            yield from _type_types(vi.type, f"tensor {vi.name!r}")
        for t in g.initializer:
            yield t.data_type, f"initializer {t.name!r}"
        for t in g.sparse_initializer:
            yield t.values.data_type, "a sparse initializer"
        for node in g.node:
            yield from _node_types(node, graphs, f"node {node.name or node.op_type!r}")


def _node_types(node: onnx.NodeProto, graphs: list, where: str):
    for a in node.attribute:
        if a.type == onnx.AttributeProto.INT and a.name in ("to", "dtype", "output_dtype"):
            yield a.i, where
        elif a.type == onnx.AttributeProto.TENSOR:
            yield a.t.data_type, where
        elif a.type == onnx.AttributeProto.TENSORS:
            yield from ((t.data_type, where) for t in a.tensors)
        elif a.type == onnx.AttributeProto.TYPE_PROTO:
            yield from _type_types(a.tp, where)
        elif a.type == onnx.AttributeProto.GRAPH:
            graphs.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(a.graphs)


def _type_types(tp: onnx.TypeProto, where: str):
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        yield getattr(tp, kind).elem_type, where
    elif kind in ("sequence_type", "optional_type"):
        yield from _type_types(getattr(tp, kind).elem_type, where)
    elif kind == "map_type":
        yield tp.map_type.key_type, where
        yield from _type_types(tp.map_type.value_type, where)
    elif kind == "opaque_type":
        yield _OPAQUE, where
