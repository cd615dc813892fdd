"""The convolution workspace by rule (graphmem.analysis.workspace): MLAS's working buffer
as ``MlasConvPrepare`` sizes it, branch by branch, on one-Conv graphs; the options that
choose the rule on every command that shows a total."""
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

from graphmem.analysis.workspace import float16_convs, largest, rule_for
from graphmem.cli import main
from graphmem.errors import GraphmemError

from conftest import graph_of, make_model


def conv_model(batch, channels, filters, hw, kernel, pad, stride=1, group=1,
               elem=TensorProto.FLOAT, domain=""):
    out = (hw + 2 * pad - kernel) // stride + 1
    dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    w = numpy_helper.from_array(
        np.zeros((filters, channels // group, kernel, kernel), dtype), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[kernel, kernel],
                            pads=[pad] * 4, strides=[stride, stride], group=group,
                            domain=domain)
    return make_model([node], [("x", elem, [batch, channels, hw, hw])],
                      [("y", elem, [batch, filters, out, out])], [w])


def ws(model, rule="mlas", threads=1):
    return largest(graph_of(model), rule, threads)[0]


def test_pointwise_takes_no_buffer():
    m = conv_model(1, 16, 32, 8, kernel=1, pad=0)
    assert ws(m) == 0 and ws(m, "im2col") == 0


def test_segmented_takes_a_slice_per_thread():
    # 8 filters < 256 output pixels: ExpandThenGemmSegmented; 8 * 256 * 36 = 73,728
    # multiply-adds make 2 threads' worth (64 Ki each), capped by the session's threads
    m = conv_model(1, 4, 8, 16, kernel=3, pad=1)
    assert ws(m, threads=1) == 128 * 128 * 4
    assert ws(m, threads=4) == 2 * 128 * 128 * 4
    assert ws(m, "im2col") == 36 * 256 * 4  # one unfolded image


def test_more_filters_than_pixels_unfolds_the_image():
    # 64 filters > 16 output pixels: ExpandThenGemm, output pixels x K floats
    m = conv_model(1, 4, 64, 4, kernel=3, pad=1)
    assert ws(m) == 16 * 36 * 4 == ws(m, "im2col")


def test_a_batch_gives_each_thread_a_slice():
    m = conv_model(2, 4, 8, 16, kernel=3, pad=1)
    assert ws(m, threads=1) == 128 * 128 * 4
    assert ws(m, threads=4) == 2 * 128 * 128 * 4  # no more threads than images x groups
    depthwise = conv_model(1, 8, 8, 16, kernel=3, pad=1, group=8)
    assert ws(depthwise, threads=4) == 4 * 128 * 128 * 4


def test_float16_runs_in_float32_and_nchwc_takes_none():
    half = conv_model(1, 4, 64, 4, kernel=3, pad=1, elem=TensorProto.FLOAT16)
    assert ws(half) == 16 * 36 * 4  # MLAS works in float32 behind the inserted Casts
    assert ws(half, "im2col") == 16 * 36 * 2  # the unfolded image in the input's type
    assert float16_convs(graph_of(half)) == 1
    assert ws(half, "none") == 0


def test_provider_picks_the_rule():
    assert rule_for("cpu") == "mlas" and rule_for("cuda") == "none"
    assert rule_for("cuda", "im2col") == "im2col"
    with pytest.raises(GraphmemError):
        rule_for("cpu", "winograd")


def report_json(capsys, *args):
    assert main(["report", *args, "--json", "--no-layers"]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_workspace_choice_and_total(capsys):
    totals = {}
    for rule in ("mlas", "im2col", "none"):
        t = report_json(capsys, "squeezenet", "--workspace", rule)["totals"]
        assert t["workspace_rule"] == rule
        assert t["total_bytes"] == t["weight_bytes"] + t["arena_bytes"] + t["workspace_bytes"]
        totals[rule] = t["workspace_bytes"]
    assert totals["none"] == 0 < totals["mlas"] < totals["im2col"]
    assert report_json(capsys, "squeezenet", "--provider", "cuda")["totals"][
        "workspace_rule"] == "none"


def test_fit_no_workspace_is_workspace_none(capsys):
    answers = []
    for extra in (["--no-workspace"], ["--workspace", "none"]):
        assert main(["fit", "squeezenet", "--budget", "64MiB", "--json", *extra]) == 0
        answers.append(json.loads(capsys.readouterr().out))
    assert answers[0] == answers[1] and answers[0]["workspace_bytes"] == 0
    assert main(["fit", "squeezenet", "--budget", "64MiB", "--no-workspace",
                 "--workspace", "im2col"]) == 2
    assert "contradict" in capsys.readouterr().err


def test_report_notes_float16_convolutions_on_cpu(tmp_path, capsys):
    path = tmp_path / "half.onnx"
    onnx.save(conv_model(1, 4, 64, 4, kernel=3, pad=1, elem=TensorProto.FLOAT16), path)
    notes = report_json(capsys, str(path)).get("notes", [])
    assert any("float16" in n and "--ort-optimize" in n for n in notes)
    assert "notes" not in report_json(capsys, str(path), "--provider", "cuda")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None,
                    reason="python -m tools.upstream.mlas_workspace needs cc")
def test_mlas_rule_matches_what_onnxruntime_allocates():
    """python -m tools.upstream.mlas_workspace: one Conv per MlasConvPrepare branch run
    under a malloc log; the working buffer the installed ONNX Runtime allocated equals
    the rule's."""
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "tools.upstream.mlas_workspace"],
                          capture_output=True, text=True, timeout=900, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DIFFERS" not in proc.stdout and proc.stdout.count("\n| ") >= 9


def test_export_html_takes_the_workspace_choice(tmp_path):
    pages = {}
    for rule in ("im2col", "none"):
        path = tmp_path / f"{rule}.html"
        assert main(["export", "squeezenet", "--html", str(path), "--workspace", rule]) == 0
        pages[rule] = path.read_text()
    assert 'data-part="workspace"' in pages["im2col"] and "workspace (im2col)" in pages["im2col"]
    assert 'data-part="workspace"' not in pages["none"]  # a part of 0 bytes is left out


def test_fit_train_refuses_a_workspace_it_does_not_count(capsys):
    assert main(["fit", "squeezenet", "--budget", "1GiB", "--train",
                 "--workspace", "im2col"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphmem: --workspace is for inference") and err.count("\n") == 1
