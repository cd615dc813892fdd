"""The loader's shape arithmetic in numpy (graphmem/frontend/shape_arithmetic.py) gives
onnx's reference evaluator's values, dtypes and shapes, op by op; what it does not know
it leaves to the reference evaluator."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from graphmem.frontend import folding
from graphmem.frontend.shape_arithmetic import Unsupported, evaluate

I64 = np.int64


def _reference(node, inputs: dict, opset: int = 17):
    outs = [o for o in node.output]
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info(
        o, TensorProto.UNDEFINED, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in inputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return dict(zip(outs, ReferenceEvaluator(model).run(outs, {})))


a = np.array([[3, -7, 5], [8, -2, 9]], I64)
b = np.array([2, 3, -4], I64)
f = np.array([[0.5, 2.0, 3.5], [1.5, 8.0, 0.25]], np.float32)
g = np.array([1.5, 0.5, 4.0], np.float32)
shape = np.array([1, 2, 3], I64)
CASES = [
    ("Add", {"a": a, "b": b}, {}), ("Sub", {"a": a, "b": b}, {}),
    ("Mul", {"a": f, "b": g}, {}), ("Div", {"a": a, "b": b}, {}), ("Div", {"a": f, "b": g}, {}),
    ("Equal", {"a": a, "b": b}, {}), ("Greater", {"a": f, "b": g}, {}),
    ("GreaterOrEqual", {"a": a, "b": b}, {}), ("Less", {"a": a, "b": b}, {}),
    ("LessOrEqual", {"a": f, "b": g}, {}),
    ("And", {"a": a > 0, "b": b > 0}, {}), ("Or", {"a": a > 0, "b": b > 0}, {}),
    ("Neg", {"a": a}, {}), ("Abs", {"a": a}, {}), ("Log", {"a": f}, {}), ("Exp", {"a": f}, {}),
    ("Sqrt", {"a": f}, {}), ("Cos", {"a": f}, {}), ("Sin", {"a": f}, {}), ("Floor", {"a": f}, {}),
    ("Ceil", {"a": f}, {}), ("Not", {"a": a > 0}, {}), ("Identity", {"a": a}, {}),
    ("Max", {"a": a, "b": b}, {}), ("Min", {"a": f, "b": g}, {}),
    ("Mod", {"a": a, "b": b}, {}), ("Mod", {"a": f, "b": g}, {"fmod": 1}),
    ("Cast", {"a": f}, {"to": TensorProto.INT64}), ("Cast", {"a": a}, {"to": TensorProto.FLOAT}),
    ("Cast", {"a": a}, {"to": TensorProto.BOOL}),
    ("Shape", {"a": f}, {}), ("Shape", {"a": f}, {"start": -1}), ("Size", {"a": f}, {}),
    ("Gather", {"a": shape, "b": np.array(-1, I64)}, {}),
    ("Gather", {"a": a, "b": np.array([1, 0], I64)}, {"axis": 1}),
    ("Unsqueeze", {"a": b, "b": np.array([0, -1], I64)}, {}),
    ("Squeeze", {"a": shape.reshape(1, 3, 1), "b": np.array([0], I64)}, {}),
    ("Squeeze", {"a": shape.reshape(1, 3, 1)}, {}),
    ("Concat", {"a": b, "b": shape}, {"axis": 0}), ("Concat", {"a": a, "b": a}, {"axis": -1}),
    ("Range", {"a": np.array(0, I64), "b": np.array(10, I64), "c": np.array(3, I64)}, {}),
    ("Range", {"a": np.array(1.0, np.float32), "b": np.array(2.0, np.float32),
               "c": np.array(0.25, np.float32)}, {}),
    ("ConstantOfShape", {"a": shape}, {}),
    ("ConstantOfShape", {"a": shape}, {"value": numpy_helper.from_array(np.array([7], I64))}),
    ("Reshape", {"a": a, "b": np.array([0, -1], I64)}, {}),
    ("Reshape", {"a": a, "b": np.array([3, 0, 2], I64)[[0, 2]]}, {"allowzero": 1}),
    ("Expand", {"a": b, "b": np.array([2, 1], I64)}, {}),
    ("Where", {"a": a > 0, "b": a, "c": -a}, {}),
    ("Slice", {"a": a, "b": np.array([0, 1], I64), "c": np.array([1, 9223372036854775807], I64)},
     {}),
    ("Slice", {"a": a, "b": np.array([-1], I64), "c": np.array([-4], I64),
               "d": np.array([1], I64), "e": np.array([-1], I64)}, {}),
    ("Slice", {"a": shape, "b": np.array([1], I64), "c": np.array([3], I64),
               "d": np.array([0], I64)}, {}),
    # a quantized embedding row gathered with constant indices, dequantized
    ("DequantizeLinear", {"a": np.array([[-128, 3, 127]], np.int8),
                          "b": np.array(0.05, np.float32), "c": np.array(-3, np.int8)}, {}),
    ("DequantizeLinear", {"a": np.array([[0, 17, 255]], np.uint8),
                          "b": np.array([0.25, 2.0, 0.5], np.float32),
                          "c": np.array([128, 0, 3], np.uint8)}, {"axis": 1}),
    ("DequantizeLinear", {"a": np.array([7, -9], np.int32), "b": np.array([0.5], np.float32)},
     {"axis": 0}),
    ("DequantizeLinear", {"a": np.array([[300, -2]], np.int16),
                          "b": np.array(0.1, np.float16)}, {}),
]


@pytest.mark.parametrize("op,inputs,attrs", CASES, ids=[c[0] for c in CASES])
def test_each_op_gives_the_reference_evaluators_value(op, inputs, attrs):
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    ours = evaluate([node], inputs)["y"]
    # the reference evaluator has DequantizeLinear from opset 19 only
    theirs = np.asarray(_reference(node, inputs, 21 if op == "DequantizeLinear" else 17)["y"])
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert np.array_equal(ours, theirs, equal_nan=ours.dtype.kind == "f")


def test_constants_of_every_attribute_kind():
    nodes = [helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(b)),
             helper.make_node("Constant", [], ["i"], value_int=4),
             helper.make_node("Constant", [], ["fs"], value_floats=[1.0, 2.5])]
    ours = evaluate(nodes, {})
    for node in nodes:
        theirs = np.asarray(_reference(node, {})[node.output[0]])
        got = ours[node.output[0]]
        assert got.dtype == theirs.dtype and np.array_equal(got, theirs)


def test_a_chain_reads_what_the_nodes_before_it_computed():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0)]
    values = {"x": np.zeros((2, 3, 4), np.float32), "i": np.array(1, I64),
              "zero": np.array([0], I64), "minus1": np.array([-1], I64)}
    assert evaluate(nodes, values)["target"].tolist() == [3, -1]


@pytest.mark.parametrize("node,values", [
    (helper.make_node("Tile", ["a", "b"], ["y"]), {"a": b, "b": np.array([2], I64)}),
    (helper.make_node("Add", ["a", "b"], ["y"]), {"a": a, "b": g}),  # dtypes differ
    (helper.make_node("Gather", ["a", "b"], ["y"]), {"a": b, "b": np.array([], I64)}),
    (helper.make_node("Add", ["a", "b"], ["y"], domain="com.microsoft"), {"a": a, "b": b}),
    (helper.make_node("Add", ["a", "missing"], ["y"]), {"a": a}),
    (helper.make_node("DequantizeLinear", ["a", "b"], ["y"], block_size=2),  # blocks
     {"a": np.array([[1, 2]], np.int8), "b": np.array([[0.5]], np.float32)}),
])
def test_what_it_does_not_know_is_left_to_the_reference_evaluator(node, values):
    with pytest.raises(Unsupported):
        evaluate([node], values)


def test_the_loader_tries_it_before_building_a_reference_evaluator(monkeypatch):
    built = []
    monkeypatch.setattr(folding, "_on_reference",
                        lambda sub, wanted: built.append(wanted) or [None] * len(wanted))
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    out = folding._run_nodes(helper.make_model(helper.make_graph([], "g", [], [])), nodes,
                             {"a": a, "b": b}, (folding._on_reference, folding._on_runtime))
    assert not built and out["y"].tolist() == (a + b).tolist()
    tile = [helper.make_node("Tile", ["a", "r"], ["y"])]
    folding._run_nodes(helper.make_model(helper.make_graph([], "g", [], [])), tile,
                       {"a": b, "r": np.array([2], I64)},
                       (folding._on_reference, folding._on_runtime))
    assert built == [["y"]]
