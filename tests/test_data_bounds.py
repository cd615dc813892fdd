"""Sizes that depend on the data (issue 53): hand-built post-processing graphs plan at
the upper bounds the graph proves, the plan marks those tensors, validates, and
verifies with the sizes the data gives; a bound below the actual size is a FAIL."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.plan.format import Plan
from graphmem.plan.validate import problems
from graphmem.verify.verifier import verify

from conftest import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype), name)


def nonzero_gather():
    """NonZero of a threshold, its indices gathered: at most the 24 elements."""
    nodes = [helper.make_node("Greater", ["x", "t"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["vals"]),
             helper.make_node("Relu", ["vals"], ["y"])]
    return make_model(nodes, [("x", F, [4, 6])], [("y", F, ["k"])],
                      initializers=[const("t", 0.2, np.float32)])


def topk_min(threshold=0.3):
    """torchvision's pre-NMS top-k: the scores over a threshold, then TopK with
    k = Min(300, n), n from their Shape."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "ax0"], ["keep"]),
             helper.make_node("Gather", ["x", "keep"], ["s"]),
             helper.make_node("Shape", ["s"], ["n"]),
             helper.make_node("Min", ["cap", "n"], ["k"]),
             helper.make_node("TopK", ["s", "k"], ["y", "yi"])]
    return make_model(nodes, [("x", F, [2000])], [("y", F, ["k"])],
                      initializers=[const("thr", threshold, np.float32), const("ax0", [0]),
                                    const("cap", [300])])


def nms():
    """NonMaxSuppression with a constant max_output_boxes_per_class of 10 over 3
    classes of 50 boxes, then the kept boxes gathered: at most 1 x 3 x 10 rows."""
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou", "st"],
                              ["sel"]),
             helper.make_node("Gather", ["sel", "two"], ["box_idx"], axis=1),
             helper.make_node("Squeeze", ["boxes", "ax0"], ["flat"]),
             helper.make_node("Gather", ["flat", "box_idx"], ["kept"], axis=0),
             helper.make_node("Mul", ["kept", "scale"], ["y"])]
    return make_model(nodes, [("boxes", F, [1, 50, 4]), ("scores", F, [1, 3, 50])],
                      [("y", F, ["k", 4])],
                      initializers=[const("m", [10]), const("iou", [0.5], np.float32),
                                    const("st", [0.2], np.float32), const("two", 2),
                                    const("ax0", [0]), const("scale", 2.0, np.float32)])


def compress_unique():
    """Compress of rows whose sum is positive, then the Unique of an int input."""
    nodes = [helper.make_node("ReduceSum", ["x", "ax1"], ["sum"], keepdims=0),
             helper.make_node("Greater", ["sum", "zero"], ["cond"]),
             helper.make_node("Compress", ["x", "cond"], ["rows"], axis=0),
             helper.make_node("Relu", ["rows"], ["y"]),
             helper.make_node("Unique", ["ids"], ["u", "ui", "inv", "cnt"]),
             helper.make_node("Add", ["u", "one"], ["z"])]
    return make_model(nodes, [("x", F, [10, 4]), ("ids", I64, [12])],
                      [("y", F, ["k", 4]), ("z", I64, ["j"])],
                      initializers=[const("ax1", [1]), const("zero", 0.0, np.float32),
                                    const("one", 1)])


def save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def planned(tmp_path, model, bounds=None):
    graph = graphmem.load(save(model, tmp_path), bounds=bounds)
    plan = graphmem.plan_graph(graph).plan
    return graph, plan


def test_nonzero_plans_at_the_input_elements_and_verifies(tmp_path):
    graph, plan = planned(tmp_path, nonzero_gather())
    (sym,) = graph.data_bounds.symbols.values()
    assert (sym.name, sym.op, sym.bound, sym.proven) == ("NonZero_1", "NonZero", 24, 24)
    assert graph.tensors["nz"].shape == (2, 24) and graph.tensors["y"].shape == (24,)
    assert plan.tensors["nz"].bounded_by == {"NonZero_1": 24}
    assert plan.tensors["y"].bounded_by == {"NonZero_1": 24}
    assert plan.tensors["x"].bounded_by is None and plan.tensors["mask"].bounded_by is None
    assert plan.bounds["NonZero_1"]["bound"] == 24
    assert problems(plan, graph) == []
    report = verify(plan, graph)
    assert report.passed, report
    counts = {c.tensor: c for c in report.bounded}
    # uniform(-1, 1) inputs over 0.2: some, not all, of the 24
    assert 0 < counts["y"].elements < 24 and counts["nz"].elements == 2 * counts["y"].elements
    assert report.symbol_counts[0].startswith("NonZero_1 (NonZero, node 1): ")


