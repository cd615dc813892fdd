"""Issue 36: one vocabulary, the whole footprint (inference and a training step),
`fit --train`, `--precision`, progress on long commands, full-width tables."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from hypothesis import given, strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.analysis.fitsearch import largest_fitting
from graphmem.cli import main
from graphmem.plan.format import Plan
from conftest import make_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_training import tiny_model  # noqa: E402

F = TensorProto.FLOAT


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model("Relu"), str(path))
    return str(path)


def train_json(capsys, *argv) -> dict:
    assert main(["train", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- one vocabulary

def test_the_unaliased_peak_is_no_bound_and_old_plans_still_read(tmp_path):
    """resnet50: the unaliased peak (9.19 MiB) is above the arena (6.89): it is named as
    what it is. A plan written with the old key reads under the new name and is checked."""
    from graphmem.frontend.zoo import zoo_path
    graph = graphmem.load(zoo_path("resnet50"))
    plan = graphmem.plan_graph(graph).plan
    assert "lower_bound_bytes" not in plan.stats
    assert plan.stats["unaliased_peak_bytes"] > plan.arena_bytes
    old = json.loads(plan.to_json())
    old["stats"]["lower_bound_bytes"] = old["stats"].pop("unaliased_peak_bytes")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    back = Plan.load(path)
    assert back.stats == plan.stats
    graphmem.validate(back, graph)
    old["stats"]["lower_bound_bytes"] += 64  # a wrong old value is caught under the new name
    path.write_text(json.dumps(old))
    with pytest.raises(graphmem.PlanInvalid, match="stats.unaliased_peak_bytes"):
        graphmem.validate(Plan.load(path), graph)


def test_plan_summary_says_what_each_figure_is_and_passes_keep_one_sign(tmp_cwd, capsys):
    assert main(["plan", "resnet50", "-o", "p.json"]) == 0
    out = capsys.readouterr().out
    assert "lower bound" not in out and "unaliased peak" in out
    rows = [ln for ln in out.splitlines() if "pass inplace" in ln]
    cells = [c.strip() for c in rows[0].split("│")]
    assert cells[2].startswith("-") and cells[3].startswith("-"), rows[0]  # bytes and MiB


def test_the_exact_placement_reports_a_bound_on_the_arena_it_keeps():
    """densenet121 --placement optimal: the heuristic with Concat slices (7,225,344) beats
    the exact placement of whole Concat groups (7,626,752, its own bound): the bound
    printed is the aliased peak, which holds for the arena kept, and the gap is to it."""
    from graphmem.commands.plan import placement_bound

    class P:  # what placement_bound reads of a plan
        arena_bytes = 7_225_344
        stats = {"aliased_peak_bytes": 7_225_344}
    kept_heuristic = {"strategy": "greedy_by_breadth", "proven_optimal": False,
                      "lower_bound": 7_626_752, "gap": 0.0,
                      "tried": {"greedy_by_size": 7_626_752, "optimal": 7_626_752}}
    b = placement_bound(kept_heuristic, P)
    assert b["bound_bytes"] == 7_225_344 <= P.arena_bytes and b["proven"] and b["gap"] == 0
    P.stats = {"aliased_peak_bytes": 7_000_000}
    b = placement_bound(kept_heuristic, P)
    assert b["bound_bytes"] == 7_000_000 and not b["proven"]
    assert b["gap"] == pytest.approx((7_225_344 - 7_000_000) / 7_225_344)
    solver_kept = {"strategy": "optimal", "proven_optimal": False, "lower_bound": 7_100_000,
                   "gap": 0.017}
    b = placement_bound(solver_kept, P)
    assert b["bound_bytes"] == 7_100_000 and not b["proven"]
    for detail in (kept_heuristic, solver_kept):  # never a bound above the arena
        assert placement_bound(detail, P)["bound_bytes"] <= P.arena_bytes


def test_report_names_layers_the_same_everywhere(capsys):
    """The peak and the per-layer table name a layer by op, name, step and node; the
    JSON peak has the same label."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first_relu"),
             helper.make_node("Sigmoid", ["a"], ["b"], name="gate"),
             helper.make_node("Mul", ["a", "b"], ["y"], name="swish_mul")]
    model = make_model(nodes, [("x", F, [2, 64])], [("y", F, [2, 64])])
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"names_{os.getpid()}.onnx"
    onnx.save(model, str(path))
    try:
        assert main(["report", str(path), "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        p = d["peak"]
        assert p["layer"] == f"{p['op']} '{p['name']}' (step {p['step']}, node {p['node']})"
        assert [r["name"] for r in d["layers"]] == ["first_relu", "gate", "swish_mul"]
        assert main(["report", str(path)]) == 0
        out = capsys.readouterr().out
        assert f"live at {p['layer']}" in out
        assert "swish_mul" in out and "first_relu" in out  # the per-layer table's names
    finally:
        path.unlink()


def test_report_footprint_adds_up_and_binds_a_symbolic_batch(tmp_path, capsys):
    """The whole footprint: weights, workspace, arena, their sum the total; a batch
    dimension no --dim binds is bound to the first --batch, as fit and train do."""
    w = numpy_helper.from_array(__import__("numpy").ones([8, 4, 3, 3], "float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [("x", F, ["batch", 4, "side", "side"])],
                       [("y", F, ["batch", 8, "side", "side"])], [w])
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    assert main(["report", str(path), "--dim", "side=16", "--batch", "2,8", "--json",
                 "--budget", "1MiB"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["bindings"] == {"batch": 2, "side": 16} and d["batch"] == 2
    fp, t = d["footprint"], d["totals"]
    assert [p["key"] for p in fp["parts"]] == ["weights", "workspace", "arena"]
    assert sum(p["bytes"] for p in fp["parts"]) == fp["total_bytes"] == t["total_bytes"]
    assert [r["batch"] for r in d["whatif"]] == [2, 8] and d["budget_bytes"] == 2 ** 20
    assert main(["report", str(path), "--dim", "side=16", "--json"]) == 0  # batch 1
    assert json.loads(capsys.readouterr().out)["bindings"]["batch"] == 1


# ---------------------------------------------------------------- the training step

def test_train_json_has_the_step_total_and_what_it_counted(tiny, capsys):
    d = train_json(capsys, tiny, "--batch", "4", "--loss", "sum")
    assert d["step_bytes"] == (d["weight_bytes"] + d["master_weight_bytes"]
                               + d["optimizer_bytes"] + d["constant_bytes"] + d["arena_bytes"])
    assert (d["optimizer"], d["loss"], d["precision"]) == ("adam", "sum", "fp32")
    assert d["kept_for_backward_bytes"] <= d["arena_bytes"]
    fp = d["footprint"]
    assert sum(p["bytes"] for p in fp["parts"]) == fp["total_bytes"] == d["step_bytes"]
    keys = [p["key"] for p in fp["parts"]]
    assert keys[:2] == ["weights", "optimizer"] and "kept" in keys and "backward" in keys
    # the peak and its rows named by layer, never by onnx-ad's node or tensor names
    assert not re.search(r"'[fbr]:\d+'", d["peak"]["layer"])
    assert all(not re.search(r"'[fbr]:\d+'", h["layer"]) for h in d["peak"]["helpers"])
    assert "sunk" not in d["order_words"]


def test_offload_changes_the_step_total(tiny, capsys, monkeypatch):
    # at batch 8 offloading lowers tiny's arena as the heuristics place it (24,000 ->
    # 23,488 bytes; at batch 4 the plan is at 11,968 bytes with or without it). The
    # placement search finds 23,488 without offloading, so it is turned off here: the
    # test needs a step whose total offloading changes
    from graphmem.passes.placement import algorithm
    monkeypatch.setattr(algorithm, "SEARCH_NODES", 0)
    plain = train_json(capsys, tiny, "--batch", "8", "--loss", "sum")
    off = train_json(capsys, tiny, "--batch", "8", "--loss", "sum", "--offload",
                     "--offload-min", "0")
    assert off["offload_arena_bytes"] < off["arena_bytes"] == plain["arena_bytes"]
    assert off["step_bytes_without_offload"] == plain["step_bytes"]
    assert off["step_bytes"] == plain["step_bytes"] - plain["arena_bytes"] \
        + off["offload_arena_bytes"]
    assert off["footprint"]["total_bytes"] == off["step_bytes"]


def test_mixed_precision_halves_activations_and_keeps_fp32_optimizer_state(tiny, capsys):
    fp32 = train_json(capsys, tiny, "--batch", "8", "--loss", "sum")
    mixed = train_json(capsys, tiny, "--batch", "8", "--loss", "sum", "--precision", "mixed")
    half = train_json(capsys, tiny, "--batch", "8", "--loss", "sum", "--precision", "bf16")
    assert mixed["precision"] == "mixed"
    assert mixed["arena_bytes"] < fp32["arena_bytes"]
    assert mixed["kept_for_backward_bytes"] < fp32["kept_for_backward_bytes"]
    assert mixed["optimizer_bytes"] == fp32["optimizer_bytes"]  # float32 Adam state
    assert mixed["master_weight_bytes"] == fp32["weight_bytes"] == 2 * mixed["weight_bytes"]
    assert mixed["gradient_bytes"] * 2 == fp32["gradient_bytes"]
    assert half["optimizer_bytes"] * 2 == fp32["optimizer_bytes"]  # state in bfloat16
    assert half["master_weight_bytes"] == 0 and half["arena_bytes"] == mixed["arena_bytes"]


def test_train_text_defines_kept_for_backward(tiny, capsys):
    assert main(["train", tiny, "--batch", "4", "--loss", "sum"]) == 0
    out = capsys.readouterr().out
    assert "kept for backward" in out and "forward tensors backward reads" in out
    assert "step total" in out and "loss: sum of the output" in out
    assert "whole footprint: training step, batch 4" in out
    assert not re.search(r"\b[fb]:\d+\b", out) and "sunk helpers" not in out


# ---------------------------------------------------------------- fit --train

def test_fit_train_answers_a_batch_whose_next_does_not_fit(tiny, capsys):
    budget = 300_000
    assert main(["fit", tiny, "--train", "--budget", str(budget), "--loss", "sum",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    b = d["batch"]
    assert b > 2 and d["total_bytes"] <= budget < d["next_total_bytes"]
    tried = {t["batch"]: t["step_bytes"] for t in d["tried"]}
    assert tried[b] == d["total_bytes"] and tried[b + 1] == d["next_total_bytes"]
    assert len(d["tried"]) <= 6  # a line through the probes, not a doubling search
    # the answer is train's own total at b, and at b + 1 it is over
    assert train_json(capsys, tiny, "--batch", str(b), "--loss", "sum")["step_bytes"] \
        == d["total_bytes"]
    assert train_json(capsys, tiny, "--batch", str(b + 1), "--loss", "sum")["step_bytes"] \
        > budget
    assert main(["fit", tiny, "--train", "--budget", str(budget), "--loss", "sum",
                 "--precision", "mixed"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tried (each batch a planned training step):")
    assert "mixed" in out and re.search(r"training batch (\d+) fits", out)
    assert int(re.search(r"training batch (\d+) fits", out).group(1)) > b


@given(fixed=st.integers(0, 10 ** 6), slope=st.integers(1, 10 ** 4),
       wobble=st.integers(0, 50), budget=st.integers(0, 10 ** 8))
def test_largest_fitting_is_the_edge(fixed, slope, wobble, budget):
    def total(b):  # increasing, not quite linear
        return fixed + slope * b + (b * 7919 % 13) * wobble // 13 + wobble * b // 5
    got = largest_fitting(total, budget)
    b = got["batch"]
    if b == 0:
        assert total(1) > budget
    else:
        assert total(b) <= budget < total(b + 1)
        assert [b, total(b)] in got["probed"] and [b + 1, total(b + 1)] in got["probed"]
        assert len(got["probed"]) <= 2 * (b.bit_length() + 3)


# ---------------------------------------------------------------- progress and width

@pytest.mark.heavy  # a latency bound on the wall clock: a loaded machine misses it
def test_train_on_a_terminal_shows_progress_within_two_seconds(tiny):
    import pty
    import select
    master, slave = pty.openpty()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "graphmem", "train", tiny, "--batch", "2",
                             "--loss", "sum"], stdin=slave, stdout=subprocess.DEVNULL,
                            stderr=slave, close_fds=True)
    os.close(slave)
    seen, first = b"", None
    try:
        while first is None and time.monotonic() - start < 60:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
                if b"graphmem: train:" in seen:
                    first = time.monotonic() - start
    finally:
        proc.wait(timeout=120)
        os.close(master)
    assert first is not None and first < 2.0, (first, seen[-300:])


def test_progress_lines_through_a_pipe(tiny, capsys, monkeypatch):
    from graphmem.commands import progress
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.0)
    monkeypatch.setenv("GRAPHMEM_PROGRESS_AFTER", "0")  # the first line at once
    assert main(["train", tiny, "--batch", "2", "--loss", "sum", "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # stdout is the JSON alone
    lines = err.strip().splitlines()
    # a timed line names the stage under way (which one a tick lands in depends on the
    # machine's load: any stage of train's)
    assert any(re.match(r"graphmem: train: .+, \d+ s$", ln) for ln in lines), lines[:5]


def test_tables_keep_their_width_in_a_file(tmp_path):
    out = subprocess.run([sys.executable, "-m", "graphmem", "models"], capture_output=True,
                         text=True, check=True).stdout
    assert "light" in out and "ConstantOfShape" in out
    assert max(map(len, out.splitlines())) > 120  # not cut at 80 columns
    assert "…" not in out
