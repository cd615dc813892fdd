"""Output for its readers: every user-facing line in words a deployment engineer reads,
not the planner's internal field names; sizes in the unit that reads best."""
from __future__ import annotations

import re

from graphmem.cli import main
from graphmem.commands.pass_words import describe

# the passes' internal report fields, which the summary must not print as such
INTERNAL = ("file_peak", "match_range", "total_bytes", "share_bytes", "copy_bytes_saved",
            "reordered", "method ", "greedy_by", "sunk helpers", "proven_optimal",
            "lower_bound", "arena_with", "arena_without")


def test_plan_summary_says_what_each_pass_did_in_words(tmp_cwd, capsys):
    assert main(["plan", "shufflenet", "-o", "p.json"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split("│")[1].strip(): ln.split("│")[4] for ln in out.splitlines()
            if ln.startswith("│") and "pass " in ln.split("│")[1]}
    assert set(rows) == {"pass reorder", "pass concat", "pass inplace", "pass share",
                         "pass place"}
    for field in INTERNAL:
        assert field not in out, field
    assert "exact search" in rows["pass reorder"] and "new order used" in rows["pass reorder"]
    assert re.search(r"peak [\d.]+ MiB in the model's order, [\d.]+ MiB in the order found",
                     rows["pass reorder"])
    assert "Concat nodes built in place" in rows["pass concat"]
    assert "ops write over its input" in rows["pass inplace"]
    assert "placement: largest buffer first" in rows["pass place"]
    # a size column in the unit that reads best, not always MiB
    assert re.search(r"┃\s+size ┃", out) and "MiB ┃" not in out
    assert re.search(r"│\s+-[\d.]+ KiB │", out)  # the reorder pass saved 220.50 KiB


def test_describe_words_each_pass_and_keeps_unknown_fields():
    assert describe("reorder", {"method": "floor", "file_peak": 7225344, "peak": 7225344,
                                "bound": 7225344, "reordered": False}) == (
        "the model's own order already meets the lowest peak any order can have, "
        "peak 6.89 MiB, model's order kept")
    assert describe("inplace", {"views": 1, "inplace": 1}) == (
        "1 op writes over its input, 1 output shares its input's memory (a view)")
    assert describe("share", {"blocks": 6, "match_range": 16, "total_bytes": 9838528}) == (
        "6 shared storage blocks, 9.38 MiB in all (MXNet's pool; a buffer reuses a block "
        "up to 16x its size)")
    assert describe("concat", {"concats": 0, "slices": 0, "copy_bytes_saved": 0,
                               "arena_with_concat": 10, "arena_without_concat": 8,
                               "kept": False}) == (
        "no Concat written in place, not used: the arena is smaller without it "
        "(8 B against 10 B)")
    # a field no words were written for is still shown, readably
    assert describe("newpass", {"pad_bytes": 2048, "moves": 3}) == "pad bytes 2.00 KiB, moves 3"


def test_training_peak_names_a_recomputed_layer_by_its_model_name():
    """A recomputed copy (r:87.76) is named after the model's layer it recomputes,
    never by the built graph's internal node name."""
    from types import SimpleNamespace as NS

    from graphmem.training.names import node_names
    graph = NS(nodes=[NS(name="f:87", op_type="Conv", reads=(), outputs=("x",)),
                      NS(name="r:87.76", op_type="Conv", reads=(), outputs=("x@rc.76",)),
                      NS(name="f:88", op_type="ReduceSum", reads=("x",), outputs=("loss",)),
                      NS(name="b:89", op_type="Expand", reads=("loss",), outputs=("d",))],
               weights={})
    names = node_names(graph, {"f:87": "conv1"})
    # a node the step adds (the loss) is named by its op, never f:88
    assert names == {"f:87": "conv1", "r:87.76": "conv1 (recomputed)",
                     "f:88": "ReduceSum of the step",
                     "b:89": "backward of ReduceSum of the step"}


# ---------------------------------------------------------------- progress through a pipe

def test_probe_through_a_pipe_shows_progress_with_a_fraction_early():
    """`graphmem probe | cat`: a progress line on stderr while it runs (it printed
    nothing for its whole run), with the cases done of the total, the first of them
    before the run is over (k < n) and before the table."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "GRAPHMEM_PROGRESS_AFTER"}
    proc = subprocess.Popen([sys.executable, "-m", "graphmem", "probe", "--ops",
                             "Relu,Add,Sub,Mul,Sigmoid,Tanh,Neg,Abs,Exp,Sqrt"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    first = proc.stderr.readline()  # blocks until the first line, or the end
    rest_err = proc.stderr.read()
    out = proc.stdout.read()
    assert proc.wait(timeout=300) in (0, 1), rest_err
    m = re.fullmatch(r"graphmem: probe: running each in-place kernel on ONNX Runtime "
                     r"\(cpu\), (\d+) of (\d+) cases, (\d+) s\n", first)
    assert m, first
    assert int(m.group(1)) < int(m.group(2)), first
    assert "in-place kernels on cpu" in out


def test_progress_names_the_stage_of_how_many(monkeypatch, capsys):
    import time

    from graphmem.commands import progress
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.05)
    monkeypatch.setenv("GRAPHMEM_PROGRESS_AFTER", "0")  # the first line at once
    with progress.Progress("train", terminal=False, stages=3) as p:
        p("reading the model")
        time.sleep(0.15)
        p("planning the step")
        p.callback()("placement")
        time.sleep(0.15)
    lines = capsys.readouterr().err.splitlines()
    assert any(ln.startswith("graphmem: train: stage 1 of 3: reading the model, ")
               for ln in lines), lines
    assert any(ln.startswith("graphmem: train: stage 2 of 3: planning the step, "
                             "placement, ") for ln in lines), lines


# ---------------------------------------------------------------- the zoo note

def test_the_zoo_note_comes_first_and_quiet_silences_it(tmp_cwd, capfd):
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "graphmem", "plan", "squeezenet", "-o", "-"],
                         capture_output=True, text=True)
    assert run.returncode == 0
    err = run.stderr.splitlines()
    assert "onnx's light copy of the Model Zoo graph" in err[0], err[:2]
    assert "graphmem plan: squeezenet.onnx" in run.stderr  # the summary after it
    # on one terminal-like stream (2>&1) the note comes before the plan's output
    both = subprocess.run([sys.executable, "-m", "graphmem", "fit", "squeezenet",
                           "--budget", "64MiB"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    lines = both.stdout.splitlines()
    assert "light copy" in lines[0] and lines[1].startswith("batch "), lines
    quiet = subprocess.run([sys.executable, "-m", "graphmem", "plan", "squeezenet", "-q",
                            "-o", "p.json"], capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""


def test_place_help_states_the_search_budget_it_uses():
    from graphmem.cli import build_parser
    from graphmem.passes.placement.buffers import DEFAULT_NODES
    text = build_parser(["place"]).commands.choices["place"].format_help()
    assert f"(default {DEFAULT_NODES:,};" in " ".join(text.split())
    assert "place_buffers" not in text


# ---------------------------------------------------------------- HTML axes

def test_range_report_plots_bytes_on_a_linear_dim_axis():
    """report --dim seq=1..4096 --html: a dim's axis is linear (a log axis made memory
    that grows linearly look explosive), its ticks round, the bytes axis in one unit."""
    from graphmem.commands.ranges_html import _plot, _size_ticks, _ticks
    assert _ticks(1, 4096) == [1, 1000, 2000, 3000, 4096]
    assert _size_ticks(8.6 * 2 ** 20) == [k * 2 * 2 ** 20 for k in range(5)]
    rows = [{"seq": s, "arena": 1000 * s} for s in (1, 64, 1024, 2048, 4096)]
    svg = _plot(rows, "seq", {}, None)
    assert "log scale" not in svg
    xs = [float(v) for v in re.findall(r"[ML](-?[\d.]+),", svg)]
    # equal steps of seq are equal steps of x: 2048 halfway between 0 and 4096's ends
    assert abs((xs[3] - xs[0]) - (xs[4] - xs[3])) < 0.5 + (xs[4] - xs[0]) * 1 / 4095
    assert ">4,096</text>" in svg and "MiB</text>" in svg


def test_models_says_what_the_zoo_graphs_are_before_the_list(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert out.index("light") < out.index("resnet50")
    assert main(["models", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "light\" copies" not in out and "resnet50" in out


def test_the_first_progress_line_comes_after_a_second_unless_told(monkeypatch):
    from graphmem.commands import progress
    monkeypatch.delenv("GRAPHMEM_PROGRESS_AFTER", raising=False)
    assert progress.first_line_after() == 1.0
    monkeypatch.setenv("GRAPHMEM_PROGRESS_AFTER", "30")
    assert progress.first_line_after() == 30.0


def test_plan_through_a_pipe_numbers_the_pass_under_way(monkeypatch, capsys):
    import time
    from argparse import Namespace

    from graphmem.commands import progress
    from graphmem.commands.common import stages
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.05)
    monkeypatch.setenv("GRAPHMEM_PROGRESS_AFTER", "0")  # the first line at once
    with stages(Namespace(command="plan"), "planning", ["reorder", "concat", "place"]) as stage:
        stage("pass concat (without concat)")
        time.sleep(0.2)
    lines = capsys.readouterr().err.splitlines()
    assert any(ln.startswith("graphmem: plan: planning, pass 2 of 3: concat (without "
                             "concat), ") for ln in lines), lines


def test_fit_search_says_how_many_plans_are_left():
    from graphmem.commands.fit import search_part
    assert search_part(1, {}, 100) == "planning batch 1, plan 1 (doubling the batch)"
    assert search_part(4, {1: 10, 2: 20}, 100) == \
        "planning batch 4, plan 3 (doubling the batch: 2 fits)"
    # 64 fits, 128 does not: 6 more bisections close the gap of 64
    totals = {1: 1, 2: 2, 4: 4, 8: 8, 16: 16, 32: 32, 64: 64, 128: 128}
    assert search_part(96, totals, 100) == \
        "planning batch 96, plan 9 of about 14 (64 fits, 128 does not)"


def test_a_refused_input_is_one_line_even_after_the_first_progress_line_is_due(tmp_path):
    """Through a pipe, progress waits until the model is read and a saved plan checked
    against it: a refusal that takes longer than the first line's second (here: reading
    slowed by 1.5 s) is still the command's one line."""
    import json
    import os
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "graphmem", "models", "--write", str(tmp_path),
                    "--quiet"], check=True, capture_output=True)
    model = tmp_path / "squeezenet.onnx"
    bad = tmp_path / "bad.plan.json"
    bad.write_text(json.dumps({"format": "graphmem.plan/1", "model": "squeezenet.onnx"}))
    good = tmp_path / "good.plan.json"
    subprocess.run([sys.executable, "-m", "graphmem", "plan", str(model), "-o", str(good),
                    "--quiet"], check=True, capture_output=True)
    other = json.loads(good.read_text())
    other["graph"] = "sha256:" + "0" * 64
    wrong = tmp_path / "other.plan.json"
    wrong.write_text(json.dumps(other))
    env = {**os.environ, "GRAPHMEM_PROGRESS_AFTER": "0"}
    slow = ("import sys, time, graphmem.commands.common as c\n"
            "def slowed(f):\n"
            "    def late(*a, **k):\n"
            "        time.sleep(1.5)\n"
            "        return f(*a, **k)\n"
            "    return late\n"
            "c.Plan.load = slowed(c.Plan.load)\n"
            "c.ModelSource.load = slowed(c.ModelSource.load)\n"
            "from graphmem.cli import main; sys.exit(main(sys.argv[1:]))\n")
    for plan, says in ((bad, "plan"), (wrong, "another graph")):
        out = subprocess.run([sys.executable, "-c", slow, "verify", str(model), "--plan",
                              str(plan)], capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 2, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert says in out.stderr
    out = subprocess.run([sys.executable, "-c", slow, "verify", str(model), "--plan",
                          str(good)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr  # the hold does not stop a good plan


def test_progress_lines_start_once_the_input_is_accepted(monkeypatch, capsys):
    import time

    from graphmem.commands import progress
    monkeypatch.setenv("GRAPHMEM_PROGRESS_AFTER", "0")
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.05)
    progress.hold()
    try:
        with progress.Progress("plan", terminal=False) as p:
            p("reading the model")
            time.sleep(0.4)
            assert capsys.readouterr().err == ""
            progress.accept()
            time.sleep(0.4)
    finally:
        progress.accept()
    assert "graphmem: plan: stage 1: reading the model, " in capsys.readouterr().err
