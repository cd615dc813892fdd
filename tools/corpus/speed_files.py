"""The model files the whole-process speed bar of issue 33 is measured on, as a deployment
pipeline leaves them: each source bound to static dims, and what ONNX Runtime's
optimizer saves of it (``SessionOptions.optimized_model_filepath``) at EXTENDED and ALL.

    python -m tools.corpus.deployment_corpus build SRC          # fp32, fp16, int8, int4 forms
    python -m tools.corpus.speed_files build SRC OUT [--transformers encoder]
    python -m tools.bench --whole --files OUT --repeats 5

For each ``SRC/*.onnx`` (the sources of tools/corpus/deployment_corpus.py are bound at its dims;
any other file with symbolic dims gets ``--dim NAME=N`` values, else 1), ``OUT`` gets
``NAME.onnx`` (bound, weights inside), ``NAME.ort-extended.onnx`` and
``NAME.ort-all.onnx`` (ORT's CPU provider saved at that level). ``--transformers``
names sources that also get ``onnxruntime.transformers.optimizer``'s form (model type
bert, its fusions only), as ``NAME.transformers.onnx``. A form ORT cannot make is
listed in ``OUT/failures.json``, not hidden. Model files stay outside the repository.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path



def source_dims(path: Path, given: dict[str, int]) -> dict[str, int]:
    """The dims a source is bound at: tools/corpus/deployment_corpus.py's for its models, then
    ``given``, then 1 for every other symbolic dim of a graph input."""
    from tools.corpus import deployment_corpus
    import onnx
    dims = {}
    for name, spec in deployment_corpus.SOURCES.items():
        if path.stem.startswith(name + "-"):
            dims.update(spec["dims"])
    dims.update(given)
    model = onnx.load(str(path), load_external_data=False)
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param not in dims:
                dims[d.dim_param] = 1
    return dims


def build(src: Path, out: Path, transformers: set[str], given: dict[str, int]) -> dict:
    from tools.corpus.deploy_forms import bound, saved_at, transformers_form
    out.mkdir(parents=True, exist_ok=True)
    logging.disable(logging.WARNING)
    failures = {}
    for path in sorted(src.glob("*.onnx")):
        name = path.stem
        base = bound(path, source_dims(path, given), out / f"{name}.onnx")
        print(f"wrote {base}", flush=True)
        makers = [(f"{name}.ort-{level}.onnx", lambda lv=level, b=base, n=name:
                   saved_at(b, lv, out / f"{n}.ort-{lv}.onnx")) for level in ("extended", "all")]
        if any(name.startswith(t) for t in transformers):
            makers.append((f"{name}.transformers.onnx", lambda b=base, n=name:
                           transformers_form(b, "bert", out / f"{n}.transformers.onnx")))
        for label, make in makers:
            try:
                print(f"wrote {make()}", flush=True)
            except Exception as exc:  # recorded, not hidden
                failures[label] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                print(f"failed {label}: {failures[label]}", flush=True)
    (out / "failures.json").write_text(json.dumps(failures, indent=1) + "\n")
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("src", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--transformers", default="encoder",
                   help="comma-separated source name prefixes that get the transformer "
                        "optimizer's form too (default: encoder)")
    b.add_argument("--dim", action="append", default=[], metavar="NAME=N")
    ns = ap.parse_args(argv)
    given = {k: int(v) for k, v in (d.split("=", 1) for d in ns.dim)}
    build(ns.src, ns.out, set(filter(None, ns.transformers.split(","))), given)
    return 0


if __name__ == "__main__":
    sys.exit(main())
