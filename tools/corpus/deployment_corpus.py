"""Deployment forms of models graphmem can build without torch, and graphmem on each.

Issue 34: what a deployment engineer plans is rarely the fp32 export; it is the fp16
conversion, the int8 quantization (dynamic, or static in QDQ format), the int4
MatMulNBits form, or a KV-cache decode step. ``build`` writes those forms with ONNX
Runtime's own tools, from four sources:

- ``resnet50``: the Model Zoo graph shipped with onnx (``graphmem models``), whose
  weights are ``ConstantOfShape`` constants in that "light" copy: here they become seeded
  random initializers of the same shapes (batch-norm scales and variances in [0.5, 1.5]);
- ``encoder``: ``models/transformer.py`` at BERT-base's dims (12 layers, d_model 768,
  12 heads, d_ff 3072, vocabulary 30522; seeded random weights);
- ``gpt2-decode``: the dynamo exporter's GPT-2 decode step with past key values kept in
  ``tests/data/corpus/`` (hidden size 32);
- ``decoder``: ``models/decoder.py``, a decode step as onnxruntime-genai's builder writes
  it (GroupQueryAttention, RMSNorm, ...), at TinyLlama-1.1B's dims with 2 layers.

Forms: ``fp16`` (``onnxruntime.transformers.float16.convert_float_to_float16``,
keep_io_types), ``int8-dynamic`` (``quantize_dynamic``, int8 weights), ``int8-qdq``
(``quantize_static``, QDQ format, int8 weights and uint8 activations, two random
calibration inputs), ``int16-qdq`` (the same with uint16 activations, in ORT's own
QuantizeLinear/DequantizeLinear: ``UseQDQContribOps``), ``int4``
(``MatMulNBitsQuantizer``, block 32, symmetric; it needs the ``onnx_ir`` package).
``run`` runs ``graphmem report --json`` on each file as a
user would (only ``--dim`` bindings) and writes the table between the
``<!-- deployment -->`` markers of docs/corpus.md with ``--write``::

    python -m tools.corpus.deployment_corpus build /tmp/deploy
    python -m tools.corpus.deployment_corpus run /tmp/deploy --write
"""
from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from tools import ROOT
from tools.docs.sections import publish

DOC = ROOT / "docs" / "corpus.md"
SECTION = "deployment"  # its section of docs/corpus.md

SOURCES = {
    "resnet50": {"dims": {}, "forms": ("fp32", "fp16", "int8-dynamic", "int8-qdq",
                                       "int16-qdq")},
    "encoder": {"dims": {"batch": 1, "seq": 128},
                "forms": ("fp32", "fp16", "int8-dynamic", "int8-qdq", "int16-qdq", "int4")},
    "gpt2-decode": {"dims": {"batch": 1, "seq": 1, "past_seq": 64},
                    "forms": ("fp32", "fp16", "int8-dynamic", "int4")},
    "decoder": {"dims": {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 128,
                         "total_sequence_length": 129},
                "forms": ("fp32", "fp16", "int8-dynamic", "int4")},
}


# ---------------------------------------------------------------------- sources

def resnet50(out: Path) -> Path:
    """The zoo's resnet50 with its ConstantOfShape weights made initializers."""
    from graphmem.frontend.zoo import zoo_path
    rng = np.random.default_rng(0)
    m = onnx.load(str(zoo_path("resnet50")))
    inits = {t.name: t for t in m.graph.initializer}
    kept = []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = numpy_helper.to_array(inits[n.input[0]])
            if any(k in n.output[0] for k in ("bn_s", "riv")):  # scales, variances
                value = rng.uniform(0.5, 1.5, shape).astype(np.float32)
            else:
                value = (rng.standard_normal(shape) * 0.05).astype(np.float32)
            m.graph.initializer.append(numpy_helper.from_array(value, n.output[0]))
        else:
            kept.append(n)
    del m.graph.node[:]
    m.graph.node.extend(kept)
    used = {i for n in kept for i in n.input}
    inits_kept = [t for t in m.graph.initializer if t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits_kept)
    names = {t.name for t in m.graph.initializer} | set(inits)
    inputs = [i for i in m.graph.input if i.name not in names]
    del m.graph.input[:]
    m.graph.input.extend(inputs)
    m.ir_version = max(m.ir_version, 7)  # initializers need not be graph inputs
    path = out / "resnet50-fp32.onnx"
    onnx.save(m, str(path))
    return path


