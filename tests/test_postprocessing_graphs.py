"""Issue 53's bar on post-processing graphs in the styles of exporters the developers
did not write against, and the bar's own check tool (tools/checks/detection_bar.py).

Each graph is built by hand the way its exporter writes it, and run the way a user
runs graphmem: ``plan`` (no ``--bound``, or the one its refusal names), the independent
validator at the plan's bounds, ``verify --inputs`` on inputs that give non-empty
results (each data-dependent size counted against its bound), and the plan made again
with one bound below its count, which ``verify`` must fail with exit 1 naming the
tensor.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.plan.format import Plan
from tools.checks import detection_bar

from conftest import make_model
from test_data_bounds import range_of_data

DATA = Path(__file__).parent / "data" / "detection"
F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
node = helper.make_node


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype), name)


# --------------------------------------------------------------------- the check tool

def test_detection_bar_on_yolo_a_range_and_a_static_model(tmp_path, capsys):
    """The YOLO export meets the bar with no bound given; a Range whose limit is data is
    refused naming its bound and meets it with the default one; a model with no
    data-dependent size fails the bar (nothing to bound), and the tool exits 1."""
    shutil.copy(DATA / "yolo.onnx", tmp_path / "yolo.onnx")
    shutil.copy(DATA / "yolo.npz", tmp_path / "yolo.npz")
    onnx.save(range_of_data(), tmp_path / "range.onnx")
    np.savez(tmp_path / "range.npz", x=np.full((4, 5), 37.5, np.float32))  # 37 elements
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [4])],
                         [("y", F, [4])]), tmp_path / "static.onnx")
    out = tmp_path / "rows.json"
    assert detection_bar.main([str(tmp_path), "--json", str(out)]) == 1
    text = capsys.readouterr().out
    rows = {r["model"]: r for r in json.loads(out.read_text())}
    yolo, rng, static = rows["yolo"], rows["range"], rows["static"]
    # yolo: no bound given, validated, every symbol counted within its bound, above 0
    assert yolo["failed"] is None and yolo["given"] == [] and yolo["validated"]
    assert yolo["verified"] and yolo["counts"]
    assert all(0 < c <= b for c, b in yolo["counts"].values()), yolo["counts"]
    assert all(e <= p for _, e, p, _ in yolo["bounded"])
    sym, low = yolo["lowered"]["bound"].split("=")
    assert int(low) == yolo["counts"][sym][0] - 1 and yolo["lowered"]["exit"] == 1
    assert yolo["lowered"]["tensor"]
    # range: refused naming Range_2, planned with --bound Range_2=100; 37 ran
    assert rng["failed"] is None and rng["given"] == ["Range_2=100"], rng
    assert rng["counts"] == {"Range_2": [37, 100]}
    assert rng["lowered"] == {"bound": "Range_2=36", "exit": 1, "tensor": "r"}
    assert static["failed"].startswith("plan: no size depends on the data")
    lines = text.splitlines()
    assert [ln.split(" | ")[0] for ln in lines[:3]] == ["range", "static", "yolo"]
    assert lines[0].endswith("| PASS") and lines[2].endswith("| PASS")
    assert "FAIL plan: no size" in lines[1]
    assert lines[-1] == "2 of 3 models meet the bar; failed: static"


def test_detection_bar_refuses_a_folder_without_models(tmp_path, capsys):
    assert detection_bar.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphmem: ") and "no model" in err


# ------------------------------------------------------------------ the graphs' bar

def meets_the_bar(tmp_path, capsys, model, inputs: dict, *, bound: str | None = None,
                  full: dict | None = None) -> dict:
    """The bar on one graph, in process (detection_bar's steps, without its processes):
    :func:`planned_and_verified`, then :func:`lowered_bound_is_caught`. Returns
    {symbol: count} on ``inputs``."""
    path, given, counts = planned_and_verified(tmp_path, capsys, model, inputs,
                                               bound=bound, full=full)
    lowered_bound_is_caught(tmp_path, capsys, path, inputs, given, counts)
    return counts


def planned_and_verified(tmp_path, capsys, model, inputs: dict, *, bound: str | None = None,
                         full: dict | None = None):
    """plan with no --bound (refused in one line naming ``bound``'s symbol, then planned
    with it, where ``bound`` is given); graphmem.validate at the plan's bounds; verify on
    ``inputs``, every symbol counted above 0 and within its bound (and on ``full``,
    inputs that fill the bounds, within them too). Returns (the model's path, the
    --bound arguments given, {symbol: count} on ``inputs``)."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    plan_file = tmp_path / "p.json"
    capsys.readouterr()
    given = []
    code = main(["plan", str(path), "-o", str(plan_file), "--quiet"])
    err = capsys.readouterr().err
    if bound is None:
        assert code == 0, err
    else:
        assert code == 2 and err.count("\n") == 1, err
        m = detection_bar.NEEDS_BOUND.search(err)
        assert m and m[1] == bound.split("=")[0], err
        given = [bound]
        assert main(["plan", str(path), "-o", str(plan_file), "--quiet", "--bound", bound]) == 0
    plan = Plan.load(str(plan_file))
    assert plan.bounds, "no size depends on the data"
    graph = graphmem.load(path, bounds={k: v["bound"] for k, v in plan.bounds.items()})
    graphmem.validate(plan, graph)
    counts = {}
    for feeds, nonempty in ((inputs, True), (full, False)):
        if feeds is None:
            continue
        npz = tmp_path / "in.npz"
        np.savez(npz, **feeds)
        capsys.readouterr()
        code = main(["verify", str(path), "--plan", str(plan_file), "--inputs", str(npz)])
        out = capsys.readouterr().out
        assert code == 0 and "PASS" in out, out
        got = {m[1]: int(m[2].replace(",", "")) for m in detection_bar.COUNT.finditer(
            "\n".join(ln[len("count"):].strip() for ln in out.splitlines()
                      if ln.startswith("count")))}
        expected = {k for k, v in plan.bounds.items() if "scope" not in v}
        assert set(got) == expected, out
        assert all(c <= plan.bounds[s]["bound"] for s, c in got.items()), got
        if nonempty:
            assert all(c > 0 for c in got.values()), got
            counts = got
        # the run node by node gives the graph outputs the whole model gives: the sizes
        # of what the loader folded are not those of the bounds
        import onnxruntime as ort
        from graphmem.verify.verifier import verify
        whole = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in whole.get_outputs()], whole.run(None, feeds)))
        report = verify(plan, graph, inputs=feeds)
        assert report.passed
        assert {o.name: tuple(o.shape) for o in report.outputs} == \
            {n: v.shape for n, v in want.items()}
    return path, given, counts


