"""MACs of the matrix ops of deployed graphs (fused, quantized, attention): each rule gives
what the unfused graph it replaces counts, with both graphs built here and loaded."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import load as onnx_load

from graphmem.analysis.macs import mac_totals, matrix_macs, node_macs
from graphmem.core.ir import Node, Tensor
from graphmem.frontend.reader import from_model

from conftest import F, runtime_model

I8, U8, I32, I64 = TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32, TensorProto.INT64
MS = "com.microsoft"


def model(nodes, inputs, outputs, inits=(), opset=17, value_info=()):
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits),
        value_info=[helper.make_tensor_value_info(n, t, s) for n, t, s in value_info])
    m = runtime_model(graph, opset)
    m.opset_import.append(helper.make_opsetid(MS, 1))
    return m


def weight(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.zeros(shape, dtype), name)


def ints(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype), name)


def totals(m):
    t = mac_totals(from_model(m))
    assert not t["macs_at_least"], t["macs_unknown_ops"]
    return t["matrix_macs"]


B, S, N, H, P = 2, 5, 4, 8, 7  # batch, new positions, heads, head size, past positions
D = N * H


def unfused_heads(q, k, v, out, n_q, n_kv, s, t):
    """Q (B,S,n_q*H), K and V (B,t,n_kv*H) as heads; softmax(Q K^T) V back to (B,S,D).
    The KV heads repeated to n_q as the exporters do (an Expand)."""
    shape = lambda name, vals: ints(name, vals)  # noqa: E731
    rep = n_q // n_kv
    nodes = [
        helper.make_node("Reshape", [q, "q_shape"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),       # B,Nq,S,H
        helper.make_node("Reshape", [k, "kv_shape"], ["k4"]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),       # B,Nkv,H,t
        helper.make_node("Reshape", [v, "kv_shape"], ["v4"]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),       # B,Nkv,t,H
        helper.make_node("Unsqueeze", ["kt", "ax2"], ["kt5"]),
        helper.make_node("Expand", ["kt5", "kt_rep"], ["kte"]),
        helper.make_node("Reshape", ["kte", "kt_all"], ["kth"]),                # B,Nq,H,t
        helper.make_node("Unsqueeze", ["vh", "ax2"], ["v5"]),
        helper.make_node("Expand", ["v5", "v_rep"], ["ve"]),
        helper.make_node("Reshape", ["ve", "v_all"], ["vq"]),                   # B,Nq,t,H
        helper.make_node("MatMul", ["qh", "kth"], ["scores"]),                  # B,Nq,S,t
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "vq"], ["ctx"]),                   # B,Nq,S,H
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "out_shape"], [out]),
    ]
    inits = [shape("q_shape", [B, s, n_q, H]), shape("kv_shape", [B, t, n_kv, H]),
             shape("ax2", [2]), shape("kt_rep", [B, n_kv, rep, H, t]),
             shape("kt_all", [B, n_q, H, t]), shape("v_rep", [B, n_kv, rep, t, H]),
             shape("v_all", [B, n_q, t, H]), shape("out_shape", [B, s, n_q * H])]
    return nodes, inits


# ---------------------------------------------------------------------- attention

def test_ms_attention_is_its_projection_and_heads():
    w, b = weight("w", (D, 3 * D)), weight("b", (3 * D,))
    fused = model([helper.make_node("Attention", ["x", "w", "b"], ["y"], domain=MS,
                                    num_heads=N)],
                  [("x", F, [B, S, D])], [("y", F, [B, S, D])], [w, b])
    heads, inits = unfused_heads("q", "k", "v", "y", N, N, S, S)
    proj = [helper.make_node("MatMul", ["x", "w"], ["qkv"]),
            helper.make_node("Split", ["qkv", "three"], ["q", "k", "v"], axis=-1)]
    unfused = model(proj + heads, [("x", F, [B, S, D])], [("y", F, [B, S, D])],
                    [w, ints("three", [D, D, D])] + inits)
    expected = B * S * D * 3 * D + 2 * B * N * S * S * H
    assert totals(fused) == totals(unfused) == expected


def test_ms_attention_with_past_counts_the_past_positions():
    w, b = weight("w", (D, 3 * D)), weight("b", (3 * D,))
    node = helper.make_node("Attention", ["x", "w", "b", "", "past"], ["y", "present"],
                            domain=MS, num_heads=N, unidirectional=1)
    fused = model([node], [("x", F, [B, S, D]), ("past", F, [2, B, N, P, H])],
                  [("y", F, [B, S, D]), ("present", F, [2, B, N, P + S, H])], [w, b])
    g = from_model(fused)
    assert node_macs(g.nodes[0], g.tensors) == \
        B * S * D * 3 * D + 2 * B * N * S * (P + S) * H
    # the rule at the level of the function too: without the present output, the past
    shapes = {"x": (B, S, D), "w": (D, 3 * D), "b": (3 * D,), "past": (2, B, N, P, H),
              "y": (B, S, D)}
    tensors = {k: Tensor(k, "float32", v, 32) for k, v in shapes.items()}
    bare = Node(0, "a", "Attention", MS, ("x", "w", "b", "", "past"), ("y",),
                {"num_heads": N})
    assert node_macs(bare, tensors) == B * S * D * 3 * D + 2 * B * N * S * (P + S) * H


def test_multihead_attention_is_the_heads_over_past_and_new_keys():
    node = helper.make_node("MultiHeadAttention",
                            ["q", "k", "v", "", "", "", "past_k", "past_v"],
                            ["y", "present_k", "present_v"], domain=MS, num_heads=N)
    fused = model([node], [("q", F, [B, S, D]), ("k", F, [B, S, D]), ("v", F, [B, S, D]),
                           ("past_k", F, [B, N, P, H]), ("past_v", F, [B, N, P, H])],
                  [("y", F, [B, S, D]), ("present_k", F, [B, N, P + S, H]),
                   ("present_v", F, [B, N, P + S, H])])
    # unfused: the past as (B, P, D) concatenated with the new keys
    heads, inits = unfused_heads("q", "kc", "vc", "y", N, N, S, P + S)
    cat = [helper.make_node("Concat", ["pk", "k"], ["kc"], axis=1),
           helper.make_node("Concat", ["pv", "v"], ["vc"], axis=1)]
    unfused = model(cat + heads, [("q", F, [B, S, D]), ("k", F, [B, S, D]),
                                  ("v", F, [B, S, D]), ("pk", F, [B, P, D]),
                                  ("pv", F, [B, P, D])], [("y", F, [B, S, D])], inits)
    assert totals(fused) == totals(unfused) == 2 * B * N * S * (P + S) * H


def test_group_query_attention_with_its_kv_cache():
    kv_n = 2
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total_seq"],
        ["y", "present_k", "present_v"], domain=MS, num_heads=N, kv_num_heads=kv_n)
    fused = model([node], [("q", F, [B, S, D]), ("k", F, [B, S, kv_n * H]),
                           ("v", F, [B, S, kv_n * H]), ("past_k", F, [B, kv_n, P, H]),
                           ("past_v", F, [B, kv_n, P, H]), ("seqlens_k", I32, [B])],
                  [("y", F, [B, S, D]), ("present_k", F, [B, kv_n, P + S, H]),
                   ("present_v", F, [B, kv_n, P + S, H])],
                  [ints("total_seq", P + S, np.int32)])
    heads, inits = unfused_heads("q", "kc", "vc", "y", N, kv_n, S, P + S)
    cat = [helper.make_node("Concat", ["pk", "k"], ["kc"], axis=1),
           helper.make_node("Concat", ["pv", "v"], ["vc"], axis=1)]
    unfused = model(cat + heads, [("q", F, [B, S, D]), ("k", F, [B, S, kv_n * H]),
                                  ("v", F, [B, S, kv_n * H]), ("pk", F, [B, P, kv_n * H]),
                                  ("pv", F, [B, P, kv_n * H])], [("y", F, [B, S, D])], inits)
    # every query head runs over all P + S positions; sharing KV heads saves no MACs
    assert totals(fused) == totals(unfused) == 2 * B * N * S * (P + S) * H


def test_onnx_attention_opset_23():
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=N,
                            kv_num_heads=N)
    fused = model([node], [("q", F, [B, S, D]), ("k", F, [B, P, D]), ("v", F, [B, P, D])],
                  [("y", F, [B, S, D])], opset=23)
    heads, inits = unfused_heads("q", "k", "v", "y", N, N, S, P)
    unfused = model(heads, [("q", F, [B, S, D]), ("k", F, [B, P, D]), ("v", F, [B, P, D])],
                    [("y", F, [B, S, D])], inits)
    assert totals(fused) == totals(unfused) == 2 * B * N * S * P * H


# ---------------------------------------------------------------------- fused

def test_fused_conv_is_its_conv():
    w = weight("w", (8, 2, 3, 3))
    conv = model([helper.make_node("Conv", ["x", "w"], ["c"], group=2, pads=[1] * 4),
                  helper.make_node("Relu", ["c"], ["y"])],
                 [("x", F, [2, 4, 9, 9])], [("y", F, [2, 8, 9, 9])], [w])
    fused = model([helper.make_node("FusedConv", ["x", "w"], ["y"], domain=MS, group=2,
                                    pads=[1] * 4, activation="Relu")],
                  [("x", F, [2, 4, 9, 9])], [("y", F, [2, 8, 9, 9])], [w])
    assert totals(fused) == totals(conv) == 2 * 8 * 81 * 2 * 9


def test_fused_gemm_and_fused_matmul():
    gemm = model([helper.make_node("Gemm", ["a", "b"], ["y"], transA=1)],
                 [("a", F, [6, 3]), ("b", F, [6, 5])], [("y", F, [3, 5])])
    fgemm = model([helper.make_node("FusedGemm", ["a", "b"], ["y"], domain=MS, transA=1,
                                    activation="Relu")],
                  [("a", F, [6, 3]), ("b", F, [6, 5])], [("y", F, [3, 5])])
    assert totals(fgemm) == totals(gemm) == 3 * 5 * 6
    # transA: A (2, 7, 6, 3) is (2, 7, 3, 6) transposed; K = 6
    mm = model([helper.make_node("Transpose", ["a"], ["at"], perm=[0, 1, 3, 2]),
                helper.make_node("MatMul", ["at", "b"], ["y"])],
               [("a", F, [2, 7, 6, 3]), ("b", F, [6, 5])], [("y", F, [2, 7, 3, 5])])
    fmm = model([helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=1)],
                [("a", F, [2, 7, 6, 3]), ("b", F, [6, 5])], [("y", F, [2, 7, 3, 5])])
    assert totals(fmm) == totals(mm) == 2 * 7 * 3 * 5 * 6


def test_fused_matmul_trans_batch_at_the_level_of_the_function():
    # transBatchA moves A's first dim behind the batch: A (6, 2, 3) -> (2, 6, 3), and
    # transA then makes it (2, 3, 6): K is A's first dim, 6
    tensors = {"a": Tensor("a", "float32", (6, 2, 3), 32),
               "b": Tensor("b", "float32", (6, 5), 32),
               "y": Tensor("y", "float32", (2, 3, 5), 32)}
    node = Node(0, "f", "FusedMatMul", MS, ("a", "b"), ("y",),
                {"transA": 1, "transBatchA": 1})
    assert node_macs(node, tensors) == 2 * 3 * 5 * 6


# ---------------------------------------------------------------------- quantized

def test_integer_and_qlinear_ops_count_as_their_float_op():
    z8 = lambda name: ints(name, 0, np.uint8)  # noqa: E731
    one = lambda name: numpy_helper.from_array(np.array(0.5, np.float32), name)  # noqa
    mm = model([helper.make_node("MatMul", ["a", "b"], ["y"])],
               [("a", F, [3, 4, 6])], [("y", F, [3, 4, 5])], [weight("b", (6, 5))])
    mmi = model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                [("a", U8, [3, 4, 6])], [("y", I32, [3, 4, 5])],
                [weight("b", (6, 5), np.uint8)])
    qmm = model([helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy",
                                                    "zy"], ["y"])],
                [("a", U8, [3, 4, 6])], [("y", U8, [3, 4, 5])],
                [weight("b", (6, 5), np.uint8), one("sa"), z8("za"), one("sb"), z8("zb"),
                 one("sy"), z8("zy")])
    i2f = model([helper.make_node("MatMulIntegerToFloat", ["a", "b", "sa", "sb"], ["y"],
                                  domain=MS)],
                [("a", U8, [3, 4, 6])], [("y", F, [3, 4, 5])],
                [weight("b", (6, 5), np.uint8), one("sa"), one("sb")])
    dyn = model([helper.make_node("DynamicQuantizeMatMul", ["a", "b", "sb"], ["y"],
                                  domain=MS)],
                [("a", F, [3, 4, 6])], [("y", F, [3, 4, 5])],
                [weight("b", (6, 5), np.int8), one("sb")])
    assert totals(mmi) == totals(qmm) == totals(i2f) == totals(dyn) == totals(mm) == \
        3 * 4 * 5 * 6


def test_quantized_convs_count_as_conv():
    w, w8 = weight("w", (8, 4, 3, 3)), weight("w", (8, 4, 3, 3), np.uint8)
    z8 = ints("z", 0, np.uint8)
    s = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    conv = model([helper.make_node("Conv", ["x", "w"], ["y"])],
                 [("x", F, [1, 4, 7, 7])], [("y", F, [1, 8, 5, 5])], [w])
    ci = model([helper.make_node("ConvInteger", ["x", "w"], ["y"])],
               [("x", U8, [1, 4, 7, 7])], [("y", I32, [1, 8, 5, 5])], [w8])
    ql = model([helper.make_node("QLinearConv", ["x", "s", "z", "w", "s", "z", "s", "z"],
                                 ["y"])],
               [("x", U8, [1, 4, 7, 7])], [("y", U8, [1, 8, 5, 5])], [w8, s, z8])
    assert totals(ci) == totals(ql) == totals(conv) == 8 * 25 * 4 * 9


def test_matmul_nbits_counts_k_from_its_attribute():
    k, n, block = 32, 12, 16
    mm = model([helper.make_node("MatMul", ["a", "b"], ["y"])],
               [("a", F, [2, 3, k])], [("y", F, [2, 3, n])], [weight("b", (k, n))])
    packed = weight("bq", (n, k // block, block * 4 // 8), np.uint8)
    scales = weight("scales", (n * (k // block),))
    nbits = model([helper.make_node("MatMulNBits", ["a", "bq", "scales"], ["y"], domain=MS,
                                    K=k, N=n, bits=4, block_size=block)],
                  [("a", F, [2, 3, k])], [("y", F, [2, 3, n])], [packed, scales])
    assert totals(nbits) == totals(mm) == 2 * 3 * n * k


def test_int8_dynamic_bert_counts_the_fp32_macs(tmp_path):
    # onnxruntime's quantize_dynamic turns the MatMuls into MatMulInteger
    from onnxruntime.quantization import QuantType, quantize_dynamic
    src = Path(__file__).parent / "data" / "corpus" / "bert-dynamo.onnx"
    logging.disable(logging.WARNING)  # its advice to pre-process first
    try:
        quantize_dynamic(src, tmp_path / "int8.onnx", weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)
    dims = {"batch": 1, "seq": 16}
    fp32, int8 = from_model(onnx_load(src), dims), from_model(onnx_load(tmp_path / "int8.onnx"),
                                                              dims)
    assert "MatMulInteger" in {n.op_type for n in int8.nodes}
    a, b = mac_totals(fp32), mac_totals(int8)
    assert not a["macs_at_least"] and not b["macs_at_least"]
    assert a["matrix_macs"] == b["matrix_macs"] > 0


# ---------------------------------------------------------------------- lower bounds

def test_an_op_without_a_rule_makes_the_totals_lower_bounds():
    m = model([helper.make_node("MatMul", ["a", "b"], ["c"]),
               helper.make_node("Mystery", ["c"], ["y"], domain="example.custom")],
              [("a", F, [3, 4]), ("b", F, [4, 5])], [("y", F, [3, 5])],
              value_info=[("y", F, [3, 5])])
    m.opset_import.append(helper.make_opsetid("example.custom", 1))
    g = from_model(m)
    t = mac_totals(g)
    assert t == {"matrix_macs": 60, "macs": 60,
                 "macs_unknown_ops": ["example.custom.Mystery"], "macs_at_least": True}
    assert matrix_macs(g.nodes[1], g.tensors) == 0


def test_a_matrix_op_missing_a_shape_has_no_count():
    # a rule that cannot read the tensor it needs says so: None, never a guess
    tensors = {"y": Tensor("y", "float32", (2, 3), 32)}
    node = Node(0, "m", "MatMulIntegerToFloat", MS, ("a", "b", "sa", "sb"), ("y",), {})
    assert node_macs(node, tensors) is None


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "BiasGelu", "FastGelu"])
def test_fusions_of_element_wise_ops_have_rules(op):
    inputs = {"SkipLayerNormalization": ["x", "x", "g", "b"], "BiasGelu": ["x", "b"],
              "FastGelu": ["x", "b"]}[op]
    tensors = {n: Tensor(n, "float32", (2, 4, 8) if n in "xy" else (8,), 32)
               for n in ("x", "g", "b", "y")}
    per = {"SkipLayerNormalization": 5, "BiasGelu": 2, "FastGelu": 2}[op]
    assert node_macs(Node(0, "n", op, MS, tuple(inputs), ("y",), {}), tensors) == 64 * per


def test_report_text_json_and_html_say_at_least(tmp_path, capsys):
    import json

    import onnx

    from graphmem.cli import main
    m = model([helper.make_node("MatMul", ["a", "b"], ["c"]),
               helper.make_node("Mystery", ["c"], ["y"], domain="example.custom")],
              [("a", F, [3, 4]), ("b", F, [4, 5])], [("y", F, [3, 5])],
              value_info=[("y", F, [3, 5])])
    m.opset_import.append(helper.make_opsetid("example.custom", 1))
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    assert main(["report", str(path), "--json", "--dtype", "float32,float16"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["macs_at_least"] and data["totals"]["matrix_macs"] == 60
    assert all(r["macs_at_least"] for r in data["whatif"])
    assert main(["report", str(path), "--no-layers", "--html", str(tmp_path / "r.html")]) == 0
    text = capsys.readouterr().out
    assert ">= 60" in text and "at least 60 MAC in matrix ops" in text
    assert "example.custom.Mystery: the MACs and the roofline time are lower bounds" in text
    page = (tmp_path / "r.html").read_text()
    assert "&ge; 60</div>" in page and "no MAC rule for example.custom.Mystery" in page


@pytest.mark.parametrize("form", ["bert_opt", "bert_opt_fp16", "bert_int8_dynamic",
                                  "bert_int8_qdq", "bert_fp16"])
def test_every_deployment_form_of_bert_counts_the_unfused_macs(form):
    # tests/data/dtypes (tools/corpus/dtype_models.py): ONNX Runtime's transformer optimizer
    # (on this export it fuses SkipLayerNormalization and BiasGelu, not the attention),
    # its quantizers and fp16 converter, on the TorchScript BERT export of
    # tests/data/corpus
    data = Path(__file__).parent / "data"
    dims = {"batch": 1, "seq": 16}
    unfused = mac_totals(from_model(onnx_load(data / "corpus" / "bert-ts.onnx"), dims))
    graph = from_model(onnx_load(data / "dtypes" / f"{form}.onnx"), dims)
    deployed = mac_totals(graph)
    if form.startswith("bert_opt"):
        assert {"BiasGelu", "SkipLayerNormalization"} <= {n.op_type for n in graph.nodes}
    assert not deployed["macs_at_least"], deployed["macs_unknown_ops"]
    assert deployed["matrix_macs"] == unfused["matrix_macs"] > 0


def test_a_loaded_contrib_bert_counts_its_attention():
    # tests/data/dtypes/contrib_bert.onnx: EmbedLayerNormalization and two com.microsoft
    # Attention ops, batch 2, 8 positions, hidden 16, 2 heads
    graph = from_model(onnx_load(Path(__file__).parent / "data" / "dtypes" /
                                 "contrib_bert.onnx"))
    b, s, d = 2, 8, 16
    per_attention = b * s * d * 3 * d + 2 * b * s * s * d
    assert mac_totals(graph)["matrix_macs"] == 2 * per_attention
    assert not mac_totals(graph)["macs_at_least"]
