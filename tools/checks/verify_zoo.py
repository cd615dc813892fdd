"""Verify the nine zoo graphs on ONNX Runtime and print a Markdown table of results/times.

    python -m tools.checks.verify_zoo                      # default passes and each pass alone, CPU
    python -m tools.checks.verify_zoo --provider cuda      # the same on a GPU (onnxruntime-gpu)
    python -m tools.checks.verify_zoo --check-all --sets default

Each cell is PASS/FAIL and the seconds `graphmem.verify.verify` took (constants,
reference run, arena run; planning excluded). A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import sys
import time

import onnxruntime as ort

import graphmem
from graphmem.verify.verifier import verify
from graphmem.frontend.zoo import ZOO, zoo_path

SETS = {"default": list(graphmem.DEFAULT_PASSES), "inplace": ["inplace"], "share": ["share"],
        "place": ["place"], "none": []}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--sets", default=",".join(SETS),
                    help="comma-separated pass sets: " + ", ".join(SETS))
    ap.add_argument("--check-all", action="store_true")
    ap.add_argument("--models", default=",".join(ZOO))
    args = ap.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    print(f"onnxruntime {ort.__version__}, provider {args.provider}, "
          f"check_all={args.check_all}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print()
    print("| model | nodes | arena MiB (default) | " + " | ".join(f"{s} s" for s in sets) + " |")
    print("|---|---:|---:|" + "---:|" * len(sets))
    failed = 0
    for name in args.models.split(","):
        graph = graphmem.load(zoo_path(name))
        cells, arena = [], 0.0
        for s in sets:
            plan = graphmem.plan_graph(graph, SETS[s]).plan
            if s == "default":
                arena = plan.arena_bytes / 2 ** 20
            t0 = time.perf_counter()
            report = verify(plan, graph, provider=args.provider, check_all=args.check_all)
            seconds = time.perf_counter() - t0
            failed += not report.passed
            cells.append(f"{'PASS' if report.passed else 'FAIL'} {seconds:.2f}")
        print(f"| {name} | {len(graph.nodes)} | {arena:.2f} | " + " | ".join(cells) + " |")
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