def lowered_bound_is_caught(tmp_path, capsys, path, inputs, given, counts) -> None:
    """The symbol fullest against its bound planned again at one below its count
    (beside the bound given to plan at all): verify exits 1 naming a tensor it bounds
    and the lowered bound."""
    plan = json.loads((tmp_path / "p.json").read_text())
    _, count, sym = max((c / plan["bounds"][s]["bound"], c, s) for s, c in counts.items())
    low = [a for g in given if not g.startswith(f"{sym}=") for a in ("--bound", g)]
    low += ["--bound", f"{sym}={count - 1}"]
    low_file = tmp_path / "low.json"
    capsys.readouterr()
    code = main(["plan", str(path), "-o", str(low_file), "--quiet", *low])
    assert code == 0, capsys.readouterr().err
    np.savez(tmp_path / "in.npz", **inputs)
    code = main(["verify", str(path), "--plan", str(low_file), "--inputs",
                 str(tmp_path / "in.npz")])
    out = capsys.readouterr().out
    m = detection_bar.OVERFLOW.search(out)
    assert code == 1 and m, out
    lowered = json.loads(low_file.read_text())
    assert sym in (lowered["tensors"][m[1]].get("bounded_by") or {}), (sym, m[1])
    assert f"{sym} <= {count - 1:,}" in m[3], out


def _scores(rng, shape, fire):
    """Scores in [0, 1), about ``fire`` of them above 0.5."""
    return np.where(rng.random(shape) < fire, 0.5 + 0.5 * rng.random(shape),
                    0.5 * rng.random(shape)).astype(np.float32)


def _boxes(rng, shape):
    """Boxes [..., 4] as x1, y1, x2, y2 in a 100 x 100 image."""
    xy = rng.random(shape[:-1] + (2,)) * 80
    wh = 5 + rng.random(shape[:-1] + (2,)) * 20
    return np.concatenate([xy, xy + wh], -1).astype(np.float32)


# ultralytics' YOLOv8 head exported whole: predictions [1, 4 + classes, anchors]
ANCHORS, CLASSES = 64, 3


