"""Deployment forms (issue 33): what pipelines make of a model, planned beside ONNX
Runtime's own memory pattern at each optimization level.

    python -m tools.corpus.deploy_forms run [--models squeezenet,resnet50,bert-ts] [--write]

For each model available without torch (the Model Zoo graphs shipped with onnx, the
corpus files in tests/data/corpus), bound to static dims, three forms:

- *exported*: the file as it is;
- *transformers*: ``onnxruntime.transformers.optimizer.optimize_model`` (model type
  bert or gpt2, ``opt_level=0``: the transformer fusions only) for the corpus models;
- *qdq-int8*: ``onnxruntime.quantization.quantize_static`` (QDQ, uint8 activations, int8
  weights, a random calibration reader of 4 samples) for the zoo's CNNs, on the model
  with its weights folded into initializers (ORT's basic level saved, the zoo graphs make
  their weights with ConstantOfShape);
- *qdq-int8, Sum as Add*: the same with each two-input Sum written as Add first (ResNet
  50's residual additions: the zoo's Caffe2 graph has Sum, which the quantizer leaves in
  float; a PyTorch export has Add, which it quantizes and ORT fuses into QLinearAdd).

For each form: ``graphmem plan`` as given and with ``--ort-optimize basic|extended|all``
(the arena, graph inputs and outputs inside it), ``graphmem verify --ort-optimize all``,
what ORT took to optimize at each level (session build and save, in process), and ORT's
own pattern block at each level (``tools/bench/ort_pattern.py``, graph inputs and outputs left
out, so they are added to it for the bar). ``--write`` puts the table between
``<!-- deploy -->`` markers in docs/corpus.md. ``--from DIR`` adds the forms
``python -m tools.corpus.deployment_corpus build DIR`` wrote (issue 34's: ResNet-50 with seeded random
weights as fp32, fp16, int8 dynamic and int8 QDQ; the GPT-2 decode step as fp32, fp16,
int8 dynamic), each as it is::

    python -m tools.corpus.deployment_corpus build /tmp/deploy --models resnet50,gpt2-decode
    python -m tools.corpus.deploy_forms run --from /tmp/deploy --write

``fullsize DIR`` does the same for the full-size exports ``python -m tools.corpus.export_fullsize DIR``
wrote (issue 33's bar): each export bound to its dims (``static``), ORT-saved at each
level, the transformer optimizer's output, int8 QDQ (the CNNs), fp16, and for the others
int8 dynamic, int4 (MatMulNBits) and int8 dynamic of the transformers form, and the
transformer optimizer's GPU output in float16 (``use_gpu``, then float16: a CUDA
deployment's file; ORT's CPU provider runs it too), and the forms of ORT's tools the
others leave out: quantize_static's QOperator format (``qop-int8``, the CNNs, per
channel), ORT's optimizer's graph at ALL of the QDQ and of the fp16 form
(``qdq-int8.ort-all``, ``fp16.ort-all``), MatMulNBitsQuantizer's QDQ format (``int4-qdq``:
INT4 weights dequantized by block at opset 21; a file ORT itself refuses is not made)
and ORT's optimizer's graph at EXTENDED with its weights in a file beside it
(``external.ort-extended``); written into DIR beside it with
DIR/README.txt listing the files and their ``--dim`` bindings; each form
is planned as given and with ``--ort-optimize all`` (``--levels`` for more), verified at
all, and measured against ORT's pattern at ALL. Rows are kept in DIR/rows.json as they
are made (a run resumes; ``--redo`` measures again), ``--write`` puts the table between
``<!-- deploy-fullsize -->`` markers::

    python -m tools.corpus.deploy_forms fullsize /tmp/fullsize --write
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import ROOT
from tools.docs.sections import publish

DOC = ROOT / "docs" / "corpus.md"
SECTION = "deploy"  # its section of docs/corpus.md (the full-size runs: --section)
LEVELS = ("basic", "extended", "all")
CORPUS = ROOT / "tests" / "data" / "corpus"

# model -> (dims, transformer model type or None, quantize?); "add": quantize with its
# two-input Sums as Adds too
MODELS: dict[str, tuple[dict[str, int], str | None, bool | str]] = {
    "squeezenet": ({}, None, True), "resnet50": ({}, None, "add"),
    "shufflenet": ({}, None, True), "inception_v1": ({}, None, False),
    "inception_v2": ({}, None, False), "densenet121": ({}, None, False),
    "bvlc_alexnet": ({}, None, False), "zfnet512": ({}, None, False),
    "vgg19": ({}, None, False),
    "bert-ts": ({"batch": 1, "seq": 16}, "bert", False),
    "bert-dynamo": ({"batch": 1, "seq": 16}, "bert", False),
    "gpt2-past-ts": ({"batch": 1, "seq": 1, "past_seq": 16}, "gpt2", False),
    "gpt2-past-dynamo": ({"batch": 1, "seq": 1, "past_seq": 16}, "gpt2", False),
}


def source(name: str) -> Path:
    from graphmem.frontend.zoo import zoo_path
    return zoo_path(name) or CORPUS / f"{name}.onnx"


def bound(path: Path, dims: dict[str, int], out: Path) -> Path:
    """``path`` with its symbolic input dims bound and its outputs' shapes written (ORT's
    pattern tool pre-binds outputs), weights inside."""
    import graphmem
    from graphmem.frontend.reader import bind_dims, read_model
    model = read_model(path, load_weights=True)
    if dims:
        graph = graphmem.load(path, dims)
        bind_dims(model, dims)
        for o in model.graph.output:
            shape = o.type.tensor_type.shape
            shape.ClearField("dim")
            for d in graph.tensors[o.name].shape:
                shape.dim.add().dim_value = int(d)
    out.write_bytes(model.SerializeToString())
    return out


def saved_at(path: Path, level: str, out: Path, external: bool = False) -> Path:
    """ORT's optimizer's graph of ``path`` at ``level`` (CPU), saved as ``out``;
    ``external``: with its weights in a file beside it, as ``--ort-optimize`` saves them
    (graphmem.frontend.ort_optimize.weights_beside)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                          f"ORT_ENABLE_{level.upper()}")
    so.optimized_model_filepath = str(out)
    so.log_severity_level = 4
    if external:
        from graphmem.frontend.ort_optimize import weights_beside
        weights_beside(so, out)
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return out


