"""Issue 53 end to end on a real export: the YOLO-style detector of
tools/corpus/export_detection.py (``yolo``: a convolutional stem and head, boxes decoded
on the grid, the candidates above the confidence threshold kept by a NonZero,
torchvision's batched_nms as an If around the NonMaxSuppression, at most 50
detections), kept in tests/data/detection with the image it was exported with; and
``report --bound NAME=A,B,C``, ``fit --bound`` and ``train --bound``."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.plan.format import Plan

from conftest import make_model

DATA = Path(__file__).parent / "data" / "detection"
YOLO, IMAGE = str(DATA / "yolo.onnx"), str(DATA / "yolo.npz")
COUNT = re.compile(r"count\s+(\S+) \((\w+), node \d+\): (\d+) of at most (\d+)")


def _plan(tmp_path, *extra, name="p.json"):
    out = tmp_path / name
    assert main(["plan", YOLO, "-o", str(out), "--quiet", *extra]) == 0
    return out


def test_yolo_plans_validates_and_verifies_finding_boxes(tmp_path, capsys):
    out = _plan(tmp_path)
    plan = Plan.load(str(out))
    # the candidates' NonZeros are bounded by the 3 x 8 x 8 = 192 predictions; batched_nms's
    # If by the larger of its branches (none, or the NMS of its else_branch: at most 192)
    assert {v["op"] for v in plan.bounds.values()} == {"NonZero", "If", "NonMaxSuppression"}
    assert all(v["bound"] == v["proven"] == 192 for v in plan.bounds.values())
    (nms,) = [v for v in plan.bounds.values() if v["op"] == "NonMaxSuppression"]
    assert nms["scope"] == {"node": 89, "attr": "else_branch"}
    graph = graphmem.load(YOLO, bounds={k: v["bound"] for k, v in plan.bounds.items()})
    graphmem.validate(plan, graph)
    for o in graph.outputs:  # the detections: bounded, and cut to at most 50 by the slice
        assert plan.tensors[o].bounded_by
        assert graph.tensors[o].shape[0] == 50
    capsys.readouterr()
    assert main(["verify", YOLO, "--plan", str(out), "--inputs", IMAGE]) == 0
    text = capsys.readouterr().out
    counts = {m[1]: (int(m[3]), int(m[4])) for m in COUNT.finditer(text)}
    assert set(counts) == {k for k, v in plan.bounds.items() if "scope" not in v}
    # the image makes the detector fire: boxes pass the threshold and the NMS keeps some
    assert all(0 < n <= b for n, b in counts.values()), counts
    assert "PASS" in text


def test_yolo_a_lowered_bound_fails_naming_the_tensor(tmp_path, capsys):
    capsys.readouterr()
    assert main(["verify", YOLO, "--plan", str(_plan(tmp_path)), "--inputs", IMAGE]) == 0
    counts = {m[1]: int(m[3]) for m in COUNT.finditer(capsys.readouterr().out)}
    kept = counts["NonZero_75"]
    low = _plan(tmp_path, "--bound", f"NonZero_75={kept - 1}", name="low.json")
    assert Plan.load(str(low)).bounds["NonZero_75"]["bound"] == kept - 1
    assert main(["verify", YOLO, "--plan", str(low), "--inputs", IMAGE]) == 1
    text = capsys.readouterr().out
    assert "FAIL: tensor '/NonZero_output_0' (node 75 (NonZero" in text, text
    assert f"NonZero_75 <= {kept - 1}" in text


def nms_head(anchors=400, classes=20):
    """Scores [1, C, A] and boxes [1, A, 4] through a NonMaxSuppression of at most 100 a
    class; the kept boxes gathered (their bytes grow with the detections)."""
    n = helper.make_node
    nodes = [n("NonMaxSuppression", ["boxes", "scores", "maxb", "iou"], ["sel"]),
             n("Gather", ["sel", "two"], ["box_idx"], axis=1),
             n("Squeeze", ["boxes", "zero"], ["b2"]),
             n("Gather", ["b2", "box_idx"], ["kept"], axis=0),
             n("Relu", ["kept"], ["out"])]
    inits = [numpy_helper.from_array(np.array([100], np.int64), "maxb"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array([0], np.int64), "zero")]
    return make_model(nodes, [("boxes", TensorProto.FLOAT, [1, anchors, 4]),
                              ("scores", TensorProto.FLOAT, [1, classes, anchors])],
                      [("out", TensorProto.FLOAT, ["k", 4])], initializers=inits)


def test_report_bound_what_ifs_text_json_html(tmp_path, capsys):
    path = tmp_path / "nms.onnx"
    onnx.save(nms_head(), path)
    capsys.readouterr()
    assert main(["report", str(path), "--json", "--no-layers",
                 "--bound", "NonMaxSuppression_0=10,100,1000,5000"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["bound_whatif"]
    assert [r["asked"] for r in rows] == [10, 100, 1000, 5000]
    # 5,000 is past what the graph proves (1 x 20 x min(400, 100) = 2,000): planned there
    assert [r["bound"] for r in rows] == [10, 100, 1000, 2000]
    arenas = [r["arena_bytes"] for r in rows]
    assert arenas == sorted(arenas) and arenas[0] < arenas[-1]
    for r in rows:  # each its own plan, as plan --bound makes it
        g = graphmem.load(str(path), bounds={"NonMaxSuppression_0": r["asked"]})
        assert graphmem.plan_graph(g).plan.arena_bytes == r["arena_bytes"]
    # the report's own plan stays at the graph's bound
    assert data["bounds"]["symbols"]["NonMaxSuppression_0"]["bound"] == 2000
    assert main(["report", str(path), "--no-layers",
                 "--bound", "NonMaxSuppression_0=10,100"]) == 0
    text = capsys.readouterr().out
    assert "what-if --bound NonMaxSuppression_0" in text
    page = tmp_path / "r.html"
    assert main(["report", str(path), "--no-layers", "--html", str(page),
                 "--bound", "NonMaxSuppression_0=10,100"]) == 0
    assert 'id="bound-whatif"' in page.read_text()


def test_report_bound_what_if_refusals(tmp_path, capsys):
    path = tmp_path / "nms.onnx"
    onnx.save(nms_head(), path)
    for bad, said in ((["NonMaxSuppression_0=10,x"], "not a list of counts"),
                      (["Foo_1=10,20"], "no data-dependent size of that name"),
                      (["NonMaxSuppression_0=1,2", "Other_1=3,4"], "one symbol at a time")):
        capsys.readouterr()
        args = [a for b in bad for a in ("--bound", b)]
        assert main(["report", str(path), "--no-layers", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("graphmem: ") and said in err[0], err
    # plan takes one value a symbol
    assert main(["plan", str(path), "--bound", "NonMaxSuppression_0=10,100"]) == 2


def batched_nonzero():
    """x [N, 256] -> Relu -> NonZero of the positives -> GatherND -> Sigmoid."""
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["r"]), n("Greater", ["r", "half"], ["mask"]),
             n("NonZero", ["mask"], ["nz"]), n("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             n("GatherND", ["r", "idx"], ["vals"]), n("Sigmoid", ["vals"], ["y"])]
    return make_model(nodes, [("x", TensorProto.FLOAT, ["N", 256])],
                      [("y", TensorProto.FLOAT, ["k"])],
                      initializers=[numpy_helper.from_array(np.array(0.5, np.float32),
                                                            "half")])


def test_fit_honours_bound_and_train_refuses_it(tmp_path, capsys):
    path = tmp_path / "nz.onnx"
    onnx.save(batched_nonzero(), path)

    def fit(*extra):
        capsys.readouterr()
        assert main(["fit", str(path), "--budget", "1MiB", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)
    proven, bounded = fit(), fit("--bound", "NonZero_2=100")
    # at the graph's bound the NonZero's indices grow with the batch (2 x 256 x N); at
    # most 100 of them, only the input and the positives' mask do
    assert bounded["batch"] > proven["batch"] > 0
    g = graphmem.load(str(path), dims={"N": bounded["batch"]}, bounds={"NonZero_2": 100})
    assert graphmem.plan_graph(g).plan.arena_bytes == bounded["arena_bytes"]
    capsys.readouterr()
    assert main(["train", str(path), "--dim", "N=2", "--bound", "NonZero_2=100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--bound is not taken by train" in err[0], err


@pytest.mark.slow
def test_the_detection_table_row_of_the_yolo_export(tmp_path):
    """tools/corpus/detection_table.py on the kept export: every step of its row, as the
    docs/corpus.md section shows it (subprocesses, ONNX Runtime's arena twice)."""
    from tools.corpus import detection_table
    from tools.corpus.export_corpus import Runner
    row = detection_table.run_one(Path(YOLO), Runner(600, lambda msg: None), tmp_path)
    assert row["failures"] == [], row["failures"]
    assert row["plan"] and row["validate"] and row["verify"]
    assert row["outputs"][0][1][0] > 0  # boxes out
    assert row["lowered"]["exit"] == 1 and row["lowered"]["tensor"]
    assert [w["asked"] for w in row["what_if"]] == [10, 100, 1000]
    assert row["ort_off"] and row["ort_on"]
    line = detection_table.table([row]).splitlines()[2]
    assert line.startswith("| yolo | 98 | PASS |")