def yolov8_head(select: str):
    """Transpose -> box / class scores sliced -> ReduceMax score, ArgMax class ->
    Greater -> NonZero -> Gather of boxes, scores and classes -> Concat [n, 6];
    ``select="topk"``: then TopK of the kept scores with k = Min(Shape(scores)[0], 20)
    and the detections gathered by its indices."""
    nodes = [node("Transpose", ["preds"], ["t"], perm=[0, 2, 1]),
             node("Slice", ["t", "s0", "s4", "ax2"], ["box"]),
             node("Slice", ["t", "s4", "s7", "ax2"], ["cls"]),
             node("ReduceMax", ["cls"], ["conf"], axes=[2], keepdims=0),
             node("ArgMax", ["cls"], ["cid"], axis=2, keepdims=0),
             node("Greater", ["conf", "thr"], ["mask"]),
             node("NonZero", ["mask"], ["nz"]),
             node("Gather", ["nz", "one"], ["idx"], axis=0),
             node("Squeeze", ["box", "ax0"], ["box2"]),
             node("Gather", ["box2", "idx"], ["kb"], axis=0),
             node("Squeeze", ["conf", "ax0"], ["conf2"]),
             node("Gather", ["conf2", "idx"], ["ks"], axis=0),
             node("Squeeze", ["cid", "ax0"], ["cid2"]),
             node("Gather", ["cid2", "idx"], ["kc"], axis=0),
             node("Cast", ["kc"], ["kcf"], to=F),
             node("Unsqueeze", ["ks", "ax1"], ["ks1"]),
             node("Unsqueeze", ["kcf", "ax1"], ["kc1"]),
             node("Concat", ["kb", "ks1", "kc1"], ["det"], axis=1)]
    out = "det"
    if select == "topk":
        nodes += [node("Shape", ["ks"], ["n"]),
                  node("Min", ["n", "max_det"], ["k"]),
                  node("TopK", ["ks", "k"], ["top", "top_i"]),
                  node("Gather", ["det", "top_i"], ["best"], axis=0)]
        out = "best"
    inits = [const("s0", [0]), const("s4", [4]), const("s7", [4 + CLASSES]), const("ax2", [2]),
             const("thr", 0.6, np.float32), const("one", 1), const("ax0", [0]),
             const("ax1", [1]), const("max_det", [20])]
    return make_model(nodes, [("preds", F, [1, 4 + CLASSES, ANCHORS])], [(out, F, ["n", 6])],
                      initializers=inits)


def _preds(seed, fire):
    rng = np.random.default_rng(seed)
    boxes = _boxes(rng, (1, ANCHORS, 4)).transpose(0, 2, 1)
    return np.concatenate([boxes, _scores(rng, (1, CLASSES, ANCHORS), fire)], 1)


@pytest.mark.parametrize("select", ["nonzero", "topk"])
def test_ultralytics_yolov8_head(tmp_path, capsys, select):
    counts = meets_the_bar(tmp_path, capsys, yolov8_head(select), {"preds": _preds(0, 0.2)},
                           full={"preds": _preds(1, 1.0)})
    assert counts["NonZero_6"] > 20 if select == "topk" else counts["NonZero_6"] > 0


def nms_gather(max_per_class: str, batch: int = 1, anchors: int = 40, classes: int = 3):
    """NonMaxSuppression, then its selected (batch, class, box) indices gather the
    boxes (GatherND on (batch, box)), the scores (GatherND on all three) and the
    classes, concatenated into [k, 7] rows (batch, class, score, box): mmdetection's and
    tf2onnx's form. ``max_per_class``: "input" (a graph input, as ultralytics' and
    mmdeploy's exports take it), or "constant"."""
    nodes = [node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"],
                  ["sel"], center_point_box=0),
             node("Gather", ["sel", "bc"], ["sel_bb"], axis=1),
             node("GatherND", ["boxes", "sel_bb"], ["kb"]),
             node("GatherND", ["scores", "sel"], ["ks"]),
             node("Slice", ["sel", "z1", "two1", "one1"], ["batch_class"]),
             node("Cast", ["batch_class"], ["bcf"], to=F),
             node("Unsqueeze", ["ks", "one1"], ["ks1"]),
             node("Concat", ["bcf", "ks1", "kb"], ["det"], axis=1)]
    inits = [const("iou", [0.5], np.float32), const("score_thr", [0.3], np.float32),
             const("bc", [0, 2]), const("z1", [0]), const("two1", [2]), const("one1", [1])]
    ins = [("boxes", F, [batch, anchors, 4]), ("scores", F, [batch, classes, anchors])]
    if max_per_class == "input":
        ins.append(("max_out", I64, [1]))
    else:
        inits.append(const("max_out", [5]))
    return make_model(nodes, ins, [("det", F, ["k", 7])], initializers=inits)


@pytest.mark.parametrize("max_per_class,batch", [("input", 1), ("constant", 2)])
def test_nms_indices_gather_boxes_scores_classes(tmp_path, capsys, max_per_class, batch):
    rng = np.random.default_rng(2)
    feeds = {"boxes": _boxes(rng, (batch, 40, 4)), "scores": _scores(rng, (batch, 3, 40), 0.5)}
    full = {"boxes": np.tile(np.array([0, 0, 1, 1], np.float32), (batch, 40, 1))
            + np.arange(40, dtype=np.float32)[None, :, None] * 2,  # no two overlap
            "scores": np.full((batch, 3, 40), 0.9, np.float32)}
    if max_per_class == "input":
        feeds["max_out"] = full["max_out"] = np.array([40], np.int64)
    counts = meets_the_bar(tmp_path, capsys, nms_gather(max_per_class, batch), feeds,
                           full=full)
    print(counts)