def test_topk_with_k_min_300_of_a_shape(tmp_path):
    graph, plan = planned(tmp_path, topk_min())
    assert graph.tensors["s"].shape == (2000,)
    assert graph.tensors["y"].shape == (300,)  # Min(300, n) at n's bound
    # the Shape and the Min run: their values are known at run time only
    ops = [n.op_type for n in graph.nodes]
    assert "Shape" in ops and "Min" in ops and not graph.constants
    assert plan.tensors["y"].bounded_by == {"NonZero_1": 2000}
    assert plan.tensors["n"].bounded_by is None  # a shape's size is its rank
    assert problems(plan, graph) == []
    report = verify(plan, graph)
    assert report.passed, report
    assert {c.tensor: c.shape for c in report.bounded}["y"] == (300,)


def test_topk_below_its_cap_runs_smaller(tmp_path):
    """Fewer than 300 scores over the threshold: TopK's k is what the data gives."""
    graph, plan = planned(tmp_path, topk_min(threshold=0.95))
    report = verify(plan, graph)
    assert report.passed, report
    y = {c.tensor: c for c in report.bounded}["y"]
    assert 0 < y.elements < 300 and y.planned == 300


def test_nms_bound_from_a_constant_max_boxes(tmp_path):
    graph, plan = planned(tmp_path, nms())
    sym = graph.data_bounds.symbols["NonMaxSuppression_0"]
    assert sym.bound == 30 and "max_output_boxes_per_class 10" in sym.why
    assert graph.tensors["sel"].shape == (30, 3) and graph.tensors["y"].shape == (30, 4)
    assert problems(plan, graph) == []
    report = verify(plan, graph)
    assert report.passed, report
    sel = {c.tensor: c for c in report.bounded}["sel"]
    assert 0 < sel.shape[0] <= 30
    assert report.symbol_counts == (
        f"NonMaxSuppression_0 (NonMaxSuppression, node 0): {sel.shape[0]} of at most 30",)


def test_compress_and_unique(tmp_path):
    graph, plan = planned(tmp_path, compress_unique())
    symbols = graph.data_bounds.symbols
    assert symbols["Compress_2"].bound == 10 and symbols["Unique_4"].bound == 12
    assert graph.tensors["y"].shape == (10, 4)
    assert graph.tensors["u"].shape == (12,) and graph.tensors["inv"].shape == (12,)
    assert problems(plan, graph) == []
    report = verify(plan, graph)
    assert report.passed, report
    seen = {c.tensor for c in report.bounded}
    assert {"rows", "y", "u", "z"} <= seen


