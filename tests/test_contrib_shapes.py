"""The shape rules of graphmem.frontend.contrib_rules, op by op: each op alone in a
one-node model, run in ONNX Runtime (CPU, no graph optimization), and the output
shapes and element types it produces compared with what graphmem infers (an op or form
no CPU kernel runs: with what ONNX Runtime's symbolic shape inference gives)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontend.contrib_rules import MS, NCHWC, RULES, nchwc_block_size
from graphmem.frontend.ort_symbolic import infer
from graphmem.frontend.shape_walk import propagate

F, H, U8, I8, I32, I64 = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.UINT8,
                          TensorProto.INT8, TensorProto.INT32, TensorProto.INT64)
NP = {TensorProto.BOOL: np.bool_, F: np.float32, H: np.float16, U8: np.uint8, I8: np.int8,
      I32: np.int32, I64: np.int64, TensorProto.INT16: np.int16, TensorProto.UINT16: np.uint16}


def one_node(op, domain, inputs, attrs=None, outputs=1, opset=17):
    """A model of one ``op`` node. ``inputs`` by position: (name, elem, shape) for a
    graph input, a TensorProto for an initializer, None for an omitted optional input."""
    names = ["" if i is None else i.name if isinstance(i, TensorProto) else i[0]
             for i in inputs]
    outs = [f"y{k}" for k in range(outputs)] if isinstance(outputs, int) else list(outputs)
    node = helper.make_node(op, names, outs, domain=domain, **(attrs or {}))
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(*i) for i in inputs
                     if i is not None and not isinstance(i, TensorProto)],
        [helper.make_empty_tensor_value_info(o) for o in outs if o],
        [i for i in inputs if isinstance(i, TensorProto)])
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def ort_outputs(model) -> dict:
    """{output name: (elem_type, shape)} of one run in ONNX Runtime on random inputs."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in model.graph.input:
        t = i.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = NP[t.elem_type]
        if np.issubdtype(dtype, np.integer):
            feeds[i.name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    names = [o.name for o in model.graph.output]
    got = sess.run(names, feeds)
    from onnx.helper import np_dtype_to_tensor_dtype
    return {n: (np_dtype_to_tensor_dtype(v.dtype), tuple(v.shape)) for n, v in zip(names, got)}


def inferred(model) -> dict:
    return static_outputs(infer(model), model)


def static_outputs(typed, model) -> dict:
    """{output name of ``model``: (elem_type, shape)} as ``typed`` (``model`` with value
    infos added) gives it: None where a dim or the type is unknown."""
    found = {}
    for vi in list(typed.graph.value_info) + list(typed.graph.output):
        t = vi.type.tensor_type
        if t.elem_type and t.HasField("shape") and all(d.HasField("dim_value")
                                                       for d in t.shape.dim):
            found[vi.name] = (t.elem_type, tuple(d.dim_value for d in t.shape.dim))
    return {o.name: found.get(o.name) for o in model.graph.output}


def c(name, value, dtype=np.float32):
    """An initializer."""
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def scale(name, value=0.05):
    return c(name, value)


def zero(name, dtype=np.uint8, value=3):
    return c(name, value, dtype)


def qparams(prefix, dtype=np.uint8):
    """A scale and a zero point."""
    return [scale(prefix + "s"), zero(prefix + "z", dtype)]


def _case(op, domain, inputs, attrs=None, outputs=1, opset=17):
    return dict(op=op, domain=domain, inputs=inputs, attrs=attrs, outputs=outputs,
                opset=opset)


W3 = c("w", np.ones((4, 3, 3, 3)))
B4 = c("b", np.ones(4))


X248, W824, B24 = ("x", F, [2, 4, 8]), c("w", np.ones((8, 24))), c("b", np.ones(24))


def nbits(k, n, bits=4, block=32, dtype=np.float32):
    """MatMulNBits' B ([N, blocks, block * bits / 8] bytes) and scales ([N * blocks])."""
    blocks = -(-k // block)
    return [c("B", np.full((n, blocks, block * bits // 8), 0x88), np.uint8),
            c("scales", np.full(n * blocks, 0.01), dtype)]


def bnb4(k, n, block=32):
    """MatMulBnb4's B ([(N * K + 1) / 2] bytes) and absmax ([N * K / block])."""
    return [c("B", np.full((n * k + 1) // 2, 0x77), np.uint8),
            c("absmax", np.ones(-(-n * k // block)))]

# (case id -> one_node arguments). Every op of the rule table has a case here, or where
# no CPU kernel runs it, in SYMBOLIC_CASES below.
CASES = {
    # --- CPU graph optimizer, EXTENDED
    "FusedConv": _case("FusedConv", MS, [("x", F, [1, 3, 10, 9]), W3, B4],
                       dict(activation="Relu", pads=[1, 0, 1, 0], strides=[2, 1])),
    "FusedConv-sum": _case("FusedConv", MS, [("x", F, [1, 3, 8, 8]), W3, B4,
                                             ("z", F, [1, 4, 8, 8])],
                           dict(activation="Relu", auto_pad="SAME_UPPER")),
    "FusedGemm": _case("FusedGemm", MS, [("a", F, [5, 3]), c("b", np.ones((4, 5))),
                                         c("c", np.ones(4))],
                       dict(transA=1, transB=1, activation="LeakyRelu",
                            activation_alpha=0.1)),
    "FusedMatMul": _case("FusedMatMul", MS, [("a", F, [2, 3, 4, 5]), ("b", F, [3, 6, 5])],
                         dict(transB=1, alpha=0.5)),
    "FusedMatMul-transBatchA": _case("FusedMatMul", MS, [("a", F, [4, 2, 5]),
                                                         ("b", F, [2, 5, 6])],
                                     dict(transBatchA=1)),
    "FusedMatMul-transBatchB": _case("FusedMatMul", MS, [("a", F, [2, 3, 4]),
                                                         ("b", F, [6, 2, 4])],
                                     dict(transBatchB=1, transB=1)),
    "FusedMatMul-vector": _case("FusedMatMul", MS, [("a", F, [5]), ("b", F, [2, 5, 3])]),
    "TransposeMatMul": _case("TransposeMatMul", MS, [("a", F, [5, 3]), ("b", F, [5, 4])],
                             dict(transA=1)),
    # --- ALL: NCHWc (16 channels fill a block of every MLAS build)
    "nchwc-Conv": _case("Conv", NCHWC, [("x", F, [1, 16, 9, 9]),
                                        c("w", np.ones((32, 16, 3, 3))), c("b", np.ones(32))],
                        dict(strides=[2, 2], pads=[1, 1, 1, 1], activation="Relu")),
    "nchwc-Conv-nchw-input": _case("Conv", NCHWC, [("x", F, [1, 3, 11, 11]),
                                                   c("w", np.ones((16, 3, 7, 7)))],
                                   dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    "nchwc-Conv-depthwise": _case("Conv", NCHWC, [("x", F, [1, 32, 8, 8]),
                                                  c("w", np.ones((32, 1, 3, 3)))],
                                  dict(group=32, pads=[1, 1, 1, 1])),
    "nchwc-Conv-sum": _case("Conv", NCHWC, [("x", F, [1, 16, 6, 6]),
                                            c("w", np.ones((16, 16, 1, 1))), None,
                                            ("s", F, [1, 16, 6, 6])]),
    "nchwc-MaxPool": _case("MaxPool", NCHWC, [("x", F, [1, 16, 10, 10])],
                           dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "nchwc-AveragePool": _case("AveragePool", NCHWC, [("x", F, [1, 32, 7, 7])],
                               dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "nchwc-GlobalAveragePool": _case("GlobalAveragePool", NCHWC, [("x", F, [2, 16, 5, 5])]),
    "nchwc-GlobalMaxPool": _case("GlobalMaxPool", NCHWC, [("x", F, [2, 16, 5, 5])]),
    "nchwc-Upsample": _case("Upsample", NCHWC, [("x", F, [1, 16, 3, 4])],
                            dict(scales=[1, 1, 2, 2])),
    "ReorderInput": _case("ReorderInput", NCHWC, [("x", F, [1, 24, 5, 5])]),
    "ReorderInput-channels-last": _case("ReorderInput", NCHWC, [("x", F, [1, 5, 6, 32])],
                                        dict(channels_last=1)),
    # 30 of 32 channels: the padding (2) is under the block of every MLAS build (4, 8
    # or 16), as ORT's kernel requires; 24 of 32 runs only where the block is 16 (AVX-512)
    "ReorderOutput": _case("ReorderOutput", NCHWC, [("x", F, [1, 32, 5, 5])],
                           dict(channels=30)),
    "ReorderOutput-channels-last": _case("ReorderOutput", NCHWC, [("x", F, [1, 32, 5, 6])],
                                         dict(channels=30, channels_last=1)),
    # --- quantized: QDQ fusion (EXTENDED) and the NHWC transformer (ALL)
    "QLinearConv-nhwc": _case("QLinearConv", MS, [
        ("x", U8, [1, 7, 7, 8]), *qparams("x"), c("w", np.ones((4, 8, 3, 3)), np.int8),
        scale("ws", [0.1] * 4), zero("wz", np.int8, [0] * 4), *qparams("y")],
        dict(channels_last=1, strides=[2, 2])),
    "QLinearConv-nchw-int8": _case("QLinearConv", MS, [
        ("x", I8, [1, 8, 7, 7]), scale("xs"), zero("xz", np.int8),
        c("w", np.ones((4, 8, 3, 3)), np.int8), scale("ws"), zero("wz", np.int8, 0),
        scale("ys"), zero("yz", np.int8)], dict(pads=[1, 1, 1, 1])),
    "NhwcMaxPool": _case("NhwcMaxPool", MS, [("x", U8, [1, 9, 9, 8])],
                         dict(kernel_shape=[3, 3], strides=[2, 2])),
    "QLinearAveragePool": _case("QLinearAveragePool", MS, [
        ("x", U8, [1, 8, 9, 9]), *qparams("x"), *qparams("y")],
        dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    "QLinearGlobalAveragePool": _case("QLinearGlobalAveragePool", MS, [
        ("x", U8, [1, 5, 5, 8]), *qparams("x"), *qparams("y")], dict(channels_last=1)),
    "QLinearAdd": _case("QLinearAdd", MS, [
        ("a", I8, [2, 3, 4]), *qparams("a", np.int8), c("b", np.ones(4), np.int8),
        *qparams("b", np.int8), *qparams("c", np.int8)]),
    "QLinearMul": _case("QLinearMul", MS, [
        ("a", U8, [3, 1]), *qparams("a"), ("b", U8, [2, 1, 4]), *qparams("b"),
        *qparams("c")]),
    "QLinearSigmoid": _case("QLinearSigmoid", MS, [("x", U8, [2, 5]), *qparams("x"),
                                                   *qparams("y")]),
    "QLinearLeakyRelu": _case("QLinearLeakyRelu", MS, [
        ("x", I8, [2, 5]), *qparams("x", np.int8), *qparams("y", np.int8)],
        dict(alpha=0.1)),
    "QLinearSoftmax": _case("QLinearSoftmax", MS, [
        ("x", U8, [2, 5]), *qparams("x"), scale("ys"), zero("yz", value=0)],
        dict(opset=13, axis=-1)),
    "QLinearConcat": _case("QLinearConcat", MS, [
        *qparams("y"), ("a", U8, [1, 2, 3]), *qparams("a"), ("b", U8, [1, 5, 3]),
        *qparams("b")], dict(axis=1)),
    "QLinearWhere": _case("QLinearWhere", MS, [
        ("cond", TensorProto.BOOL, [3, 1]), ("x", U8, [1, 4]), *qparams("x"),
        c("y", [[1]], np.uint8), *qparams("y"), *qparams("z")]),
    "QGemm-float": _case("QGemm", MS, [
        ("a", U8, [3, 5]), *qparams("a"), c("b", np.ones((4, 5)), np.int8), scale("bs"),
        zero("bz", np.int8, 0)], dict(transB=1)),
    "QGemm-quantized": _case("QGemm", MS, [
        ("a", U8, [5, 3]), *qparams("a"), c("b", np.ones((5, 4)), np.int8), scale("bs"),
        zero("bz", np.int8, 0), c("bias", np.ones(4), np.int32), *qparams("y")],
        dict(transA=1)),
    "MatMulIntegerToFloat": _case("MatMulIntegerToFloat", MS, [
        ("a", U8, [2, 3, 5]), c("b", np.ones((5, 4)), np.int8), scale("as"),
        scale("bs", [0.1] * 4)]),
    "DynamicQuantizeMatMul": _case("DynamicQuantizeMatMul", MS, [
        ("a", F, [2, 3, 5]), c("b", np.ones((5, 4)), np.int8), scale("bs", [0.1] * 4)]),
    "MatMulInteger16": _case("MatMulInteger16", MS, [("a", TensorProto.INT16, [3, 5]),
                                                     ("b", TensorProto.INT16, [5, 2])]),
    "DequantizeLinear-contrib": _case("DequantizeLinear", MS, [
        ("x", U8, [2, 3]), *qparams("x")]),
    "DequantizeLinear-contrib-int16-per-axis": _case("DequantizeLinear", MS, [
        ("x", TensorProto.INT16, [2, 3]), scale("s", [0.1, 0.2, 0.3]),
        zero("z", np.int16, [0, 1, 2])], dict(axis=1)),
    "DequantizeLinear-contrib-fp16-no-zero-point": _case("DequantizeLinear", MS, [
        ("x", I8, [2, 3]), c("s", 0.1, np.float16)]),
    "QuantizeLinear-contrib": _case("QuantizeLinear", MS, [("x", F, [2, 3]), *qparams("y")]),
    "QuantizeLinear-contrib-no-zero-point": _case("QuantizeLinear", MS, [
        ("x", F, [2, 3]), scale("s")]),
    "QuantizeLinear-contrib-uint16-fp16": _case("QuantizeLinear", MS, [
        ("x", H, [4, 2, 3]), c("s", 0.1, np.float16), zero("z", np.uint16)]),
    "QuantizeLinear-contrib-int8-per-axis": _case("QuantizeLinear", MS, [
        ("x", F, [2, 3]), scale("s", [0.1, 0.2]), zero("z", np.int8, [0, 1])], dict(axis=0)),
    # --- transformer fusions
    "BiasGelu": _case("BiasGelu", MS, [("x", F, [2, 3, 8]), c("b", np.ones(8))]),
    "FastGelu": _case("FastGelu", MS, [("x", F, [2, 3, 8]), c("b", np.ones(8))]),
    "QuickGelu": _case("QuickGelu", MS, [("x", F, [2, 3, 8])], dict(alpha=1.702)),
    "Gelu": _case("Gelu", MS, [("x", F, [2, 3, 8])]),
    "SkipLayerNormalization": _case("SkipLayerNormalization", MS, [
        ("x", F, [2, 3, 8]), ("s", F, [2, 3, 8]), c("g", np.ones(8)), c("b", np.zeros(8))],
        outputs=["y", "mean", "inv_std", "sum"]),
    "SkipLayerNormalization-sum-only": _case("SkipLayerNormalization", MS, [
        ("x", F, [2, 3, 8]), ("s", F, [2, 3, 8]), c("g", np.ones(8))],
        outputs=["y", "", "", "sum"]),
    "SkipSimplifiedLayerNormalization": _case("SkipSimplifiedLayerNormalization", MS, [
        ("x", F, [2, 3, 8]), ("s", F, [2, 3, 8]), c("g", np.ones(8))],
        outputs=["y", "", "inv_std", "sum"]),
    "SimplifiedLayerNormalization": _case("SimplifiedLayerNormalization", "", [
        ("x", F, [2, 3, 8]), c("g", np.ones(8))], dict(axis=-1), outputs=2, opset=13),
    "LayerNormalization-contrib": _case("LayerNormalization", "", [
        ("x", F, [2, 3, 8]), c("g", np.ones((3, 8))), c("b", np.zeros((3, 8)))],
        dict(axis=1), outputs=3, opset=13),
    "GatherBlockQuantized": _case("GatherBlockQuantized", MS, [
        c("data", np.ones((10, 32)), np.uint8), ("i", I32, [2, 3]),
        c("scales", np.ones((10, 2)))], dict(block_size=32, gather_axis=0, quantize_axis=1)),
    "GatherBlockQuantized-8bit": _case("GatherBlockQuantized", MS, [
        c("data", np.ones((10, 32)), np.uint8), ("i", I64, [4]),
        c("scales", np.ones((10, 1)))],
        dict(block_size=32, gather_axis=0, quantize_axis=1, bits=8)),
    # --- attention and embedding fusions (the transformer optimizer; GQA: genai's LLMs)
    "Attention": _case("Attention", MS, [X248, W824, B24], dict(num_heads=2)),
    "Attention-mask": _case("Attention", MS, [X248, W824, B24, c("m", [4, 3], np.int32)],
                            dict(num_heads=2)),
    # the present without a past: [2, B, heads, S, v_hidden / heads]
    "Attention-present": _case("Attention", MS, [X248, W824, B24], dict(num_heads=2),
                               outputs=2),
    "Attention-past": _case("Attention", MS, [
        ("x", F, [2, 1, 8]), W824, B24, c("m", np.ones((2, 6)), np.int32),
        ("past", F, [2, 2, 2, 5, 4])], dict(num_heads=2, unidirectional=1), outputs=2),
    "Attention-past-no-mask": _case("Attention", MS, [
        ("x", F, [2, 3, 8]), W824, B24, None, ("past", F, [2, 2, 4, 5, 2])],
        dict(num_heads=4, unidirectional=1), outputs=2),
    # q, k and v of other widths than the input: the output and the present follow v
    "Attention-qkv-hidden-sizes": _case("Attention", MS, [
        X248, c("w", np.ones((8, 28))), c("b", np.ones(28))],
        dict(num_heads=2, qkv_hidden_sizes=[12, 12, 4]), outputs=2),
    "Attention-wider-than-input": _case("Attention", MS, [
        X248, c("w", np.ones((8, 48))), c("b", np.ones(48))], dict(num_heads=2), outputs=2),
    "Attention-attention-bias-fp16": _case("Attention", MS, [
        ("x", H, [2, 4, 8]), c("w", np.ones((8, 24)), np.float16),
        c("b", np.ones(24), np.float16), None, None, ("ab", H, [1, 2, 4, 4])],
        dict(num_heads=2)),
    "QAttention": _case("QAttention", MS, [
        ("x", U8, [2, 4, 8]), c("w", np.ones((8, 24)), np.int8), B24, scale("xs"),
        scale("ws")], dict(num_heads=2), outputs=2),
    "QAttention-past": _case("QAttention", MS, [
        ("x", U8, [2, 1, 8]), c("w", np.ones((8, 24)), np.uint8), B24, scale("xs"),
        scale("ws", [0.1]), c("m", np.ones((2, 6)), np.int32), zero("xz"), zero("wz"),
        ("past", F, [2, 2, 2, 5, 4])], dict(num_heads=2, unidirectional=1), outputs=2),
    "MultiHeadAttention": _case("MultiHeadAttention", MS, [
        ("q", F, [2, 3, 8]), ("k", F, [2, 5, 8]), ("v", F, [2, 5, 6])], dict(num_heads=2)),
    "MultiHeadAttention-past": _case("MultiHeadAttention", MS, [
        ("q", F, [2, 1, 8]), ("k", F, [2, 1, 8]), ("v", F, [2, 1, 8]), None, None, None,
        ("pk", F, [2, 2, 5, 4]), ("pv", F, [2, 2, 5, 4])], dict(num_heads=2), outputs=3),
    "MultiHeadAttention-past-bias-fp16": _case("MultiHeadAttention", MS, [
        ("q", H, [1, 2, 8]), ("k", H, [1, 2, 8]), ("v", H, [1, 2, 8]),
        c("b", np.zeros(24), np.float16), None, None, ("pk", H, [1, 4, 3, 2]),
        ("pv", H, [1, 4, 3, 2])], dict(num_heads=4, unidirectional=1), outputs=3),
    # presents without a past: key and value split into heads, each of its own width
    "MultiHeadAttention-present": _case("MultiHeadAttention", MS, [
        ("q", F, [2, 3, 8]), ("k", F, [2, 5, 8]), ("v", F, [2, 5, 6])], dict(num_heads=2),
        outputs=3),
    "MultiHeadAttention-present-key-only": _case("MultiHeadAttention", MS, [
        ("q", F, [2, 3, 8]), ("k", F, [2, 5, 8]), ("v", F, [2, 5, 8])], dict(num_heads=2),
        outputs=["y", "present_k", ""]),
    # cross attention on the encoder's key and value already split into heads (BNSH)
    "MultiHeadAttention-cross-bnsh": _case("MultiHeadAttention", MS, [
        ("q", F, [2, 3, 8]), ("k", F, [2, 2, 5, 4]), ("v", F, [2, 2, 5, 4])],
        dict(num_heads=2), outputs=3),
    # past_sequence_length given: one buffer for past and present, the past's length
    "MultiHeadAttention-shared-buffer": _case("MultiHeadAttention", MS, [
        ("q", F, [2, 1, 8]), ("k", F, [2, 1, 8]), ("v", F, [2, 1, 8]), None, None, None,
        ("pk", F, [2, 2, 7, 4]), ("pv", F, [2, 2, 7, 4]), c("past_length", [3], np.int32)],
        dict(num_heads=2), outputs=3),
    "GroupQueryAttention": _case("GroupQueryAttention", MS, [
        ("q", F, [1, 3, 32]), ("k", F, [1, 3, 16]), ("v", F, [1, 3, 16]),
        ("pk", F, [1, 2, 0, 8]), ("pv", F, [1, 2, 0, 8]), c("seqlens", [2], np.int32),
        c("total", 3, np.int32)], dict(num_heads=4, kv_num_heads=2), outputs=3),
    "GroupQueryAttention-decode": _case("GroupQueryAttention", MS, [
        ("q", F, [2, 1, 32]), ("k", F, [2, 1, 16]), ("v", F, [2, 1, 16]),
        ("pk", F, [2, 2, 5, 8]), ("pv", F, [2, 2, 5, 8]), c("seqlens", [5, 3], np.int32),
        c("total", 6, np.int32)], dict(num_heads=4, kv_num_heads=2), outputs=3),
    "GroupQueryAttention-packed": _case("GroupQueryAttention", MS, [
        ("qkv", F, [1, 3, 64]), None, None, ("pk", F, [1, 2, 4, 8]), ("pv", F, [1, 2, 4, 8]),
        c("seqlens", [2], np.int32), c("total", 3, np.int32)],
        dict(num_heads=4, kv_num_heads=2), outputs=3),
    "RotaryEmbedding": _case("RotaryEmbedding", MS, [
        ("x", F, [2, 3, 16]), ("pos", I64, [2, 3]), c("cos", np.ones((8, 4))),
        c("sin", np.zeros((8, 4)))], dict(num_heads=2)),
    "RotaryEmbedding-bnsh": _case("RotaryEmbedding", MS, [
        ("x", F, [2, 2, 3, 8]), ("pos", I64, [2, 3]), c("cos", np.ones((8, 4))),
        c("sin", np.zeros((8, 4)))]),
    "RotaryEmbedding-fp16-interleaved": _case("RotaryEmbedding", MS, [
        ("x", H, [1, 3, 16]), c("pos", [2], np.int64), c("cos", np.ones((8, 4)), np.float16),
        c("sin", np.zeros((8, 4)), np.float16)], dict(num_heads=2, interleaved=1)),
    "EmbedLayerNormalization": _case("EmbedLayerNormalization", MS, [
        ("ids", I32, [2, 3]), ("seg", I32, [2, 3]), c("we", np.ones((10, 8))),
        c("pe", np.ones((6, 8))), c("se", np.ones((2, 8))), c("g", np.ones(8)),
        c("b", np.zeros(8))], dict(epsilon=1e-5), outputs=["y", "mask_index"]),
    "EmbedLayerNormalization-mask-sum": _case("EmbedLayerNormalization", MS, [
        ("ids", I32, [2, 3]), ("seg", I32, [2, 3]), c("we", np.ones((10, 8))),
        c("pe", np.ones((6, 8))), c("se", np.ones((2, 8))), c("g", np.ones(8)),
        c("b", np.zeros(8)), ("mask", I32, [2, 3])], outputs=3),
    # no segment (DistilBERT, RoBERTa), position ids, the sum without the mask index
    "EmbedLayerNormalization-no-segment": _case("EmbedLayerNormalization", MS, [
        ("ids", I32, [2, 3]), None, c("we", np.ones((10, 8))), c("pe", np.ones((6, 8))),
        None, c("g", np.ones(8)), c("b", np.zeros(8)), None, ("pos", I32, [1, 3])],
        outputs=["y", "", "sum"]),
    "EmbedLayerNormalization-fp16": _case("EmbedLayerNormalization", MS, [
        ("ids", I32, [2, 3]), None, c("we", np.ones((10, 8)), np.float16),
        c("pe", np.ones((6, 8)), np.float16), None, c("g", np.ones(8), np.float16),
        c("b", np.zeros(8), np.float16)], outputs=2),
    # --- weights quantized in blocks (matmul_nbits_quantizer, bitsandbytes)
    "MatMulNBits": _case("MatMulNBits", MS, [("a", F, [2, 3, 64]), *nbits(64, 5)],
                         dict(K=64, N=5, bits=4, block_size=32)),
    "MatMulNBits-2d": _case("MatMulNBits", MS, [("a", F, [3, 64]), *nbits(64, 5)],
                            dict(K=64, N=5, bits=4, block_size=32)),
    "MatMulNBits-vector": _case("MatMulNBits", MS, [("a", F, [64]), *nbits(64, 5)],
                                dict(K=64, N=5, bits=4, block_size=32)),
    "MatMulNBits-8bit": _case("MatMulNBits", MS, [("a", F, [2, 2, 3, 48]),
                                                  *nbits(48, 6, bits=8, block=16)],
                              dict(K=48, N=6, bits=8, block_size=16)),
    "MatMulNBits-fp16": _case("MatMulNBits", MS, [("a", H, [2, 3, 64]),
                                                  *nbits(64, 5, dtype=np.float16)],
                              dict(K=64, N=5, bits=4, block_size=32)),
    "MatMulNBits-zero-points-bias": _case("MatMulNBits", MS, [
        ("a", F, [2, 3, 64]), *nbits(64, 5), c("zp", np.full(5, 0x88), np.uint8), None,
        c("bias", np.ones(5))], dict(K=64, N=5, bits=4, block_size=32, accuracy_level=4)),
    "MatMulBnb4": _case("MatMulBnb4", MS, [("a", F, [2, 3, 64]), *bnb4(64, 5)],
                        dict(K=64, N=5, block_size=32, quant_type=1)),
    "MatMulBnb4-2d-fp4": _case("MatMulBnb4", MS, [("a", F, [3, 64]), *bnb4(64, 5)],
                               dict(K=64, N=5, block_size=32, quant_type=0)),
    "MatMulBnb4-not-transposed": _case("MatMulBnb4", MS, [("a", F, [2, 3, 5]), *bnb4(64, 5)],
                                       dict(K=64, N=5, block_size=32, quant_type=1, transB=0)),
}


# Cases ONNX Runtime's CPU kernels do not run (CUDA-only ops, forms the CPU kernel
# refuses), checked against ORT's own SymbolicShapeInference instead: an implementation
# of the same shapes independent of the rules (it is what graphmem fell back on).
SYMBOLIC_CASES = {
    # the CPU kernel needs the bias (without it the session crashes); the output is
    # sized from the weights, a third of [input_hidden, q + k + v]
    "Attention-no-bias": _case("Attention", MS, [X248, W824], dict(num_heads=2), outputs=2),
    # one buffer for past and present (the CPU kernel refuses it): ORT's inference takes
    # the present's length from the mask, [B, max_length], the past's own
    "Attention-shared-buffer": _case("Attention", MS, [
        ("x", F, [2, 1, 8]), W824, B24, c("m", np.ones((2, 7)), np.int32),
        ("past", F, [2, 2, 2, 7, 4]), None, c("past_length", 3, np.int32)],
        dict(num_heads=2, past_present_share_buffer=1), outputs=2),
    # packed QKV and packed KV: "not implemented for CPU"
    "MultiHeadAttention-packed-qkv": _case("MultiHeadAttention", MS, [
        ("qkv", F, [2, 3, 2, 3, 4])], dict(num_heads=2), outputs=3),
    "MultiHeadAttention-packed-qkv-past": _case("MultiHeadAttention", MS, [
        ("qkv", F, [2, 1, 2, 3, 4]), None, None, None, None, None, ("pk", F, [2, 2, 5, 4]),
        ("pv", F, [2, 2, 5, 4])], dict(num_heads=2), outputs=3),
    "MultiHeadAttention-packed-kv": _case("MultiHeadAttention", MS, [
        ("q", F, [2, 3, 8]), ("kv", F, [2, 5, 2, 2, 4])], dict(num_heads=2)),
    # CUDA (and ROCm) kernels only: Stable Diffusion's UNet through the transformer
    # optimizer, and GemmFastGelu
    "BiasAdd": _case("BiasAdd", MS, [("x", F, [2, 3, 8]), c("b", np.ones(8)),
                                     ("skip", F, [2, 3, 8])]),
    "BiasSplitGelu": _case("BiasSplitGelu", MS, [("x", H, [2, 3, 8]),
                                                 c("b", np.ones(8), np.float16)]),
    "GroupNorm": _case("GroupNorm", MS, [("x", F, [1, 4, 4, 8]), c("g", np.ones(8)),
                                         c("b", np.zeros(8))], dict(groups=2, activation=1)),
    "SkipGroupNorm": _case("SkipGroupNorm", MS, [
        ("x", F, [1, 4, 4, 8]), c("g", np.ones(8)), c("b", np.zeros(8)),
        ("skip", F, [1, 4, 4, 8])], dict(groups=2, activation=0), outputs=2),
    "SkipGroupNorm-bias-fp16": _case("SkipGroupNorm", MS, [
        ("x", H, [1, 4, 4, 8]), c("g", np.ones(8)), c("b", np.zeros(8)),
        ("skip", H, [1, 1, 1, 8]), c("bias", np.ones(8), np.float16)],
        dict(groups=2, activation=1)),
    "GemmFastGelu": _case("GemmFastGelu", MS, [("x", F, [2, 3, 8]), c("w", np.ones((8, 5))),
                                               c("b", np.ones(5))]),
    "GemmFastGelu-2d": _case("GemmFastGelu", MS, [("x", H, [3, 8]),
                                                  c("w", np.ones((8, 5)), np.float16)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_inferred_shape_is_what_onnx_runtime_makes(case):
    model = one_node(**CASES[case])
    expected = ort_outputs(model)
    assert inferred(model) == expected
    if (CASES[case]["domain"], CASES[case]["op"]) in RULES:  # no fallback on ORT's
        assert by_rules(model) == expected


@pytest.mark.parametrize("case", list(SYMBOLIC_CASES))
def test_inferred_shape_is_what_ort_symbolic_inference_makes(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ORT's inference may write a file where it gives up
    model = one_node(**SYMBOLIC_CASES[case])
    expected = symbolic_outputs(model)
    assert None not in expected.values()
    assert by_rules(model) == expected


def by_rules(model) -> dict:
    """{output name: (elem_type, shape)} of the rules' one pass (shape_walk.propagate,
    no fallback on ORT's inference): None where it leaves an output unknown."""
    known = propagate(model)
    return {o.name: known.get(o.name) for o in model.graph.output}


def symbolic_outputs(model) -> dict:
    """{output name: (elem_type, shape)} by ONNX Runtime's SymbolicShapeInference alone
    (None where it leaves a dim or the type unknown)."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    return static_outputs(SymbolicShapeInference.infer_shapes(
        model, auto_merge=False, guess_output_rank=False), model)


# CUDA-only channels-last convolutions that ORT's symbolic inference does not know
# either: their schema's inference (contrib_ops nhwc_inference_context.h) is ONNX Conv's
# on the input transposed to NCHW, the weight as given; checked against onnx's Conv
# inference that way. (x, w, attributes)
NHWC_CONV_CASES = {
    "NhwcConv": ("NhwcConv", [1, 16, 15, 3], (8, 3, 3, 3),
                 dict(pads=[1, 1, 1, 1], strides=[2, 2], kernel_shape=[3, 3])),
    "NhwcConv-no-kernel-shape": ("NhwcConv", [2, 9, 9, 4], (6, 4, 2, 2), dict(dilations=[2, 2])),
    "NhwcConv-same-group": ("NhwcConv", [1, 7, 10, 4], (4, 2, 3, 3),
                            dict(auto_pad="SAME_UPPER", group=2, strides=[2, 3])),
    "NhwcFusedConv": ("NhwcFusedConv", [1, 8, 8, 3], (5, 3, 1, 1),
                      dict(activation="Relu", kernel_shape=[1, 1])),
}


@pytest.mark.parametrize("case", list(NHWC_CONV_CASES))
def test_channels_last_conv_is_onnx_conv_on_the_transposed_input(case):
    op, x, w, attrs = NHWC_CONV_CASES[case]
    model = one_node(op, MS, [("x", F, x), c("w", np.ones(w))], attrs)
    conv_attrs = {k: v for k, v in attrs.items() if k != "activation"}
    nchw = one_node("Conv", "", [("x", F, [x[0], x[-1], *x[1:-1]]), c("w", np.ones(w))],
                    conv_attrs)
    (elem, (n, m, *spatial)), = static_outputs(onnx.shape_inference.infer_shapes(nchw),
                                               nchw).values()
    assert by_rules(model) == {"y0": (elem, (n, *spatial, m))}


def test_every_rule_has_a_case():
    """Each (domain, op) of the table is checked against ONNX Runtime above (or, where
    no CPU kernel runs it, against ORT's symbolic inference, or its schema's own way)."""
    covered = {(c["domain"], c["op"]) for c in (*CASES.values(), *SYMBOLIC_CASES.values())}
    covered |= {(MS, op) for op, *_ in NHWC_CONV_CASES.values()}
    assert set(RULES) <= covered, sorted(set(RULES) - covered)


def test_reorder_input_rounds_channels_up_to_this_machine_block():
    block = nchwc_block_size(24)
    assert block in (4, 8, 16)
    out = ort_outputs(one_node(**CASES["ReorderInput"]))
    assert out["y0"][1][1] == -(-24 // block) * block


def test_a_chain_through_ort_inference_keeps_the_rules():
    """DecoderMaskedMultiHeadAttention (no rule here: ORT's inference) ->
    SkipLayerNormalization with its sum output and FusedMatMul (this table's rules): the
    fallback walks the graph with the rules in front of ORT's handlers, and every tensor
    is what ONNX Runtime makes."""
    g, wm = c("g", np.ones(8)), c("wm", np.ones((8, 5)))
    nodes = [helper.make_node("DecoderMaskedMultiHeadAttention",
                              ["q", "k", "v", "", "", "pk", "pv", "past_length"],
                              ["att", "present_k", "present_v"], domain=MS, num_heads=2,
                              past_present_share_buffer=1),
             helper.make_node("SkipLayerNormalization", ["att", "q", "g"],
                              ["ln", "", "", "sum"], domain=MS),
             helper.make_node("FusedMatMul", ["ln", "wm"], ["y"], domain=MS, alpha=2.0)]
    outs = ["att", "present_k", "ln", "sum", "y"]
    inputs = [helper.make_tensor_value_info(n, F, s) for n, s in (
        ("q", [2, 1, 8]), ("k", [2, 1, 8]), ("v", [2, 1, 8]), ("pk", [2, 2, 5, 4]),
        ("pv", [2, 2, 5, 4]))]
    graph = helper.make_graph(nodes, "chain", inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outs],
                              [g, wm, c("past_length", 2, np.int32)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)], ir_version=8)
    assert "att" not in propagate(model)  # the rules alone leave the chain open
    assert inferred(model) == ort_outputs(model)


@pytest.mark.parametrize("op,opset", [("SimplifiedLayerNormalization", 17),
                                      ("LayerNormalization", 16)])
def test_a_model_with_ort_own_onnx_domain_op_loads_plans_and_verifies(op, opset, tmp_path):
    """ONNX Runtime registers SimplifiedLayerNormalization (and LayerNormalization before
    opset 17) in the ONNX domain itself; its transformer optimizer writes RMSNorm so (a
    Llama decoder) and runs the file. onnx's checker knows no such op there: the loader
    checks those nodes as ORT's contrib ops, and the file plans and verifies."""
    import graphmem
    from graphmem.verify.verifier import verify
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node(op, ["a", "g"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "own", [helper.make_tensor_value_info("x", F, [2, 3, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 3, 8])],
                              [c("g", np.linspace(0.5, 1.5, 8))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    path = tmp_path / f"{op}.onnx"
    path.write_bytes(model.SerializeToString())
    ort_outputs(model)  # ONNX Runtime runs it
    loaded = graphmem.load(path)
    assert loaded.tensors["n"].shape == (2, 3, 8)
    # by the contrib rules in the shape walk, on the bytes (ONNX Runtime's symbolic
    # inference, twice as slow on the T5 encoder ORT saves, is not needed)
    assert [s.strategy for s in loaded.sizing if s.count][-1] == "shape-walk"
    plan = graphmem.plan_graph(loaded).plan
    graphmem.validate(plan, loaded)
    assert verify(plan, loaded).passed


@pytest.mark.parametrize("with_ms", [False, True])
def test_ort_own_ops_are_relabelled_on_the_models_bytes(with_ms):
    """checking.as_ort_contrib: the bytes protobuf reads as the model with those nodes in
    ORT's domain (the others untouched) and that domain imported once."""
    from graphmem import wire
    from graphmem.frontend.checking import as_ort_contrib
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["n"], axis=-1),
             helper.make_node("Relu", ["n"], ["y"]),
             helper.make_node("LayerNormalization", ["y", "g"], ["z"], domain="ai.onnx")]
    graph = helper.make_graph(nodes, "own", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("z", F, [2, 8])],
                              [c("g", np.ones(8))])
    opsets = [helper.make_opsetid("", 16)] + ([helper.make_opsetid(MS, 1)] if with_ms else [])
    data = helper.make_model(graph, opset_imports=opsets).SerializeToString()
    out = onnx.ModelProto.FromString(
        as_ort_contrib(data, wire.parse_model(data), frozenset({"LayerNormalization"})))
    assert [n.domain for n in out.graph.node] == [MS, "", MS]
    assert [(o.domain, o.version) for o in out.opset_import] == [("", 16), (MS, 1)]
    assert [n.op_type for n in out.graph.node] == [n.op_type for n in nodes]


def test_a_model_with_an_unknown_onnx_domain_op_is_still_refused(tmp_path):
    """Only ORT's own ONNX-domain ops pass the checker as contrib ops."""
    import graphmem
    from graphmem.errors import GraphmemError
    node = helper.make_node("NoSuchNorm", ["x"], ["y"])
    graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 8])])
    path = tmp_path / "bad.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                       ir_version=8).SerializeToString())
    with pytest.raises(GraphmemError, match="No Op registered for NoSuchNorm"):
        graphmem.load(path)


def _layered_model(folder, layers: int):
    """``layers`` layers of BiasGelu -> Shape -> Mod -> Reshape to the computed shape
    (onnx's inference propagates no data through Mod), written to ``folder``."""
    nodes = []
    for i in range(layers):
        x, b, s, m = f"x{i}", f"b{i}", f"s{i}", f"m{i}"
        nodes += [helper.make_node("BiasGelu", [x, "bias"], [b], domain=MS),
                  helper.make_node("Shape", [b], [s]),
                  helper.make_node("Mod", [s, "big"], [m]),
                  helper.make_node("Reshape", [b, m], [f"x{i + 1}"])]
    graph = helper.make_graph(
        nodes, "layers", [helper.make_tensor_value_info("x0", F, [2, 3, 8])],
        [helper.make_tensor_value_info(f"x{layers}", F, [2, 3, 8])],
        [c("bias", np.linspace(-1, 1, 8)), c("big", [1 << 20], np.int64)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)], ir_version=8)
    path = folder / "layers.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_contrib_ops_that_size_each_layer_shape_arithmetic_load(tmp_path):
    """A contrib op in every layer whose output the next layer's shape arithmetic reads
    (the transformer optimizer's ViT-B/16: BiasGelu, then Shape, Mod and a Reshape to
    the computed shape): every layer is sized (once, the third layer stayed unknown),
    and the plan verifies."""
    import graphmem
    from graphmem.verify.verifier import verify
    layers = 4
    loaded = graphmem.load(_layered_model(tmp_path, layers))
    assert all(loaded.tensors[f"x{i}"].shape == (2, 3, 8) for i in range(layers + 1))
    plan = graphmem.plan_graph(loaded).plan
    assert verify(plan, loaded).passed


def test_the_contrib_rules_walk_shape_arithmetic_and_its_shapes_fold(tmp_path):
    """The layered model above is sized by the first shape walk alone: the rules
    compute Shape -> Mod as they walk (no turn per layer; ViT-B/16 through the
    transformer optimizer took 12), and the shape arithmetic the rules unlocked is
    folded like any other: constants, not tensors of the plan."""
    import graphmem
    layers = 6
    loaded = graphmem.load(_layered_model(tmp_path, layers))
    ran = [s.strategy for s in loaded.sizing]
    assert ran[-1] == "shape-walk" and "constant-values" not in ran, ran
    plan = graphmem.plan_graph(loaded).plan
    assert not any(f"{k}{i}" in plan.tensors for k in "sm" for i in range(layers))
    assert {f"m{i}" for i in range(layers)} <= set(plan.constants)


def test_the_rules_walk_computes_no_large_value(monkeypatch):
    """The walk computes shape-sized values only: a ConstantOfShape of a computed shape
    (a causal mask at a long sequence) is sized by onnx's inference, never filled."""
    from graphmem.frontend import shape_arithmetic, shape_walk
    computed = []
    real = shape_arithmetic.evaluate
    monkeypatch.setattr(shape_arithmetic, "evaluate",
                        lambda nodes, values: computed.append(nodes[0].op_type)
                        or real(nodes, values))
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["mask"]),
             helper.make_node("BiasGelu", ["mask", "bias"], ["y"], domain=MS)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [64, 64, 64])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [c("bias", np.zeros(64))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    known = shape_walk.propagate(model)
    assert known["mask"][1] == (64, 64, 64) and known["y"][1] == (64, 64, 64)
    assert computed == ["Shape"]  # the 262,144-element mask was never computed


def test_the_rules_walk_computes_sized_arithmetic_only_where_it_is_read(monkeypatch):
    """Shape arithmetic whose outputs are sized already (what onnx's inference leaves,
    the walk's usual input) is computed when a node left open reads its value, and not
    otherwise: here the Reshape after the contrib op reads ``s``; ``m`` is read by
    nothing."""
    from graphmem.frontend import shape_arithmetic, shape_walk
    computed = []
    real = shape_arithmetic.evaluate
    monkeypatch.setattr(shape_arithmetic, "evaluate",
                        lambda nodes, values: computed.append(nodes[0].outputs[0])
                        or real(nodes, values))
    nodes = [helper.make_node("Shape", ["x"], ["s2"]),
             helper.make_node("Mod", ["s2", "big"], ["m"]),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("BiasGelu", ["x", "bias"], ["b"], domain=MS),
             helper.make_node("Reshape", ["b", "s"], ["y"]),
             helper.make_node("Relu", ["m"], ["r"])]
    i64 = TensorProto.INT64
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3, 8])],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info(
            "r", i64, [3])], [c("bias", np.zeros(8)), c("big", [1 << 20], np.int64)],
        value_info=[helper.make_tensor_value_info(t, i64, [3]) for t in ("s2", "m", "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    known = shape_walk.propagate(model)
    assert known["y"][1] == (2, 3, 8)
    assert computed == ["s"]


def test_the_rules_walk_computes_each_distinct_arithmetic_once(monkeypatch, tmp_path):
    """Layers compute the same shapes from same-shaped tensors: the walk evaluates each
    distinct (op, attributes, input values) once, and every layer still gets its value
    (the layered model: BiasGelu -> Shape -> Mod -> Reshape, six times)."""
    import graphmem
    from graphmem.frontend import shape_arithmetic
    computed = []
    real = shape_arithmetic.evaluate
    monkeypatch.setattr(shape_arithmetic, "evaluate",
                        lambda nodes, values: computed.append(nodes[0].op_type)
                        or real(nodes, values))
    loaded = graphmem.load(_layered_model(tmp_path, 6))
    assert all(loaded.tensors[f"x{i}"].shape == (2, 3, 8) for i in range(7))
    assert sorted(computed) == ["Mod", "Shape"]


def test_an_optional_input_given_but_unknown_is_not_taken_for_absent():
    """GroupQueryAttention's key comes from an op no rule knows: it is given (so not the
    packed-QKV form, whose head size would be hidden / (heads + 2 kv_heads)), only not
    sized yet. The output is the query's shape, and the presents follow the past."""
    from graphmem.frontend.shape_walk import propagate
    nodes = [helper.make_node("Opaque", ["kx"], ["k"], domain="example.org"),
             helper.make_node("GroupQueryAttention",
                              ["q", "k", "v", "pk", "pv", "seqlens", "total"],
                              ["y", "present_k", "present_v"], domain=MS, num_heads=4,
                              kv_num_heads=2)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in (
            ("q", [1, 3, 32]), ("kx", [1, 3, 16]), ("v", [1, 3, 16]), ("pk", [1, 2, 4, 8]),
            ("pv", [1, 2, 4, 8]))],
        [helper.make_empty_tensor_value_info("y")],
        [c("seqlens", [6], np.int32), c("total", 7, np.int32)])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(MS, 1),
        helper.make_opsetid("example.org", 1)], ir_version=8)
    known = propagate(model)
    assert known["y"] == (F, (1, 3, 32))
    assert known["present_k"] == known["present_v"] == (F, (1, 2, 7, 8))


def test_a_computed_total_sequence_length_grows_the_present():
    """onnxruntime-genai's decoders compute GroupQueryAttention's total_sequence_length
    from the attention mask's shape (Shape, Gather, Cast) and may declare the presents
    with no dims: the rule reads the computed value, and the present is the past plus
    one token, as ONNX Runtime makes it (the past's length alone, before: a plan one row
    short of what the kernel writes)."""
    nodes = [helper.make_node("Shape", ["mask"], ["mask_shape"]),
             helper.make_node("Gather", ["mask_shape", "one"], ["total64"], axis=0),
             helper.make_node("Cast", ["total64"], ["total"], to=I32),
             helper.make_node("GroupQueryAttention",
                              ["qkv", "", "", "pk", "pv", "seqlens", "total"],
                              ["y", "present_k", "present_v"], domain=MS, num_heads=4,
                              kv_num_heads=2)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in (
            ("qkv", F, [1, 1, 64]), ("mask", I64, [1, 5]), ("pk", F, [1, 2, 4, 8]),
            ("pv", F, [1, 2, 4, 8]))],
        [helper.make_tensor_value_info(o, F, [None] * 4) for o in ("present_k", "present_v")]
        + [helper.make_empty_tensor_value_info("y")],
        [c("seqlens", [4], np.int32), c("one", 1, np.int64)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)], ir_version=8)
    expected = ort_outputs(model)
    assert expected["present_k"] == (F, (1, 2, 5, 8))
    assert by_rules(model) == inferred(model) == expected


def _quantized_block(path):
    """A BERT-like block in the deployment forms the transformer optimizer and ORT's
    quantizers write, every op one this table sizes: EmbedLayerNormalization ->
    MatMulNBits (int4) -> Add -> Attention (mask index) -> RotaryEmbedding ->
    MultiHeadAttention -> com.microsoft QuantizeLinear -> DequantizeLinear, at symbolic
    batch and sequence."""
    hidden = 64
    inits = [c("we", np.linspace(-1, 1, 10 * hidden).reshape(10, hidden)),
             c("pe", np.linspace(-1, 1, 16 * hidden).reshape(16, hidden)),
             c("g", np.ones(hidden)), c("beta", np.zeros(hidden)),
             *nbits(hidden, hidden), c("bias", np.linspace(-1, 1, hidden)),
             c("w", np.linspace(-0.1, 0.1, hidden * 3 * hidden).reshape(hidden, 3 * hidden)),
             c("b", np.zeros(3 * hidden)), c("cos", np.ones((16, 8))),
             c("sin", np.zeros((16, 8))), scale("qs"), zero("qz")]
    nodes = [
        helper.make_node("EmbedLayerNormalization",
                         ["ids", "", "we", "pe", "", "g", "beta"], ["emb", "mask_index"],
                         domain=MS),
        helper.make_node("MatMulNBits", ["emb", "B", "scales"], ["mm"], domain=MS,
                         K=hidden, N=hidden, bits=4, block_size=32),
        helper.make_node("Add", ["mm", "bias"], ["h"]),
        helper.make_node("Attention", ["h", "w", "b", "mask_index"], ["att"], domain=MS,
                         num_heads=4),
        helper.make_node("RotaryEmbedding", ["att", "pos", "cos", "sin"], ["rot"],
                         domain=MS, num_heads=4),
        helper.make_node("MultiHeadAttention", ["rot", "att", "att"], ["mha"], domain=MS,
                         num_heads=4),
        helper.make_node("QuantizeLinear", ["mha", "qs", "qz"], ["q"], domain=MS),
        helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["y"], domain=MS)]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("ids", I32, ["batch", "seq"]),
                         helper.make_tensor_value_info("pos", I64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", F, ["batch", "seq", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)], ir_version=8)
    path.write_bytes(model.SerializeToString())
    return model


def test_a_quantized_transformer_block_is_sized_by_the_rules_alone(tmp_path):
    """Every op of the block has a rule: the contrib rules size the whole graph, ONNX
    Runtime's symbolic inference is not run (it imports sympy and walks the graph in
    Python: most of the time graphmem took on a BERT-base-sized int4 encoder), and the
    shapes are the ones ONNX Runtime makes."""
    import json
    import subprocess
    import sys

    import graphmem
    from graphmem.verify.verifier import verify
    path = tmp_path / "block.onnx"
    model = _quantized_block(path)
    loaded = graphmem.load(path, {"batch": 2, "seq": 5})
    ran = [s.strategy for s in loaded.sizing if s.count]
    assert ran[-1] == "shape-walk" and "onnxruntime-symbolic" not in ran, ran
    fixed = helper.make_model(model.graph, opset_imports=model.opset_import, ir_version=8)
    for vi in fixed.graph.input:
        for d, v in zip(vi.type.tensor_type.shape.dim, (2, 5)):
            d.dim_value = v
    for name, (elem, shape) in ort_outputs(_every_output(fixed)).items():
        assert (loaded.tensors[name].shape, loaded.tensors[name].dtype) == (
            shape, helper.tensor_dtype_to_np_dtype(elem).name), name
    plan = graphmem.plan_graph(loaded).plan
    graphmem.validate(plan, loaded)
    assert verify(plan, loaded).passed
    code = ("import json, sys\n"
            "from graphmem.cli import main\n"
            f"rc = main(['plan', {str(path)!r}, '--dim', 'batch=2', '--dim', 'seq=5',\n"
            f"           '-o', {str(tmp_path / 'plan.json')!r}, '-q'])\n"
            "print(json.dumps([rc, 'sympy' in sys.modules]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, False]


def _every_output(model):
    """``model`` with every node output a graph output."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.output[:]
    out.graph.output.extend(helper.make_empty_tensor_value_info(o)
                            for n in model.graph.node for o in n.output if o)
    return out


def test_ort_inference_reads_no_file_and_keeps_the_working_folder(tmp_path, monkeypatch):
    """The fallback never changes the process's working folder, and reads no external
    data relative to it: a Reshape whose shape is external data stays unknown even with
    a file of that name, holding a valid shape, in the working folder (ORT would read it
    with no folder); the model comes back with the tensor still external."""
    monkeypatch.chdir(tmp_path)
    np.array([3, 2], np.int64).tofile(tmp_path / "shape.bin")
    shape = onnx.TensorProto(name="shape", data_type=TensorProto.INT64, dims=[2])
    shape.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "shape.bin"), ("length", "16")):
        entry = shape.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "ext",
                              [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_empty_tensor_value_info("y")], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    moved = []
    monkeypatch.setattr("os.chdir", lambda path: moved.append(path))
    notes: list[str] = []
    out = infer(model, notes=notes)
    assert not moved and Path.cwd() == tmp_path
    assert static_outputs(out, model) == {"y": None}
    assert notes and "stopped" in notes[0]
    assert out.graph.initializer[0].data_location == TensorProto.EXTERNAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shape.bin"]  # nothing written
