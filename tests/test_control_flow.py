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

import graphmem
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


def test_loop_whose_condition_can_stop_it_early_is_bounded_by_its_trip_count(tmp_path):
    """(issue 53: was refused) a condition computed in the body that may stop the Loop
    before M: its scan output planned at M, a symbol Loop_0; it runs once here."""
    stop = helper.make_node("Greater", ["i", "i"], ["c_out"])  # computed: not static
    onnx.save(_loop(stop), tmp_path / "m.onnx")
    graph = load(str(tmp_path / "m.onnx"))
    assert graph.tensors["ys"].shape == (3, 2)
    sym = graph.data_bounds.symbols["Loop_0"]
    assert (sym.bound, sym.proven, sym.tensor) == (3, 3, "ys")
    from graphmem.verify.verifier import verify
    report = verify(graphmem.plan_graph(graph).plan, graph)
    assert report.passed, report
    assert "Loop_0 (Loop, node 0): 1 of at most 3" in report.symbol_counts


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


F = TensorProto.FLOAT


def _vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def _plan_and_verify(model, inputs=None, folder=None):
    model.ir_version = 8
    path = folder / "m.onnx"
    onnx.save(model, str(path))
    graph = load(path)
    plan = Plan.parse(plan_graph(graph).plan.to_json(), "plan")
    assert problems(plan, graph) == []
    report = verify(plan, graph, inputs=inputs)
    assert report.passed, report.mismatch and report.mismatch.describe()
    return graph, plan


def test_scan_on_axis_1_in_reverse_verifies(tmp_path):
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x_t"], ["s2"]),
         helper.make_node("Mul", ["s2", "x_t"], ["y_t"])], "b",
        [_vi("s", [3, 4]), _vi("x_t", [3, 4])], [_vi("s2", [3, 4]), _vi("y_t", [3, 4])])
    g = helper.make_graph(
        [helper.make_node("Scan", ["s0", "X"], ["s_last", "Y"], body=body, num_scan_inputs=1,
                          scan_input_axes=[1], scan_input_directions=[1],
                          scan_output_axes=[1], scan_output_directions=[1])], "g",
        [_vi("s0", [3, 4]), _vi("X", [3, 5, 4])], [_vi("s_last", [3, 4]), _vi("Y", [3, 5, 4])])
    graph, _ = _plan_and_verify(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                                folder=tmp_path)
    assert graph.tensors["Y"].shape == (3, 5, 4)


