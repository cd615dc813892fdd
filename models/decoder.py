"""One decode step of a Llama-style decoder, written as onnxruntime-genai's model builder
writes it for ONNX Runtime: ORT's own ops, a key/value cache in and out.

- ``SimplifiedLayerNormalization`` (RMSNorm, ORT's op in the standard domain) and
  ``SkipSimplifiedLayerNormalization`` (residual add and RMSNorm in one);
- one packed QKV ``MatMul`` per layer into ``GroupQueryAttention`` (grouped key/value
  heads, rotary embedding inside: ``do_rotary``, cos and sin caches);
- ``seqlens_k`` and ``total_sequence_length`` computed from the attention mask
  (ReduceSum - 1; Shape, Gather, Cast), as the builder does;
- a SiLU MLP and the logits.

Inputs: ``input_ids`` [batch_size, sequence_length], ``attention_mask`` [batch_size,
total_sequence_length], ``past_key_values.N.key|value`` [batch_size, kv_heads,
past_sequence_length, head_size]; outputs ``logits`` and ``present.N.key|value``
[batch_size, kv_heads, total_sequence_length, head_size] (``present_dims=False``: declared
with unnamed dims, which some writers leave). Bind a decode step with ``--dim
batch_size=1 --dim sequence_length=1 --dim past_sequence_length=P --dim
total_sequence_length=P+1``. ``int4=True`` writes every weight MatMul as MatMulNBits
(4 bits, blocks of 32 along K, a float scale per block: the builder's int4 form), with
seeded random packed weights.

    python models/decoder.py --out decoder.onnx [--int4] [--layers 2 --hidden 64]
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def build(layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
          ffn: int = 128, vocab: int = 100, max_length: int = 256, seed: int = 0,
          present_dims: bool = True, int4: bool = False) -> onnx.ModelProto:
    """The decoder of ``layers`` blocks (see the module docstring)."""
    rng = np.random.default_rng(seed)
    head = hidden // heads
    nodes, inits = [], []

    def w(name, *shape, scale=0.05, mean=0.0):
        value = (mean + rng.standard_normal(shape) * scale).astype(np.float32)
        inits.append(numpy_helper.from_array(value, name))
        return name

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def matmul(x, name, k, n, out=None):
        """x @ W[k, n]: a MatMul of a float weight, or MatMulNBits of a packed one."""
        out = out or f"{name}_out"
        if not int4:
            return op("MatMul", [x, w(name, k, n)], out)
        blocks = -(-k // 32)
        packed = rng.integers(0, 256, (n, blocks, 16), dtype=np.uint8)
        inits.append(numpy_helper.from_array(packed, f"{name}_q4"))
        w(f"{name}_scales", n * blocks, scale=0.002, mean=0.01)
        return op("MatMulNBits", [x, f"{name}_q4", f"{name}_scales"], out,
                  domain=MS, K=k, N=n, bits=4, block_size=32)

    def op(kind, ins, outs, domain="", **attrs):
        outs = [outs] if isinstance(outs, str) else outs
        nodes.append(helper.make_node(kind, ins, outs, name=f"{kind}_{len(nodes)}",
                                      domain=domain, **attrs))
        return outs[0]

    batch, seq, past, total = ("batch_size", "sequence_length", "past_sequence_length",
                               "total_sequence_length")
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            [batch, total])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, vocab])]
    for i in range(layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kv}", TensorProto.FLOAT, [batch, kv_heads, past, head]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", TensorProto.FLOAT,
                [batch, kv_heads, total, head] if present_dims else [None] * 4))

    x = op("Gather", [w("embed_tokens", vocab, hidden), "input_ids"], "embeddings")
    mask_sum = op("ReduceSum", ["attention_mask", const("axis_1", np.array([1], np.int64))],
                  "mask_sum", keepdims=0)
    seqlens = op("Cast", [op("Sub", [mask_sum, const("one", np.array(1, np.int64))],
                             "seqlens_k_64")], "seqlens_k", to=TensorProto.INT32)
    total_64 = op("Gather", [op("Shape", ["attention_mask"], "mask_shape"),
                             const("index_1", np.array(1, np.int64))], "total_64", axis=0)
    total_len = op("Cast", [total_64], "total_sequence_length", to=TensorProto.INT32)
    angles = np.arange(max_length)[:, None] / 10000 ** (np.arange(0, head, 2) / head)
    const("cos_cache", np.cos(angles).astype(np.float32))
    const("sin_cache", np.sin(angles).astype(np.float32))

    residual = x
    normed = op("SimplifiedLayerNormalization", [x, w("norm_0", hidden, mean=1.0)], "norm_0_out",
                axis=-1, epsilon=1e-5)
    for i in range(layers):
        qkv = matmul(normed, f"qkv_{i}", hidden, hidden + 2 * kv_heads * head)
        attn = op("GroupQueryAttention",
                  [qkv, "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value",
                   seqlens, total_len, "cos_cache", "sin_cache"],
                  [f"attn_{i}_out", f"present.{i}.key", f"present.{i}.value"],
                  domain=MS, num_heads=heads, kv_num_heads=kv_heads, do_rotary=1)
        o = matmul(attn, f"o_proj_{i}", hidden, hidden)
        post = op("SkipSimplifiedLayerNormalization",
                  [o, residual, w(f"post_norm_{i}", hidden, mean=1.0)],
                  [f"post_norm_{i}_out", "", "", f"residual_{i}_attn"], domain=MS,
                  epsilon=1e-5)
        gate = matmul(post, f"gate_{i}", hidden, ffn)
        up = matmul(post, f"up_{i}", hidden, ffn)
        silu = op("Mul", [gate, op("Sigmoid", [gate], f"gate_{i}_sigmoid")], f"silu_{i}")
        down = matmul(op("Mul", [silu, up], f"mlp_{i}"), f"down_{i}", ffn, hidden)
        normed = op("SkipSimplifiedLayerNormalization",
                    [down, f"residual_{i}_attn", w(f"norm_{i + 1}", hidden, mean=1.0)],
                    [f"norm_{i + 1}_out", "", "", f"residual_{i}_mlp"], domain=MS,
                    epsilon=1e-5)
        residual = f"residual_{i}_mlp"
    matmul(normed, "lm_head", hidden, vocab, out="logits")
    graph = helper.make_graph(nodes, "decoder", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(MS, 1)], ir_version=8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--int4", action="store_true")
    ns = ap.parse_args()
    onnx.save(build(ns.layers, ns.hidden, ns.heads, ns.kv_heads, ns.ffn, ns.vocab,
                    int4=ns.int4), ns.out)


if __name__ == "__main__":
    main()
