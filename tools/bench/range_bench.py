"""Range plans measured: for each model and box, the range plan's arena at 12 bindings
spread over the box (both corners included) against a fresh plan at each binding, each
evaluated plan checked by the validator against the model bound there and every
tensor's bytes compared with the fresh plan's.

    python -m tools.bench.range_bench [--json OUT] [--fast]

Cases: the corpus transformers (tests/data/corpus: BERT and GPT-2 with a KV cache, both
exporters), two of them as ONNX Runtime's optimizer leaves them, and the Llama-style decode step and prefill of models/decoder.py (4 layers,
hidden 256: GroupQueryAttention, a KV cache). ``--fast``: the corpus only.
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


def run_case(label, path, box, fixed, follow) -> dict:
    derived = {n: parse_formula(t, tuple(box)) for n, t in follow.items()}

    def load_at(b):
        return load(str(path), {**fixed, **{n: f.at(b) for n, f in derived.items()}, **b})
    t0 = time.perf_counter()
    built = build_range_plan(load_at, box, model_name=Path(path).name, options=OPTIONS)
    rp = built.plan
    problems = range_problems(rp, built.formulas.graph) + structural_problems(
        rp, load_at, evaluate)
    rows = []
    for b in spread(box):
        plan = evaluate(rp, b)
        graph = load_at(b)
        validate(plan, graph)
        fresh = plan_graph(graph, **OPTIONS).plan
        same = all(plan.tensors[n].bytes == t.bytes for n, t in fresh.tensors.items())
        rows.append({"binding": b, "arena_bytes": plan.arena_bytes,
                     "fresh_arena_bytes": fresh.arena_bytes,
                     "ratio": plan.arena_bytes / max(fresh.arena_bytes, 1),
                     "sizes_equal": same})
    return {"case": label, "model": Path(path).name, "box": box, "fixed": fixed,
            "segments": len(rp.segments), "build_seconds": round(time.perf_counter() - t0, 2),
            "proved": not problems, "rows": rows,
            "worst_ratio": max(r["ratio"] for r in rows),
            "smallest_over_largest": rows[0]["arena_bytes"] / max(rows[-1]["arena_bytes"], 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.range_bench",
                                description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="OUT", help="write every row as JSON here")
    p.add_argument("--fast", action="store_true", help="the corpus only")
    args = p.parse_args(argv)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = CASES + ([] if args.fast else ort_cases() + decoder_cases(Path(tmp)))
        print(f"{'case':28} {'box':48} {'seg':>3} {'build s':>7} {'proved':>6} "
              f"{'worst ratio':>11} {'sizes':>5} {'small/large':>11}")
        for case in cases:
            r = run_case(*case)
            out.append(r)
            box = ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in r["box"].items())
            print(f"{r['case']:28} {box:48} {r['segments']:>3} {r['build_seconds']:>7} "
                  f"{str(r['proved']):>6} {r['worst_ratio']:>11.4f} "
                  f"{str(all(x['sizes_equal'] for x in r['rows'])):>5} "
                  f"{r['smallest_over_largest']:>11.4f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    from graphmem.frontend.ort_optimize import cleanup
    cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
