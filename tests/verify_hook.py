"""The one place the tests call graphmem's ONNX Runtime verifier (``graphmem.verify``).

That module is built on its own branch. Until it is merged, every caller skips with
a reason (the plan has still been built and validated by then).
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import graphmem


def verify_or_skip(path: Path, result: graphmem.Result, dims: dict) -> None:
    """Run the plan in one arena on ONNX Runtime and compare outputs: the verify hook.

    SWITCH-ON POINT: ``graphmem.verify`` is built on its own branch. Until it is merged
    this skips with a reason; once merged, adapt the one call below to its API (the
    AttributeError that follows a merge says where).
    """
    try:
        verify = importlib.import_module("graphmem.verify")
    except ModuleNotFoundError:
        pytest.skip("graphmem.verify is not merged yet: planned and validated only")
    report = verify.verify_plan(str(path), result.plan, dims=dims)
    assert report.ok, report