def encoder(out: Path) -> Path:
    from models.transformer import build
    m = build(layers=12, d_model=768, heads=12, d_ff=3072, vocab=30522)
    path = out / "encoder-fp32.onnx"
    onnx.save(m, str(path))
    return path


def decoder(out: Path) -> Path:
    """models/decoder.py at TinyLlama-1.1B's dims with 2 layers (hidden 2048, 32 heads,
    4 key/value heads, intermediate 5632, vocabulary 32000)."""
    from models.decoder import build
    m = build(layers=2, hidden=2048, heads=32, kv_heads=4, ffn=5632, vocab=32000,
              max_length=2048)
    path = out / "decoder-fp32.onnx"
    onnx.save(m, str(path))
    return path


def gpt2_decode(out: Path) -> Path:
    path = out / "gpt2-decode-fp32.onnx"
    path.write_bytes((ROOT / "tests" / "data" / "corpus" / "gpt2-past-dynamo.onnx").read_bytes())
    return path


# ---------------------------------------------------------------------- forms

def fp16(src: Path, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(dst))


def int8_dynamic(src: Path, dst: Path) -> None:
    """quantize_dynamic, int8 weights. A model with ORT's own ops (the transformer
    optimizer's output, a genai decoder) is typed first by ORT's symbolic shape inference,
    as ORT's quantization pre-processing does: the quantizer needs the type of every
    MatMul input, and onnx's inference knows no com.microsoft op."""
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic
    m = onnx.load(str(src), load_external_data=False)
    if not any(n.domain == "com.microsoft" for n in m.graph.node):
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        return
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    typed = SymbolicShapeInference.infer_shapes(onnx.load(str(src)), auto_merge=True)
    with tempfile.TemporaryDirectory(prefix="int8-dynamic-") as tmp:
        path = Path(tmp) / src.name
        onnx.save(typed, str(path))
        quantize_dynamic(path, dst, weight_type=QuantType.QInt8)


def int8_qdq(src: Path, dst: Path, dims: dict[str, int], activations: str = "QUInt8",
             extra: dict | None = None) -> None:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    m = onnx.load(str(src), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = []
    for _ in range(2):
        feed = {}
        for vi in m.graph.input:
            if vi.name in inits:
                continue
            tt = vi.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param]
                     for d in tt.shape.dim]
            if tt.elem_type == onnx.TensorProto.INT64:
                feed[vi.name] = rng.integers(0, 100, shape).astype(np.int64)
            else:
                feed[vi.name] = rng.standard_normal(shape).astype(np.float32)
        feeds.append(feed)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ,
                    weight_type=QuantType.QInt8,
                    activation_type=getattr(QuantType, activations), extra_options=extra)


def int4(src: Path, dst: Path) -> None:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    q = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=32, is_symmetric=True)
    q.process()
    q.model.save_model_to_file(str(dst))


def cmd_build(ns) -> int:
    out = Path(ns.dir)
    out.mkdir(parents=True, exist_ok=True)
    logging.disable(logging.WARNING)  # the quantizers' advice to pre-process
    failures = {}
    makers = {"resnet50": resnet50, "encoder": encoder, "gpt2-decode": gpt2_decode,
              "decoder": decoder}
    for name, spec in SOURCES.items():
        if ns.models and name not in ns.models.split(","):
            continue
        src = makers[name](out)
        print(f"wrote {src}", flush=True)
        for form in spec["forms"]:
            if form == "fp32":
                continue
            dst = out / f"{name}-{form}.onnx"
            try:
                if form == "fp16":
                    fp16(src, dst)
                elif form == "int8-dynamic":
                    int8_dynamic(src, dst)
                elif form == "int8-qdq":
                    int8_qdq(src, dst, spec["dims"])
                elif form == "int16-qdq":
                    int8_qdq(src, dst, spec["dims"], "QUInt16", {"UseQDQContribOps": True})
                else:
                    int4(src, dst)
                print(f"wrote {dst}", flush=True)
            except Exception as exc:  # recorded in the table, not hidden
                failures[dst.name] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                print(f"failed {dst.name}: {failures[dst.name]}", flush=True)
    (out / "build-failures.json").write_text(json.dumps(failures, indent=1))
    return 0


# ---------------------------------------------------------------------- run

