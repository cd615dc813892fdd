"""Every entry of the CPU in-place tables (the default one and the opt-in probed one, its
superset) runs correctly in place on this machine's ONNX Runtime
(graphmem.commands.probe, graphmem.verify.probe), and every view op runs on its input's bytes."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.verify.cuda import cuda_usable
from graphmem.core import ops
from graphmem.commands.probe import probe
from graphmem.verify.probe import cases, in_place
from graphmem.verify.verifier import verify

from conftest import make_model

F = TensorProto.FLOAT
PROBED_CPU = ops.INPLACE_TABLES[ops.table_key("cpu", "probed")]


def _in_place(plan: graphmem.Plan, out: str, src: str) -> graphmem.Plan:
    return in_place(plan, out, src)


def test_every_overwrite_entry_holds_on_this_machine():
    """The test of the tables is the probe (graphmem probe): every entry of the CPU probed
    table (which holds the default one), run in place on this machine's ONNX Runtime at
    sizes that reach vector tails and blocks, and with an input broadcast, gives the
    plain run's results."""
    assert all(set(pairs) <= set(PROBED_CPU.get(op, ())) for op, pairs in ops.OVERWRITE.items())
    failed = [f"{o.case.label}: {o.detail}" for o in probe(PROBED_CPU) if not o.passed]
    assert not failed, "\n".join(failed[:10])


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_usable(),
                    reason="needs onnxruntime-gpu with CUDAExecutionProvider and a CUDA device")
def test_every_overwrite_entry_holds_on_cuda():
    failed = [f"{o.case.label}: {o.detail}"
              for o in probe(ops.INPLACE_TABLES["cuda-probed"], "cuda") if not o.passed]
    assert not failed, "\n".join(failed[:10])


def test_every_case_of_the_table_is_probed():
    labels = {c.label for c in cases(PROBED_CPU)}
    assert "Add input 1 -> output 0, shape [4, 64, 1000], input 0 broadcast" in labels
    assert "Sum input 2 -> output 0, shape [1]" in labels
    assert len({c.op for c in cases(PROBED_CPU)}) == len(PROBED_CPU)


def test_a_gelu_model_is_planned_without_gelu_in_place(tmp_path):
    """Gelu's CPU kernel declares no in-place support and fails in place on some CPUs
    (issue 20): the default plan keeps its output apart, and verifies."""
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Gelu", ["a"], ["y"])]
    model = make_model(nodes, [("x", F, [4, 64, 1000])], [("y", F, [4, 64, 1000])], opset=20)
    path = tmp_path / "gelu.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["y"].alias_of is None
    assert verify(plan, graph).passed


def test_a_kernel_that_cannot_run_in_place_fails(tmp_path):
    """The control: Transpose written over its own input is caught at that node."""
    nodes = [helper.make_node("Identity", ["x"], ["p"]),
             helper.make_node("Transpose", ["p"], ["y"], perm=[1, 0])]
    model = make_model(nodes, [("x", F, [64, 64])], [("y", F, [64, 64])])
    path = tmp_path / "transpose.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    plan = _in_place(graphmem.plan_graph(graph, []).plan, "y", "p")
    assert graphmem.problems(plan, graph)  # not in the table, so the rules refuse it
    report = verify(plan, graph, runtime_only=True)
    assert not report.passed and report.mismatch.node.startswith("node 1 (Transpose")
    assert report.mismatch.overlapping == ("p",)
    assert report.in_place_op == "Transpose"  # the report points to `graphmem probe`


VIEW_CASES = {
    "Reshape": ([2, 3, 64], [6, 64], {}, [np.array([6, 64], np.int64)]),
    "Flatten": ([2, 3, 64], [2, 192], {"axis": 1}, []),
    "Squeeze": ([1, 3, 64], [3, 64], {}, [np.array([0], np.int64)]),
    "Unsqueeze": ([3, 64], [1, 3, 64], {}, [np.array([0], np.int64)]),
    "Identity": ([2, 3, 64], [2, 3, 64], {}, []),
    "Dropout": ([2, 3, 64], [2, 3, 64], {}, []),
}


@pytest.mark.parametrize("op", sorted(ops.VIEW))
def test_view_op_runs_on_its_input_bytes(op, tmp_path):
    """A view's output at its input's offset, while the input is still read later."""
    shape, out_shape, attrs, consts = VIEW_CASES[op]
    inits = [numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(consts)]
    nodes = [helper.make_node("Neg", ["x"], ["p"]),
             helper.make_node(op, ["p"] + [f"c{i}" for i in range(len(consts))], ["v"], **attrs),
             helper.make_node("Sigmoid", ["v"], ["s"]),
             helper.make_node("Neg", ["p"], ["q"])]  # p is read after the view
    model = make_model(nodes, [("x", F, shape)], [("s", F, out_shape), ("q", F, shape)],
                       initializers=inits, opset=20)
    path = tmp_path / f"{op}.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    plan = graphmem.plan_graph(graph, []).plan
    tensors = dict(plan.tensors)
    tensors["v"] = dataclasses.replace(tensors["v"], offset=tensors["p"].offset,
                                       alias_of="p", alias="view")
    from graphmem.plan.stats import plan_stats
    view = dataclasses.replace(plan, tensors=tensors)
    view = dataclasses.replace(view, stats=plan_stats(view))
    graphmem.validate(view, graph)
    report = verify(view, graph, check_all=True)
    assert report.passed, report.mismatch and report.mismatch.describe()


def test_probe_command_lists_table_entries_and_candidates(capsys):
    import json

    from graphmem.cli import main
    assert main(["probe", "--ops", "Relu,Gelu", "--json"]) == 0  # Gelu is not in the table
    out = json.loads(capsys.readouterr().out)
    assert out["ops"]["Relu"]["in_table"] and not out["ops"]["Gelu"]["in_table"]
    assert out["ops"]["Relu"]["passed"] == out["ops"]["Relu"]["cases"] and out["table_holds"]
    assert main(["probe", "--ops", "Nope"]) == 2
    assert "no overwrite entry for Nope" in capsys.readouterr().err


def test_probe_command_takes_contrib_table_entries(capsys):
    """The tables' contrib entries are probed by their domain:op key: CPU FusedConv over
    its sum input; an entry with no probe model (CUDA Attention) is named, not run."""
    import json

    from graphmem.cli import main
    assert main(["probe", "--ops", "com.microsoft:FusedConv", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fused = out["ops"]["com.microsoft:FusedConv"]
    assert fused["in_table"] and fused["cases"] > 0 and fused["passed"] == fused["cases"]
    assert fused["pairs"] == [[3, 0]] and out["unprobed"] == []
    assert main(["probe", "--provider", "cpu", "--ops", "com.microsoft:Attention"]) == 2
    assert "no overwrite entry for com.microsoft:Attention" in capsys.readouterr().err


def test_probe_on_cuda_without_cuda_is_one_line(capsys):
    if cuda_usable():
        pytest.skip("the CUDA provider runs here")
    from graphmem.cli import main
    assert main(["probe", "--provider", "cuda", "--ops", "Relu"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: --provider cuda")
    assert captured.out == ""
