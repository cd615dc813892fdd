"""Constant folding: which nodes fold, their values on ONNX Runtime, and a node no
evaluator can run costing only what is computed from it, named in the reason."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontend.folding import evaluate_constants


def constants_model(nodes, inits):
    graph = helper.make_graph(nodes, "c", [], [helper.make_tensor_value_info(
        nodes[-1].output[0], TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_one_failing_node_loses_only_what_follows_it():
    a = numpy_helper.from_array(np.arange(3, dtype=np.float32), "a")
    shape = numpy_helper.from_array(np.array([2], dtype=np.int64), "shape")
    nodes = [helper.make_node("Add", ["a", "a"], ["twice"], name="ok"),
             # three elements cannot take shape [2]: no evaluator runs this node
             helper.make_node("Reshape", ["a", "shape"], ["bad"], name="broken"),
             helper.make_node("Neg", ["bad"], ["after_bad"], name="downstream"),
             helper.make_node("Neg", ["twice"], ["fine"], name="independent")]
    model = constants_model(nodes, [a, shape])
    failures: dict[str, str] = {}
    values = evaluate_constants(model, model.graph.node, {}, failures=failures)
    np.testing.assert_array_equal(values["fine"], -2 * np.arange(3, dtype=np.float32))
    assert "bad" not in values and "after_bad" not in values
    assert "Reshape node 'broken' failed" in failures["bad"]
    assert failures["after_bad"] == failures["bad"]  # the root cause, not the Neg
    assert set(failures) == {"bad", "after_bad"}


def test_values_come_from_onnx_runtime():
    """GatherElements with indices broadcast by Expand: the exporters' token-type ids
    (onnx's reference evaluator got this wrong on a BERT export, issue 21)."""
    buffer = numpy_helper.from_array(np.zeros((1, 16), dtype=np.int64), "buffer")
    idx = numpy_helper.from_array(np.zeros((1, 8), dtype=np.int64), "idx")
    shape = numpy_helper.from_array(np.array([2, 8], dtype=np.int64), "shape")
    nodes = [helper.make_node("GatherElements", ["buffer", "idx"], ["picked"], axis=1),
             helper.make_node("Expand", ["picked", "shape"], ["types"])]
    model = constants_model(nodes, [buffer, idx, shape])
    values = evaluate_constants(model, model.graph.node, {})
    assert values["types"].shape == (2, 8) and values["types"].dtype == np.int64
