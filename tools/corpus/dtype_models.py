"""Write the small models of tests/data/dtypes/: the deployment forms of a real export
(tests/data/corpus/bert-ts.onnx, the TorchScript export of a BERT-style encoder) and
in the dtypes verify must judge exactly (issue 35):

- ``bert_fp16.onnx``: onnxruntime.transformers.float16.convert_float_to_float16;
- ``bert_opt.onnx``: ONNX Runtime's transformer optimizer (EmbedLayerNormalization,
  Attention, SkipLayerNormalization, FastGelu: com.microsoft ops), float32;
- ``bert_opt_fp16.onnx``: the same, then float16;
- ``bert_int8_dynamic.onnx``: onnxruntime.quantization.quantize_dynamic (int8 weights,
  DynamicQuantizeLinear / MatMulInteger);
- ``bert_int8_qdq.onnx``: quantize_static in the QDQ format (QuantizeLinear /
  DequantizeLinear pairs), calibrated on 4 seeded random token batches;
- ``bf16.onnx``: a hand-built bfloat16 graph of the ops ONNX Runtime's CPU provider has
  bfloat16 kernels for (Cast, LayerNormalization, Transpose, Concat);
- ``contrib_bert.onnx``: EmbedLayerNormalization and two Attention ops (com.microsoft),
  whose integer inputs are indices and a 0/1 mask;
- ``ir14.onnx``: a float32 MatMul/Add/Softmax graph at opset 17 and IR version 14, as
  onnx 1.23's ``helper.make_model`` writes it.

    python -m tools.corpus.dtype_models            # rewrites tests/data/dtypes/*.onnx
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tools import ROOT

OUT = ROOT / "tests" / "data" / "dtypes"
BERT = ROOT / "tests" / "data" / "corpus" / "bert-ts.onnx"


def fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    return convert_float_to_float16(model, keep_io_types=True)


def optimized(path: Path, half: bool = False) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model
    opt = optimize_model(str(path), model_type="bert", num_heads=0, hidden_size=0,
                         opt_level=0, use_gpu=False)
    if not any(o.domain == "com.microsoft" for o in opt.model.opset_import):
        opt.model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    if half:
        opt.convert_float_to_float16(keep_io_types=True, use_symbolic_shape_infer=True)
    return opt.model


def dynamic_int8(path: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8)


def static_qdq(path: Path, out: Path) -> None:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.data = iter([{"input_ids": rng.integers(0, 100, [2, 8]),
                               "attention_mask": np.ones([2, 8], np.int64),
                               "token_type_ids": rng.integers(0, 2, [2, 8])}
                              for _ in range(4)])

        def get_next(self):
            return next(self.data, None)
    quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


def bf16() -> onnx.ModelProto:
    B, F = TensorProto.BFLOAT16, TensorProto.FLOAT
    rng = np.random.default_rng(0)
    scale = numpy_helper.from_array(rng.uniform(0.5, 1.5, [16]).astype(np.float32), "scale")
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=B),
             helper.make_node("Cast", ["scale"], ["sb"], to=B),
             helper.make_node("LayerNormalization", ["xb", "sb"], ["ln"], axis=-1),
             helper.make_node("Transpose", ["ln"], ["tr"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["xb"], ["tx"], perm=[0, 2, 1]),
             helper.make_node("Concat", ["tr", "tx"], ["cat"], axis=1),
             helper.make_node("Cast", ["cat"], ["y"], to=F)]
    g = helper.make_graph(nodes, "bf16", [helper.make_tensor_value_info("x", F, [2, 8, 16])],
                          [helper.make_tensor_value_info("y", F, [2, 32, 8])], [scale])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    return m


def contrib() -> onnx.ModelProto:
    """EmbedLayerNormalization (ids into a 30-row table, segment ids into a 2-row one),
    Attention with its mask index, and a second Attention reading the 0/1 mask input."""
    F, I = TensorProto.FLOAT, TensorProto.INT32
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)
    inits = [w("word", 30, 16), w("pos", 8, 16), w("seg", 2, 16), w("gamma", 16),
             w("beta", 16), w("qkv", 16, 48), w("qkv_b", 48)]
    ms = "com.microsoft"
    nodes = [helper.make_node("EmbedLayerNormalization",
                              ["ids", "segments", "word", "pos", "seg", "gamma", "beta", "mask"],
                              ["emb", "mask_index"], domain=ms, epsilon=1e-5),
             helper.make_node("Attention", ["emb", "qkv", "qkv_b", "mask_index"], ["att"],
                              domain=ms, num_heads=2),
             helper.make_node("Attention", ["att", "qkv", "qkv_b", "mask"], ["att2"],
                              domain=ms, num_heads=2),
             helper.make_node("Add", ["att2", "emb"], ["y"])]
    g = helper.make_graph(nodes, "contrib",
                          [helper.make_tensor_value_info(n, I, [2, 8])
                           for n in ("ids", "segments", "mask")],
                          [helper.make_tensor_value_info("y", F, [2, 8, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(ms, 1)])
    m.ir_version = 8
    return m


def ir14() -> onnx.ModelProto:
    F = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.uniform(-1, 1, [16, 16]).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.uniform(-1, 1, [16]).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Softmax", ["a"], ["s"], axis=-1),
             helper.make_node("Mul", ["s", "x"], ["y"])]
    g = helper.make_graph(nodes, "ir14", [helper.make_tensor_value_info("x", F, [4, 16])],
                          [helper.make_tensor_value_info("y", F, [4, 16])], [w, b])
    # onnx's own IR version (14 with onnx 1.23) at an opset ONNX Runtime 1.31 knows
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert m.ir_version == 14 or onnx.IR_VERSION != 14, m.ir_version
    return m


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    bert = onnx.load(str(BERT))
    onnx.save(fp16(bert), str(OUT / "bert_fp16.onnx"))
    onnx.save(optimized(BERT), str(OUT / "bert_opt.onnx"))
    onnx.save(optimized(BERT, half=True), str(OUT / "bert_opt_fp16.onnx"))
    with tempfile.TemporaryDirectory() as tmp:
        dynamic_int8(BERT, OUT / "bert_int8_dynamic.onnx")
        pre = Path(tmp) / "bert.onnx"
        from onnxruntime.quantization.shape_inference import quant_pre_process
        quant_pre_process(str(BERT), str(pre), skip_symbolic_shape=True)
        static_qdq(pre, OUT / "bert_int8_qdq.onnx")
    onnx.save(bf16(), str(OUT / "bf16.onnx"))
    onnx.save(contrib(), str(OUT / "contrib_bert.onnx"))
    onnx.save(ir14(), str(OUT / "ir14.onnx"))
    for p in sorted(OUT.glob("*.onnx")):
        m = onnx.load(str(p))
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{p.name}: {p.stat().st_size:,} bytes, IR {m.ir_version}, {len(m.graph.node)} "
              f"nodes, ops {', '.join(ops)}")
    return 0


if __name__ == "__main__":
    argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                            description=__doc__.splitlines()[0]).parse_args()
    sys.exit(main())
