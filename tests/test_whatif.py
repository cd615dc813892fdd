"""Batch and precision what-ifs by re-planning, and ``fit`` cross-checked by planning."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import graphmem
from graphmem.analysis import breakdown as analysis
from graphmem.cli import main
from graphmem.frontend.reader import from_model
from graphmem.commands.sizes import parse_bytes
from graphmem.analysis.whatif import (Batcher, check_scaling, fit, footprint, rebatch,
                             sweep, with_float_dtype)
from graphmem.frontend.zoo import ZOO, zoo_path

from conftest import F, make_model

GIB = 2 ** 30


def zoo_model(name):
    return onnx.load(str(zoo_path(name)))


# ---------------------------------------------------------------------- batch

@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_model_rebatches(name):
    batcher = Batcher(zoo_model(name))
    assert batcher.axis.symbol is None and batcher.axis.size == 1
    g3 = batcher.graph(3)
    base = batcher.base
    for t in base.arena_tensors():
        assert g3.tensors[t].numel == 3 * base.tensors[t].numel  # every activation scales
    assert analysis.weight_bytes(g3) == analysis.weight_bytes(base)
    [out] = g3.outputs
    assert g3.tensors[out].shape == (3, *base.tensors[out].shape[1:])
    graphmem.plan_graph(g3)  # and plans (validated inside)


@pytest.mark.parametrize("name", ["shufflenet", "inception_v1"])
def test_rebatched_model_runs_on_onnxruntime(name):
    # shufflenet has 33 Reshapes whose shape constants hard-code batch 1 ([1, 4, 28, 56,
    # 56] ...); inception_v1 reshapes its classifier weight ([1000, 1024]) as well as its
    # data ([1, 1024]). A rebatched model must compute, per image, what the original does.
    model = zoo_model(name)
    batched = rebatch(model, 3, 1)
    rng = np.random.default_rng(0)
    images = rng.standard_normal((3, 3, 224, 224)).astype(np.float32)
    one = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    three = ort.InferenceSession(batched.SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    inits = {i.name for i in model.graph.initializer}
    [name_in] = [i.name for i in model.graph.input if i.name not in inits]
    [got] = three.run(None, {name_in: images})
    want = np.concatenate([one.run(None, {name_in: images[i:i + 1]})[0] for i in range(3)])
    assert got.shape == (3, 1000)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_rebatch_keeps_a_shared_shape_for_weights():
    # One shape constant [1, 6] reshapes the data and a weight: the weight keeps it.
    shape = numpy_helper.from_array(np.array([1, 6], np.int64), "shape")
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("Reshape", ["w", "shape"], ["wflat"]),
             helper.make_node("Add", ["flat", "wflat"], ["y"])]
    model = make_model(nodes, [("x", F, [1, 2, 3])], [("y", F, [1, 6])], [shape, w])
    g = Batcher(model).graph(4)
    assert g.tensors["flat"].shape == (4, 6)
    assert g.tensors["wflat"].shape == (1, 6)
    assert g.tensors["y"].shape == (4, 6)


def test_rebatch_rewrites_constant_node_shapes():
    nodes = [helper.make_node("Constant", [], ["shape"],
                              value=numpy_helper.from_array(np.array([1, -1], np.int64))),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = make_model(nodes, [("x", F, [1, 2, 3])], [("y", F, [1, 6])])
    assert Batcher(model).graph(5).tensors["y"].shape == (5, 6)


def test_rebatch_refuses_a_shape_that_hard_codes_more_than_the_batch():
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"]),
             helper.make_node("Relu", ["y"], ["z"])]
    model = make_model(nodes, [("x", F, [1, 6])], [("z", F, [2, 3])], [shape])
    with pytest.raises(graphmem.GraphmemError, match="cannot set the batch to 2"):
        Batcher(model).graph(2)


def test_symbolic_batch_is_bound_not_rewritten():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [("x", F, ["N", 4])], [("y", F, ["N", 4])])
    batcher = Batcher(model, {"N": 2})
    assert batcher.axis.symbol == "N" and batcher.axis.size == 2
    assert batcher.graph(7).tensors["y"].shape == (7, 4)


def test_scaling_check_names_the_tensor():
    a = from_model(make_model([helper.make_node("Relu", ["x"], ["y"])],
                              [("x", F, [1, 4])], [("y", F, [1, 4])]))
    b = from_model(make_model([helper.make_node("Relu", ["x"], ["y"])],
                              [("x", F, [3, 5])], [("y", F, [3, 5])]))
    with pytest.raises(graphmem.GraphmemError, match="'x'"):
        check_scaling(a, b, 1, 3)


# ---------------------------------------------------------------------- precision

def test_precision_retypes_floats_only_and_replans():
    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    w = numpy_helper.from_array(np.ones((12,), np.float32), "w")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Mul", ["r", "w"], ["y"])]
    g = from_model(make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, [2, 12])], [shape, w]))
    half = with_float_dtype(g, "float16")
    assert half.tensors["x"].bytes == 48 and half.tensors["w"].bytes == 24
    assert half.tensors["shape"] == g.tensors["shape"]  # int64 untouched
    f32, f16, i8 = (footprint(with_float_dtype(g, d), alignment=64)
                    for d in ("float32", "float16", "int8"))
    assert f32["weight_bytes"] == 48 + 16 and f16["weight_bytes"] == 24 + 16
    # 96-byte tensors take two 64-byte lines in float32, 48-byte ones one line in
    # float16 and 24-byte ones one line in int8: alignment is real, not a ratio
    assert (f32["arena_bytes"], f16["arena_bytes"], i8["arena_bytes"]) == (256, 128, 128)
    with pytest.raises(graphmem.GraphmemError, match="unknown dtype"):
        with_float_dtype(g, "float7")


def test_sweep_replans_each_cell():
    rows = sweep(Batcher(zoo_model("resnet50")), [1, 2], ["float32", "float16"])
    cell = {(r["batch"], r["dtype"]): r for r in rows}
    shape_bytes = 16  # the flattening Reshape's int64 [1, 2048] stays int64
    assert (cell[1, "float16"]["weight_bytes"] - shape_bytes) * 2 == \
        cell[1, "float32"]["weight_bytes"] - shape_bytes
    assert cell[2, "float32"]["arena_bytes"] > cell[1, "float32"]["arena_bytes"]
    for r in rows:
        assert r["total_bytes"] == r["weight_bytes"] + r["arena_bytes"] + r["workspace_bytes"]


def test_report_whatif_json(capsys):
    assert main(["report", "vgg19", "--json", "--batch", "1,8", "--dtype",
                 "float32,float16,int8"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["batch"], r["dtype"]): r for r in data["whatif"]}
    assert len(rows) == 6
    assert rows[1, "float32"]["arena_bytes"] == data["totals"]["arena_bytes"]
    # vgg19 is a chain: the arena is its largest adjacent pair, 8 times as large at batch 8
    assert rows[8, "float32"]["arena_bytes"] == 8 * rows[1, "float32"]["arena_bytes"]
    assert rows[8, "int8"]["arena_bytes"] * 4 == rows[8, "float32"]["arena_bytes"]


# ---------------------------------------------------------------------- fit

def planned_total(name, batch):
    """weights + arena + workspace, from a plan made without the fit machinery."""
    model = zoo_model(name)
    inits = {i.name for i in model.graph.initializer}
    [data] = [i for i in model.graph.input if i.name not in inits]
    data.type.tensor_type.shape.dim[0].dim_value = batch
    for n in model.graph.node:  # the zoo's one flattening Reshape hard-codes batch 1
        if n.op_type == "Reshape":
            init = next(i for i in model.graph.initializer if i.name == n.input[1])
            value = numpy_helper.to_array(init).copy()
            value[0] = batch
            init.CopyFrom(numpy_helper.from_array(value, init.name))
    del model.graph.value_info[:]
    for o in model.graph.output:
        o.type.tensor_type.ClearField("shape")
    graph = from_model(model, check=False)  # outputs without shapes do not pass the checker
    plan = graphmem.plan_graph(graph).plan
    return (analysis.weight_bytes(graph) + plan.arena_bytes + analysis.workspace(graph)[0])


@pytest.mark.parametrize("name, budget, want", [
    ("vgg19", "4GiB", 144), ("vgg19", "12GiB", 479),
    ("resnet50", "4GiB", 580), ("resnet50", "12GiB", 1768),
])
def test_fit_answer_is_the_edge(name, budget, want, capsys):
    assert main(["fit", name, "--budget", budget, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["budget_bytes"] == parse_bytes(budget)
    n = out["batch"]
    at, above = planned_total(name, n), planned_total(name, n + 1)
    assert out["total_bytes"] == at <= out["budget_bytes"] < above == out["next_total_bytes"]
    assert n == want


def test_fit_zero_when_one_sample_does_not_fit(capsys):
    assert main(["fit", "vgg19", "--budget", "500MB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["batch"] == 0 and out["total_bytes"] > out["budget_bytes"] == 500 * 10 ** 6


def test_fit_text_and_options(capsys):
    assert main(["fit", "resnet50", "--budget", "1GiB", "--dtype", "float16",
                 "--no-workspace"]) == 0
    out = capsys.readouterr().out
    assert "fits (float16): weights + arena =" in out and "would need" in out


def test_fit_search_on_a_function():
    probes = []

    def total(b):
        probes.append(b)
        return 100 + 10 * b

    assert fit(total, 1000)["batch"] == 90
    assert fit(total, 109)["batch"] == 0
    assert fit(total, 110) == {"batch": 1, "total_bytes": 110, "next_total_bytes": 120,
                               "probed": [1, 2]}


@pytest.mark.parametrize("text, value", [
    ("12GiB", 12 * GIB), ("4GB", 4 * 10 ** 9), ("512MiB", 512 * 2 ** 20), ("1000", 1000),
    ("1.5GiB", 3 * GIB // 2), ("2e9", 2 * 10 ** 9), ("64 kib", 65536),
])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "12 parsecs", "GiB", "-4GB", "1,000"])
def test_bad_budget_is_one_line(text, capsys):
    assert main(["fit", "squeezenet", f"--budget={text}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("graphmem: ")


def test_a_batch_named_dim_is_the_batch_wherever_it_stands():
    """A time-major RNN export ([T, batch, features], tests/data/control_flow): fit
    varies 'batch', not the first axis, and its Loop's carried state grows with it."""
    from pathlib import Path
    path = Path(__file__).parent / "data" / "control_flow" / "rnn_loop_ts.onnx"
    batcher = Batcher(onnx.load(str(path)), {"T": 5}, model_path=str(path))
    assert batcher.axis.symbol == "batch"
    assert batcher.graph(3).tensors["h.4"].shape == (3, 32)
    assert batcher.graph(3).tensors["xs"].shape == (5, 3, 8)