def tf_where_gathernd():
    """tf2onnx's form of ``tf.where(scores > t)`` and what follows: NonZero ->
    Transpose (the [n, rank] indices) -> GatherND of boxes and scores, Squeeze of the
    index column, the count as ReduceSum of the mask cast to int32, and a 3-input Where
    over the kept scores."""
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("NonZero", ["mask"], ["nz"]),
             node("Transpose", ["nz"], ["where"], perm=[1, 0]),
             node("GatherND", ["boxes", "where"], ["kb"]),
             node("GatherND", ["scores", "where"], ["ks"]),
             node("Squeeze", ["where", "ax1"], ["kidx"]),
             node("Cast", ["mask"], ["mask_i"], to=I32),
             node("ReduceSum", ["mask_i", "ax0"], ["count"], keepdims=0),
             node("Greater", ["ks", "hi"], ["strong"]),
             node("Where", ["strong", "ks", "zero"], ["ks_strong"]),
             node("Cast", ["kidx"], ["kidx_f"], to=F),
             node("Add", ["ks_strong", "kidx_f"], ["tagged"])]
    inits = [const("thr", 0.5, np.float32), const("hi", 0.8, np.float32),
             const("zero", 0.0, np.float32), const("ax0", [0]), const("ax1", [1])]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("kb", F, ["n", 4]), ("tagged", F, ["n"]), ("count", I32, [])],
                      initializers=inits)


def test_tf2onnx_where_gathernd_squeeze_reducesum(tmp_path, capsys):
    rng = np.random.default_rng(3)
    counts = meets_the_bar(tmp_path, capsys, tf_where_gathernd(),
                           {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4)},
                           full={"boxes": _boxes(rng, (50, 4)),
                                 "scores": np.full(50, 0.9, np.float32)})
    print(counts)


def compress_boxes():
    """Compress of the boxes over a threshold on axis 0, and of the flattened scores (no
    axis), then arithmetic on both."""
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("Compress", ["boxes", "mask"], ["kb"], axis=0),
             node("Compress", ["scores", "mask"], ["ks"]),
             node("Unsqueeze", ["ks", "ax1"], ["ks1"]),
             node("Mul", ["kb", "ks1"], ["weighted"])]
    inits = [const("thr", 0.5, np.float32), const("ax1", [1])]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("weighted", F, ["n", 4])], initializers=inits)


def _compress_inputs():
    rng = np.random.default_rng(4)
    return ({"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4)},
            {"boxes": _boxes(rng, (50, 4)), "scores": np.full(50, 0.9, np.float32)})


def test_compress(tmp_path, capsys):
    inputs, full = _compress_inputs()
    _, _, counts = planned_and_verified(tmp_path, capsys, compress_boxes(), inputs, full=full)
    kept = int((inputs["scores"] > 0.5).sum())  # 19 of 50
    # the two Compress read the same condition: one count, Compress_2 its alias
    assert counts == {"Compress_1": kept}


def test_compress_one_bound_lowered(tmp_path, capsys):
    inputs, _ = _compress_inputs()
    path, given, counts = planned_and_verified(tmp_path, capsys, compress_boxes(), inputs)
    lowered_bound_is_caught(tmp_path, capsys, path, inputs, given, counts)
    # the alias's name tightens the count both Compress nodes hold
    graph = graphmem.load(path, bounds={"Compress_2": 18})
    assert graph.tensors["kb"].shape == (18, 4) and graph.tensors["ks"].shape == (18,)
    assert list(graph.data_bounds.symbols) == ["Compress_1"] and not graph.load_notes
    assert graph.data_bounds.governed["weighted"] == ("Compress_1",)


def unique_classes():
    """The classes of the boxes over a threshold, their Unique (sorted: values,
    first indices, inverse indices, counts), each class's count gathered back per box."""
    nodes = [node("ReduceMax", ["scores"], ["conf"], axes=[0], keepdims=0),
             node("ArgMax", ["scores"], ["cid"], axis=0, keepdims=0),
             node("Greater", ["conf", "thr"], ["mask"]),
             node("Compress", ["cid", "mask"], ["kc"], axis=0),
             node("Unique", ["kc"], ["u", "first", "inv", "cnt"], sorted=1),
             node("Gather", ["cnt", "inv"], ["per_box"], axis=0),
             node("Add", ["u", "one"], ["u1"])]
    inits = [const("thr", 0.5, np.float32), const("one", 1)]
    return make_model(nodes, [("scores", F, [6, 40])],
                      [("u1", I64, ["u"]), ("per_box", I64, ["n"]), ("first", I64, ["u"])],
                      initializers=inits)


def test_unique(tmp_path, capsys):
    rng = np.random.default_rng(5)
    counts = meets_the_bar(tmp_path, capsys, unique_classes(),
                           {"scores": _scores(rng, (6, 40), 0.2)},
                           full={"scores": np.eye(6, 40, dtype=np.float32)[:, :40]
                                 + np.tile(np.eye(6, dtype=np.float32), 7)[:, :40]})
    print(counts)


def topk_of_count():
    """TopK of the scores with k the count over a threshold: k = Cast(ReduceSum(mask))
    (a value of the data, not shape arithmetic), reshaped to [1]."""
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("Cast", ["mask"], ["mask_i"], to=I64),
             node("ReduceSum", ["mask_i"], ["n"], keepdims=1),
             node("Cast", ["n"], ["k"], to=I64),
             node("TopK", ["scores", "k"], ["top", "top_i"]),
             node("Gather", ["boxes", "top_i"], ["kb"], axis=0),
             node("Unsqueeze", ["top", "ax1"], ["top1"]),
             node("Concat", ["kb", "top1"], ["det"], axis=1)]
    inits = [const("thr", 0.5, np.float32), const("ax1", [1])]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("det", F, ["n", 5])], initializers=inits)


