"""Range plans measured: for each model and box, the range plan's arena at 12 bindings
spread over the box (both corners included) against a fresh plan at each binding, each
evaluated plan checked by the validator against the model bound there and every
tensor's bytes compared with the fresh plan's.

    python -m tools.bench.range_bench [--json OUT] [--fast]
    python -m tools.bench.range_bench --files DIR [--models a,b] [--seq N] [--past N]
        [--batch N] [--optimized] [--verify K] [--write]

Cases: the corpus transformers (tests/data/corpus: BERT and GPT-2 with a KV cache, both
exporters), two of them as ONNX Runtime's optimizer leaves them, and the Llama-style
decode step and prefill of models/decoder.py (4 layers, hidden 256: GroupQueryAttention,
a KV cache). ``--fast``: the corpus only.

``--files DIR``: the full-size exports ``python -m tools.corpus.export_fullsize DIR``
wrote (every ``<model>-<exporter>.onnx`` there, boxes from ``DIR/fullsize.json``: a
prefill's ``seq`` over 1..``--seq``, a decode step's ``past_seq`` over 1..``--past`` at
``seq`` 1 (``batch`` over 1..``--batch`` beside them where that is above 1), a model with
neither (an audio encoder) over ``batch`` 1..max(``--batch``, 8); with
``--optimized`` also each as ONNX Runtime's transformer optimizer leaves it, ``+ort`` in
the case's name; a folder of such files named ``<model>-<exporter>+ort.onnx`` beside a
``fullsize.json`` is read as it is). Beside the
columns above, each row checks the report's aliased-peak formula against the validator's
aliased peak of the evaluated plan at every binding, runs ``verify`` (the evaluated plan in
its arena on ONNX Runtime) at ``--verify`` bindings (the ends first), and the serving fit
at a budget halfway up the box: its answer's total within the budget and one more over it,
each from a fresh plan. ``--write``: the table into docs/benchmarks.md
(``<!-- bench:range-fullsize -->``).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from graphmem.frontend.reader import load
from graphmem.pipeline import plan_graph
from graphmem.plan.validate import validate
from graphmem.ranges.build import build_range_plan
from graphmem.ranges.evaluate import evaluate
from graphmem.ranges.formulas import parse_formula
from graphmem.ranges.prove import range_problems, structural_problems
from tools import ROOT

CORPUS = ROOT / "tests" / "data" / "corpus"
OPTIONS = {"passes": ["reorder", "concat", "inplace", "share", "place"], "alignment": 64}

# (label, model, box, fixed dims, dims that follow the box)
CASES = [
    ("bert-ts prefill", CORPUS / "bert-ts.onnx", {"seq": (1, 64), "batch": (1, 8)}, {}, {}),
    ("bert-dynamo prefill", CORPUS / "bert-dynamo.onnx", {"seq": (1, 64)}, {"batch": 4}, {}),
    ("gpt2-past-dynamo decode", CORPUS / "gpt2-past-dynamo.onnx",
     {"past_seq": (1, 127), "batch": (1, 8)}, {"seq": 1}, {}),
    ("gpt2-past-ts decode", CORPUS / "gpt2-past-ts.onnx", {"past_seq": (1, 127)},
     {"seq": 1, "batch": 4}, {}),
    ("gpt2-past-ts prefill", CORPUS / "gpt2-past-ts.onnx", {"seq": (1, 124)},
     {"past_seq": 4, "batch": 2}, {}),
]


def ort_cases() -> list:
    """Two corpus models as ONNX Runtime runs them (optimized offline, level extended:
    its fused Attention, SkipLayerNormalization, ...)."""
    from graphmem.frontend.ort_optimize import optimize
    bert = optimize(CORPUS / "bert-ts.onnx", "extended").path
    gpt2 = optimize(CORPUS / "gpt2-past-dynamo.onnx", "extended").path
    return [("bert-ts prefill, ORT", bert, {"seq": (1, 64), "batch": (1, 8)}, {}, {}),
            ("gpt2-past-dynamo decode, ORT", gpt2, {"past_seq": (1, 127), "batch": (1, 8)},
             {"seq": 1}, {})]


def decoder_cases(folder: Path) -> list:
    import onnx
    from models import decoder
    path = folder / "llama-decoder.onnx"
    onnx.save(decoder.build(layers=4, hidden=256), str(path))
    return [("llama decode (GQA)", path, {"batch_size": (1, 16), "past_sequence_length": (1, 255)},
             {"sequence_length": 1}, {"total_sequence_length": "past_sequence_length + 1"}),
            ("llama prefill (GQA)", path, {"batch_size": (1, 8), "sequence_length": (1, 256)},
             {"past_sequence_length": 0}, {"total_sequence_length": "sequence_length"})]


def spread(box: dict, count: int = 12) -> list[dict]:
    return [{n: lo + (hi - lo) * k // (count - 1) for n, (lo, hi) in box.items()}
            for k in range(count)]


def run_case(label, path, box, fixed, follow, full: bool = False, verify_count: int = 0
             ) -> dict:
    """One case: the range plan built and proved, then at 12 bindings of the box the
    evaluated plan validated and compared with a fresh plan; ``full``: also the aliased
    peak formula, ``verify`` at ``verify_count`` bindings and the serving fit."""
    derived = {n: parse_formula(t, tuple(box)) for n, t in follow.items()}

    def load_at(b):
        return load(str(path), {**fixed, **{n: f.at(b) for n, f in derived.items()}, **b})
    t0 = time.perf_counter()
    built = build_range_plan(load_at, box, model_name=Path(path).name, options=OPTIONS)
    seconds = time.perf_counter() - t0
    rp = built.plan
    problems = range_problems(rp, built.formulas.graph) + structural_problems(
        rp, load_at, evaluate)
    peaks = {}
    if full:
        from graphmem.ranges.memory import peak_or_none
        peaks = {i: peak_or_none(rp, i) for i in range(len(rp.segments))}
    rows = []
    points = spread(box)
    order = [0, len(points) - 1] + list(range(1, len(points) - 1))
    verify_at = set(order[:verify_count])
    for k, b in enumerate(points):
        plan = evaluate(rp, b)
        graph = load_at(b)
        validate(plan, graph)
        fresh = plan_graph(graph, **OPTIONS).plan
        same = all(plan.tensors[n].bytes == t.bytes for n, t in fresh.tensors.items())
        formulas_equal = all(f.bytes.at(b) == graph.tensors[n].bytes
                             for n, f in built.formulas.tensors.items())
        row = {"binding": b, "arena_bytes": plan.arena_bytes,
               "fresh_arena_bytes": fresh.arena_bytes,
               "ratio": plan.arena_bytes / max(fresh.arena_bytes, 1),
               "sizes_equal": same and formulas_equal}
        if full:
            from graphmem.plan.stats import plan_stats
            from graphmem.ranges.memory import max_at
            fs = peaks[rp.segment_at(b)]
            row["peak_equal"] = fs is not None and max_at(fs, b) == plan_stats(plan)[
                "aliased_peak_bytes"]
        if k in verify_at:
            from graphmem.verify.verifier import verify
            row["verify"] = verify(plan, graph, provider="cpu").passed
        rows.append(row)
    out = {"case": label, "model": Path(path).name, "box": box, "fixed": fixed,
           "segments": len(rp.segments), "build_seconds": round(seconds, 2),
           "plan_file_bytes": len(rp.to_json()),
           "proved": not problems, "problems": problems[:3], "rows": rows,
           "worst_ratio": max(r["ratio"] for r in rows),
           "smallest_over_largest": rows[0]["arena_bytes"] / max(rows[-1]["arena_bytes"], 1)}
    if full:
        out["fit"] = fit_check(rp, load_at, points[len(points) // 2])
    return out


def fit_check(rp, load_at, mid: dict) -> dict:
    """The serving fit at a budget of the total at ``mid``: its first answer checked with
    the plans the range plan gives there and one further, each validated, the weights
    from the model loaded there."""
    from graphmem.ranges.serving import serving_fit

    def total(b):
        plan = evaluate(rp, b)
        graph = load_at(b)
        validate(plan, graph)
        return plan.arena_bytes + sum(graph.tensors[t].bytes for t in graph.stored_weight_names())
    budget = total(mid)
    fit = serving_fit(rp, budget)
    dim = fit["batch_dim"]
    hi = rp.dims[dim][1]
    # an answer inside the range, so that one more is a binding to check: the longest
    # context's (the first row where none is)
    rows = [r for r in fit["by_context"] if r["value"] is not None]
    inner = [r for r in rows if r["value"] < hi]
    row = (inner or rows or fit["by_context"])[-1 if inner else 0]
    if row["value"] is None:
        return {"budget_bytes": budget, "dim": dim, "value": None, "holds": False}
    at = {**row["context"], dim: row["value"]}
    inside = total(at) <= budget
    over = row["value"] == hi or total({**at, dim: row["value"] + 1}) > budget
    return {"budget_bytes": budget, "dim": dim, "at": row["context"], "value": row["value"],
            "holds": inside and over}


FULLSIZE_SECTION = "bench:range-fullsize"


def fullsize_cases(folder: Path, models: list[str] | None, seq: int, past: int, batch: int,
                   optimized: bool, work: Path) -> list:
    """The cases of the full-size exports in ``folder`` (see the module docstring)."""
    spec = json.loads((folder / "fullsize.json").read_text())
    cases = []
    for onnx_path in sorted(folder.glob("*.onnx")):
        stem = onnx_path.stem
        model, _, exporter = stem.rpartition("-")
        if model not in spec or (models and model not in models):
            continue
        dims = spec[model]["dims"]
        fixed = {n: v for n, v in dims.items()}
        if "past_seq" in dims:
            box = {"past_seq": (1, past)}
            kind = "decode"
        elif "seq" in dims:
            box = {"seq": (1, seq)}
            kind = "prefill"
        else:
            box = {"batch": (1, max(batch, 8))}
            kind = "encoder"
        if batch > 1 and "batch" not in box:
            box["batch"] = (1, batch)
        for n in box:
            fixed.pop(n, None)
        forms = [(f"{stem} {kind}", onnx_path)]
        if optimized and spec[model].get("model_type"):
            from tools.corpus.deploy_forms import transformers_form
            out = work / f"{stem}+ort.onnx"
            try:
                transformers_form(onnx_path, spec[model]["model_type"], out)
                forms.append((f"{stem}+ort {kind}", out))
            except Exception as exc:  # noqa: BLE001 -- the optimizer's own failure, reported
                print(f"{stem}: the transformer optimizer failed: {exc}", file=sys.stderr)
        cases += [(label, p, box, fixed, {}) for label, p in forms]
    return cases


def fullsize_table(results: list[dict]) -> str:
    lines = ["| case | box | segments | build s | plan file | proved | worst ratio | "
             "smallest/largest | sizes equal | aliased peak equal | verify | fit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['case']} | {_box_text(r['box'])} | | | | "
                         f"{r['error'].replace('|', '/')} | | | | | | |")
            continue
        ver = [x["verify"] for x in r["rows"] if "verify" in x]
        fit = r.get("fit", {})
        lines.append(
            f"| {r['case']} | {_box_text(r['box'])} | {r['segments']} | {r['build_seconds']} | "
            f"{r['plan_file_bytes'] / 2 ** 20:.1f} MiB | {r['proved']} | {r['worst_ratio']:.4f} | "
            f"{r['smallest_over_largest']:.4f} | {all(x['sizes_equal'] for x in r['rows'])} | "
            f"{all(x.get('peak_equal', False) for x in r['rows'])} | "
            f"{sum(ver)} of {len(ver)} PASS | "
            f"{_fit_text(fit)}: {'holds' if fit.get('holds') else 'MISSES'} |")
    return "\n".join(lines)


def write_fullsize(results: list[dict], how: str, note: str = "") -> None:
    """The table of ``results`` into docs/benchmarks.md's ``bench:range-fullsize``."""
    from tools.docs.sections import write_doc
    body = ("Generated by `python -m tools.bench.range_bench " + how + "` on the exports of "
            "`python -m tools.corpus.export_fullsize DIR` (random weights). Each row: one "
            "range plan over the box, then at 12 bindings spread over it (ends included) its "
            "evaluated plan validated against the model loaded there, its arena over a fresh "
            "plan's (worst ratio), the smallest binding's arena over the largest's, every "
            "tensor's size formula against the loader, the report's aliased-peak formula "
            "against the evaluated plan's; verify (the evaluated plan run in its arena on "
            "ONNX Runtime, CPU) at the smallest binding, and at the largest where the row "
            "says 2 (`--verify K`); the serving fit at the budget of the middle binding "
            "(weights + arena), the longest context's answer inside the range and one more "
            "checked with validated plans. Build seconds on a shared 2-core machine.\n\n"
            + fullsize_table(results) + (f"\n\n{note}" if note else ""))
    write_doc(ROOT / "docs" / "benchmarks.md", FULLSIZE_SECTION, body)


