"""Control flow (If, Loop, Scan): bodies load as nested scopes, are planned into their
node's workspace, validated, and verified by running them inside the arena."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.frontend.reader import from_model, load
from graphmem.pipeline import plan_graph
from graphmem.plan.format import Plan
from graphmem.plan.validate import problems
from graphmem.planning.scopes import opaque_graph
from graphmem.verify.verifier import verify

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import control_flow  # noqa: E402

NAMES = list(control_flow.MODELS)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cf")
    out = {}
    for name, build in control_flow.MODELS.items():
        onnx.save(build(), str(folder / f"{name}.onnx"))
        out[name] = folder / f"{name}.onnx"
    return out


def _bodies(plan: Plan):
    for s in plan.scopes:
        yield s
        yield from _bodies(s.plan)


@pytest.mark.parametrize("name", NAMES)
def test_plans_validates_and_verifies(saved, name):
    graph = load(saved[name])
    assert graph.scopes, "the bodies are loaded as scopes"
    result = plan_graph(graph)
    plan = Plan.parse(result.plan.to_json(), "plan")  # through its JSON text
    assert plan.scopes and problems(plan, graph) == []
    body_tensors = {t for s in _bodies(plan) for t in s.plan.tensors}
    assert body_tensors
    report = verify(plan, graph)
    assert report.passed, report.mismatch and report.mismatch.describe()


def test_loop_body_holds_the_peak_and_is_in_the_plan(saved):
    """The bar: a Loop whose body holds the peak is planned with the body's tensors in
    the plan, and verified."""
    graph = load(saved["loop_decoder"])
    plan = plan_graph(graph).plan
    (body,) = plan.scopes
    assert body.attr == "body" and {"up", "act", "sq", "mix"} <= set(body.plan.tensors)
    ws = plan.tensors[body.workspace]
    assert ws.bytes == body.plan.arena_bytes and ws.live[0] == ws.live[1]
    top = sum(t.bytes for n, t in plan.tensors.items() if n != body.workspace)
    assert body.plan.arena_bytes > top  # the body is the peak
    assert plan.arena_bytes >= ws.offset + ws.bytes
    assert verify(plan, graph).passed


def test_nested_plans_cost_less_than_opaque_bodies(saved):
    for name in NAMES:
        graph = load(saved[name])
        assert plan_graph(graph).plan.arena_bytes < plan_graph(opaque_graph(graph)).plan.arena_bytes


def _corrupt_nested(plan_json: str) -> str:
    """The innermost body's 'sq' moved onto 'act' (both live at once)."""
    d = json.loads(plan_json)
    ts = d["scopes"][0]["scopes"][0]["tensors"]
    ts["sq"]["offset"] = ts["act"]["offset"]
    return json.dumps(d)


def test_broken_nested_plan_is_refused_and_fails_verify(saved):
    graph = load(saved["nested"])
    bad = Plan.parse(_corrupt_nested(plan_graph(graph).plan.to_json()), "bad")
    found = problems(bad, graph)
    assert found and found[0].startswith("scope then_branch of node 5: scope body of node 0")
    report = verify(bad, graph, runtime_only=True)  # the rules skipped: the run sees it
    assert not report.passed and report.mismatch is not None
    assert "If" in report.mismatch.node


def test_cli_plan_verify_report(saved, tmp_path, capsys):
    path = saved["scan_rnn"]
    out = tmp_path / "p.json"
    assert main(["plan", str(path), "-o", str(out)]) == 0
    assert main(["verify", str(path), "--plan", str(out)]) == 0
    assert main(["report", str(path), "--plan", str(out)]) == 0
    assert main(["export", str(path), "--html", str(tmp_path / "r.html")]) == 0
    bad = tmp_path / "bad.json"
    d = json.loads(out.read_text())
    d["scopes"][0]["tensors"]["hw"]["offset"] = d["scopes"][0]["tensors"]["xw"]["offset"]
    bad.write_text(json.dumps(d))
    assert main(["verify", str(path), "--plan", str(bad), "--runtime-only"]) == 1
    capsys.readouterr()


def test_old_plans_without_scopes_still_parse():
    text = ('{"format": "graphmem.plan/1", "model": "m", "bindings": {}, "alignment": 64, '
            '"order": [], "constants": [], "arena_bytes": 0, "tensors": {}}')
    plan = Plan.parse(text, "old")
    assert plan.scopes == () and "scopes" not in plan.to_dict()


def _loop(cond_out_node, trips=3):
    body = helper.make_graph(
        [cond_out_node, helper.make_node("Relu", ["h_in"], ["h_out"]),
         helper.make_node("Neg", ["h_out"], ["y"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["h", "ys"], body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, ["steps", 2])],
        [numpy_helper.from_array(np.array(trips, np.int64), "M")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_loop_scan_output_sized_from_a_constant_trip_count():
    graph = from_model(_loop(helper.make_node("Identity", ["c"], ["c_out"]), trips=5))
    assert graph.tensors["ys"].shape == (5, 2)


def test_loop_whose_condition_can_stop_it_early_is_refused():
    stop = helper.make_node("Greater", ["i", "i"], ["c_out"])  # computed: not static
    with pytest.raises(GraphmemError, match="cannot size tensor 'ys'.*condition"):
        from_model(_loop(stop))


def test_if_branches_of_different_shapes_are_refused():
    def branch(name, n):
        return helper.make_graph(
            [helper.make_node("Constant", [], [name],
                              value=numpy_helper.from_array(np.zeros(n, np.float32)))],
            name, [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n"])])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("a", 2),
                          else_branch=branch("b", 3))], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GraphmemError, match="output 'y' is float32\\[2\\] in then_branch"):
        from_model(m)