def test_topk_with_k_a_count_of_the_data(tmp_path, capsys):
    rng = np.random.default_rng(6)
    counts = meets_the_bar(tmp_path, capsys, topk_of_count(),
                           {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4)},
                           full={"boxes": _boxes(rng, (50, 4)),
                                 "scores": np.full(50, 0.9, np.float32)})
    print(counts)


def slice_to_count():
    """The scores sorted (TopK of all 50), then Slice with its end the count over a
    threshold (ReduceSum of the mask): the first n, as TensorFlow's exports cut a padded
    result."""
    nodes = [node("TopK", ["scores", "all"], ["sorted", "order"]),
             node("Greater", ["scores", "thr"], ["mask"]),
             node("Cast", ["mask"], ["mask_i"], to=I64),
             node("ReduceSum", ["mask_i"], ["n"], keepdims=1),
             node("Slice", ["sorted", "z", "n", "ax0"], ["head"]),
             node("Slice", ["order", "z", "n", "ax0"], ["head_i"]),
             node("Gather", ["boxes", "head_i"], ["kb"], axis=0),
             node("Unsqueeze", ["head", "ax1"], ["head1"]),
             node("Concat", ["kb", "head1"], ["det"], axis=1)]
    inits = [const("thr", 0.5, np.float32), const("all", [50]), const("z", [0]),
             const("ax0", [0]), const("ax1", [1])]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("det", F, ["n", 5])], initializers=inits)


def test_slice_with_its_end_from_the_data(tmp_path, capsys):
    """The two Slices cut the same rows (the same starts, ends and axes, inputs of one
    shape): one symbol, Slice_5 its alias, so lowering it lowers both."""
    rng = np.random.default_rng(7)
    feeds = {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4)}
    counts = meets_the_bar(tmp_path, capsys, slice_to_count(), feeds,
                           full={"boxes": _boxes(rng, (50, 4)),
                                 "scores": np.full(50, 0.9, np.float32)})
    assert counts == {"Slice_4": int((feeds["scores"] > 0.5).sum())}
    graph = graphmem.load(tmp_path / "m.onnx", bounds={"Slice_5": 30})
    assert graph.tensors["head"].shape == (30,) and graph.tensors["head_i"].shape == (30,)


def range_of_count():
    """Range(0, n) with n the count over a threshold, the first n boxes gathered by it."""
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("Cast", ["mask"], ["mask_i"], to=I64),
             node("ReduceSum", ["mask_i"], ["n"], keepdims=0),
             node("Range", ["zero", "n", "one"], ["r"]),
             node("Gather", ["boxes", "r"], ["kb"], axis=0),
             node("Relu", ["kb"], ["y"])]
    inits = [const("thr", 0.5, np.float32), const("zero", 0), const("one", 1)]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("y", F, ["n", 4])], initializers=inits)


def test_range_with_a_limit_from_the_data(tmp_path, capsys):
    """The limit, a ReduceSum of 50 flags cast to int64, is at most 50 by the value
    ranges: planned with no --bound, the Range at 50."""
    rng = np.random.default_rng(8)
    meets_the_bar(tmp_path, capsys, range_of_count(),
                  {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4)},
                  full={"boxes": _boxes(rng, (50, 4)), "scores": np.full(50, 0.9, np.float32)})
    plan = Plan.load(str(tmp_path / "p.json"))
    assert plan.bounds["Range_3"]["bound"] == plan.bounds["Range_3"]["proven"] == 50


