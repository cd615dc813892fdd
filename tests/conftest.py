"""Shared helpers for graphmem's tests: tiny ONNX graphs built by hand."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import graphmem
from graphmem.frontend.reader import from_model

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17, value_info=()):
    """A ModelProto from helper.make_node lists and (name, elem, shape) triples."""
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        list(initializers),
        value_info=[helper.make_tensor_value_info(n, t, s) for n, t, s in value_info])
    return runtime_model(graph, opset)


# The IR version each test model is written with: onnx's newest may be newer than what
# the installed ONNX Runtime reads (onnx 1.23 writes IR 14, onnxruntime-gpu 1.31 reads
# up to 13); IR 10 goes with opset 21 and every runtime since 1.17 reads it.
TEST_IR_VERSION = 10


def runtime_model(graph, opset=17):
    """``helper.make_model`` at an IR version every supported ONNX Runtime reads."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, TEST_IR_VERSION)
    return model


def graph_of(model, dims=None):
    return from_model(model, dims)


def plan_of(model, passes=graphmem.DEFAULT_PASSES, **kw):
    """Plan a ModelProto; the pipeline validates the plan before returning it."""
    graph = graph_of(model, kw.pop("dims", None))
    result = graphmem.plan_graph(graph, passes, **kw)
    graphmem.validate(result.plan, graph)
    return result


@pytest.fixture
def tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# Hypothesis run sizes: a few hundred examples by default, thousands with
# `pytest --hypothesis-profile long` (the plugin loads that after this file).
from hypothesis import settings  # noqa: E402

settings.register_profile("graphmem", max_examples=200, deadline=None)
settings.register_profile("long", max_examples=3000, deadline=None)
settings.load_profile("graphmem")