def transformers_form(path: Path, model_type: str, out: Path, gpu_fp16: bool = False
                      ) -> Path:
    """The transformer optimizer's fusions (opt_level 0: no ORT session); ``gpu_fp16``:
    for a GPU (``use_gpu``) and then in float16 with float inputs and outputs, as a CUDA
    deployment runs it (``optimizer.py --use_gpu --float16``)."""
    from onnxruntime.transformers.optimizer import optimize_model
    opt = optimize_model(str(path), model_type=model_type, num_heads=0, hidden_size=0,
                         opt_level=0, use_gpu=gpu_fp16)
    if gpu_fp16:
        opt.convert_float_to_float16(keep_io_types=True)
    opt.save_model_to_file(str(out))
    return out


def qdq_form(path: Path, out: Path, work: Path, operators: bool = False) -> Path:
    """quantize_static of ``path`` (QDQ; ``operators``: the QOperator format, QLinearConv
    and ORT's QLinear ops, weights per channel)."""
    import numpy as np
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    folded = saved_at(path, "basic", work / f"{path.stem}.folded.onnx")
    model = onnx.load(str(folded))
    if model.ir_version < 4:  # ORT's saved file keeps IR 3 with initializers not inputs
        model.ir_version = 7  # (opset 9 needs IR >= 4 for that), as the quantizer reads it
        read = {t for n in model.graph.node for t in n.input}
        inits = {t.name for t in model.graph.initializer}
        keep = [i for i in model.graph.input if i.name in read and i.name not in inits]
        del model.graph.input[:]
        model.graph.input.extend(keep)  # the weights' shape inputs ORT folded away
        onnx.save_model(model, str(folded))
    inits = {t.name for t in model.graph.initializer}
    inputs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim])
              for i in model.graph.input if i.name not in inits]

    class Random(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{n: rng.standard_normal(s).astype(np.float32)
                                  for n, s in inputs} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)
    quantize_static(str(folded), str(out), Random(),
                    quant_format=QuantFormat.QOperator if operators else QuantFormat.QDQ,
                    per_channel=operators, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return out


def sum_as_add(path: Path, out: Path) -> Path:
    """``path`` with each two-input Sum written as Add (the same op on two inputs)."""
    import onnx
    model = onnx.load(str(path))
    for node in model.graph.node:
        if node.op_type == "Sum" and node.domain in ("", "ai.onnx") and len(node.input) == 2:
            node.op_type = "Add"
    onnx.save_model(model, str(out))
    return out


def graphmem_cmd(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphmem", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)


def first_line(proc) -> str:
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("graphmem:")]
    return (lines or proc.stderr.strip().splitlines()[-1:] or ["no output"])[-1][:300]


def measure_form(path: Path, work: Path, levels: tuple[str, ...] = LEVELS) -> dict:
    """One form through graphmem and ORT: ``plan`` as given and at each of ``levels``,
    ``verify --ort-optimize all``, ORT's pattern (off and at each of ``levels``)."""
    import graphmem
    from tools.bench import ort_pattern
    from graphmem.frontend.ort_optimize import cleanup, optimize
    row: dict = {"failures": []}
    try:
        graph = graphmem.load(path)
    except Exception as exc:  # noqa: BLE001 -- the row says why, the run goes on
        row["failures"].append(f"load: {str(exc).splitlines()[0][:300]}")
        graph = None
    row["nodes"] = len(graph.nodes) if graph else None
    row["io"] = (sum(graph.tensors[t].bytes for t in set(graph.inputs) | set(graph.outputs))
                 if graph else None)
    for level in ("exported", *levels):
        out = work / f"{path.stem}.{level}.plan.json"
        extra = [] if level == "exported" else ["--ort-optimize", level]
        p = graphmem_cmd("plan", path, *extra, "-o", out, "--quiet")
        if p.returncode == 0:
            row[f"arena_{level}"] = json.loads(out.read_text())["stats"]["arena_bytes"]
        else:
            row[f"arena_{level}"] = None
            row["failures"].append(f"plan {' '.join(extra)}: {first_line(p)}")
        if level != "exported":
            t0 = time.perf_counter()
            try:
                optimize(path, level)
                row[f"optimize_s_{level}"] = time.perf_counter() - t0
            finally:
                cleanup()
    p = graphmem_cmd("verify", path, "--ort-optimize", "all")
    row["verify"] = p.returncode == 0
    if p.returncode:
        row["failures"].append(f"verify --ort-optimize all: {first_line(p) if p.returncode == 2 else 'FAIL'}")
    for level in ("off", *levels) if levels == LEVELS else levels:
        m = ort_pattern.measure(path, level, timeout=1200)
        row[f"ort_{level}"] = m.get("pattern_bytes")
        if m.get("error"):
            row["failures"].append(f"ORT pattern at {level}: {m['error']}")
    a, o = row.get("arena_all"), row.get("ort_all")
    row["bar"] = None if a is None or o is None or row["io"] is None else a <= o + row["io"]
    return row


def built_forms(folder: Path) -> list[tuple[str, str, dict[str, int], Path]]:
    """(model, form, dims, path) of each file tools/corpus/deployment_corpus.py built."""
    from tools.corpus import deployment_corpus
    out = []
    for path in sorted(folder.glob("*.onnx")):
        model = next((m for m in deployment_corpus.SOURCES if path.stem.startswith(m + "-")),
                     None)
        if model is not None:
            out.append((model, path.stem[len(model) + 1:],
                        deployment_corpus.SOURCES[model]["dims"], path))
    return out


def run(names: list[str], built: Path | None = None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="deploy-forms-") as tmp:
        work = Path(tmp)
        for model, form, dims, path in built_forms(built) if built else []:
            print(f"{model} {form} (built)", file=sys.stderr, flush=True)
            row = measure_form(bound(path, dims, work / path.name), work)
            row.update(model=f"{model} (issue 34)", form=form, dims=dims)
            rows.append(row)
        for name in names:
            dims, model_type, quantize = MODELS[name]
            base = bound(source(name), dims, work / f"{name}.onnx")
            makers = [("exported", lambda: base)]
            if model_type:
                makers.append(("transformers", lambda: transformers_form(
                    base, model_type, work / f"{name}.transformers.onnx")))
            if quantize:
                makers.append(("qdq-int8", lambda: qdq_form(
                    base, work / f"{name}.qdq.onnx", work)))
            if quantize == "add":
                makers.append(("qdq-int8, Sum as Add", lambda: qdq_form(
                    sum_as_add(base, work / f"{name}.add.onnx"),
                    work / f"{name}.add.qdq.onnx", work)))
            forms = []
            for form, make in makers:
                try:
                    forms.append((form, make()))
                except Exception as exc:  # a form that cannot be made stays in the table
                    rows.append({"model": name, "form": form, "failures": [
                        f"making the form: {type(exc).__name__}: {str(exc)[:200]}"]})
            for form, path in forms:
                print(f"{name} {form}", file=sys.stderr, flush=True)
                row = measure_form(path, work)
                row.update(model=name, form=form)
                rows.append(row)
    return rows


# ---------------------------------------------------------------- full-size exports

FULL_FORMS = ("static", "ort-basic", "ort-extended", "ort-all", "transformers", "qdq-int8",
              "fp16", "int8-dynamic", "int4", "transformers-int8", "transformers-gpu-fp16",
              "qop-int8", "qdq-int8.ort-all", "fp16.ort-all", "int4-qdq",
              "external.ort-extended")


def int8_dynamic_form(path: Path, out: Path) -> Path:
    from tools.corpus.deployment_corpus import int8_dynamic
    int8_dynamic(path, out)
    return out


def int4_form(path: Path, out: Path) -> Path:
    from tools.corpus.deployment_corpus import int4
    int4(path, out)
    return out


def fp16_form(path: Path, out: Path) -> Path:
    from tools.corpus.deployment_corpus import fp16
    fp16(path, out)
    return out


def full_forms(folder: Path, models: list[str] | None, forms: tuple[str, ...],
               exporters: tuple[str, ...] = ("ts", "dynamo"), make: bool = True
               ) -> list[tuple[str, str, str, Path, str]]:
    """Write the deploy forms of each export ``tools/corpus/export_fullsize.py`` wrote into
    ``folder`` beside it (a form already there is kept) and list them: (model, exporter,
    form, path, "" or why it could not be made). ``static``: the export with its dims
    bound as ``fullsize.json`` says; every other form is made from that one."""
    spec = json.loads((folder / "fullsize.json").read_text())
    out = []
    for model in models or list(spec):
        dims, model_type, cnn = (spec[model]["dims"], spec[model]["model_type"],
                                 spec[model]["cnn"])
        for exporter in exporters:
            src = folder / f"{model}-{exporter}.onnx"
            if not src.exists():
                continue
            stem = folder / f"{model}-{exporter}"
            static = Path(f"{stem}.static.onnx")
            makers = {"static": lambda: bound(src, dims, static)}

            def bound_() -> Path:  # the static form, made first where it is not there
                return _made(static, makers["static"])

            for lv in LEVELS:
                makers[f"ort-{lv}"] = (lambda lv=lv: saved_at(static, lv,
                                                               Path(f"{stem}.ort-{lv}.onnx")))
            if model_type:
                makers["transformers"] = lambda: transformers_form(
                    static, model_type, Path(f"{stem}.transformers.onnx"))
                makers["transformers-gpu-fp16"] = lambda: transformers_form(
                    static, model_type, Path(f"{stem}.transformers-gpu-fp16.onnx"),
                    gpu_fp16=True)
            if cnn:
                makers["qdq-int8"] = lambda: _qdq_in_temp(bound_(), Path(f"{stem}.qdq-int8.onnx"))
            else:  # what LLM and encoder deployments quantize to
                makers["int8-dynamic"] = lambda: int8_dynamic_form(
                    static, Path(f"{stem}.int8-dynamic.onnx"))
                makers["int4"] = lambda: int4_form(static, Path(f"{stem}.int4.onnx"))
                if model_type:  # quantize_dynamic after the fusions: QAttention, ...
                    makers["transformers-int8"] = lambda: int8_dynamic_form(
                        Path(f"{stem}.transformers.onnx"),
                        Path(f"{stem}.transformers-int8.onnx"))
            makers["fp16"] = lambda: fp16_form(bound_(), Path(f"{stem}.fp16.onnx"))
            # forms ORT's tools make that the ones above do not: QOperator ops, the
            # optimizer's graph of a quantized or float16 model, int4 weights
            # dequantized by block (opset 21), weights in a file beside the model
            if cnn:
                makers["qop-int8"] = lambda: _qdq_in_temp(
                    bound_(), Path(f"{stem}.qop-int8.onnx"), operators=True)
                makers["qdq-int8.ort-all"] = lambda: saved_at(
                    _made(Path(f"{stem}.qdq-int8.onnx"), makers["qdq-int8"]), "all",
                    Path(f"{stem}.qdq-int8.ort-all.onnx"))
            else:
                makers["int4-qdq"] = lambda: _loads(int4_qdq_form(
                    bound_(), Path(f"{stem}.int4-qdq.onnx")))
            makers["fp16.ort-all"] = lambda: saved_at(
                _made(Path(f"{stem}.fp16.onnx"), makers["fp16"]), "all",
                Path(f"{stem}.fp16.ort-all.onnx"))
            makers["external.ort-extended"] = lambda: saved_at(
                bound_(), "extended", Path(f"{stem}.external.ort-extended.onnx"),
                external=True)
            for form in forms:
                if form not in makers:
                    continue
                path = Path(f"{stem}.{form}.onnx")
                why = ""
                if make and not path.exists():
                    print(f"making {path.name}", file=sys.stderr, flush=True)
                    try:
                        makers[form]()
                    except Exception as exc:  # a form that cannot be made stays listed
                        path.unlink(missing_ok=True)
                        why = f"making the form: {type(exc).__name__}: {str(exc)[:200]}"
                out.append((model, exporter, form, path, why))
    return out


def _qdq_in_temp(path: Path, out: Path, operators: bool = False) -> Path:
    with tempfile.TemporaryDirectory(prefix="deploy-qdq-") as tmp:
        return qdq_form(path, out, Path(tmp), operators)


def _made(path: Path, maker) -> Path:
    """``path``, made by ``maker`` first where it is not there yet."""
    if not path.exists():
        maker()
    return path


def _loads(path: Path) -> Path:
    """``path`` where ONNX Runtime loads it; a file its own tools wrote that it refuses
    (MatMulNBitsQuantizer's QDQ output of a model with ReduceMean's ``axes`` attribute,
    which opset 21 no longer has) is not a form to plan."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        path.unlink(missing_ok=True)
        text = " ".join(str(exc).split())
        why = text.rpartition(" Error ")[2] if " Error " in text else text
        raise RuntimeError(f"ONNX Runtime refuses the file its quantizer wrote: "
                           f"{why[:160]}") from None
    return path


def int4_qdq_form(path: Path, out: Path) -> Path:
    """MatMulNBitsQuantizer's QDQ output: each MatMul weight as INT4 dequantized by
    blocks of 32 (opset 21), for providers without MatMulNBits."""
    import onnx
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer)
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True,
                                          quant_format=QuantFormat.QDQ)
    q = MatMulNBitsQuantizer(onnx.load(str(path)), algo_config=config)
    q.process()
    q.model.save_model_to_file(str(out))
    return out


def readme(folder: Path, listed) -> None:
    """``folder``/README.txt: each file and the ``--dim`` bindings it plans with."""
    spec = json.loads((folder / "fullsize.json").read_text())
    lines = ["Full-size exports (tools/corpus/export_fullsize.py) and their deploy forms",
             "(tools/corpus/deploy_forms.py fullsize). Random weights. <model>-<exporter>.onnx is",
             "the export (symbolic dims: bind them as below); every other form is made from",
             "<model>-<exporter>.static.onnx (the export with those dims bound) and needs no",
             "--dim. Forms: static, ort-LEVEL (ONNX Runtime CPU's optimizer at LEVEL, saved",
             "by optimized_model_filepath), transformers (onnxruntime.transformers",
             "optimize_model, opt_level 0), qdq-int8 (quantize_static, QDQ), fp16",
             "(convert_float_to_float16, keep_io_types), int8-dynamic (quantize_dynamic,",
             "int8 weights), int4 (MatMulNBitsQuantizer, block 32, symmetric) and",
             "transformers-int8 (quantize_dynamic of the transformers form),",
             "transformers-gpu-fp16 (optimize_model with use_gpu, then float16 with float",
             "inputs and outputs: what a CUDA deployment runs), qop-int8 (quantize_static,",
             "QOperator, per channel), qdq-int8.ort-all and fp16.ort-all (those forms saved",
             "by ORT's optimizer at ALL), int4-qdq (MatMulNBitsQuantizer, QDQ format) and",
             "external.ort-extended (ORT-saved at EXTENDED, weights in a .weights file).", ""]
    for model in spec:
        for exporter in ("ts", "dynamo"):
            src = folder / f"{model}-{exporter}.onnx"
            if src.exists():
                lines.append(f"{src.name}  " + " ".join(
                    f"--dim {k}={v}" for k, v in spec[model]["dims"].items()))
    lines.append("")
    lines += [p.name for _, _, _, p, _ in listed if p.exists()]
    (folder / "README.txt").write_text("\n".join(lines) + "\n")


def run_full(folder: Path, models: list[str] | None, forms: tuple[str, ...],
             levels: tuple[str, ...], store: Path, redo: bool = False,
             exporters: tuple[str, ...] = ("ts", "dynamo")) -> list[dict]:
    """Measure every form (:func:`measure_form` at ``levels``), each row kept in ``store``
    (JSON) as it is made, so that a run resumes where it stopped."""
    rows = json.loads(store.read_text()) if store.exists() else {}
    listed = full_forms(folder, models, forms, exporters)
    readme(folder, full_forms(folder, None, FULL_FORMS, ("ts", "dynamo"), make=False))
    for model, exporter, form, path, why in listed:
        key = path.name
        if key in rows and not redo:
            continue
        print(f"measuring {key}", file=sys.stderr, flush=True)
        if why:
            row = {"failures": [why]}
        else:
            with tempfile.TemporaryDirectory(prefix="deploy-full-") as tmp:
                t0 = time.perf_counter()
                row = measure_form(path, Path(tmp), levels)
                row["seconds"] = round(time.perf_counter() - t0, 1)
        row.update(model=f"{model}-{exporter}", form=form, dims={})
        rows[key] = row
        store.write_text(json.dumps(rows, indent=1, default=str))
    everything = full_forms(folder, None, FULL_FORMS, ("ts", "dynamo"), make=False)
    return [rows[p.name] for _, _, _, p, _ in everything if p.name in rows]


def _dims(row: dict) -> dict[str, int]:
    return row["dims"] if "dims" in row else MODELS[row["model"]][0]


def _mib(v) -> str:
    return "–" if v is None else f"{v / 2**20:.2f}"


def table(rows: list[dict]) -> str:
    lines = ["| model | form | nodes | graphmem as given | graphmem basic | graphmem extended | "
             "graphmem all | ORT off | ORT basic | ORT extended | ORT all | I/O | "
             "all ≤ ORT all + I/O | verify (all) | ORT optimize s (basic / extended / all) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        if "nodes" not in r:
            lines.append(f"| {r['model']} | {r['form']} | – | – | – | – | – | – | – | – | – "
                         f"| – | – | – | {r['failures'][0]} |")
            continue
        secs = " / ".join(f"{r.get(f'optimize_s_{lv}', float('nan')):.2f}" for lv in LEVELS)
        bar = {True: "yes", False: "**no**", None: "–"}[r["bar"]]
        lines.append(
            f"| {r['model']} | {r['form']} | {r['nodes']} | {_mib(r.get('arena_exported'))} | "
            + " | ".join(_mib(r.get(f"arena_{lv}")) for lv in LEVELS) + " | "
            + " | ".join(_mib(r.get(f"ort_{lv}")) for lv in ("off", *LEVELS))
            + f" | {_mib(r['io'])} | {bar} | {'PASS' if r['verify'] else 'FAIL'} | {secs} |")
    fails = [f"- {r['model']} {r['form']}: {f}" for r in rows for f in r.get("failures", [])]
    return "\n".join(lines) + ("\n\nFailures:\n\n" + "\n".join(fails) if fails else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--models", default=",".join(MODELS))
    r.add_argument("--write", action="store_true")
    r.add_argument("--json", metavar="PATH")
    r.add_argument("--from", dest="built", metavar="DIR",
                   help="also the forms tools/corpus/deployment_corpus.py build wrote into DIR")
    f = sub.add_parser("fullsize", help="the forms of tools/corpus/export_fullsize.py's exports")
    f.add_argument("dir")
    f.add_argument("--models", default="")
    f.add_argument("--forms", default=",".join(FULL_FORMS))
    f.add_argument("--levels", default="all",
                   help="the --ort-optimize levels to plan at (default all; 'basic,extended,"
                        "all' also measures ORT's pattern off and at each)")
    f.add_argument("--store", metavar="JSON", help="rows kept here (default DIR/rows.json)")
    f.add_argument("--redo", action="store_true")
    f.add_argument("--exporters", default="ts,dynamo")
    f.add_argument("--table-only", action="store_true",
                   help="make and measure nothing: the table of the rows DIR/rows.json holds")
    f.add_argument("--write", action="store_true")
    f.add_argument("--section", default=FULL_SECTION,
                   help="with --write: the <!-- SECTION --> markers of docs/corpus.md to "
                        f"write between (default {FULL_SECTION}; another keeps that table)")
    f.add_argument("--title", default="Every form beside ORT's pattern",
                   help="the table's heading")
    ns = ap.parse_args(argv)
    if ns.cmd == "fullsize":
        return main_full(ns)
    rows = run(ns.models.split(",") if ns.models else [], Path(ns.built) if ns.built else None)
    import onnxruntime
    command = "run --from DIR --write" if ns.built else "run --write"
    head = (f"Generated by `python -m tools.corpus.deploy_forms {command}` (onnxruntime "
            f"{onnxruntime.__version__}, CPU). MiB = 2^20 bytes. *graphmem*: `graphmem plan`'s "
            "arena, graph inputs and outputs inside it, of the form as given and with "
            "`--ort-optimize LEVEL`. *ORT*: ONNX Runtime's own memory-pattern block at each "
            "level (`tools/bench/ort_pattern.py`), graph inputs and outputs left out; *I/O*: their "
            "bytes. Bindings: " + "; ".join(dict.fromkeys(
                f"{r['model']} " + (" ".join(f"{k}={v}" for k, v in _dims(r).items())
                                    or "static") for r in rows)) + ".")
    body = "## The graph the runtime runs: deployment forms beside ORT's pattern (issue 33)\n\n" + head + "\n\n" + table(rows)
    return publish(DOC, SECTION, body, ns.write, rows, ns.json)


FULL_SECTION = "deploy-fullsize"


def full_table(rows: list[dict]) -> str:
    """The table of :func:`run_full`'s rows (planned as given and at ``all`` only)."""
    lines = ["| model | form | nodes | graphmem as given | graphmem all | ORT all | I/O | "
             "all ≤ ORT all + I/O | verify (all) | ORT optimize s (all) |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in rows:
        if "nodes" not in r:
            lines.append(f"| {r['model']} | {r['form']} | – | – | – | – | – | – | – | – |")
            continue
        bar = {True: "yes", False: "**no**", None: "–"}[r["bar"]]
        secs = r.get("optimize_s_all")
        lines.append(
            f"| {r['model']} | {r['form']} | {r['nodes'] if r['nodes'] is not None else '–'} "
            f"| {_mib(r.get('arena_exported'))} | {_mib(r.get('arena_all'))} "
            f"| {_mib(r.get('ort_all'))} | {_mib(r['io'])} | {bar} "
            f"| {'PASS' if r['verify'] else 'FAIL'} | "
            f"{'–' if secs is None else f'{secs:.2f}'} |")
    made = [r for r in rows if "nodes" in r]
    met = sum(r.get("bar") is True and r.get("verify") is True for r in made)
    fails = [f"- {r['model']} {r['form']}: {f}" for r in rows for f in r.get("failures", [])]
    return ("\n".join(lines) + f"\n\nThe bar (graphmem's arena at `--ort-optimize all` at most "
            f"ORT's pattern at ALL plus the I/O bytes, and verify passing) holds on {met} of "
            f"the {len(made)} forms made; {len(rows) - len(made)} could not be made."
            + ("\n\nFailures:\n\n" + "\n".join(fails) if fails else ""))


def _section_args(ns) -> str:
    """The options that put the table in a section of its own, as given."""
    if ns.section == FULL_SECTION:
        return ""
    return f" --section {ns.section} --title '{ns.title}'"


def main_full(ns) -> int:
    import onnxruntime
    folder = Path(ns.dir)
    store = Path(ns.store) if ns.store else folder / "rows.json"
    levels = tuple(ns.levels.split(","))
    rows = run_full(folder, ns.models.split(",") if ns.models else None,
                    () if ns.table_only else tuple(ns.forms.split(",")), levels, store,
                    ns.redo, tuple(ns.exporters.split(",")))
    spec = json.loads((folder / "fullsize.json").read_text())
    exported = json.loads((folder / "export.json").read_text())
    versions = exported.get("_versions", {})
    head = (
        "Generated by `python -m tools.corpus.export_fullsize DIR` (torch "
        f"{versions.get('torch', '?')}, torchvision {versions.get('torchvision', '?')}, "
        f"transformers {versions.get('transformers', '?')}) and `python -m tools.corpus.deploy_forms "
        f"fullsize DIR --write{_section_args(ns)}` (onnxruntime {onnxruntime.__version__}, "
        "CPU). Columns as "
        "in the section above (graphmem's arena with graph inputs and outputs inside it; ORT's "
        "pattern without them); *model* is `<model>-<exporter>` (`ts`: `dynamo=False`, opset 17; `dynamo`: "
        "`dynamo=True`, opset 18); every form is made from the export with its dims bound ("
        + "; ".join(f"{m} " + " ".join(f"{k}={v}" for k, v in d["dims"].items())
                    for m, d in spec.items()) + ").")
    made = "\n".join(f"- {m}: {d.get('made_by', '?')}; the transformer optimizer's "
                     f"model type: {d['model_type'] or 'none (not a transformer)'}"
                     for m, d in spec.items())
    head += "\n\nModels (random weights, nothing downloaded):\n\n" + made
    fails = [f"- {k}: {e['error']}" for k, e in exported.items()
             if isinstance(e, dict) and e.get("error")]
    body = (f"### {ns.title}\n\n" + head + "\n\n"
            + (table(rows) if levels != ("all",) else full_table(rows))
            + ("\n\nExports that failed:\n\n" + "\n".join(fails)
                             if fails else ""))
    return publish(DOC, ns.section, body, ns.write)


if __name__ == "__main__":
    sys.exit(main())