def padded_to_max_det(fill: str = "ConstantOfShape"):
    """The detections padded to a fixed 50 rows, as TensorFlow's combined NMS returns
    them: the n rows over a threshold (NonZero, Gather), then 50 - n rows of zeros
    (n read by a Shape) concatenated after them, made by ``fill``: ConstantOfShape([50 -
    n, 5]), an Expand or a Tile of one zero row to 50 - n rows; or ``"Slice"``: rows n
    to 50 of a constant [50, 5] of zeros (a Slice whose start is the count)."""
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("NonZero", ["mask"], ["nz"]),
             node("Squeeze", ["nz", "z"], ["idx"]),
             node("Gather", ["boxes", "idx"], ["kb"], axis=0),
             node("Gather", ["scores", "idx"], ["ks"], axis=0),
             node("Unsqueeze", ["ks", "ax1"], ["ks1"]),
             node("Concat", ["kb", "ks1"], ["det"], axis=1),
             node("Shape", ["det"], ["dshape"]),
             node("Slice", ["dshape", "z", "one1", "z"], ["n"]),
             node("Sub", ["max_det", "n"], ["pad_n"])]
    if fill == "ConstantOfShape":
        nodes += [node("Concat", ["pad_n", "five"], ["pad_shape"], axis=0),
                  node("ConstantOfShape", ["pad_shape"], ["pad"],
                       value=numpy_helper.from_array(np.zeros(1, np.float32)))]
    elif fill == "Expand":
        nodes += [node("Concat", ["pad_n", "five"], ["pad_shape"], axis=0),
                  node("Expand", ["zero_row", "pad_shape"], ["pad"])]
    elif fill == "Tile":
        nodes += [node("Concat", ["pad_n", "one1"], ["reps"], axis=0),
                  node("Tile", ["zero_row", "reps"], ["pad"])]
    else:
        nodes += [node("Slice", ["zero_rows", "n", "max_det", "z"], ["pad"])]
    nodes.append(node("Concat", ["det", "pad"], ["padded"], axis=0))
    inits = [const("thr", 0.5, np.float32), const("ax1", [1]), const("z", [0]),
             const("one1", [1]), const("max_det", [50]), const("five", [5]),
             const("zero_row", np.zeros((1, 5)), np.float32),
             const("zero_rows", np.zeros((50, 5)), np.float32)]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("padded", F, [50, 5])], initializers=inits)


def test_a_shape_of_a_bounded_tensor_never_folds(tmp_path):
    """The Shape of the bounded detections, and the pad's shape computed from it, run:
    folded at the bound (n = 50) they made a pad of [0, 5] zeros, and verify passed with
    [n, 5] detections where the model gives [50, 5] (ONNX Runtime's symbolic inference,
    the loader's last strategy, folded them)."""
    onnx.save(padded_to_max_det(), tmp_path / "m.onnx")
    graph = graphmem.load(tmp_path / "m.onnx")
    governed = graph.data_bounds.governed
    assert {"det", "pad", "padded"} <= set(governed)
    assert tuple(graph.folded_nodes) == ()
    assert {"dshape", "pad_shape"} <= {o for n in graph.nodes for o in n.outputs}


@pytest.mark.parametrize("fill", ["ConstantOfShape", "Expand", "Tile", "Slice"])
def test_detections_padded_to_a_fixed_count(tmp_path, capsys, fill):
    rng = np.random.default_rng(9)
    meets_the_bar(tmp_path, capsys, padded_to_max_det(fill),
                  {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4)},
                  full={"boxes": _boxes(rng, (50, 4)), "scores": np.full(50, 0.9, np.float32)})


def topk_k_input():
    """TopK with k a graph input (ultralytics' and mmdeploy's ``max_det``), the boxes of
    the k best scores gathered."""
    nodes = [node("TopK", ["scores", "k"], ["top", "top_i"]),
             node("Gather", ["boxes", "top_i"], ["kb"], axis=0),
             node("Unsqueeze", ["top", "ax1"], ["top1"]),
             node("Concat", ["kb", "top1"], ["det"], axis=1)]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50]), ("k", I64, [1])],
                      [("det", F, ["k", 5])], initializers=[const("ax1", [1])])


def test_topk_with_k_a_graph_input(tmp_path, capsys):
    rng = np.random.default_rng(10)
    feeds = {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4),
             "k": np.array([12], np.int64)}
    counts = meets_the_bar(tmp_path, capsys, topk_k_input(), feeds,
                           full={**feeds, "k": np.array([50], np.int64)})
    assert counts == {"TopK_0": 12}


