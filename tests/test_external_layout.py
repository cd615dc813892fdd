"""External data read where ONNX Runtime reads it (issue 55): the model's folder as
named and its real file's folder, one rule for every command; links out of both, FIFOs
and hard links refused in one line."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.cli import main


def _hub_layout(root):
    """The Hugging Face hub's cache: snapshots/<rev>/ holds links into blobs/."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal([64, 64]).astype(np.float32), "W")
    # (the Reshape's target stays inline: ORT's own inference cannot read an external one)
    shape = numpy_helper.from_array(np.array([2, 64], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Reshape", ["r", "shape"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], [w, shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    (root / "build").mkdir()
    onnx.save(m, str(root / "build" / "model.onnx"), save_as_external_data=True,
              location="model.onnx_data", size_threshold=1024)
    (root / "blobs").mkdir()
    (root / "snapshots" / "rev").mkdir(parents=True)
    os.replace(root / "build" / "model.onnx", root / "blobs" / "1a2b")
    os.replace(root / "build" / "model.onnx_data", root / "blobs" / "3c4d")
    os.symlink("../../blobs/1a2b", root / "snapshots" / "rev" / "model.onnx")
    os.symlink("../../blobs/3c4d", root / "snapshots" / "rev" / "model.onnx_data")
    return root / "snapshots" / "rev" / "model.onnx"


@pytest.mark.parametrize("command", [["plan", "-o", "p.json"], ["report"], ["verify"],
                                     ["plan", "--ort-optimize", "all", "-o", "q.json"],
                                     ["verify", "--ort-optimize", "all"]])
def test_the_hub_layout_runs_in_every_command(tmp_path, monkeypatch, capsys, command):
    model = _hub_layout(tmp_path)
    ort.InferenceSession(str(model))  # ONNX Runtime runs it
    monkeypatch.chdir(tmp_path)
    assert main([command[0], str(model), *command[1:]]) == 0, capsys.readouterr().err


def test_a_linked_model_reads_data_beside_its_link_too(tmp_path, monkeypatch, capsys):
    model = _hub_layout(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(os.path.realpath(model), tmp_path / "elsewhere" / "model.onnx")
    os.replace(os.path.realpath(tmp_path / "blobs" / "3c4d"),
               tmp_path / "elsewhere" / "model.onnx_data")
    monkeypatch.chdir(tmp_path)
    assert main(["verify", "elsewhere/model.onnx"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("make, says", [
    (lambda d: os.link(d / "blobs" / "3c4d", d / "m" / "model.onnx_data"), "2 hard links"),
    (lambda d: os.mkfifo(d / "m" / "model.onnx_data"), "a FIFO, not a regular file"),
    (lambda d: (d / "m" / "model.onnx_data").mkdir(), "a folder, not a regular file"),
    (lambda d: os.symlink("../blobs/3c4d", d / "m" / "model.onnx_data"),
     "outside the model's folder"),
], ids=["hard link", "FIFO", "folder", "link out"])
@pytest.mark.parametrize("command", [["plan", "-o", "p.json"], ["report"], ["verify"],
                                     ["train"]])
def test_hostile_data_files_are_refused_in_one_line(tmp_path, monkeypatch, capsys, make,
                                                    says, command):
    _hub_layout(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.onnx").write_bytes((tmp_path / "blobs" / "1a2b").read_bytes())
    make(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main([command[0], "m/model.onnx", *command[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "'model.onnx_data'" in err[0], err