def test_a_bound_below_the_actual_size_fails_naming_the_tensor(tmp_path, capsys):
    model = save(topk_min(), tmp_path)
    out = tmp_path / "low.json"
    assert main(["plan", model, "--bound", "NonZero_1=100", "-o", str(out)]) == 0
    text = json.loads(out.read_text())
    assert text["bounds"]["NonZero_1"]["bound"] == 100
    assert text["tensors"]["nz"]["bounded_by"] == {"NonZero_1": 100}
    capsys.readouterr()
    assert main(["verify", model, "--plan", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "FAIL: tensor 'nz'" in " ".join(printed.split()), printed
    assert "NonZero_1 <= 100" in " ".join(printed.split()), printed


def test_the_plan_text_round_trips(tmp_path):
    _, plan = planned(tmp_path, nms())
    again = Plan.parse(plan.to_json(), "test")
    assert again == plan
    assert again.tensors["sel"].bounded_by == {"NonMaxSuppression_0": 30}


def test_a_corrupt_bounded_by_is_refused(tmp_path):
    _, plan = planned(tmp_path, nms())
    d = json.loads(plan.to_json())
    d["tensors"]["sel"]["bounded_by"] = {"NonMaxSuppression_0": "many"}
    with pytest.raises(GraphmemError, match="corrupt plan"):
        Plan.from_dict(d, "test")


def test_bound_tightens_and_a_looser_one_is_noted(tmp_path, capsys):
    graph, _ = planned(tmp_path, nonzero_gather(), {"NonZero_1": 5})
    assert graph.tensors["nz"].shape == (2, 5)
    graph, _ = planned(tmp_path, nonzero_gather(), {"NonZero_1": 500, "Other": 3})
    assert graph.tensors["nz"].shape == (2, 24)
    err = capsys.readouterr().err
    assert "the graph proves at most 24" in err and "--bound Other" in err


def range_of_data():
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["limit"], to=I64),
             helper.make_node("Range", ["zero", "limit", "one"], ["r"], name="count"),
             helper.make_node("Cast", ["r"], ["y"], to=F)]
    return make_model(nodes, [("x", F, [4, 5])], [("y", F, ["k"])],
                      initializers=[const("zero", 0), const("one", 1)])


def test_a_range_of_data_needs_a_bound_and_plans_with_one(tmp_path, capsys):
    model = save(range_of_data(), tmp_path)
    assert main(["plan", model]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bound Range_2=N" in err, err
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.full((4, 5), 7.5, np.float32))
    assert main(["verify", model, "--bound", "Range_2=16", "--inputs", str(inputs)]) == 0
    out = capsys.readouterr().out
    assert "Range_2 (Range, node 2): 7 of at most 16" in out, out
    np.savez(inputs, x=np.full((4, 5), 20.0, np.float32))
    assert main(["verify", model, "--bound", "Range_2=16", "--inputs", str(inputs)]) == 1
    assert "FAIL: tensor 'r'" in capsys.readouterr().out


def test_a_bounded_tensor_over_a_live_one_is_caught(tmp_path):
    """The plan's rules skipped (--runtime-only): the input placed under the bounded
    NonZero output, written while the input is still to be read, shows as a read that
    differs."""
    from dataclasses import replace
    graph, plan = planned(tmp_path, nonzero_gather())
    tensors = dict(plan.tensors)
    tensors["x"] = replace(plan.tensors["x"], offset=plan.tensors["nz"].offset)
    bad = Plan(**{**plan.__dict__, "tensors": tensors})
    report = verify(bad, graph, runtime_only=True)
    assert not report.passed and report.mismatch is not None
    assert report.mismatch.tensor == "x" and report.mismatch.read


