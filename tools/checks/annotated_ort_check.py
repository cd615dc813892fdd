"""Annotated zoo models in ONNX Runtime: same outputs as the originals, bit for bit?

    python -m tools.checks.annotated_ort_check [--raise-ir-version]

For each of the nine zoo graphs: plan, annotate, run onnx.checker (full check), run the
original and the annotated model in ONNX Runtime (CPU, one thread) on the same random
input, and compare the outputs exactly.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

import graphmem
from graphmem.export.annotate import annotate
from graphmem.frontend.reader import read_model
from graphmem.plan.view import build
from graphmem.frontend.zoo import ZOO, zoo_path


def outputs(model, graph):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {i.name: rng.standard_normal(graph.tensors[i.name].shape).astype(np.float32)
            for i in sess.get_inputs() if i.name in graph.inputs}
    return sess.run(None, feed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--raise-ir-version", action="store_true",
                    help="raise an older model to IR version 10 before annotating")
    raise_ir = ap.parse_args(argv).raise_ir_version
    bad = 0
    for name in ZOO:
        graph = graphmem.load(zoo_path(name))
        view = build(graphmem.plan_graph(graph).plan, graph)
        model = read_model(zoo_path(name))
        annotated = annotate(model, view, graph, raise_ir_version=raise_ir)
        onnx.checker.check_model(annotated, full_check=True)
        t0 = time.perf_counter()
        want, got = outputs(model, graph), outputs(annotated, graph)
        diff = max(float(np.abs(a - b).max()) for a, b in zip(want, got))
        same = all(np.array_equal(a, b) for a, b in zip(want, got))
        bad += not same
        print(f"{name:13s} ir {annotated.ir_version:2d}  identical={same}  max|diff|={diff:.3g}"
              f"  ({time.perf_counter() - t0:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
