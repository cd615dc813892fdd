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
from pathlib import Path

import numpy as np
import onnx

from tools.checks import detection_bar

from test_data_bounds import range_of_data
from conftest import make_model

DATA = Path(__file__).parent / "data" / "detection"


# --------------------------------------------------------------------- the check tool

def test_detection_bar_on_yolo_a_range_and_a_static_model(tmp_path, capsys):
    """The YOLO export meets the bar with no bound given; a Range whose limit is data is
    refused naming its bound and meets it with the default one; a model with no
    data-dependent size fails the bar (nothing to bound), and the tool exits 1."""
    shutil.copy(DATA / "yolo.onnx", tmp_path / "yolo.onnx")
    shutil.copy(DATA / "yolo.npz", tmp_path / "yolo.npz")
    onnx.save(range_of_data(), tmp_path / "range.onnx")
    np.savez(tmp_path / "range.npz", x=np.full((4, 5), 37.5, np.float32))  # 37 elements
    from onnx import TensorProto, helper
    F = TensorProto.FLOAT
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
