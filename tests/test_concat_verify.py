"""Zero-copy Concat plans run correctly on ONNX Runtime (the Concat itself is skipped)."""
from __future__ import annotations

import onnx
import pytest

import graphmem
from graphmem.verify.verifier import verify
from models.generate import inception_cell, unet


@pytest.mark.parametrize("make", [lambda: inception_cell(relu=False), lambda: inception_cell(relu=True),
                                  unet], ids=["inception_cell", "inception_cell_relu", "unet"])
def test_concat_plans_verify_on_onnxruntime(make, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(make(), str(path))
    graph = graphmem.load(path)
    plan = graphmem.plan_graph(graph).plan
    assert any(t.slice_of for t in plan.tensors.values())  # the concat pass did act
    report = verify(plan, graph)
    assert report.passed, report