def pad_to_max_output_size():
    """tf2onnx's ``pad_to_max_output_size``: the NonMaxSuppression's kept indices padded
    with Pad to a fixed 30 rows, its pads computed from the count (30 - n): the
    output's size is 30 whatever n is."""
    nodes = [node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"],
                  ["sel"]),
             node("Gather", ["sel", "two"], ["bidx"], axis=1),
             node("Shape", ["bidx"], ["n"]),
             node("Sub", ["max_total", "n"], ["pad_n"]),
             node("Concat", ["z", "pad_n"], ["pads"], axis=0),
             node("Pad", ["bidx", "pads", "minus1"], ["padded"], mode="constant")]
    inits = [const("max_out", [30]), const("iou", [0.5], np.float32),
             const("score_thr", [0.3], np.float32), const("two", 2), const("max_total", [30]),
             const("z", [0]), const("minus1", -1)]
    return make_model(nodes, [("boxes", F, [1, 40, 4]), ("scores", F, [1, 1, 40])],
                      [("padded", I64, [30])], initializers=inits)


def test_nms_padded_to_a_fixed_count_by_pad(tmp_path, capsys):
    rng = np.random.default_rng(11)
    counts = meets_the_bar(tmp_path, capsys, pad_to_max_output_size(),
                           {"boxes": _boxes(rng, (1, 40, 4)),
                            "scores": _scores(rng, (1, 1, 40), 0.5)})
    assert 0 < counts["NonMaxSuppression_0"] <= 30


def nms_of_filtered_boxes():
    """The boxes over a score threshold (NonZero, Gather) into a NonMaxSuppression of at
    most 10: its bound follows from the filter's (1 x 1 x min(n, 10))."""
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("NonZero", ["mask"], ["nz"]),
             node("Squeeze", ["nz", "ax0"], ["idx"]),
             node("Gather", ["boxes", "idx"], ["fb"], axis=0),
             node("Gather", ["scores", "idx"], ["fs"], axis=0),
             node("Unsqueeze", ["fb", "ax0"], ["fb3"]),
             node("Unsqueeze", ["fs", "ax01"], ["fs3"]),
             node("NonMaxSuppression", ["fb3", "fs3", "max_out", "iou"], ["sel"]),
             node("Gather", ["sel", "two"], ["k"], axis=1),
             node("Gather", ["fb", "k"], ["kb"], axis=0)]
    inits = [const("thr", 0.5, np.float32), const("ax0", [0]), const("ax01", [0, 1]),
             const("max_out", [10]), const("iou", [0.5], np.float32), const("two", 2)]
    return make_model(nodes, [("boxes", F, [60, 4]), ("scores", F, [60])],
                      [("kb", F, ["k", 4])], initializers=inits)


def test_nms_over_boxes_a_filter_kept(tmp_path, capsys):
    rng = np.random.default_rng(12)
    far = (np.arange(60, dtype=np.float32)[:, None] * 30 + np.array([0, 0, 10, 10],
                                                                     np.float32))
    counts = meets_the_bar(tmp_path, capsys, nms_of_filtered_boxes(),
                           {"boxes": _boxes(rng, (60, 4)), "scores": _scores(rng, (60,), 0.4)},
                           full={"boxes": far, "scores": np.full(60, 0.9, np.float32)})
    assert counts["NonMaxSuppression_7"] <= 10


def scatter_into_fixed_rows():
    """The kept rows scattered into a fixed [50, 4] of zeros (ScatterND by the NonZero
    indices): the output's size does not depend on the data, its inputs' do."""
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("NonZero", ["mask"], ["nz"]),
             node("Transpose", ["nz"], ["where"], perm=[1, 0]),
             node("GatherND", ["boxes", "where"], ["kb"]),
             node("Mul", ["kb", "half"], ["scaled"]),
             node("ScatterND", ["zeros", "where", "scaled"], ["out"])]
    inits = [const("thr", 0.5, np.float32), const("half", 0.5, np.float32),
             numpy_helper.from_array(np.zeros((50, 4), np.float32), "zeros")]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("out", F, [50, 4])], initializers=inits)


def test_scatter_of_kept_rows_into_a_fixed_output(tmp_path, capsys):
    rng = np.random.default_rng(13)
    meets_the_bar(tmp_path, capsys, scatter_into_fixed_rows(),
                  {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4)},
                  full={"boxes": _boxes(rng, (50, 4)), "scores": np.full(50, 0.9, np.float32)})


def unique_rows():
    """The kept boxes rounded to a grid of 10, their distinct rows (Unique on axis 0)."""
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("Compress", ["boxes", "mask"], ["kb"], axis=0),
             node("Div", ["kb", "ten"], ["scaled"]),
             node("Floor", ["scaled"], ["grid"]),
             node("Unique", ["grid"], ["rows", "first", "inv", "cnt"], axis=0, sorted=1),
             node("Mul", ["rows", "ten"], ["y"])]
    inits = [const("thr", 0.5, np.float32), const("ten", 10.0, np.float32)]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])],
                      [("y", F, ["u", 4]), ("cnt", I64, ["u"])], initializers=inits)


