"""The one place the breadth tests call graphmem's ONNX Runtime verifier."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import graphmem
from graphmem.verify import verifier as verify
from graphmem.errors import GraphmemError

# The verifier's refusals that say nothing of the model or its plan, each a skip with
# its reason named; any other GraphmemError fails the test. The machine cannot hold the
# arena and the reference run's tensors (graphmem/verify/arena.py, check_fits):
SKIP_REASONS = {
    "this machine has too little memory to verify it": re.compile(
        r"verifying needs about [\d,]+ bytes .*; this machine has [\d,]+ bytes available"),
}


def skip_reason(exc: GraphmemError) -> str | None:
    """The documented reason ``exc`` is a skip, or None: a failure."""
    return next((name for name, pattern in SKIP_REASONS.items()
                 if pattern.fullmatch(str(exc))), None)


def verify_or_skip(path: Path, result: graphmem.Result) -> None:
    """Run the plan in one arena on ONNX Runtime and compare outputs.

    A refusal of :data:`SKIP_REASONS` is a skip naming its reason; any other error of
    the verifier (a model it cannot run, a plan it finds wrong) fails the test.
    """
    graph = result.graph
    assert graph.model_path and Path(graph.model_path) == Path(path)
    # the ONNX test folders ship real inputs beside the model: use them where they are
    shipped = Path(path).parent / "test_data_set_0"
    try:
        inputs = verify.read_inputs(shipped, graph) if shipped.is_dir() else None
        report = verify.verify(result.plan, graph, inputs=inputs)
    except GraphmemError as exc:
        reason = skip_reason(exc)
        if reason is None:
            raise
        pytest.skip(f"{reason}: {exc}")
    detail = report.mismatch.describe() if report.mismatch else (report.problems, report.outputs)
    assert report.passed, detail
