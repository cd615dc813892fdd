"""The loader's shape inference as named strategies (graphmem/frontend/shape_strategies.py):
each that ran is recorded with what it sized, and a new one is one function in the list."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.core.dtypes import ENUM_BY_NAME
from graphmem.errors import GraphmemError
from graphmem.frontend import shape_strategies
from graphmem.frontend.reader import from_model
from graphmem.frontend.shape_strategies import STRATEGIES, Strategy, add_types

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def test_a_model_onnx_sizes_is_sized_by_onnx_alone():
    g = from_model(_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 3])],
                          [_vi("y", [2, 3])]))
    assert [s.strategy for s in g.sizing] == ["onnx"]
    assert g.sizing[0].count == len(g.tensors) and g.sizing[0].tensors == ()
    assert g.load_notes == ()


def test_the_dropout_mask_of_opset_9_is_sized_by_its_strategy():
    g = from_model(_model([helper.make_node("Dropout", ["x"], ["y", "mask"])],
                          [_vi("x", [2, 3])], [_vi("y", [2, 3])], opset=9))
    assert [(s.strategy, s.tensors) for s in g.sizing] == [
        ("onnx", ()), ("dropout-mask", ("mask",))]
    assert g.tensors["mask"].shape == (2, 3) and g.tensors["mask"].dtype == "float32"


def _range_model():
    """A Range (it turns onnx's data propagation off: UNBOUNDED_DATA_PROP) beside a
    Reshape whose target is a Mul of constants, known only from its computed value."""
    inits = [numpy_helper.from_array(np.array([3, 4], np.int64), "c"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(4, np.int64), "four")]
    nodes = [helper.make_node("Mul", ["c", "one"], ["target"]),
             helper.make_node("Reshape", ["x", "target"], ["y"]),
             helper.make_node("Range", ["zero", "four", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Add", ["y", "rf"], ["z"])]
    return _model(nodes, [_vi("x", [2, 6])], [_vi("z", ["p", "q"])], inits)


def test_shape_arithmetic_without_data_propagation_is_sized_by_the_shape_walk():
    """The walk computes the Mul as it goes and sizes the Reshape, then the Range and
    what reads it, in one pass: no constant-value round runs."""
    g = from_model(_range_model())
    ran = {s.strategy: s.tensors for s in g.sizing}
    assert ran["shape-walk"] == ("y", "z")
    assert "constant-values" not in ran and "walk-and-values" not in ran
    assert g.tensors["z"].shape == (3, 4)


def test_shape_arithmetic_without_data_propagation_is_sized_by_constant_values(monkeypatch):
    """Without the walk, the constant values size it: the inference with the computed
    values types z = Add(y, Cast(Range)), a graph output declared [p, q], and that type
    is written over the declared one (it was left to ONNX Runtime's symbolic inference,
    which imports onnxruntime and sympy)."""
    monkeypatch.setattr(shape_strategies, "STRATEGIES",
                        tuple(s for s in STRATEGIES if s.name != "shape-walk"))
    g = from_model(_range_model())
    ran = {s.strategy: s.tensors for s in g.sizing}
    assert ran["constant-values"] == ("y", "z")
    assert "onnxruntime-symbolic" not in ran
    assert g.tensors["z"].shape == (3, 4)


def _mystery_model():
    return _model([helper.make_node("Mystery", ["x"], ["y"], domain="test.domain"),
                   helper.make_node("Relu", ["y"], ["z"])],
                  [_vi("x", [2, 5])], [_vi("z", ["p", "q"])], domains=("test.domain",))


def same_as_input(state) -> None:
    """A rule for test.domain's Mystery: its output is typed as its input."""
    found = {}
    for name, node in state.missing:
        t = state.tensors.get(node.inputs[0]) if node.op_type == "Mystery" else None
        if t is not None:
            found[name] = (ENUM_BY_NAME[t.dtype], t.shape)
    add_types(state, found)


def test_a_new_strategy_is_one_function_in_the_list(monkeypatch):
    with pytest.raises(GraphmemError, match="'Mystery' is from domain 'test.domain'"):
        from_model(_mystery_model())
    mine = Strategy("mystery", same_as_input, summary="test.domain's Mystery")
    monkeypatch.setattr(shape_strategies, "STRATEGIES", (STRATEGIES[0], mine) + STRATEGIES[1:])
    g = from_model(_mystery_model())
    assert g.tensors["z"].shape == (2, 5)
    # the rule sizes y, and onnx's inference, run again, what follows it
    assert [(s.strategy, s.tensors) for s in g.sizing] == [("onnx", ()),
                                                          ("mystery", ("y", "z"))]


def test_every_strategy_has_a_name_and_a_summary():
    assert STRATEGIES[0].name == "onnx" and STRATEGIES[0].always
    for s in STRATEGIES:
        assert s.name and s.summary and callable(s.run)


def test_one_name_per_function_and_one_function_per_name():
    """A name in Graph.sizing says which function sized the tensors: a strategy that
    runs twice (dropout-mask) runs under one name, and no function under two."""
    names: dict[str, set] = {}
    runs: dict[object, set] = {}
    for s in STRATEGIES:
        names.setdefault(s.name, set()).add(s.run)
        runs.setdefault(s.run, set()).add(s.name)
    assert all(len(v) == 1 for v in names.values()), names
    assert all(len(v) == 1 for v in runs.values()), runs


def test_an_undecodable_attribute_is_a_note_not_silence(capsys):
    """An attribute neither graphmem's decoder nor onnx.helper can read becomes None,
    with a note that names it."""
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    bad = model.graph.node[0].attribute.add()
    bad.name, bad.type, bad.ref_attr_name = "junk", onnx.AttributeProto.INT, "outer"
    # a reference attribute outside a function: onnx.helper refuses its value
    g = from_model(model, check=False)
    assert g.nodes[0].attrs == {"junk": None}
    assert len(g.load_notes) == 1 and "'junk'" in g.load_notes[0]
    assert "'junk'" in capsys.readouterr().err
