"""Shared helpers for graphmem's tests: tiny ONNX graphs built by hand."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from onnx import TensorProto, helper

# A command at work past a second writes progress lines on stderr through a pipe
# (graphmem/commands/progress.py). The many tests of the one line a failing command
# writes run with the first such line an hour away, in this process and the commands
# it starts, so that their count does not depend on how loaded the machine is; the
# tests of the progress lines themselves take the variable out (tests/test_words.py)
# or set their own timings.
os.environ.setdefault("GRAPHMEM_PROGRESS_AFTER", "3600")

import graphmem
from graphmem.frontend.reader import from_model

F = TensorProto.FLOAT

# The property tests are judged by what they find, not by how fast the machine draws and
# runs an example: hypothesis's 200 ms deadline and its too-slow check failed tests on a
# loaded 2-core machine (issue 55: the default run must pass while another process keeps
# both cores busy). A test's own @settings still sets what it names.
settings.register_profile("graphmem", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("graphmem")


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


def onnx_python_imported_by_plan(args: list[str]) -> tuple[int, list[str]]:
    """``graphmem plan ARGS`` in a fresh process: its exit code, and the modules of
    onnx's Python package it imported (its compiled core, ``onnx.onnx_cpp2py_export``,
    left out: the loader loads that alone)."""
    import json
    import subprocess
    import sys
    code = ("import json, sys\n"
            "from graphmem.cli import main\n"
            f"rc = main(['plan', *{list(args)!r}])\n"
            "mods = [m for m in sys.modules if (m == 'onnx' or m.startswith('onnx.'))\n"
            "        and not m.startswith('onnx.onnx_cpp2py_export')]\n"
            "print(json.dumps({'rc': rc, 'mods': mods}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return found["rc"], found["mods"]


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


def quantize_static_quietly(src, dst, feeds: list[dict], quant_format: str = "QDQ") -> None:
    """ONNX Runtime's ``quantize_static`` of ``src`` into ``dst``, calibrated on
    ``feeds`` (input name -> array), int8 weights and uint8 activations, in the
    ``quant_format`` "QDQ" or "QOperator"; its warnings silenced."""
    import logging
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    logging.disable(logging.WARNING)
    try:
        quantize_static(src, dst, Reader(), quant_format=getattr(QuantFormat, quant_format),
                        weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    finally:
        logging.disable(logging.NOTSET)