def test_the_summary_says_what_the_bounds_govern(tmp_path, capsys):
    from graphmem.plan.bounded import summary
    _, plan = planned(tmp_path, nms())
    s = summary(plan)
    governed = set(s["symbols"]["NonMaxSuppression_0"]["tensors"])
    assert governed == {"sel", "box_idx", "kept", "y"}
    # sel int64[30, 3], box_idx int64[30], kept and y float32[30, 4]
    slots = {n: t for n, t in plan.tensors.items() if n in governed}
    assert s["tensors"] == 4 and 0 < s["arena_bytes_covered"] <= plan.arena_bytes
    assert s["slot_bytes"] == sum(t.bytes for t in slots.values()
                                  if not t.alias_of and not t.slice_of)
    assert main(["plan", save(nms(), tmp_path), "-o", str(tmp_path / "p.json")]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "NonMaxSuppression_0 <= 30 (NonMaxSuppression node 0, 4 tensors)" in text, text


def yolo_head(anchors=200, classes=80):
    """A YOLO-style head: predictions [1, A, 5 + C] to xyxy boxes and class scores
    (objectness x class), NonMaxSuppression over them (at most 100 a class), the kept
    boxes, scores and classes gathered: at most 1 x 80 x min(200, 100) detections."""
    n = helper.make_node
    nodes = [
        n("Sigmoid", ["pred"], ["p"]),
        n("Slice", ["p", "s0", "s2", "ax2"], ["cxcy"]),
        n("Slice", ["p", "s2", "s4", "ax2"], ["wh"]),
        n("Slice", ["p", "s4", "s5", "ax2"], ["obj"]),
        n("Slice", ["p", "s5", "send", "ax2"], ["cls"]),
        n("Mul", ["wh", "half"], ["hwh"]),
        n("Sub", ["cxcy", "hwh"], ["xy1"]),
        n("Add", ["cxcy", "hwh"], ["xy2"]),
        n("Concat", ["xy1", "xy2"], ["boxes"], axis=2),
        n("Mul", ["cls", "obj"], ["conf"]),
        n("Transpose", ["conf"], ["scores"], perm=[0, 2, 1]),
        n("NonMaxSuppression", ["boxes", "scores", "maxb", "iou", "thr"], ["sel"],
          name="nms"),
        n("Gather", ["sel", "c1"], ["cls_idx"], axis=1),
        n("Gather", ["sel", "c2"], ["box_idx"], axis=1),
        n("Squeeze", ["boxes", "ax0"], ["boxes2"]),
        n("Gather", ["boxes2", "box_idx"], ["det_boxes"], axis=0),
        n("Squeeze", ["scores", "ax0"], ["scores2"]),
        n("Concat", ["cls_idx", "box_idx"], ["pairs"], axis=0),
        n("Unsqueeze", ["cls_idx", "ax1"], ["ci"]),
        n("Unsqueeze", ["box_idx", "ax1"], ["bi"]),
        n("Concat", ["ci", "bi"], ["nd"], axis=1),
        n("GatherND", ["scores2", "nd"], ["det_scores"]),
        n("Cast", ["cls_idx"], ["det_classes"], to=F),
    ]
    inits = [const("s0", [0]), const("s2", [2]), const("s4", [4]), const("s5", [5]),
             const("send", [5 + classes]), const("ax2", [2]), const("ax0", [0]),
             const("ax1", [1]), const("half", 0.5, np.float32), const("maxb", [100]),
             const("iou", [0.45], np.float32), const("thr", [0.25], np.float32),
             const("c1", 1), const("c2", 2)]
    return make_model(nodes, [("pred", F, [1, anchors, 5 + classes])],
                      [("det_boxes", F, ["k", 4]), ("det_scores", F, ["k"]),
                       ("det_classes", F, ["k"])], initializers=inits)


def test_a_yolo_style_head_with_nms(tmp_path):
    graph, plan = planned(tmp_path, yolo_head())
    sym = graph.data_bounds.symbols["NonMaxSuppression_11"]
    assert sym.bound == 1 * 80 * 100
    assert graph.tensors["det_boxes"].shape == (8000, 4)
    assert plan.tensors["det_scores"].bounded_by == {"NonMaxSuppression_11": 8000}
    assert plan.tensors["boxes"].bounded_by is None  # before the NMS
    assert problems(plan, graph) == []
    report = verify(plan, graph)
    assert report.passed, report
    kept = {c.tensor: c for c in report.bounded}["det_boxes"].shape[0]
    assert 0 < kept <= 8000
    # tightened to what a deployment keeps: plans smaller, and verifies while it holds
    small = planned(tmp_path, yolo_head(), {"NonMaxSuppression_11": kept})[1]
    assert small.arena_bytes < plan.arena_bytes
    assert verify(small, graphmem.load(str(tmp_path / "m.onnx"),
                                       bounds={"NonMaxSuppression_11": kept})).passed
    low = {"NonMaxSuppression_11": kept - 1}
    report = verify(planned(tmp_path, yolo_head(), low)[1],
                    graphmem.load(str(tmp_path / "m.onnx"), bounds=low))
    assert not report.passed and "tensor 'sel'" in report.overflow


def batched_nms_if():
    """torchvision's post-processing: the scores over a threshold (NonZero), their boxes
    gathered, then ``if boxes.numel() == 0: empty else: nms(...)`` as an If whose
    else_branch holds the NonMaxSuppression (at most 20 boxes) and reads the bounded
    boxes from the graph; the kept boxes gathered after it."""
    n = helper.make_node
    then_branch = helper.make_graph(
        [n("Constant", [], ["empty"], value=numpy_helper.from_array(
            np.zeros((0,), np.int64)))], "then", [],
        [helper.make_tensor_value_info("empty", I64, [0])])
    else_branch = helper.make_graph(
        [n("Constant", [], ["ax0b"], value=numpy_helper.from_array(np.array([0], np.int64))),
         n("Unsqueeze", ["b", "ax0b"], ["b3"]),
         n("Unsqueeze", ["s", "ax0b"], ["s2"]),
         n("Unsqueeze", ["s2", "ax0b"], ["s3"]),
         n("Constant", [], ["maxb"], value=numpy_helper.from_array(np.array([20], np.int64))),
         n("Constant", [], ["iou"], value=numpy_helper.from_array(np.array([0.5],
                                                                           np.float32))),
         n("NonMaxSuppression", ["b3", "s3", "maxb", "iou"], ["sel"]),
         n("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2, np.int64))),
         n("Gather", ["sel", "two"], ["keep"], axis=1)], "else", [],
        [helper.make_tensor_value_info("keep", I64, ["k"])])
    nodes = [n("Greater", ["scores", "thr"], ["mask"]),
             n("NonZero", ["mask"], ["nz"]),
             n("Squeeze", ["nz", "ax0"], ["idx"]),
             n("Gather", ["boxes", "idx"], ["b"], axis=0),
             n("Gather", ["scores", "idx"], ["s"], axis=0),
             n("Size", ["b"], ["count"]),
             n("Equal", ["count", "zero"], ["none"]),
             n("If", ["none"], ["kept"], then_branch=then_branch, else_branch=else_branch),
             n("Gather", ["b", "kept"], ["y"], axis=0)]
    return make_model(nodes, [("boxes", F, [100, 4]), ("scores", F, [100])],
                      [("y", F, ["k", 4])],
                      initializers=[const("thr", 0.3, np.float32), const("ax0", [0]),
                                    const("zero", 0)])


def test_an_if_around_nms_reading_bounded_boxes(tmp_path, capsys):
    graph, plan = planned(tmp_path, batched_nms_if())
    symbols = graph.data_bounds.symbols
    assert symbols["NonZero_1"].bound == 100
    # the branches: 0 boxes, or what the NonMaxSuppression of the body keeps (<= 20)
    assert symbols["If_7"].bound == 20 and graph.tensors["y"].shape == (20, 4)
    assert "NonMaxSuppression_6_7_else_branch" in graph.data_bounds.body_symbols
    assert plan.tensors["y"].bounded_by == {"If_7": 20, "NonZero_1": 100}
    assert problems(plan, graph) == []
    report = verify(plan, graph)
    assert report.passed, report
    kept = {c.tensor: c for c in report.bounded}["kept"].elements
    assert 0 < kept <= 20
    # no score over the threshold: the then_branch's empty answer, planned the same
    inputs = tmp_path / "none.npz"
    np.savez(inputs, boxes=np.zeros((100, 4), np.float32),
             scores=np.zeros(100, np.float32))
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "m.onnx"), "--inputs", str(inputs)]) == 0
    out = capsys.readouterr().out
    assert "If_7 (If, node 7): 0 of at most 20" in out, out
    assert main(["verify", str(tmp_path / "m.onnx"), "--bound", f"If_7={kept - 1}"]) == 1
    assert "FAIL: tensor 'kept'" in capsys.readouterr().out


