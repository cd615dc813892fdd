"""Weights as the file stores them: a folded dequantization counts as the quantized
tensors it reads, and the float bytes it makes are reported apart."""
from __future__ import annotations

from graphmem.analysis import breakdown
from graphmem.core.ir import Graph, Node, Tensor
from graphmem.frontend.stored_weights import dequantized_sources


def test_a_dequantized_constant_is_made_of_its_stored_inputs():
    folded = [
        ("DequantizeLinear", "", ("w_q", "w_scale", "w_zero"), ("w",)),
        ("Transpose", "", ("w",), ("w_t",)),               # computed from a dequantized one
        ("ConstantOfShape", "", ("shape",), ("zeros",)),    # no dequantization: not mapped
        ("Add", "", ("w_t", "zeros"), ("w_sum",)),
        ("DequantizeLinear", "ai.onnx", ("b_q", "w_scale"), ("b",)),
        ("DequantizeLinear", "com.microsoft", ("c_q", "s"), ("c",)),  # ORT's own: the same
        ("Dequantize", "com.example", ("d_q", "s"), ("d",)),  # some other op: not one
    ]
    assert dequantized_sources(folded) == {
        "w": ("w_q", "w_scale", "w_zero"), "w_t": ("w_q", "w_scale", "w_zero"),
        "w_sum": ("w_q", "w_scale", "w_zero", "zeros"), "b": ("b_q", "w_scale"),
        "c": ("c_q", "s")}


def qdq_graph() -> Graph:
    f32 = lambda n, s: Tensor(n, "float32", s, 32)  # noqa: E731
    tensors = {t.name: t for t in [
        Tensor("w_q", "int8", (64, 32), 8), f32("w_scale", ()), Tensor("w_zero", "int8", (), 8),
        f32("w", (64, 32)), f32("x", (4, 64)), f32("y", (4, 32)), f32("bias", (32,))]}
    node = Node(0, "mm", "MatMul", "", ("x", "w"), ("y",))
    add = Node(1, "add", "Add", "", ("y", "bias"), ("z",))
    tensors["z"] = f32("z", (4, 32))
    return Graph(name="qdq", nodes=(node, add), tensors=tensors, inputs=("x",),
                 outputs=("z",), weights=frozenset({"w_q", "w_scale", "w_zero", "bias"}),
                 constants=("w",), folded_nodes=(9,),
                 stored_as={"w": ("w_q", "w_scale", "w_zero")})


def test_weights_count_as_stored_and_the_dequantized_bytes_apart():
    g = qdq_graph()
    stored = 64 * 32 + 4 + 1 + 32 * 4  # int8 weight, scale, zero point; the float bias
    assert breakdown.weight_bytes(g) == g.weight_bytes() == stored
    assert breakdown.dequantized_bytes(g) == g.dequantized_bytes() == 64 * 32 * 4
    assert breakdown.weight_dtypes(g) == {"int8": 64 * 32 + 1, "float32": 4 + 32 * 4}
    assert breakdown.compute_class(g) == "int8"
    assert breakdown.param_count(g) == 64 * 32 + 32  # parameters, however stored


def test_without_quantized_weights_nothing_changes():
    g = qdq_graph()
    plain = Graph(name="p", nodes=g.nodes, tensors=g.tensors, inputs=g.inputs,
                  outputs=g.outputs, weights=frozenset({"w", "bias"}), constants=())
    assert breakdown.weight_bytes(plain) == plain.weight_bytes() == (64 * 32 + 32) * 4
    assert breakdown.dequantized_bytes(plain) == plain.dequantized_bytes() == 0


def test_ort_own_dequantize_linear_of_a_weight_folds_as_the_standard_one(tmp_path):
    """quantize_static writes its QDQ pairs in ORT's domain for 16-bit activations (or
    with UseQDQContribOps): a weight's com.microsoft DequantizeLinear folds as the
    standard op's does, its weight counted as stored, and the plan verifies. Before, each
    dequantized weight was an arena tensor, live from the start of the file's order (a
    BERT-base encoder: a 528 MB file-order peak, 1.7 s of reordering to bring it down)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import graphmem
    from graphmem.verify.verifier import verify
    ms = "com.microsoft"
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (16, 8)).astype(np.int8), "w_q"),
             numpy_helper.from_array(np.array(0.02, np.float32), "w_s"),
             numpy_helper.from_array(np.array(0.01, np.float32), "a_s"),
             numpy_helper.from_array(np.array(30000, np.uint16), "a_z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "a_s", "a_z"], ["xq"], domain=ms),
             helper.make_node("DequantizeLinear", ["xq", "a_s", "a_z"], ["xd"], domain=ms),
             helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], domain=ms),
             helper.make_node("MatMul", ["xd", "w"], ["y"])]
    graph = helper.make_graph(nodes, "qdq16", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 16])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [4, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ms, 1)], ir_version=8)
    path = tmp_path / "qdq16.onnx"
    path.write_bytes(model.SerializeToString())
    g = graphmem.load(path)
    assert "w" in g.constants and g.stored_as["w"] == ("w_q", "w_s")
    assert [n.op_type for n in g.nodes] == ["QuantizeLinear", "DequantizeLinear", "MatMul"]
    assert g.weight_bytes() == 16 * 8 + 4 + 4 + 2  # int8 weight, two scales, a uint16 zero
    plan = graphmem.plan_graph(g).plan
    assert "w" not in plan.tensors
    assert verify(plan, g).passed
