"""A small pre-norm transformer encoder, written as ONNX the way exporters write it.

Symbolic ``batch`` and ``seq`` dims; the head split is done with Shape -> Gather ->
Concat -> Reshape chains (what PyTorch exports), so planning it exercises shape
inference with data propagation and the folding of shape arithmetic.

    python models/transformer.py --out transformer.onnx [--layers 2 --d-model 64]
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(layers: int = 2, d_model: int = 64, heads: int = 4, d_ff: int = 256,
          vocab: int = 100, seed: int = 0, opset: int = 17) -> onnx.ModelProto:
    """An encoder of ``layers`` blocks over token ids [batch, seq] -> logits [batch, seq, vocab]."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    dh = d_model // heads

    def w(name, *shape, scale=0.05):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def op(kind, ins, out, **attrs):
        nodes.append(helper.make_node(kind, ins, [out], name=f"{kind}_{len(nodes)}", **attrs))
        return out

    const("zero", [0]); const("one", [1]); const("heads_dh", [heads, dh]); const("d", [d_model])
    x = op("Gather", [w("embed", vocab, d_model), "ids"], "emb")
    # dynamic shape pieces: batch and seq from the input
    shp = op("Shape", ["ids"], "ids_shape")
    b = op("Gather", [shp, "zero"], "batch_dim")
    s = op("Gather", [shp, "one"], "seq_dim")
    split_shape = op("Concat", [b, s, "heads_dh"], "split_shape", axis=0)
    merge_shape = op("Concat", [b, s, "d"], "merge_shape", axis=0)
    for i in range(layers):
        p = f"l{i}_"
        h = op("LayerNormalization", [x, w(p + "ln1_g", d_model, scale=1.0), w(p + "ln1_b", d_model)],
               p + "ln1", axis=-1)
        heads_of = {}
        for name in ("q", "k", "v"):
            t = op("MatMul", [h, w(p + name + "_w", d_model, d_model)], p + name + "_mm")
            t = op("Add", [t, w(p + name + "_b", d_model)], p + name)
            t = op("Reshape", [t, split_shape], p + name + "_split")
            perm = [0, 2, 3, 1] if name == "k" else [0, 2, 1, 3]
            heads_of[name] = op("Transpose", [t], p + name + "_heads", perm=perm)
        scores = op("MatMul", [heads_of["q"], heads_of["k"]], p + "scores")
        scaled = op("Mul", [scores, const(p + "scale", np.float32(1 / np.sqrt(dh)), np.float32)],
                    p + "scaled")
        probs = op("Softmax", [scaled], p + "probs", axis=-1)
        ctx = op("MatMul", [probs, heads_of["v"]], p + "ctx")
        ctx = op("Transpose", [ctx], p + "ctx_t", perm=[0, 2, 1, 3])
        ctx = op("Reshape", [ctx, merge_shape], p + "ctx_merged")
        attn = op("MatMul", [ctx, w(p + "o_w", d_model, d_model)], p + "attn_mm")
        attn = op("Add", [attn, w(p + "o_b", d_model)], p + "attn")
        x = op("Add", [x, attn], p + "res1")
        h = op("LayerNormalization", [x, w(p + "ln2_g", d_model, scale=1.0), w(p + "ln2_b", d_model)],
               p + "ln2", axis=-1)
        f = op("MatMul", [h, w(p + "ff1_w", d_model, d_ff)], p + "ff1_mm")
        f = op("Add", [f, w(p + "ff1_b", d_ff)], p + "ff1")
        f = op("Gelu", [f], p + "gelu") if opset >= 20 else op("Relu", [f], p + "gelu")
        f = op("MatMul", [f, w(p + "ff2_w", d_ff, d_model)], p + "ff2_mm")
        f = op("Add", [f, w(p + "ff2_b", d_model)], p + "ff2")
        x = op("Add", [x, f], p + "res2")
    h = op("LayerNormalization", [x, w("lnf_g", d_model, scale=1.0), w("lnf_b", d_model)], "lnf", axis=-1)
    op("MatMul", [h, w("head_w", d_model, vocab)], "logits")
    graph = helper.make_graph(
        nodes, "transformer",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="graphmem-models")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="transformer.onnx")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    args = ap.parse_args()
    onnx.save(build(args.layers, args.d_model, args.heads), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
