"""The generated transformer: symbolic dims, shape arithmetic folded, plan validates."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import graphmem
from graphmem.frontend.reader import from_model
from models.transformer import build


@pytest.fixture(scope="module")
def model():
    return build(layers=2, d_model=32, heads=4)


def test_transformer_plans_with_bound_dims(model):
    graph = from_model(model, {"batch": 4, "seq": 16})
    # Shape/Gather/Concat chains over the bound input shape fold into constants
    assert {"ids_shape", "batch_dim", "seq_dim", "split_shape", "merge_shape"} <= set(graph.constants)
    result = graphmem.plan_graph(graph, bindings={"batch": 4, "seq": 16})
    plan = result.plan
    graphmem.validate(plan, graph)
    assert plan.bindings == {"batch": 4, "seq": 16}
    assert plan.tensors["logits"].bytes == 4 * 16 * 100 * 4
    assert plan.tensors["l0_scores"].bytes == 4 * 4 * 16 * 16 * 4
    assert plan.arena_bytes <= 1.01 * plan.stats["aliased_peak_bytes"]
    # views: the head split Reshapes alias their inputs
    assert plan.tensors["l0_q_split"].alias == "view"


def test_transformer_scales_with_the_binding(model):
    small = graphmem.plan_graph(from_model(model, {"batch": 1, "seq": 8})).plan
    big = graphmem.plan_graph(from_model(model, {"batch": 2, "seq": 8})).plan
    # every tensor the plan holds carries the batch dim
    assert big.stats["naive_bytes"] == 2 * small.stats["naive_bytes"]
    assert big.arena_bytes > small.arena_bytes


def test_transformer_runs_on_onnxruntime(model):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (logits,) = sess.run(None, {"ids": np.arange(6, dtype=np.int64).reshape(2, 3)})
    assert logits.shape == (2, 3, 100) and np.isfinite(logits).all()
