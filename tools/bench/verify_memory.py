"""verify's peak memory against ONNX Runtime running the same model (issue 55).

For each case, in fresh processes, on the same inputs (graphmem's seeded random ones,
written to an .npz first): the peak RSS of an ``InferenceSession`` on the model file
(default options) plus one run, and the peak RSS of ``graphmem verify`` (the whole
command: load, plan, the reference and the plan's run, the whole-model line), each the
process's own high-water mark (Linux's ``VmHWM``, which starts afresh at ``exec``,
where ``ru_maxrss`` carries the parent's size over), written as it exits. The bar:
verify's peak at most 1.5 x (ORT's peak + the plan's arena).

    python -m tools.bench.verify_memory [--write] [--json OUT] [--keep DIR] [--fast] [--fp32]
                                        [--detection DIR]

Cases: a Qwen2-0.5B-sized decode step of models/decoder.py (24 layers, hidden 896, 14
heads, 2 key/value heads, MLP 4864, vocabulary 151,936, int4 weights: the
onnxruntime-genai builder's form; about 0.5 B parameters in an external-data file,
built in a temporary folder or ``--keep DIR``), at past 127, also verified with
``--ort-optimize all``; and the corpus's largest model (tests/data/corpus), a GPT-2 decode
step. ``--fp32``: the same decoder with float32 weights too (building it takes about three
times its file's size in memory). ``--fast``: the corpus model only. ``--detection DIR``: also the
models of DIR whose sizes depend on the data (``tools.corpus.export_detection``'s folder:
each NAME.onnx on its image NAME.npz, both runs given it), with their weights inside the
file and saved again as external data. ``--write``: the table into docs/benchmarks.md
(``<!-- bench:verify-memory -->``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tools import ROOT
from tools.docs.sections import BENCHMARKS, environment, publish

BAR = 1.5
QWEN = dict(layers=24, hidden=896, heads=14, kv_heads=2, ffn=4864, vocab=151936, int4=True)
STEP = {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 127,
        "total_sequence_length": 128}
CORPUS = ROOT / "tests" / "data" / "corpus"

# each child writes its VmHWM (kB) to the file $PEAK_FILE as it exits
_PEAK = """
import atexit, os
def _peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(os.environ["PEAK_FILE"], "w").write(line.split()[1])
atexit.register(_peak)
"""
# an InferenceSession on the file, one run on the saved inputs
_ORT_CHILD = _PEAK + """
import sys, numpy as np, onnxruntime as ort
feeds = dict(np.load(sys.argv[2]))
so = ort.SessionOptions()
so.log_severity_level = 3
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
s.run(None, feeds)
"""
# the command line of graphmem (``python -m graphmem ARGS``)
_GRAPHMEM_CHILD = _PEAK + """
import runpy, sys
sys.argv = ["graphmem", *sys.argv[1:]]
runpy.run_module("graphmem", run_name="__main__", alter_sys=True)
"""


def _peak(cmd: list[str], cwd: Path = ROOT) -> tuple[int, int, str]:
    """(exit code, the child's peak RSS in bytes, its stdout and stderr)."""
    if not Path("/proc/self/status").exists():
        raise SystemExit("this tool reads the peak RSS from /proc (Linux)")
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT),
                                              "PEAK_FILE": str(peak)})
        kb = int(peak.read_text()) if peak.exists() else 0
        return proc.returncode, kb * 1024, proc.stdout


def _write_inputs(model: Path, dims: dict[str, int], where: Path) -> Path:
    import numpy as np

    import graphmem
    from graphmem.verify.inputs import random_inputs
    graph = graphmem.load(model, dims)
    path = where / (model.stem + "-inputs.npz")
    np.savez(path, **random_inputs(graph, 0))
    return path


def measure(label: str, model: Path, dims: dict[str, int], work: Path,
            extra: tuple[str, ...] = (), inputs: Path | None = None) -> dict:
    """One row: ORT's peak, verify's peak, the arena, the ratio, verify's verdict.
    ``inputs``: an .npz both runs are given (verify with ``--inputs``), instead of
    graphmem's seeded random inputs."""
    feeds = inputs if inputs is not None else _write_inputs(model, dims, work)
    code, ort_peak, text = _peak([sys.executable, "-c", _ORT_CHILD, str(model), str(feeds)])
    if code:
        raise SystemExit(f"{label}: ONNX Runtime failed: {text[-500:]}")
    flags = [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]
    if inputs is not None:
        flags += ["--inputs", str(inputs)]
    cmd = [sys.executable, "-c", _GRAPHMEM_CHILD, "verify", str(model), *flags, *extra]
    code, verify_peak, text = _peak(cmd)
    arena = re.search(r"arena\s+([\d,]+) bytes", text)
    verdict = "PASS" if code == 0 and "PASS" in text else f"exit {code}"
    if arena is None:
        raise SystemExit(f"{label}: verify printed no arena: {text[-500:]}")
    arena_bytes = int(arena.group(1).replace(",", ""))
    size = model.stat().st_size + sum(p.stat().st_size for p in model.parent.iterdir()
                                      if p.name.startswith(model.name + "_data")
                                      or p.suffix == ".data" and p.stem == model.stem)
    return {"case": label + (" " + " ".join(extra) if extra else ""), "file_bytes": size,
            "ort_peak": ort_peak, "arena": arena_bytes, "verify_peak": verify_peak,
            "ratio": verify_peak / (ort_peak + arena_bytes), "verdict": verdict}


