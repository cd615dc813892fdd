"""The one place the breadth tests call graphmem's ONNX Runtime verifier."""
from __future__ import annotations

from pathlib import Path

import pytest

import graphmem
from graphmem.verify import verifier as verify
from graphmem.errors import GraphmemError


def verify_or_skip(path: Path, result: graphmem.Result) -> None:
    """Run the plan in one arena on ONNX Runtime and compare outputs.

    A model the verifier declines (it says why, e.g. control flow) is a skip with its
    reason, never a pass.
    """
    graph = result.graph
    assert graph.model_path and Path(graph.model_path) == Path(path)
    # the ONNX test folders ship real inputs beside the model: use them where they are
    shipped = Path(path).parent / "test_data_set_0"
    try:
        inputs = verify.read_inputs(shipped, graph) if shipped.is_dir() else None
        report = verify.verify(result.plan, graph, inputs=inputs)
    except GraphmemError as exc:
        pytest.skip(f"graphmem.verify cannot run it: {exc}")
    detail = report.mismatch.describe() if report.mismatch else (report.problems, report.outputs)
    assert report.passed, detail