def _fit_text(fit: dict) -> str:
    at = ", ".join(f"{n}={v}" for n, v in (fit.get("at") or {}).items())
    return f"{fit.get('dim')}={fit.get('value')}" + (f" at {at}" if at else "")


def _box_text(box: dict) -> str:
    return ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in box.items())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.range_bench",
                                description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="OUT", help="write every row as JSON here")
    p.add_argument("--fast", action="store_true", help="the corpus only")
    p.add_argument("--files", metavar="DIR", help="the full-size exports of "
                   "python -m tools.corpus.export_fullsize DIR instead of the built-in cases")
    p.add_argument("--models", default="", help="with --files: these models only (a,b)")
    p.add_argument("--seq", type=int, default=512,
                   help="with --files: a prefill's seq range's top")
    p.add_argument("--past", type=int, default=1023,
                   help="with --files: a decode step's past_seq range's top")
    p.add_argument("--batch", type=int, default=8, help="with --files: batch's top beside seq "
                   "or past_seq (1: batch bound to 1); an encoder's is at least 8")
    p.add_argument("--optimized", action="store_true",
                   help="with --files: each model as ORT's transformer optimizer leaves it too")
    p.add_argument("--verify", type=int, default=2, metavar="K",
                   help="with --files: run verify at this many bindings (the ends first)")
    p.add_argument("--table-from", metavar="JSON", nargs="+",
                   help="write the --files table from the --json files of earlier runs (no "
                   "planning), their rows in the order given")
    p.add_argument("--note", default="", help="with --write: a line under the table (what "
                   "the runs left out, and why)")
    p.add_argument("--write", action="store_true",
                   help="with --files: write the table into docs/benchmarks.md "
                   f"({FULLSIZE_SECTION})")
    args = p.parse_args(argv)
    out = []
    if args.table_from:
        for f in args.table_from:
            out += json.loads(Path(f).read_text())
        print(fullsize_table(out))
        if args.write:
            write_fullsize(out, "--files DIR --json RUN.json` runs (one per folder and "
                           "flags), the table by `python -m tools.bench.range_bench "
                           "--table-from RUN.json ... --write", args.note)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        if args.files:
            cases = fullsize_cases(Path(args.files), [m for m in args.models.split(",") if m],
                                   args.seq, args.past, args.batch, args.optimized, Path(tmp))
        else:
            cases = CASES + ([] if args.fast else ort_cases() + decoder_cases(Path(tmp)))
        print(f"{'case':40} {'box':30} {'seg':>3} {'build s':>7} {'proved':>6} "
              f"{'worst ratio':>11} {'sizes':>5} {'small/large':>11}")
        for case in cases:
            try:
                r = run_case(*case, full=bool(args.files),
                             verify_count=args.verify if args.files else 0)
            except Exception as exc:  # noqa: BLE001 -- a case that fails is a row saying so
                if not args.files:
                    raise
                r = {"case": case[0], "box": case[2], "error": f"{type(exc).__name__}: {exc}"}
                out.append(r)
                print(f"{case[0]:40} FAILED: {r['error'][:300]}", flush=True)
                continue
            out.append(r)
            print(f"{r['case']:40} {_box_text(r['box']):30} {r['segments']:>3} "
                  f"{r['build_seconds']:>7} {str(r['proved']):>6} {r['worst_ratio']:>11.4f} "
                  f"{str(all(x['sizes_equal'] for x in r['rows'])):>5} "
                  f"{r['smallest_over_largest']:>11.4f}", flush=True)
            if args.files:
                print(f"{'':40} peak formula equal "
                      f"{all(x.get('peak_equal') for x in r['rows'])}, verify "
                      f"{[x['verify'] for x in r['rows'] if 'verify' in x]}, fit {r.get('fit')}, "
                      f"plan file {r['plan_file_bytes']:,} bytes", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if args.files and args.write:
        write_fullsize(out, f"--files DIR {'--optimized ' if args.optimized else ''}--write",
                       args.note)
    from graphmem.frontend.ort_optimize import cleanup
    cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
