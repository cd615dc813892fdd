"""Symbolic dims bound on the model's bytes (the loader's :func:`bind`) and on a
ModelProto (:func:`bind_dims`, for tools and ``graphmem train``): one set of rules,
so the same bindings, the same refusals and the same types either way."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_python_imported_by_plan
from graphmem import wire
from graphmem.errors import GraphmemError
from graphmem.frontend.binding import all_dim_params, bind, bind_dims, wire_dim_params
from graphmem.frontend.splice import splice

F = TensorProto.FLOAT


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(inputs, outputs, value_info=(), inits=()):
    nodes = [helper.make_node("Identity", [inputs[0].name], [o.name]) for o in outputs]
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits),
                              value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _dim_value(name, value):
    """An input whose first dim is a dim_value (negative ones are unknown sizes)."""
    vi = _vi(name, [1, 3])
    vi.type.tensor_type.shape.dim[0].dim_value = value
    return vi


def _empty_param(name):
    vi = _vi(name, ["a", 3])
    vi.type.tensor_type.shape.dim[0].dim_param = ""
    return vi


MODELS = {
    "static": _model([_vi("x", [2, 3])], [_vi("y", [2, 3])]),
    "named": _model([_vi("x", ["batch", "seq"]), _vi("m", ["batch", 4], TensorProto.INT64)],
                    [_vi("y", ["batch", "seq"])], [_vi("v", ["seq", None, 5])]),
    "expressions": _model(
        [_vi("ids", ["batch", "seq"], TensorProto.INT64),
         _vi("mask", ["batch", "past_seq + seq"], TensorProto.INT64),
         _vi("past", ["batch", 2, "past_seq", 8])],
        [_vi("present", ["batch", 2, "past_seq + seq", 8]), _vi("y", ["batch", "2*seq"])],
        [_vi("v", ["seq + 1"])]),
    "unbound outputs": _model(
        [_vi("x", ["batch", 3])],
        [_vi("y", ["batch", "out_len"]), _vi("z", ["batch", None]), _vi("w", [])],
        [_vi("v", ["hidden", "batch"]), _vi("u", None), _vi("t", ["batch", "batch"])]),
    "unnamed input dim": _model([_vi("x", ["batch", None])], [_vi("y", ["batch", None])]),
    "negative input dim": _model([_dim_value("x", -1)], [_vi("y", [None, 3])]),
    "empty dim_param": _model([_vi("x", ["batch", 3])], [_empty_param("y"), _vi("z", ["batch"])]),
    "empty input dim_param": _model([_empty_param("x")], [_vi("y", [None, 3])]),
    "no input shape": _model([_vi("x", ["batch"]), _vi("s", None)], [_vi("y", ["batch"])]),
    "sequence input": _model(
        [_vi("x", ["batch", 3]),
         helper.make_tensor_sequence_value_info("s", F, ["n", 3])],
        [_vi("y", ["batch", 3])],
        [helper.make_tensor_sequence_value_info("q", F, ["n"])]),
    "initializer input": _model(
        [_vi("x", ["batch", 4]), _vi("w", ["k", 4])], [_vi("y", ["batch", "k"])],
        inits=[numpy_helper.from_array(np.zeros((3, 4), np.float32), "w")]),
    "int64 output, unset elem": _model(
        [_vi("x", ["n"], TensorProto.INT64)],
        [_vi("y", ["n", "m"], TensorProto.UNDEFINED), _vi("z", ["n"], TensorProto.INT64)]),
}

BINDINGS = [({}, None), ({"batch": 2}, None), ({"batch": 2, "seq": 8}, None),
            ({"batch": 1, "seq": 8, "past_seq": 4}, None), ({}, 3), ({"seq": 5}, 2),
            ({"n": 7, "k": 2}, None), ({"nothing": 1, "batch": 2}, 4), ({"hidden": 6}, 1)]


def _by_proto(model, dims, default):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    notes: list[str] = []
    try:
        bindings = bind_dims(m, dims, default, notes=notes)
    except GraphmemError as e:
        return ("refused", str(e)), None
    return (list(bindings.items()), notes), m


def _by_wire(model, dims, default):
    data = model.SerializeToString()
    parsed = wire.parse_model(data)
    notes: list[str] = []
    try:
        bindings, changes = bind(data, parsed.graph, dict(dims), default, notes)
    except GraphmemError as e:
        return ("refused", str(e)), None, None
    return (list(bindings.items()), notes), onnx.load_from_string(splice(data, parsed, changes)), changes


def _entries(m):
    g = m.graph
    return [[vi.SerializeToString() for vi in entries] for entries in (g.input, g.output, g.value_info)]


@pytest.mark.parametrize("dims,default", BINDINGS)
@pytest.mark.parametrize("name", MODELS)
def test_the_wire_binds_as_the_proto_does(name, dims, default):
    model = MODELS[name]
    got_proto, bound_proto = _by_proto(model, dims, default)
    got_wire, bound_wire, changes = _by_wire(model, dims, default)
    assert got_wire == got_proto
    if bound_proto is None:
        return
    # the same types (these models carry no doc strings or denotations, so the bytes)
    assert _entries(bound_wire) == _entries(bound_proto)
    # only the entries that change are written again
    before = _entries(model)
    after = _entries(bound_proto)
    assert len(changes) == sum(a != b for x, y in zip(before, after) for a, b in zip(x, y))


def test_the_outcomes_the_cases_are_for():
    """The cases above reach what they are named for (else the comparison proves little)."""
    def outcome(name, dims, default=None):
        return _by_wire(MODELS[name], dims, default)[0]
    assert outcome("static", {}) == ([], [])
    assert outcome("static", {"batch": 2})[1] == [
        "--dim batch: the model has no symbolic dimension of that name; ignored"]
    assert outcome("expressions", {"batch": 1, "seq": 8, "past_seq": 4})[0] == [
        ("batch", 1), ("seq", 8), ("past_seq", 4), ("past_seq + seq", 12), ("2*seq", 16),
        ("seq + 1", 9)]
    assert outcome("unnamed input dim", {"batch": 2}) == ("refused", (
        "axis 1 of input 'x' has an unknown size with no name; graphmem needs a static "
        "shape for every graph input"))
    assert outcome("negative input dim", {})[0] == "refused"
    assert outcome("empty input dim_param", {})[0] == "refused"
    assert outcome("no input shape", {"batch": 2}) == ("refused", (
        "graph input 's' has no shape; graphmem needs its rank and dims"))
    refused = outcome("named", {"batch": 2})
    assert refused[0] == "refused" and "--dim seq=VALUE" in refused[1]
    # the sequence input and the initializer are neither bound nor refused
    assert outcome("sequence input", {"batch": 2}) == ([("batch", 2)], [])
    assert outcome("initializer input", {"batch": 2}) == ([("batch", 2)], [])
    _, m, _ = _by_wire(MODELS["unbound outputs"], {"batch": 2}, None)
    shapes = {vi.name: vi.type.tensor_type for vi in list(m.graph.output) + list(m.graph.value_info)}
    assert not shapes["y"].HasField("shape") and shapes["y"].elem_type == F  # cleared, typed
    assert [d.dim_value for d in shapes["t"].shape.dim] == [2, 2]
    assert [d.WhichOneof("value") for d in shapes["z"].shape.dim] == ["dim_value", None]


def test_dim_params_are_listed_in_the_order_first_seen():
    for model in MODELS.values():
        assert wire_dim_params(wire.parse_model(model.SerializeToString()).graph) == \
            all_dim_params(model)
    assert all_dim_params(MODELS["expressions"]) == [
        "batch", "seq", "past_seq + seq", "past_seq", "2*seq", "seq + 1"]


def test_a_plan_with_a_dim_imports_none_of_onnxs_python(tmp_path):
    """Binding ``--dim batch=2`` reads and writes the value infos on the wire: onnx's
    Python package (55-65 ms to import, as long as planning a small model) stays out."""
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_vi("x", ["batch", 4])], [_vi("y", ["batch", 4])],
                              [w], value_info=[_vi("h", ["batch", 4])])
    path, out = tmp_path / "m.onnx", tmp_path / "p.json"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert onnx_python_imported_by_plan(
        [str(path), "--dim", "batch=2", "-o", str(out), "-q"]) == (0, [])
    assert json.loads(out.read_text())["bindings"] == {"batch": 2}