def test_loop_stopped_by_its_condition_and_carried_views_verify(tmp_path):
    """No scan outputs: a condition computed in the body may stop the loop (here after
    3 of 10 iterations); a carried output that is a view of another formal input is
    copied as a parallel assignment."""
    body = helper.make_graph(
        [helper.make_node("Less", ["i", "two"], ["c_out"]),
         helper.make_node("Identity", ["b_in"], ["a_out"]),
         helper.make_node("Add", ["a_in", "b_in"], ["b_out"])], "b",
        [_vi("i", [], TensorProto.INT64), _vi("c", [], TensorProto.BOOL), _vi("a_in", [4]),
         _vi("b_in", [4])],
        [_vi("c_out", [], TensorProto.BOOL), _vi("a_out", [4]), _vi("b_out", [4])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "a", "b"], ["a_last", "b_last"], body=body)], "g",
        [_vi("a", [4]), _vi("b", [4])], [_vi("a_last", [4]), _vi("b_last", [4])],
        [numpy_helper.from_array(np.array(10, np.int64), "M"),
         numpy_helper.from_array(np.array(2, np.int64), "two")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    _plan_and_verify(m, {"a": np.ones(4, np.float32), "b": np.full(4, 2, np.float32)},
                     tmp_path)


@pytest.mark.parametrize("sign", [1, -1])
def test_if_takes_either_branch_and_a_branch_may_view_an_outer_tensor(sign, tmp_path):
    model = control_flow.if_branches()
    other = helper.make_graph([helper.make_node("Identity", ["xr"], ["e_out"])], "else_view",
                              [], [_vi("e_out", [32, 128])])
    for a in model.graph.node[3].attribute:
        if a.name == "else_branch":
            a.g.CopyFrom(other)
    x = np.abs(np.random.default_rng(0).standard_normal((32, 128))).astype(np.float32)
    _plan_and_verify(model, {"x": sign * x}, tmp_path)


def test_bar_loop_body_peak_end_to_end(tmp_path, capsys):
    """Issue 21's bar, as a user runs it: a Loop whose body holds the peak, with a
    symbolic batch bound by --dim only, is planned with the body's tensors in the plan,
    passes the independent check, verifies PASS on ONNX Runtime CPU, and reports, fits
    and exports; an annotated model carries the nested plan."""
    path = tmp_path / "loop.onnx"
    onnx.save(control_flow.loop_decoder(batch="N"), str(path))
    plan_path = tmp_path / "loop.plan.json"
    assert main(["plan", str(path), "--dim", "N=4", "-o", str(plan_path)]) == 0
    plan = Plan.load(plan_path)
    (body,) = plan.scopes
    assert {"up", "act", "sq", "mix", "down"} <= set(body.plan.tensors)
    assert plan.tensors[body.workspace].bytes > sum(
        t.bytes for n, t in plan.tensors.items() if n != body.workspace)
    assert problems(plan, load(path, {"N": 4})) == []
    assert main(["verify", str(path), "--plan", str(plan_path)]) == 0
    assert main(["report", str(path), "--dim", "N=4"]) == 0
    assert main(["fit", str(path), "--budget", "8MiB"]) == 0
    annotated = tmp_path / "annotated.onnx"
    assert main(["export", str(path), "--dim", "N=4", "--annotated", str(annotated)]) == 0
    again = tmp_path / "again.json"
    assert main(["export", "--plan-from", str(annotated), "--plan-out", str(again)]) == 0
    assert Plan.load(again).scopes == plan.scopes
    capsys.readouterr()


def test_train_refuses_control_flow_in_one_line(saved, capsys):
    assert main(["train", str(saved["loop_decoder"])]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "node 1 (Loop 'decode') is control flow" in err


def test_scan_of_opset_8_is_refused_in_one_line():
    body = helper.make_graph([helper.make_node("Add", ["s", "x"], ["s2"])], "b",
                             [_vi("s", [2]), _vi("x", [2])], [_vi("s2", [2])])
    g = helper.make_graph(
        [helper.make_node("Scan", ["", "s0", "X"], ["s_last"], body=body, num_scan_inputs=1)],
        "g", [_vi("s0", [1, 2]), _vi("X", [1, 3, 2])], [_vi("s_last", [1, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 8)])
    m.ir_version = 3
    with pytest.raises(GraphmemError, match="a Scan of opset 8"):
        from_model(m)


def test_a_plan_that_leaves_a_body_out_is_invalid(saved):
    """A plan of a control-flow model without its scopes (the bodies invisible, as
    graphmem planned before) is refused: the body's memory is not in it."""
    graph = load(saved["loop_decoder"])
    d = json.loads(plan_graph(graph).plan.to_json())
    del d["scopes"]
    assert problems(Plan.from_dict(d), graph)[0] == "scopes: the body of node 1 has no plan"


def test_plan_summary_and_weights_count_the_bodies(saved, capsys):
    assert main(["plan", str(saved["nested"])]) == 0
    out = capsys.readouterr().out
    assert "3 bodies" in out
    graph = load(saved["nested"])
    assert "axis0" in graph.weight_names()  # an initializer of the then-branch


def test_loop_inside_a_scan_verifies(tmp_path):
    """Both iterate: the Loop's workspace lies in the Scan body's arena, its body reads
    the Scan body's slice, and is run anew each Scan step."""
    I64, B = TensorProto.INT64, TensorProto.BOOL
    inner = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Add", ["h_in", "x_t"], ["h_out"]),
         helper.make_node("Mul", ["h_out", "h_out"], ["sq"])], "inner",
        [_vi("i", [], I64), _vi("c", [], B), _vi("h_in", [4])],
        [_vi("c_out", [], B), _vi("h_out", [4]), _vi("sq", [4])])
    outer = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "s"], ["h_last", "sqs"], body=inner),
         helper.make_node("ReduceSum", ["sqs", "axes"], ["y_t"], keepdims=0),
         helper.make_node("Tanh", ["h_last"], ["s2"])], "outer",
        [_vi("s", [4]), _vi("x_t", [4])], [_vi("s2", [4]), _vi("y_t", [4])],
        [numpy_helper.from_array(np.array([0], np.int64), "axes")])
    g = helper.make_graph(
        [helper.make_node("Scan", ["s0", "X"], ["s_last", "Y"], body=outer, num_scan_inputs=1)],
        "g", [_vi("s0", [4]), _vi("X", [5, 4])], [_vi("s_last", [4]), _vi("Y", [5, 4])],
        [numpy_helper.from_array(np.array(3, np.int64), "M")])
    graph, plan = _plan_and_verify(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), folder=tmp_path)
    (scan,) = plan.scopes
    (loop,) = scan.plan.scopes
    assert graph.scopes[0][0].graph.tensors["sqs"].shape == (3, 4)
    assert {"h_out", "sq"} <= set(loop.plan.tensors)


def test_a_body_tensor_freed_too_early_is_poisoned(saved):
    """A body tensor whose live range ends before its last read: no other tensor takes
    its bytes, so only the poisoning of dead body bytes between steps can show it."""
    graph = load(saved["scan_rnn"])
    d = json.loads(plan_graph(graph).plan.to_json())
    xw = d["scopes"][0]["tensors"]["xw"]
    assert xw["live"] == [0, 2]
    xw["live"] = [0, 1]  # Add (step 2) still reads it
    bad = Plan.from_dict(d)
    assert "scope body of node 1: tensor 'xw': live [0, 1], expected [0, 2]" in problems(bad, graph)
    report = verify(bad, graph, runtime_only=True)
    assert not report.passed and report.mismatch is not None


