"""tests/verify_hook.py skips only for the reasons it names: the verifier's own refusal
for want of memory is one; a model it cannot run is a failure."""
from __future__ import annotations

import dataclasses

import onnx
import pytest
from onnx import TensorProto, helper

import graphmem
from graphmem.errors import GraphmemError
from graphmem.verify import arena

from conftest import make_model
from verify_hook import SKIP_REASONS, skip_reason, verify_or_skip


def test_the_memory_refusal_is_the_named_skip(monkeypatch):
    monkeypatch.setattr(arena, "available_memory", lambda: 1000)
    with pytest.raises(GraphmemError) as exc:
        arena.check_fits(4096, 512)
    assert skip_reason(exc.value) == "this machine has too little memory to verify it"
    assert list(SKIP_REASONS) == [skip_reason(exc.value)]


@pytest.mark.parametrize("message", [
    "ONNX Runtime cannot run the whole model: Graph output (graphmem.workspace.3) does not "
    "exist in the graph",
    "the verifier runs the bodies of If/Loop/Scan nodes on the CPU provider only",
    "invalid plan: tensor 'y' overlaps 'x'"])
def test_any_other_refusal_is_a_failure(message):
    assert skip_reason(GraphmemError(message)) is None


def test_the_hook_fails_on_an_error_of_the_verifier(tmp_path):
    """A plan for another model: the verifier refuses it, and the hook passes the error
    on (a test that relied on it fails) rather than skipping."""
    relu = make_model([helper.make_node("Relu", ["x"], ["y"])],
                      [("x", TensorProto.FLOAT, [4])], [("y", TensorProto.FLOAT, [4])])
    sig = make_model([helper.make_node("Sigmoid", ["x"], ["z"])],
                     [("x", TensorProto.FLOAT, [4])], [("z", TensorProto.FLOAT, [4])])
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(relu, str(a))
    onnx.save(sig, str(b))
    wrong = dataclasses.replace(graphmem.plan_model(b), graph=graphmem.load(a))
    with pytest.raises(GraphmemError, match="another model"):
        verify_or_skip(a, wrong)