def _qwen(where: Path, int4: bool = True) -> Path:
    """The decoder's file (built in a child process: it takes a few times the file's size)."""
    path = where / f"qwen2-0.5b-{'int4' if int4 else 'fp32'}-step.onnx"
    if not path.exists():
        options = {**QWEN, "int4": int4}
        code = ("import sys, onnx; from models.decoder import build; "
                f"onnx.save(build(**{options!r}), sys.argv[1], save_as_external_data=True, "
                "location=sys.argv[2], size_threshold=1024)")
        subprocess.run([sys.executable, "-c", code, str(path), path.name + "_data"],
                       cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return path


def detection_rows(folder: Path, work: Path) -> list[dict]:
    """A row for each NAME.onnx of ``folder`` with its image NAME.npz beside it (what
    ``tools.corpus.export_detection`` writes): sizes that depend on the data, verified
    with the sizes the image gives (graphmem/verify/bounded.py); and the same model
    saved with its weights as external data (``NAME-external.onnx``, in ``work``)."""
    import onnx
    rows = []
    for model in sorted(folder.glob("*.onnx")):
        image = model.with_suffix(".npz")
        if not image.exists():
            continue
        try:
            row = measure(f"{model.stem} (sizes from the data), on its image", model, {},
                          work, inputs=image)
        except SystemExit as exc:  # (a model graphmem refuses: said, not measured)
            print(f"{model.name}: not measured: {str(exc)[-300:]}", file=sys.stderr)
            continue
        rows.append(row)
        external = work / f"{model.stem}-external.onnx"
        onnx.save(onnx.load(str(model)), str(external), save_as_external_data=True,
                  location=external.name + "_data")
        rows.append(measure(f"{model.stem}, weights as external data, on its image",
                            external, {}, work, inputs=image))
    return rows


def _corpus_largest() -> Path:
    return max(CORPUS.glob("*.onnx"), key=lambda p: p.stat().st_size)


def table(rows: list[dict]) -> str:
    mb = 1 << 20
    lines = [environment(), "",
             f"Peak RSS of `graphmem verify MODEL` against an ONNX Runtime session on the "
             f"same file plus one run on the same inputs (each a fresh process); the bar is "
             f"verify <= {BAR} x (ORT + arena). verify maps the external weights once for "
             "both of its runs and holds only the reference tensors a comparison still "
             "needs; its whole-model line is an ORT session of the model, so its floor is "
             "ORT's own peak plus what the interpreter, onnx and graphmem take (the whole "
             "of a small model's figure). With `--ort-optimize all` the peak comes before "
             "verify starts, in the optimization step (ONNX Runtime optimizing and saving "
             "the model). A model whose sizes depend on the data (issue 53) is verified "
             "node by node with the sizes its image gives, each node's session dropped "
             "after it, and has no whole-model line.", "",
             "| case | file MB | ORT session + run MB | arena MB | verify peak MB | "
             "verify / (ORT + arena) | verify |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['file_bytes'] / mb:,.1f} | {r['ort_peak'] / mb:,.0f} "
                     f"| {r['arena'] / mb:,.2f} | {r['verify_peak'] / mb:,.0f} | "
                     f"{r['ratio']:.2f} | {r['verdict']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the table into the docs")
    ap.add_argument("--json", metavar="OUT", help="the rows as JSON")
    ap.add_argument("--keep", metavar="DIR", help="build (or reuse) the decoder here")
    ap.add_argument("--fast", action="store_true", help="the corpus model only")
    ap.add_argument("--fp32", action="store_true", help="the decoder in float32 too")
    ap.add_argument("--detection", metavar="DIR",
                    help="also each NAME.onnx of DIR on its image NAME.npz (the folder "
                         "tools.corpus.export_detection writes), weights inside the file "
                         "and as external data")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="verify-memory-") as tmp:
        work = Path(tmp)
        if not args.fast:
            where = Path(args.keep) if args.keep else work
            where.mkdir(parents=True, exist_ok=True)
            qwen = _qwen(where)
            label = "Qwen2-0.5B-sized int4 decode step, past 127"
            rows.append(measure(label, qwen, STEP, work))
            rows.append(measure(label, qwen, STEP, work, ("--ort-optimize", "all")))
            if args.fp32:
                rows.append(measure("Qwen2-0.5B-sized float32 decode step, past 127",
                                    _qwen(where, int4=False), STEP, work))
        big = _corpus_largest()
        rows.append(measure(f"corpus's largest: {big.name} decode, batch 4, past 127", big,
                            {"batch": 4, "seq": 1, "past_seq": 127}, work))
        if args.detection:
            rows += detection_rows(Path(args.detection), work)
    for r in rows:
        print(json.dumps(r), file=sys.stderr)
    return publish(BENCHMARKS, "bench:verify-memory", table(rows), args.write, rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