def test_a_body_symbol_is_in_the_plans_bounds(tmp_path, capsys):
    """The NonMaxSuppression inside batched_nms's else_branch: in the plan's ``bounds``
    with its scope, round-tripped by the plan file, tightened by --bound, and verify
    --plan reloads the model at it."""
    graph, plan = planned(tmp_path, batched_nms_if())
    body = plan.bounds["NonMaxSuppression_6_7_else_branch"]
    assert body["scope"] == {"node": 7, "attr": "else_branch"}
    assert body["op"] == "NonMaxSuppression" and body["bound"] == body["proven"] == 20
    path = str(tmp_path / "m.onnx")
    out = tmp_path / "p.json"
    assert main(["plan", path, "-o", str(out), "--quiet",
                 "--bound", "NonMaxSuppression_6_7_else_branch=5"]) == 0
    saved = Plan.load(str(out))
    assert saved.bounds["NonMaxSuppression_6_7_else_branch"]["bound"] == 5
    assert saved.bounds["NonMaxSuppression_6_7_else_branch"]["scope"]["attr"] == "else_branch"
    capsys.readouterr()
    assert main(["report", path, "--no-layers", "--bound",
                 "NonMaxSuppression_6_7_else_branch=5"]) == 0
    assert "in the else_branch of node 7" in capsys.readouterr().out
    # the If's output follows the body's bound: at most 5 boxes kept
    small = graphmem.load(path, bounds={"NonMaxSuppression_6_7_else_branch": 5})
    assert small.tensors["y"].shape == (5, 4)
    assert main(["verify", path, "--plan", str(out)]) in (0, 1)
    text = capsys.readouterr().out
    assert "If_7 (If, node 7)" in text and "of at most 5" in text, text


