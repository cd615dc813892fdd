"""Loop-carried values that grow each iteration (issue 53): a Concat onto the value in
the body, as torchvision pastes masks and gathers keypoints. Planned at the initial
size plus the trip count's bound times the step proven from the body, the body's slots
at the bound, verified iteration by iteration; anything but a linear growth by a
Concat is refused in one line naming the Loop and the value."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.verify.verifier import verify

from conftest import make_model

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
DATA = Path(__file__).parent / "data" / "control_flow"
PASTE, KEYPOINT = str(DATA / "paste_loop_ts.onnx"), str(DATA / "keypoint_loop_ts.onnx")


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype), name)


def growing_loop(kind="grow", trips=5):
    """x [5, 6]; a Loop of ``trips`` iterations (M constant, condition true) whose
    carried ``res`` starts [0, 6] and takes row ``i`` of x each iteration
    (``Concat(res, x[i:i+1])``); ``kind`` changes the body to what is refused."""
    n = helper.make_node
    body = [n("Gather", ["x", "i"], ["row"], axis=0),
            n("Unsqueeze", ["row", "ax0"], ["row1"]),
            n("Identity", ["cond_in"], ["cond_out"])]
    init = [0, 6]
    extra_out = []
    if kind == "grow":
        body.append(n("Concat", ["res_in", "row1"], ["res_out"], axis=0))
    elif kind == "cast":  # through a Cast to its own type and an Identity after
        body += [n("Cast", ["res_in"], ["res_f"], to=F),
                 n("Concat", ["res_f", "row1"], ["cat"], axis=0),
                 n("Identity", ["cat"], ["res_out"])]
    elif kind == "shrink":
        init = [5, 6]
        body.append(n("Slice", ["res_in", "one", "big", "ax0"], ["res_out"]))
    elif kind == "pad":
        body.append(n("Pad", ["res_in", "pads"], ["res_out"]))
    elif kind == "double":
        init = [1, 6]
        body.append(n("Concat", ["res_in", "res_in"], ["res_out"], axis=0))
    elif kind == "computed":  # the added row is computed from the value itself
        body += [n("ReduceMean", ["res_in"], ["mean"], axes=[0], keepdims=1),
                 n("Concat", ["res_in", "mean"], ["res_out"], axis=0)]
    elif kind == "reads_size":  # a scan output whose size is the value's
        body += [n("Shape", ["res_in"], ["shape"]),
                 n("ConstantOfShape", ["shape"], ["zeros"]),
                 n("ReduceSum", ["zeros"], ["total"], keepdims=0),
                 n("Concat", ["res_in", "row1"], ["res_out"], axis=0)]
        body.append(n("Identity", ["zeros"], ["seen"]))
        extra_out = [helper.make_tensor_value_info("seen", F, ["r", "c"])]
    elif kind == "two_axes":
        body += [n("Concat", ["res_in", "row1"], ["tall"], axis=0),
                 n("Concat", ["tall", "tall"], ["res_out"], axis=1)]
    g = helper.make_graph(
        body, "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("res_in", F, ["r", "c"])],
        [helper.make_tensor_value_info("cond_out", B, []),
         helper.make_tensor_value_info("res_out", F, ["r", "c"])] + extra_out,
        [const("ax0", [0]), const("one", [1]), const("big", [1 << 30]),
         const("pads", [0, 0, 1, 0])])
    outs = ["res"] + (["seen_all"] if extra_out else [])
    nodes = [n("Loop", ["trips", "true", "empty"], outs, body=g),
             n("Relu", ["res"], ["y"])]
    return make_model(
        nodes, [("x", F, [5, 6])], [("y", F, ["r", "c"])],
        initializers=[const("trips", trips), numpy_helper.from_array(np.array(True), "true"),
                      const("empty", np.zeros(init), np.float32)])


def save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def test_a_carried_value_grown_by_a_concat_plans_at_its_bound(tmp_path, capsys):
    path = save(growing_loop(), tmp_path)
    graph = graphmem.load(path)
    sym = graph.data_bounds.symbols["Loop_0_carried_0"]
    assert (sym.op, sym.node, sym.tensor, sym.axis, sym.bound, sym.proven) == \
        ("Loop", 0, "res", 0, 5, 5)
    assert sym.why.startswith("its initial 0 + 5 iterations (its trip count M) x at most 1")
    assert "Loop_0" not in graph.data_bounds.symbols  # the trip count is exact
    assert graph.tensors["res"].shape == (5, 6) and graph.tensors["y"].shape == (5, 6)
    (body,) = graph.scopes[0]
    assert body.graph.tensors["res_in"].shape == (5, 6)  # holds the last value too
    assert body.graph.tensors["res_out"].shape == (6, 6)
    plan = graphmem.plan_graph(graph).plan
    graphmem.validate(plan, graph)
    assert plan.tensors["res"].bounded_by == {"Loop_0_carried_0": 5}
    inner = plan.scopes[0].plan
    assert inner.tensors["res_in"].bounded_by == {"Loop_0_carried_0": 5}
    assert inner.tensors["res_out"].bounded_by == {"Loop_0_carried_0": 5}
    assert inner.tensors["row1"].slice_of is None  # the bounded Concat is not written in place
    assert plan.bounds["Loop_0_carried_0"]["bound"] == 5
    assert plan.bounds["Loop_0_carried_0"]["why"] == sym.why
    out = tmp_path / "p.json"
    assert main(["plan", path, "-q", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", path, "--plan", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Loop_0_carried_0 (Loop, node 0): 5 of at most 5" in printed, printed


def test_a_lowered_bound_fails_naming_the_body_tensor(tmp_path, capsys):
    path = save(growing_loop(), tmp_path)
    low = tmp_path / "low.json"
    assert main(["plan", path, "-q", "--bound", "Loop_0_carried_0=3", "-o", str(low)]) == 0
    assert json.loads(low.read_text())["tensors"]["res"]["bounded_by"] == \
        {"Loop_0_carried_0": 3}
    capsys.readouterr()
    assert main(["verify", path, "--plan", str(low)]) == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert "FAIL: tensor 'res_in'" in printed, printed
    assert "iteration 3" in printed and "[4, 6]" in printed, printed
    assert "Loop_0_carried_0 <= 3" in printed, printed


def test_a_looser_bound_is_noted_and_planned_at_the_proof(tmp_path, capsys):
    graph = graphmem.load(save(growing_loop(), tmp_path), bounds={"Loop_0_carried_0": 50})
    assert graph.data_bounds.symbols["Loop_0_carried_0"].bound == 5
    assert any("--bound Loop_0_carried_0=50" in n for n in graph.load_notes)


def test_through_a_cast_to_its_own_type_and_an_identity(tmp_path):
    graph = graphmem.load(save(growing_loop("cast"), tmp_path))
    assert graph.tensors["res"].shape == (5, 6)
    plan = graphmem.plan_graph(graph).plan
    report = verify(plan, graph)
    assert report.passed, report


def test_no_iterations(tmp_path):
    graph = graphmem.load(save(growing_loop(trips=0), tmp_path))
    assert graph.tensors["res"].shape == (0, 6)
    report = verify(graphmem.plan_graph(graph).plan, graph)
    assert report.passed, report


@pytest.mark.parametrize("kind,words", [
    ("shrink", "loop-carried value 'res_out' shrinks from [5, 6] to [4, 6]"),
    ("pad", "grows from [0, 6] to [1, 6] through Pad, not a Concat onto it"),
    ("double", "its Concat (body node 3) reads its formal input 'res_in' 2 times"),
    ("computed", "adds 'mean', which is computed from a growing loop-carried value"),
    ("reads_size", "body tensor 'seen' is [0, 6] or [5, 6] as loop-carried value 'res_in' "
                   "grows"),
    ("two_axes", "changes from [0, 6] to [1, 12] on 2 axes"),
])
def test_what_is_not_a_linear_growth_by_a_concat_is_refused(tmp_path, capsys, kind, words):
    path = save(growing_loop(kind), tmp_path)
    with pytest.raises(GraphmemError) as exc:
        graphmem.load(path)
    text = str(exc.value)
    assert "node 0 (Loop)" in text and words in text, text
    out = tmp_path / "p.json"
    assert main(["plan", path, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graphmem: ") and not out.exists(), err


def test_torch_paste_loop_over_the_kept_rows(tmp_path, capsys):
    """torch's export of a scripted loop over the rows a NonZero kept (the trip count
    M is their count, a bounded symbol), concatenating one [1, 4, 5] piece each."""
    graph = graphmem.load(PASTE)
    syms = graph.data_bounds.symbols
    trip = next(s for s in syms.values() if s.op == "Loop" and "_carried_" not in s.name)
    grown = syms[f"{trip.name}_carried_0"]
    assert (trip.bound, grown.bound, grown.proven) == (12, 12, 12)
    assert trip.name in grown.why
    loop = trip.node
    out = {n.index: n for n in graph.nodes}[loop].outputs[0]
    assert graph.tensors[out].shape == (12, 4, 5)
    plan = graphmem.plan_graph(graph).plan
    graphmem.validate(plan, graph)
    report = verify(plan, graph)
    assert report.passed, report
    lines = {line.split(" (")[0]: line for line in report.symbol_counts}
    kept = int(lines["NonZero_4"].split(": ")[1].split()[0])
    assert 0 < kept < 12
    assert lines[trip.name].endswith(f": {kept} of at most 12")
    assert lines[grown.name].endswith(f": {kept} of at most 12")
    # the trip count's bound lowered below the rows kept: caught naming the tensor
    low = graphmem.load(PASTE, bounds={trip.name: kept - 1})
    assert low.data_bounds.symbols[grown.name].bound == kept - 1
    report = verify(graphmem.plan_graph(low).plan, low)
    assert not report.passed and "past its planned slot" in report.overflow
    assert f"{grown.name} <= {kept - 1}" in report.overflow


def test_torch_keypoint_loop_two_values_through_casts(tmp_path, capsys):
    graph = graphmem.load(KEYPOINT)
    grown = sorted(s.name for s in graph.data_bounds.symbols.values() if "_carried_" in s.name)
    assert [n.rsplit("_", 1)[1] for n in grown] == ["0", "1"]
    loop = graph.data_bounds.symbols[grown[0]].node
    xy, sc = {n.index: n for n in graph.nodes}[loop].outputs
    assert graph.tensors[xy].shape == (12, 3, 4) and graph.tensors[sc].shape == (12, 4)
    out = tmp_path / "p.json"
    assert main(["plan", KEYPOINT, "-q", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", KEYPOINT, "--plan", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{grown[1]} (Loop, node {loop}): " in printed, printed


def test_a_growing_loop_in_a_branch_has_a_symbol_of_that_body(tmp_path, capsys):
    """The growing Loop of :func:`growing_loop` in an If's then_branch, its value summed
    there (its size stays in the branch); returned whole instead, refused in one line."""
    def model(escapes):
        n = helper.make_node
        inner = growing_loop().graph
        loop = inner.node[0]
        body = [loop, n("ReduceSum", ["res", "ax0"], ["out"], keepdims=0)] if not escapes \
            else [loop, n("Identity", ["res"], ["out"])]
        shape = ["r", 6] if escapes else [6]
        then = helper.make_graph(
            body, "then", [], [helper.make_tensor_value_info("out", F, shape)],
            [i for i in inner.initializer if i.name in ("trips", "true", "empty")]
            + [const("ax0", [0])])
        other = helper.make_graph(
            [n("Constant", [], ["out2"], value=numpy_helper.from_array(
                np.zeros((2, 6) if escapes else (6,), np.float32)))], "else", [],
            [helper.make_tensor_value_info("out2", F, shape)])
        nodes = [n("ReduceSum", ["x"], ["s"], keepdims=0), n("Greater", ["s", "zero"], ["c"]),
                 n("If", ["c"], ["y"], then_branch=then, else_branch=other)]
        return make_model(nodes, [("x", F, [5, 6])], [("y", F, shape)],
                          initializers=[const("zero", 0.0, np.float32)])
    path = save(model(False), tmp_path)
    graph = graphmem.load(path)
    sym = graph.data_bounds.body_symbols["Loop_0_carried_0_2_then_branch"]
    assert (sym.bound, sym.scope, sym.tensor) == (5, "2_then_branch", "res")
    assert graph.scopes[2][0].graph.tensors["res"].shape == (5, 6)
    plan = graphmem.plan_graph(graph).plan
    graphmem.validate(plan, graph)
    capsys.readouterr()
    assert main(["verify", path]) == 0
    assert "Loop_0_carried_0_2_then_branch (Loop, node 0 in the then_branch of node 2): " \
        "5 of at most 5" in capsys.readouterr().out
    escaping = save(model(True), tmp_path, "e.onnx")
    assert main(["plan", escaping, "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bounded by Loop_0_carried_0_2_then_branch" in err[0], err


def test_a_growth_bounded_by_a_symbol_of_the_body(tmp_path, capsys):
    """Each iteration appends the indices of row i's positive elements (a NonZero of
    the body: at most 6), so the value grows by at most 6 an iteration: 5 x 6."""
    n = helper.make_node
    body = helper.make_graph(
        [n("Gather", ["x", "i"], ["row"], axis=0), n("Greater", ["row", "zero"], ["pos"]),
         n("NonZero", ["pos"], ["nz"]), n("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
         n("Concat", ["res_in", "nzt"], ["res_out"], axis=0),
         n("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("res_in", I64, ["r", 1])],
        [helper.make_tensor_value_info("cond_out", B, []),
         helper.make_tensor_value_info("res_out", I64, ["r", 1])],
        [const("zero", 0.0, np.float32)])
    model = make_model([n("Loop", ["trips", "true", "empty"], ["res"], body=body)],
                       [("x", F, [5, 6])], [("res", I64, ["r", 1])],
                       initializers=[const("trips", 5),
                                     numpy_helper.from_array(np.array(True), "true"),
                                     const("empty", np.zeros((0, 1)))])
    path = save(model, tmp_path)
    graph = graphmem.load(path)
    sym = graph.data_bounds.symbols["Loop_0_carried_0"]
    assert (sym.bound, sym.proven) == (30, 30) and "x at most 6" in sym.why
    assert "NonZero_2_0_body" in graph.data_bounds.body_symbols
    assert graph.tensors["res"].shape == (30, 1)
    assert graph.scopes[0][0].graph.tensors["res_out"].shape == (36, 1)
    graphmem.validate(graphmem.plan_graph(graph).plan, graph)
    inputs = tmp_path / "in.npz"  # 2 positive elements a row: 10 in all
    x = -np.ones((5, 6), np.float32)
    x[:, 1:3] = 1
    np.savez(inputs, x=x)
    capsys.readouterr()
    assert main(["verify", path, "--inputs", str(inputs)]) == 0
    assert "Loop_0_carried_0 (Loop, node 0): 10 of at most 30" in capsys.readouterr().out
    low = tmp_path / "low.json"
    assert main(["plan", path, "-q", "--bound", "Loop_0_carried_0=9", "-o", str(low)]) == 0
    capsys.readouterr()
    assert main(["verify", path, "--plan", str(low), "--inputs", str(inputs)]) == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert "FAIL: tensor 'res_in'" in printed and "Loop_0_carried_0 <= 9" in printed, printed
