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


def _windowed_model():
    """Swin's window padding as PyTorch's TorchScript exporter writes it: the pads come
    from the input's Shape through Concat -> Reshape -> Transpose -> Reshape -> Cast
    (which onnx's data propagation does not follow); a Reshape, a ConstantOfShape (the
    attention mask's zeros) and a Mul read dims of the padded tensor, one of them as
    data (so it runs, not folded)."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    inits = [i64("one", [1]), i64("zero3", [0, 0, 0]), i64("four", 4), i64("two", 2),
             i64("pairs", [-1, 2]), i64("flat", [-1]), i64("c2", [2]), i64("c4", [4]),
             i64("ax0", [0])]
    N = helper.make_node
    nodes = [
        N("Shape", ["x"], ["s"]), N("Gather", ["s", "one"], ["w"], axis=0),  # w = 5, [1]
        N("Mod", ["w", "four"], ["wm"]), N("Sub", ["four", "wm"], ["r0"]),
        N("Mod", ["r0", "four"], ["r"]),  # pad to a multiple of 4: 3
        N("Concat", ["zero3", "zero3"], ["z6"], axis=0),
        N("Concat", ["ax0", "ax0", "ax0", "r", "ax0", "ax0"], ["p6"], axis=0),
        N("Reshape", ["p6", "pairs"], ["p32"]), N("Transpose", ["p32"], ["p23"], perm=[1, 0]),
        N("Reshape", ["p23", "flat"], ["pads_i"]), N("Cast", ["pads_i"], ["pads"], to=7),
        N("Pad", ["x", "pads"], ["y"]),  # [n, 8, 4]
        N("Shape", ["y"], ["s2"]), N("Gather", ["s2", "one"], ["h"], axis=0),  # 8
        N("Gather", ["s2", "ax0"], ["n"], axis=0), N("Div", ["h", "two"], ["h2"]),
        N("Concat", ["n", "h2", "c2", "c4"], ["shape"], axis=0),
        N("Reshape", ["y", "shape"], ["z"]),  # [n, 4, 2, 4]
        N("Concat", ["h", "h"], ["hh"], axis=0), N("ConstantOfShape", ["hh"], ["mask"]),
        N("Cast", ["h"], ["hf"], to=1), N("Mul", ["z", "hf"], ["zs"]),
        N("ReduceSum", ["mask"], ["ms"], keepdims=0), N("Add", ["zs", "ms"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "windows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 4, 2, 4])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_shapes_computed_from_shapes_that_an_earlier_round_sized(tmp_path):
    """Inference with computed values runs rounds until nothing more is sized, evaluates
    the dim data that runs (Cast(h) read by a Mul) for the Reshape that also reads it,
    and a ConstantOfShape of computed dims takes its value's shape over the [?, ?] an
    earlier round inferred (tv-swin-ts of the corpus failed on each of the three)."""
    import graphmem
    from graphmem.verify.verifier import verify
    path = tmp_path / "windows.onnx"
    onnx.save(_windowed_model(), str(path))
    g = graphmem.load(path, dims={"n": 2})
    assert g.tensors["y"].shape == (2, 8, 4)
    assert g.tensors["z"].shape == (2, 4, 2, 4) and g.tensors["zs"].shape == (2, 4, 2, 4)
    assert g.tensors["out"].shape == (2, 4, 2, 4)
    assert g.tensors["mask"].shape == (8, 8)
    plan = graphmem.plan_graph(g).plan
    graphmem.validate(plan, g)
    assert verify(plan, g).passed


def test_a_value_replaces_the_entry_inferred_before_it_was_known():
    """onnx-ad's MaxPool adjoint scatters into ConstantOfShape([numel, 1]); a first
    inference that could not compute numel leaves z (and the ScatterND's y) as [?, 1].
    When z's value is known it becomes an initializer for the next inference, and the
    stale entry must not stand for it, or y stays [?, 1] (densenet121's dynamo export
    failed to train on it: 'cannot infer the shape of tensor a_maxpool')."""
    from graphmem.core.ir import Tensor
    from graphmem.frontend.constant_nodes import Folding
    from graphmem.frontend.constant_values import infer_with_constant_values
    i64 = lambda n, v: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    N = helper.make_node
    nodes = [N("ConstantOfShape", ["shape"], ["z"]), N("ScatterND", ["z", "idx", "x"], ["y"]),
             N("Relu", ["y"], ["out"])]
    stale = [helper.make_tensor_value_info(t, TensorProto.FLOAT, ["a", 1]) for t in ("z", "y")]
    g = helper.make_graph(nodes, "fill", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [2, 1])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["a", 1])],
                          [i64("shape", [16, 1]), i64("idx", [[0], [3]])], value_info=stale)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out = onnx.ModelProto.FromString(infer_with_constant_values(
        model.SerializeToString(), [0, 1, 2], {"x": Tensor("x", "float32", (2, 1), 32)},
        Folding(frozenset({0}), ("z",)), None))
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in out.graph.value_info}
    assert dims["z"] == [16, 1] and dims["y"] == [16, 1]


def test_constant_values_infer_the_same_whatever_the_files_node_order():
    """The computed nodes are dropped from the model inference reads: in place when the
    file lists its nodes in the order given, else each kept node written in order (onnx's
    inference reads nodes in the file's order). Both give the same types."""
    from graphmem.core.ir import Tensor
    from graphmem.frontend.constant_nodes import Folding
    from graphmem.frontend.constant_values import infer_with_constant_values
    i64 = lambda n, v: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    N = helper.make_node
    nodes = [N("Shape", ["x"], ["s"]), N("ConstantOfShape", ["s"], ["z"]),
             N("Add", ["z", "x"], ["y"]), N("Relu", ["y"], ["out"])]

    def types(file_order):
        g = helper.make_graph([nodes[i] for i in file_order], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [i64("unused", [1])])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        at = {n: k for k, n in enumerate(file_order)}
        out = onnx.ModelProto.FromString(infer_with_constant_values(
            model.SerializeToString(), [at[i] for i in range(4)],
            {"x": Tensor("x", "float32", (3, 2), 32)},
            Folding(frozenset({at[0], at[1]}), ("s", "z")), None))
        assert len(out.graph.node) == 4  # the nodes are carried back untouched
        return {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                for v in (*out.graph.value_info, *out.graph.output)}

    in_order = types([0, 1, 2, 3])
    assert in_order["y"] == [3, 2] and in_order["out"] == [3, 2] and in_order["z"] == [3, 2]
    assert types([3, 2, 1, 0]) == in_order