def test_an_if_on_static_data_settles_beside_one_that_waits(tmp_path):
    """Two Ifs: the batched_nms one, whose body reads the NonZero-gated boxes, and one
    on the static scores alone: each is sized (the one waiting for the bounds does not
    undo the other)."""
    model = batched_nms_if()
    n = helper.make_node
    branch = lambda name, op: helper.make_graph(  # noqa: E731
        [n(op, ["scores"], [name])], name, [], [helper.make_tensor_value_info(name, F, [100])])
    model.graph.node.insert(0, n("ReduceMax", ["scores"], ["top"], keepdims=0))
    model.graph.node.insert(1, n("Greater", ["top", "thr"], ["any"]))
    model.graph.node.insert(2, n("If", ["any"], ["plain"], then_branch=branch("t", "Relu"),
                                 else_branch=branch("e", "Neg")))
    model.graph.output.append(helper.make_tensor_value_info("plain", F, [100]))
    graph, plan = planned(tmp_path, model)
    assert set(graph.scopes) == {2, 10}
    assert "If_10" in graph.data_bounds.symbols and "If_2" not in graph.data_bounds.symbols
    assert plan.tensors["plain"].bounded_by is None
    assert verify(plan, graph).passed


def test_an_annotated_bounded_model_round_trips(tmp_path):
    """export --annotated leaves a bounded tensor's shape open, so that the annotated
    model loads at the plan's bounds as the original did: its Shape -> Min runs, the
    plan's graph digest matches, --plan-from gives back the plan, verify passes."""
    model = save(topk_min(), tmp_path)
    plan, annotated = tmp_path / "p.json", tmp_path / "a.onnx"
    assert main(["plan", model, "--bound", "NonZero_1=1990", "-o", str(plan), "-q"]) == 0
    assert main(["export", model, "--plan", str(plan), "--annotated", str(annotated)]) == 0
    back = tmp_path / "back.json"
    assert main(["export", "--plan-from", str(annotated), "--plan-out", str(back)]) == 0
    assert back.read_text() == plan.read_text()
    assert main(["verify", str(annotated), "--plan", str(plan)]) == 0


