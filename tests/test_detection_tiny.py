"""Issue 53 end to end on tiny versions of torchvision's own detectors: the ``tiny_*``
models of tools/corpus/export_detection.py (torchvision's FasterRCNN, MaskRCNN whole and
up to its masks' probabilities, KeypointRCNN, RetinaNet, FCOS, SSD and SSDlite classes
over a few-channel FPN on 64 x 64 images, exported by torch's TorchScript exporter), kept
in tests/data/detection
with the image each was exported with, on which each finds boxes. Each plans with no
``--bound``, its plan is accepted by graphmem.validate at its bounds, ``verify --inputs``
passes reporting every symbol's count at run time, and one bound lowered below its count
is caught naming the tensor."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import graphmem
from graphmem.cli import main
from graphmem.plan.format import Plan

DATA = Path(__file__).parent / "data" / "detection"
COUNT = re.compile(r"count\s+(\S+) \((\w+), node (\d+)\): ([\d,]+) of at most ([\d,]+)")
# a graph output's type in verify's table: the detections' boxes, [n, 4]
BOXES = re.compile(r"float32\[(\d+), 4\]")
TINY = ("tiny_fasterrcnn", "tiny_maskrcnn_masks", "tiny_retinanet", "tiny_fcos",
        "tiny_ssd", "tiny_ssdlite", "tiny_maskrcnn", "tiny_keypointrcnn")
# a symbol of a Loop body's node in verify's counts: "Resize_31_axis2_1803_body (Resize,
# node 31 in the body of node 1803): 32 of at most 64"
BODY_COUNT = re.compile(r"count\s+(\S+) \((\w+), node \d+ in the body of node (\d+)\): "
                        r"([\d,]+) of at most ([\d,]+)")


def _int(text):  # verify's counts, 3,840
    return int(text.replace(",", ""))


def _files(name):
    return str(DATA / f"{name}.onnx"), str(DATA / f"{name}.npz")


def _verify_lowered(model, image, tmp_path, capsys, symbol: str, bound: int) -> str:
    """Plan ``model`` with ``--bound symbol=bound`` (planned there) and verify it on
    ``image``: it must exit 1; returns what it printed."""
    low = tmp_path / "low.json"
    assert main(["plan", model, "-o", str(low), "--quiet",
                 "--bound", f"{symbol}={bound}"]) == 0
    assert Plan.load(str(low)).bounds[symbol]["bound"] == bound
    capsys.readouterr()
    assert main(["verify", model, "--plan", str(low), "--inputs", image]) == 1
    return capsys.readouterr().out


@pytest.mark.parametrize("name", TINY)
def test_tiny_detector_plans_validates_verifies_and_catches_a_lowered_bound(
        name, tmp_path, capsys):
    model, image = _files(name)
    out = tmp_path / "p.json"
    assert main(["plan", model, "-o", str(out), "--quiet"]) == 0
    plan = Plan.load(str(out))
    assert plan.bounds, "a detector has sizes that depend on the data"
    graph = graphmem.load(model, bounds={k: v["bound"] for k, v in plan.bounds.items()})
    graphmem.validate(plan, graph)
    for o in graph.outputs:  # the detections are planned at their bounds
        assert plan.tensors[o].bounded_by, o

    capsys.readouterr()
    assert main(["verify", model, "--plan", str(out), "--inputs", image]) == 0
    text = capsys.readouterr().out
    assert "PASS" in text
    counts = {m[1]: (m[2], int(m[3]), _int(m[4]), _int(m[5])) for m in COUNT.finditer(text)}
    top = {k for k, v in plan.bounds.items() if "scope" not in v}
    assert set(counts) == top  # every symbol of the graph's own nodes, each counted
    for s, (op, node, n, bound) in counts.items():
        assert (op, node) == (plan.bounds[s]["op"], plan.bounds[s]["node"])
        assert 0 <= n <= bound == plan.bounds[s]["bound"], (s, n, bound)
    # the image makes the detector fire: candidates pass the score threshold, the last
    # NMS (torchvision's batched_nms, an If) keeps some, and boxes come out
    last = max((s for s in top if plan.bounds[s]["op"] == "If"),
               key=lambda s: plan.bounds[s]["node"])
    assert counts[last][2] > 0, counts
    assert [int(n) for n in BOXES.findall(text)] and all(
        int(n) > 0 for n in BOXES.findall(text)), text

    # the last NMS's count lowered by one: its output overflows its slot, exit 1
    kept = counts[last][2]
    text = _verify_lowered(model, image, tmp_path, capsys, last, kept - 1)
    tensor = plan.bounds[last]["tensor"]
    assert f"FAIL: tensor '{tensor}' (node {plan.bounds[last]['node']} (If" in text, text
    assert f"{last} <= {kept - 1}" in text, text


@pytest.mark.parametrize("name", ["tiny_maskrcnn", "tiny_keypointrcnn"])
def test_paste_and_keypoint_loops_count_their_body_sizes_and_catch_a_lowered_one(
        name, tmp_path, capsys):
    """Mask R-CNN's mask pasting and Keypoint R-CNN's heatmaps-to-keypoints: a Loop over
    the detections whose carried values grow by one detection's result an iteration
    (``Loop_N_carried_J``) and whose body resizes to each box's size (``Resize_i_axisK``,
    bounded by the value ranges of the clipped boxes). verify runs the body iteration by
    iteration: each body symbol's largest count is reported within its bound; the
    Resize's bound lowered below it fails naming the body's tensor."""
    model, image = _files(name)
    out = tmp_path / "p.json"
    assert main(["plan", model, "-o", str(out), "--quiet"]) == 0
    plan = Plan.load(str(out))
    carried = [k for k, v in plan.bounds.items() if "_carried_" in k and "scope" not in v]
    resized = [k for k, v in plan.bounds.items()
               if v["op"] == "Resize" and v.get("scope", {}).get("attr") == "body"]
    assert carried and resized, sorted(plan.bounds)
    capsys.readouterr()
    assert main(["verify", model, "--plan", str(out), "--inputs", image]) == 0
    text = capsys.readouterr().out
    body = {m[1]: (_int(m[4]), _int(m[5])) for m in BODY_COUNT.finditer(text)}
    assert set(resized) <= set(body), text
    assert all(0 < n <= b for n, b in (body[s] for s in resized)), body
    top = {m[1]: _int(m[4]) for m in COUNT.finditer(text)}
    assert all(top[s] > 0 for s in carried), top  # the masks / keypoints of each box

    sym = resized[0]
    n = body[sym][0]
    text = _verify_lowered(model, image, tmp_path, capsys, sym, n - 1)
    tensor = plan.bounds[sym]["tensor"]
    assert f"FAIL: tensor '{tensor}' (the body of node" in text, text
    assert f"{sym} <= {n - 1}" in text, text
