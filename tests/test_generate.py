"""The generated networks: valid ONNX that ONNX Runtime runs, and plans that validate."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from models.generate import inception_cell, main, randwire, unet

from conftest import plan_of


def _run(model):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).random(inp.shape, dtype=np.float32)
    return sess.run(None, {inp.name: x})[0]


@pytest.mark.parametrize("make", [lambda: randwire(seed=0), lambda: randwire(nodes=12, seed=5),
                                  inception_cell, lambda: inception_cell(relu=True), unet])
def test_generated_models_run_and_plan(make):
    model = make()
    y = _run(model)
    assert np.isfinite(y).all() and y.size > 0
    plan = plan_of(model).plan
    assert plan.arena_bytes > 0


def test_randwire_is_a_random_wiring():
    a, b = randwire(seed=0), randwire(seed=1)
    ops = {n.op_type for n in a.graph.node}
    assert {"Sum", "Relu", "Conv"} <= ops
    assert [n.input[:] for n in a.graph.node] != [n.input[:] for n in b.graph.node]
    assert randwire(seed=0).SerializeToString() == a.SerializeToString()  # seeded
    widths = {d.dims[0] for d in a.graph.initializer if len(d.dims) == 4}
    assert len(widths) > 1  # mixed channel widths


def test_cli_writes_models(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--count", "2", "--nodes", "8"]) == 0
    names = sorted(p.name for p in tmp_path.glob("*.onnx"))
    assert names == ["inception_cell.onnx", "inception_cell_relu.onnx", "randwire_8_0.onnx",
                     "randwire_8_1.onnx", "unet.onnx"]
