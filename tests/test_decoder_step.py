"""A decode step as onnxruntime-genai's builder writes it (models/decoder.py): ORT's own
ops (GroupQueryAttention with rotary, SimplifiedLayerNormalization,
SkipSimplifiedLayerNormalization, MatMulNBits), the key/value cache in and out, and
GroupQueryAttention's total length computed from the attention mask. It loads by the
contrib rules alone, plans, and runs inside its arena on ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import graphmem
from graphmem.verify.verifier import verify
from models.decoder import build

KV_HEADS, HEAD = 2, 16  # build()'s defaults: 64 hidden, 4 heads, 2 key/value heads


def step_dims(seq: int, past: int) -> dict[str, int]:
    return {"batch_size": 1, "sequence_length": seq, "past_sequence_length": past,
            "total_sequence_length": past + seq}


def ort_presents(model, dims) -> tuple:
    """The present key's shape as ONNX Runtime makes it, on a mask of ones."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.ones((1, dims["sequence_length"]), np.int64),
             "attention_mask": np.ones((1, dims["total_sequence_length"]), np.int64)}
    for i in range(2):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = np.zeros(
                (1, KV_HEADS, dims["past_sequence_length"], HEAD), np.float32)
    return sess.run(["present.0.key"], feeds)[0].shape


@pytest.mark.parametrize("form", ["fp32", "int4", "presents-undeclared"])
@pytest.mark.parametrize("seq,past", [(1, 16), (3, 5)])
def test_a_decode_step_plans_and_verifies(form, seq, past, tmp_path):
    model = build(int4=form == "int4", present_dims=form != "presents-undeclared")
    path = tmp_path / "decoder.onnx"
    path.write_bytes(model.SerializeToString())
    dims = step_dims(seq, past)
    g = graphmem.load(path, dims=dims)
    # the present holds the past and the new tokens: what the kernel writes
    assert g.tensors["present.0.key"].shape == ort_presents(model, dims) == (
        1, KV_HEADS, past + seq, HEAD)
    strategies = [s.strategy for s in g.sizing if s.count]
    assert "shape-walk" in strategies and "onnxruntime-symbolic" not in strategies
    plan = graphmem.plan_graph(g).plan
    graphmem.validate(plan, g)
    report = verify(plan, g)
    assert report.passed, report.mismatch and report.mismatch.describe()


def test_planning_the_int4_step_imports_no_onnx_python(tmp_path):
    """The whole `graphmem plan` of the builder's int4 decode step stays on the loader's
    own paths (no onnx Python package, which ONNX Runtime's symbolic inference would
    have pulled in with sympy)."""
    from conftest import onnx_python_imported_by_plan
    path = tmp_path / "decoder-int4.onnx"
    path.write_bytes(build(int4=True, present_dims=False).SerializeToString())
    args = [str(path), "-o", str(tmp_path / "plan.json"), "-q"]
    for name, value in step_dims(1, 16).items():
        args += ["--dim", f"{name}={value}"]
    rc, mods = onnx_python_imported_by_plan(args)
    assert rc == 0 and mods == []