def test_a_range_plan_of_a_bounded_model(tmp_path, capsys):
    """A range of dims (issue 52) plans NonZero at the bound the graph proves, a formula
    of the dims (2 x 6*N here), and verifies at a binding; --bound with a range is
    refused in one line, nothing written."""
    nodes = [helper.make_node("Greater", ["x", "t"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["vals"]),
             helper.make_node("Relu", ["vals"], ["y"])]
    model = save(make_model(nodes, [("x", F, ["N", 6])], [("y", F, ["k"])],
                            initializers=[const("t", 0.2, np.float32)]), tmp_path)
    ranged = tmp_path / "r.json"
    assert main(["plan", model, "--dim", "N=1..8", "-o", str(ranged), "-q"]) == 0
    assert json.loads(ranged.read_text())["tensors"]["nz"]["bytes"]["text"] == "96*N"
    assert main(["verify", model, "--plan", str(ranged), "--at", "N=4"]) == 0
    capsys.readouterr()
    refused = tmp_path / "r2.json"
    assert main(["plan", model, "--dim", "N=1..8", "--bound", "NonZero_1=5",
                 "-o", str(refused)]) == 2
    assert "--bound goes with a plan at one binding" in capsys.readouterr().err
    assert not refused.exists()


def loop_over_kept(kind):
    """boxes [50, 4]; those whose largest coordinate passes 0.5 kept (a NonZero); a Loop
    emitting one [8] row an iteration from the kept boxes. ``early``: M = 30, the body's
    condition stops it at the kept count (data); ``sum``: M is the kept count as a
    ReduceSum of the mask (a value, which no shape bounds)."""
    n = helper.make_node
    body_nodes = [n("Gather", ["kept", "i"], ["b"], axis=0),
                  n("Concat", ["b", "b"], ["row"], axis=0)]
    body_nodes += ([n("Add", ["i", "one"], ["next"]), n("Less", ["next", "n"], ["cond_out"])]
                   if kind == "early" else [n("Identity", ["cond_in"], ["cond_out"])])
    body = helper.make_graph(
        body_nodes, "body", [helper.make_tensor_value_info("i", I64, []),
                             helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("row", F, [8])])
    nodes = [n("ReduceMax", ["boxes"], ["score"], axes=[1], keepdims=0),
             n("Greater", ["score", "thr"], ["mask"]), n("NonZero", ["mask"], ["nz"]),
             n("Squeeze", ["nz", "ax0"], ["idx"]), n("Gather", ["boxes", "idx"], ["kept"], axis=0),
             n("Cast", ["mask"], ["mi"], to=I64), n("ReduceSum", ["mi"], ["n"], keepdims=0),
             n("Loop", ["thirty" if kind == "early" else "n", "true"], ["rows"], body=body)]
    return make_model(nodes, [("boxes", F, [50, 4])], [("rows", F, ["k", 8])],
                      initializers=[const("thr", 0.5, np.float32), const("ax0", [0]),
                                    const("one", 1), const("thirty", 30),
                                    numpy_helper.from_array(np.array(True), "true")])


def test_a_loop_that_may_stop_early_is_bounded_by_its_trip_count(tmp_path, capsys):
    graph, plan = planned(tmp_path, loop_over_kept("early"))
    sym = graph.data_bounds.symbols["Loop_7"]
    assert (sym.op, sym.bound, sym.proven) == ("Loop", 30, 30)
    assert graph.tensors["rows"].shape == (30, 8)
    assert plan.tensors["rows"].bounded_by == {"Loop_7": 30}
    path = str(tmp_path / "m.onnx")
    few = tmp_path / "few.npz"  # 12 boxes pass: the condition stops it after 12
    boxes = np.zeros((50, 4), np.float32)
    boxes[:12] = 0.9
    np.savez(few, boxes=boxes)
    capsys.readouterr()
    assert main(["verify", path, "--inputs", str(few)]) == 0
    out = capsys.readouterr().out
    assert "Loop_7 (Loop, node 7): 12 of at most 30" in out, out


def test_a_loop_whose_trip_count_is_data_needs_a_bound(tmp_path, capsys):
    path = save(loop_over_kept("sum"), tmp_path)
    assert main(["plan", path, "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --bound Loop_7=N" in err[0], err
    graph = graphmem.load(path, bounds={"Loop_7": 50})
    assert graph.data_bounds.symbols["Loop_7"].proven is None
    assert graph.tensors["rows"].shape == (50, 8)
    plan = graphmem.plan_graph(graph).plan
    report = verify(plan, graph)
    assert report.passed, report
    kept = {c.tensor: c for c in report.bounded}["rows"].shape[0]
    assert 0 < kept <= 50
    low = graphmem.load(path, bounds={"Loop_7": kept - 1})
    report = verify(graphmem.plan_graph(low).plan, low)
    assert not report.passed and "tensor 'rows'" in report.overflow


def falling(size_op):
    """The rows a NonZero keeps (n, read by a Shape), then a size computed as 50 - n
    (``size_op``: a ConstantOfShape of [50 - n, 3], a Range(n, 50), a TopK of k =
    50 - n), beside a Reshape of the kept rows to [n, 2, 2] (a size that grows with n)."""
    nodes = [helper.make_node("Greater", ["scores", "thr"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
             helper.make_node("Gather", ["boxes", "idx"], ["kb"], axis=0),
             helper.make_node("Shape", ["kb"], ["kshape"]),
             helper.make_node("Slice", ["kshape", "ax0", "one1", "ax0"], ["n"]),
             helper.make_node("Concat", ["n", "two_two"], ["grid"], axis=0),
             helper.make_node("Reshape", ["kb", "grid"], ["kb22"]),
             helper.make_node("Sub", ["fifty", "n"], ["rest"])]
    if size_op == "ConstantOfShape":
        nodes += [helper.make_node("Concat", ["rest", "three"], ["pad_shape"], axis=0),
                  helper.make_node("ConstantOfShape", ["pad_shape"], ["out"])]
    elif size_op == "Range":
        nodes += [helper.make_node("Squeeze", ["n", "ax0"], ["n0"]),
                  helper.make_node("Range", ["n0", "fifty0", "step"], ["out"])]
    else:
        nodes += [helper.make_node("TopK", ["scores", "rest"], ["out", "out_i"])]
    inits = [const("thr", 0.5, np.float32), const("ax0", [0]), const("one1", [1]),
             const("two_two", [2, 2]), const("fifty", [50]), const("three", [3]),
             const("fifty0", 50), const("step", 1)]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("out", F if size_op != "Range" else I64,
                        ["r", 3] if size_op == "ConstantOfShape" else ["r"]),
                       ("kb22", F, ["n", 2, 2])], initializers=inits)


@pytest.mark.parametrize("size_op", ["ConstantOfShape", "Range", "TopK"])
def test_a_size_that_falls_as_the_count_grows_is_planned_at_its_most(tmp_path, size_op):
    """50 - n is 0 at n's bound (50) and 50 at n = 0: the output is sized by its value
    rule (a symbol at 50 - n's hi), not at the bound; the Reshape to [n, 2, 2], whose
    size grows with n, stays at the bound with no symbol of its own; verify passes with
    fewer rows kept (the output larger than at the bound)."""
    graph, plan = planned(tmp_path, falling(size_op))
    assert graph.tensors["out"].shape[0] == 50
    syms = graph.data_bounds.symbols
    (own,) = [s for s in syms.values() if s.tensor == "out"]
    assert own.op == size_op and own.bound == own.proven == 50
    assert graph.tensors["kb22"].shape == (50, 2, 2)
    assert {s.op for s in syms.values()} == {"NonZero", size_op}
    assert problems(plan, graph) == []
    scores = np.where(np.arange(50) % 3 == 0, 0.9, 0.1).astype(np.float32)  # 17 kept
    report = verify(plan, graph, inputs={"boxes": np.ones((50, 4), np.float32),
                                         "scores": scores})
    assert report.passed, report
    assert {c.tensor: c.shape for c in report.bounded}["out"][0] == 33


def test_two_nonzero_of_one_tensor_are_one_symbol(tmp_path):
    """Two NonZero of the same mask count the same: the second is an alias of the
    first (one symbol, both outputs governed by it), and a --bound of the alias's name
    tightens both; verify passes."""
    nodes = [helper.make_node("Greater", ["x", "t"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["a"]),
             helper.make_node("NonZero", ["mask"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = make_model(nodes, [("x", F, [4, 6])], [("y", I64, [2, "k"])],
                       initializers=[const("t", 0.2, np.float32)])
    graph, plan = planned(tmp_path, model)
    assert list(graph.data_bounds.symbols) == ["NonZero_1"]
    assert graph.data_bounds.aliases == {"NonZero_2": "NonZero_1"}
    assert plan.tensors["b"].bounded_by == {"NonZero_1": 24}
    assert problems(plan, graph) == []
    assert verify(plan, graph).passed
    tight, _ = planned(tmp_path, model, bounds={"NonZero_2": 5})
    assert tight.tensors["a"].shape == tight.tensors["b"].shape == (2, 5)
    assert not tight.load_notes