def graphmem(*args, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphmem", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def quantized_ops(path: Path) -> str:
    """The deployment ops the file holds (DequantizeLinear, MatMulInteger, ...)."""
    m = onnx.load(str(path), load_external_data=False)
    ops = sorted({n.op_type for n in m.graph.node} & {
        "DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
        "ConvInteger", "QLinearConv", "QLinearMatMul", "MatMulNBits", "Cast"})
    return ", ".join(ops) or "–"


def run_one(path: Path, dims: dict[str, int]) -> dict:
    dim_args = [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]
    row = {"file_bytes": path.stat().st_size, "ops": quantized_ops(path)}
    proc = graphmem("report", path, *dim_args, "--json", "--no-layers")
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return row
    t = json.loads(proc.stdout)["totals"]
    row.update({k: t[k] for k in ("weight_bytes", "weight_bytes_dequantized",
                                  "weight_bytes_by_dtype", "matrix_macs", "macs_at_least",
                                  "macs_unknown_ops", "arena_bytes")})
    return row


def _mib(v) -> str:
    return "–" if v is None else f"{v / 2**20:,.2f}"


def _count(n: int) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.3f} {unit}"
    return f"{n:,}"


def table(rows: list[dict]) -> str:
    lines = ["| model | form | bindings | file MiB | weights as stored MiB | stored as | "
             "dequantized MiB | MACs (matrix ops) | arena MiB | deployment ops | failure |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---|---|"]
    for r in rows:
        dims = " ".join(f"{k}={v}" for k, v in r["dims"].items()) or "fixed"
        if "error" in r:
            lines.append(f"| {r['model']} | {r['form']} | {dims} | {_mib(r.get('file_bytes'))} "
                         f"| – | – | – | – | – | {r.get('ops', '–')} | "
                         f"{r['error'].replace('|', chr(92) + '|')[:200]} |")
            continue
        kinds = ", ".join(f"{d} {100 * b / max(r['weight_bytes'], 1):.0f}%"
                          for d, b in r["weight_bytes_by_dtype"].items())
        macs = ("≥ " if r["macs_at_least"] else "") + _count(r["matrix_macs"])
        if r["macs_at_least"]:
            macs += f" (no rule: {', '.join(r['macs_unknown_ops'])})"
        lines.append(
            f"| {r['model']} | {r['form']} | {dims} | {_mib(r['file_bytes'])} | "
            f"{_mib(r['weight_bytes'])} | {kinds} | {_mib(r['weight_bytes_dequantized'])} | "
            f"{macs} | {_mib(r['arena_bytes'])} | {r['ops']} | |")
    return "\n".join(lines)


def cmd_run(ns) -> int:
    src = Path(ns.dir)
    failures = json.loads((src / "build-failures.json").read_text()) \
        if (src / "build-failures.json").exists() else {}
    rows = []
    for name, spec in SOURCES.items():
        for form in spec["forms"]:
            path = src / f"{name}-{form}.onnx"
            row = {"model": name, "form": form, "dims": spec["dims"]}
            if path.name in failures:
                row["error"] = f"build: {failures[path.name]}"
            elif not path.exists():
                continue
            else:
                row.update(run_one(path, spec["dims"]))
            rows.append(row)
            print(json.dumps(row), flush=True)
    import onnxruntime
    body = (f"Generated by `python -m tools.corpus.deployment_corpus build DIR` and `run DIR "
            f"--write` (onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}). "
            "MiB = 2^20 bytes. *weights as stored*: `report`'s `weight_bytes`, the weights "
            "read by running nodes at the size the file stores them; *dequantized*: the "
            "float bytes folding a weight's DequantizeLinear makes (`weight_bytes_dequantized`)"
            "; *MACs*: `matrix_macs`, ≥ where an op has no rule; *arena*: the planned "
            "arena.\n\n" + table(rows))
    return publish(DOC, SECTION, body, ns.write)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write the deployment forms into DIR")
    b.add_argument("dir")
    b.add_argument("--models", help="comma-separated subset of " + ",".join(SOURCES))
    b.set_defaults(func=cmd_build)
    r = sub.add_parser("run", help="graphmem report on every file of DIR")
    r.add_argument("dir")
    r.add_argument("--write", action="store_true", help="rewrite the table in docs/corpus.md")
    r.set_defaults(func=cmd_run)
    ns = p.parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