@pytest.mark.parametrize("scopes, message", [
    ('"x"', "scopes must be a list"),
    ('[{"attr": "body", "workspace": "w"}]', "missing field 'node'"),
    ('[{"node": 1, "attr": "body", "workspace": "w", "order": [], "constants": [], '
     '"arena_bytes": 0, "tensors": {"t": {"kind": "input"}}}]', "scopes[0]: corrupt plan"),
])
def test_malformed_scopes_are_refused_in_one_line(scopes, message):
    text = ('{"format": "graphmem.plan/1", "model": "m", "bindings": {}, "alignment": 64, '
            '"order": [], "constants": [], "arena_bytes": 0, "tensors": {}, '
            f'"scopes": {scopes}}}')
    with pytest.raises(GraphmemError, match=message.replace("[", "\\[")) as info:
        Plan.parse(text, "p.json")
    assert "\n" not in str(info.value) and str(info.value).startswith("p.json")


def test_trip_count_computed_from_a_bound_dim(tmp_path):
    """As exporters write ``for i in range(x.shape[0])``: M = Gather(Shape(x), 0),
    folded once --dim binds the dim, sizes the scan output."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Add", ["h_in", "h_in"], ["h_out"]),
         helper.make_node("Neg", ["h_out"], ["y"])], "body",
        [_vi("i", [], TensorProto.INT64), _vi("c", [], TensorProto.BOOL), _vi("h_in", [2])],
        [_vi("c_out", [], TensorProto.BOOL), _vi("h_out", [2]), _vi("y", [2])])
    g = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["shape"]),
         helper.make_node("Gather", ["shape", "zero"], ["M"]),
         helper.make_node("Loop", ["M", "", "h0"], ["h", "ys"], body=body)], "g",
        [_vi("x", ["T", 3]), _vi("h0", [2])],
        [_vi("h", [2]), _vi("ys", ["T", 2])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    graph = load(path, {"T": 7})
    assert graph.tensors["ys"].shape == (7, 2)
    assert "M" in graph.constants  # a count, like a Reshape's shape: folded
    assert verify(plan_graph(graph).plan, graph).passed


def test_torchscript_rnn_loop_export_plans_and_verifies(tmp_path, capsys):
    """A real export (tools/corpus/export_control_flow.py, PyTorch's TorchScript exporter): a
    scripted RNN loop becomes a Loop whose trip count is Shape -> Gather of the
    sequence; with only --dim bindings it plans with its body, validates and verifies."""
    path = Path(__file__).parent / "data" / "control_flow" / "rnn_loop_ts.onnx"
    dims = ["--dim", "T=9", "--dim", "batch=3"]
    out = tmp_path / "p.json"
    assert main(["plan", str(path), *dims, "-o", str(out)]) == 0
    plan = Plan.load(out)
    (body,) = plan.scopes
    assert any(t.kind == "activation" for t in body.plan.tensors.values())
    assert problems(plan, load(path, {"T": 9, "batch": 3})) == []
    assert main(["verify", str(path), "--plan", str(out)]) == 0
    capsys.readouterr()


def test_runtime_only_verify_checks_the_bodies_too(saved):
    """--runtime-only skips the plan rules, not the bounds: a body tensor past its
    sub-arena was bound outside the arena (ONNX Runtime wrote there: SIGSEGV), a missing
    body plan ended in a StopIteration."""
    import dataclasses
    graph = load(saved["scan_rnn"])
    plan = plan_graph(graph).plan
    scope = plan.scopes[0]
    name = next(t for t in scope.plan.tensors if scope.plan.tensors[t].bytes)
    moved = dataclasses.replace(scope.plan.tensors[name], offset=1 << 30)
    body = dataclasses.replace(scope.plan, tensors={**scope.plan.tensors, name: moved})
    bad = dataclasses.replace(plan, scopes=(dataclasses.replace(scope, plan=body),
                                            *plan.scopes[1:]))
    report = verify(bad, graph, runtime_only=True)
    assert not report.passed and any(name in p and "do not fit" in p
                                      for p in report.problems), report.problems
    missing = dataclasses.replace(plan, scopes=plan.scopes[1:])
    report = verify(missing, graph, runtime_only=True)
    assert any("has no plan" in p for p in report.problems), report.problems


def _branch(name, n):
    return helper.make_graph(
        [helper.make_node("Constant", [], [name],
                          value=numpy_helper.from_array(np.zeros(n, np.float32)))],
        name, [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, [n])])


@pytest.mark.parametrize("node, message", [
    (helper.make_node("If", ["c"], ["y", "z"], then_branch=_branch("a", 2),
                      else_branch=_branch("b", 2)), "then_branch has 1 outputs, the node 2"),
    (helper.make_node("If", ["c"], ["y"], then_branch=_branch("a", 2)),
     "has no else_branch attribute"),
    (helper.make_node("Scan", ["c"], ["y"], body=_branch("a", 2)), "num_scan_inputs is None"),
    (helper.make_node("Loop", ["", "c"], ["y"], body=_branch("a", 2)),
     "cannot have a body of 1 outputs"),
])
def test_control_flow_nodes_that_break_the_spec_are_refused_in_one_line(node, message):
    """onnx's checker does not look at these counts; they ended in IndexError/KeyError."""
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2])
                           for o in node.output])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GraphmemError, match=message):
        from_model(m, check=False)