def test_unique_rows(tmp_path, capsys):
    rng = np.random.default_rng(14)
    counts = meets_the_bar(tmp_path, capsys, unique_rows(),
                           {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.6)},
                           full={"boxes": np.arange(200, dtype=np.float32).reshape(50, 4) * 10,
                                 "scores": np.full(50, 0.9, np.float32)})
    assert counts["Unique_4"] <= counts["Compress_1"]


def loop_over_detections(trip: str):
    """A Loop over the kept boxes (tf2onnx's while loop, torchvision's per-detection
    loops), each iteration's box area a scan output; its trip count the Shape of the
    kept boxes (``trip="shape"``: bounded by the NonZero) or a ReduceSum of the mask
    (``"count"``: a value of the data, which needs a --bound)."""
    body = helper.make_graph(
        [node("Gather", ["kb", "i"], ["row"], axis=0),
         node("Slice", ["row", "b2", "b4", "b0"], ["hi"]),
         node("Slice", ["row", "b0", "b2", "b0"], ["lo"]),
         node("Sub", ["hi", "lo"], ["wh"]),
         node("ReduceProd", ["wh"], ["area"], keepdims=0),
         node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("area", F, [])],
        [const("b0", [0]), const("b2", [2]), const("b4", [4])])
    nodes = [node("Greater", ["scores", "thr"], ["mask"]),
             node("NonZero", ["mask"], ["nz"]),
             node("Squeeze", ["nz", "z"], ["idx"]),
             node("Gather", ["boxes", "idx"], ["kb"], axis=0)]
    if trip == "shape":
        nodes += [node("Shape", ["kb"], ["ks"]), node("Gather", ["ks", "zs"], ["M"], axis=0)]
    else:
        nodes += [node("Cast", ["mask"], ["mi"], to=I64),
                  node("ReduceSum", ["mi"], ["M"], keepdims=0)]
    nodes += [node("Loop", ["M", "true"], ["areas"], body=body),
              node("Relu", ["areas"], ["y"])]
    return make_model(nodes, [("boxes", F, [50, 4]), ("scores", F, [50])], [("y", F, ["n"])],
                      initializers=[const("thr", 0.5, np.float32), const("z", [0]),
                                    const("zs", 0), const("true", True, np.bool_)])


@pytest.mark.parametrize("trip,bound", [("shape", None), ("count", "Loop_6=50")])
def test_a_loop_over_the_kept_detections(tmp_path, capsys, trip, bound):
    rng = np.random.default_rng(15)
    feeds = {"boxes": _boxes(rng, (50, 4)), "scores": _scores(rng, (50,), 0.4)}
    counts = meets_the_bar(tmp_path, capsys, loop_over_detections(trip), feeds, bound=bound,
                           full={**feeds, "scores": np.full(50, 0.9, np.float32)})
    kept = int((feeds["scores"] > 0.5).sum())
    assert counts == ({"NonZero_1": kept} if bound is None else
                      {"NonZero_1": kept, "Loop_6": kept})


def test_detection_bar_takes_a_body_tensor_bounded_in_its_scope_plan():
    """A lowered Loop_N_carried_J fails in the body's slot first (its formal input, in
    the scope's plan): the symbol bounds that tensor there, not in the graph's tensors."""
    plan = {"tensors": {"out": {"bounded_by": {"NonZero_1": 9}}},
            "scopes": [{"node": 7, "attr": "body", "tensors": {
                "res.11": {"bounded_by": {"Loop_7_carried_0": 99}}},
                "scopes": [{"tensors": {"deep": {"bounded_by": {"Loop_2_7_body": 3}}}}]}]}
    assert detection_bar._bounded_by(plan, "out") == {"NonZero_1": 9}
    assert detection_bar._bounded_by(plan, "res.11") == {"Loop_7_carried_0": 99}
    assert detection_bar._bounded_by(plan, "deep") == {"Loop_2_7_body": 3}
    assert detection_bar._bounded_by(plan, "other") == {}


def test_detection_bar_runs_as_a_module(tmp_path):
    """python -m tools.checks.detection_bar DIR, as the docs give it (a helper defined
    after the module's main guard was missing there)."""
    shutil.copy(DATA / "yolo.onnx", tmp_path / "yolo.onnx")
    shutil.copy(DATA / "yolo.npz", tmp_path / "yolo.npz")
    p = subprocess.run([sys.executable, "-m", "tools.checks.detection_bar", str(tmp_path)],
                       capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert p.returncode == 0 and "1 of 1 models meet the bar" in p.stdout, p.stdout + p.stderr
