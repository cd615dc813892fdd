"""Tiny hand-built graphs whose size formulas are known by hand (the range-plan tests)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _weight(name: str, shape, seed: int) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)


def _model(nodes, inputs, outputs, weights) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, weights)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def matmul_chain() -> onnx.ModelProto:
    """x[batch, seq, 16] -> MatMul 16x32 -> Relu -> MatMul 32x16 -> Add x -> y."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["h2"]),
             helper.make_node("Add", ["h2", "x"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", "seq", 16])],
                  [helper.make_tensor_value_info("y", F, ["batch", "seq", 16])],
                  [_weight("w1", (16, 32), 1), _weight("w2", (32, 16), 2)])


# bytes of each tensor of matmul_chain, by hand
MATMUL_CHAIN_BYTES = {"x": "64*batch*seq", "h1": "128*batch*seq", "r1": "128*batch*seq",
                      "h2": "64*batch*seq", "y": "64*batch*seq"}


def attention() -> onnx.ModelProto:
    """One head of self-attention over x[seq, 16]: scores of seq x seq."""
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 0]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
             helper.make_node("MatMul", ["probs", "v"], ["ctx"]),
             helper.make_node("MatMul", ["ctx", "wo"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["seq", 16])],
                  [helper.make_tensor_value_info("y", F, ["seq", 16])],
                  [_weight("wq", (16, 8), 1), _weight("wk", (16, 8), 2),
                   _weight("wv", (16, 8), 3), _weight("wo", (8, 16), 4)])


ATTENTION_BYTES = {"x": "64*seq", "q": "32*seq", "kt": "32*seq", "scores": "4*seq**2",
                   "probs": "4*seq**2", "ctx": "32*seq", "y": "64*seq"}


def decode_step() -> onnx.ModelProto:
    """One decode step: a new key appended to the cache of past_seq keys, the query's
    scores over past_seq + 1 positions."""
    nodes = [helper.make_node("MatMul", ["x", "wk"], ["k_new"]),
             helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("Concat", ["past_key", "k_new"], ["present_key"], axis=1),
             helper.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
             helper.make_node("MatMul", ["probs", "present_key"], ["ctx"]),
             helper.make_node("MatMul", ["ctx", "wo"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", 1, 16]),
                          helper.make_tensor_value_info("past_key", F,
                                                        ["batch", "past_seq", 8])],
                  [helper.make_tensor_value_info("y", F, ["batch", 1, 16]),
                   helper.make_tensor_value_info("present_key", F,
                                                 ["batch", "past_seq + 1", 8])],
                  [_weight("wk", (16, 8), 1), _weight("wq", (16, 8), 2),
                   _weight("wo", (8, 16), 3)])


DECODE_STEP_BYTES = {"past_key": "32*batch*past_seq", "present_key": "32*batch*past_seq + 32*batch",
                     "kt": "32*batch*past_seq + 32*batch", "scores": "4*batch*past_seq + 4*batch",
                     "y": "64*batch"}


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def strided_convs() -> onnx.ModelProto:
    """Two strided 1-d convolutions over x[batch, 8, seq] (as a speech encoder's front
    end): lengths floor((seq + 1)/2), then floor((that + 1)/2); a MatMul after."""
    nodes = [helper.make_node("Conv", ["x", "c1"], ["h1"], strides=[2], pads=[1, 1]),
             helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Conv", ["r1", "c2"], ["h2"], strides=[2], pads=[1, 1]),
             helper.make_node("Transpose", ["h2"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "w"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", 8, "seq"])],
                  [helper.make_tensor_value_info("y", F, ["batch", "frames", 32])],
                  [_weight("c1", (16, 8, 3), 1), _weight("c2", (16, 16, 3), 2),
                   _weight("w", (16, 32), 3)])
