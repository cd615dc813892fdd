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
        ("DequantizeLinear", "com.microsoft", ("c_q", "s"), ("c",)),  # not the standard op
    ]
    assert dequantized_sources(folded) == {
        "w": ("w_q", "w_scale", "w_zero"), "w_t": ("w_q", "w_scale", "w_zero"),
        "w_sum": ("w_q", "w_scale", "w_zero", "zeros"), "b": ("b_q", "w_scale")}


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
