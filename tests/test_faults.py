"""Issue 55's fault classes (tools/faults/fault_suite.py makes the reproducers): train checks a
model before onnx's version converter, which runs in a bounded process; local functions
are budgeted before onnx's inference inlines them."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import onnx
import pytest

from graphmem.errors import GraphmemError
from graphmem.frontend import function_budget
from graphmem.frontend.function_budget import MAX_INLINED_NODES, check_functions
from graphmem.frontend.reader import load
from graphmem.isolated import convert_version
from tools.faults import fault_suite


def _cli(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "graphmem", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("graphmem: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("case", [fault_suite.CONVERTER_CASES[i] for i in (0, 3, 9, 11)])
def test_train_checks_the_model_before_the_converter(tmp_path, case):
    p = tmp_path / "m.onnx"
    p.write_bytes(fault_suite.converter_model(*case))
    line = _one_line(_cli("train", p))
    assert "onnx.checker" in line and case[0] in line


def test_a_converter_crash_is_one_error_not_a_signal(tmp_path):
    # the converter itself, unchecked: it dies of SIGSEGV in its own process
    data = fault_suite.converter_model("Pad", "pads", 1, 2)
    with pytest.raises(GraphmemError, match="crashed"):
        convert_version(data, 17, "the model")


def test_the_converter_still_converts():
    m = onnx.helper.make_model(
        onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
                               [fault_suite.vi("x", fault_suite.F, [2])],
                               [fault_suite.vi("y", fault_suite.F, [2])]),
        opset_imports=[onnx.helper.make_opsetid("", 9)])
    out = onnx.ModelProto.FromString(convert_version(m.SerializeToString(), 17, "m"))
    assert out.opset_import[0].version == 17


def test_functions_within_the_budget_plan(tmp_path):
    p = tmp_path / "f.onnx"
    p.write_bytes(fault_suite.function_bomb(8))
    assert load(p).nodes


@pytest.mark.parametrize("make, message", [
    (lambda: fault_suite.function_bomb(22), "nodes once inlined"),
    (lambda: fault_suite.function_bomb(64), "calls deep"),
    (lambda: fault_suite.function_bomb(300), "calls deep"),
    (fault_suite.recursive_function, "calls itself"),
], ids=["2**21 nodes", "depth 64", "depth 300", "recursive"])
def test_function_bombs_are_refused_before_onnx(make, message):
    data = make()
    start = time.perf_counter()
    with pytest.raises(GraphmemError, match=message):
        check_functions(data)
    assert time.perf_counter() - start < 5  # counted, not inlined


def test_the_budget_is_the_inlined_node_count(monkeypatch):
    data = fault_suite.function_bomb(6)  # a call that inlines to 2**5 Relus
    monkeypatch.setattr(function_budget, "MAX_INLINED_NODES", 32)
    check_functions(data)
    monkeypatch.setattr(function_budget, "MAX_INLINED_NODES", 31)
    with pytest.raises(GraphmemError, match="more than 31 nodes"):
        check_functions(data)
    assert MAX_INLINED_NODES >= 1 << 20


@pytest.mark.parametrize("command", ["plan", "report", "verify", "train"])
def test_every_command_refuses_a_function_bomb_in_one_line(tmp_path, command):
    p = tmp_path / "bomb.onnx"
    p.write_bytes(fault_suite.function_bomb(40))
    start = time.monotonic()
    _one_line(_cli(command, p, cwd=tmp_path))
    assert time.monotonic() - start < 60


# --------------------------------------------------------------------------- signals

def _kill_finder(module: str, signum: int) -> str:
    """Python source that puts first an import finder sending the process ``signum``
    as ``module`` is first looked for."""
    return ("import os, sys\n"
            "class Kill:\n"
            "    @staticmethod\n"
            "    def find_spec(name, path=None, target=None):\n"
            f"        if name == {module!r}:\n"
            f"            os.kill(os.getpid(), {int(signum)})\n"
            "        return None\n"
            "sys.meta_path.insert(0, Kill)\n")


def _signal_when_imported(module: str, signum: int, tmp_path, model) -> subprocess.CompletedProcess:
    """``python -m graphmem plan`` (as runpy runs it) that sends itself ``signum`` as
    ``module`` is first looked for: inside the CLI's own imports or a command's."""
    script = (
        "import runpy\n" + _kill_finder(module, signum) +
        f"sys.argv = ['graphmem', 'plan', {str(model)!r}, '-o', 'p.json']\n"
        "runpy.run_module('graphmem', run_name='__main__', alter_sys=True)\n")
    # SIGINT as a terminal's Ctrl-C finds it: a suite started in the background of a
    # shell without job control has it ignored, and Python keeps it so (exit 0, lost)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _killed_on_import(tmp_path, module: str, signum: int):
    """A small model in ``tmp_path`` and an environment whose sitecustomize sends the
    process ``signum`` as it looks for ``module`` (an import the command makes)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_kill_finder(module, signum))
    model = tmp_path / "m.onnx"
    model.write_bytes(fault_suite.small_model())
    return model, dict(os.environ, PYTHONPATH=str(hook))


@pytest.mark.parametrize("module", ["graphmem.cli", "graphmem.streams", "numpy",
                                    "graphmem.commands.plan"])
@pytest.mark.parametrize("signum, code, line", [
    (2, 130, "graphmem: interrupted"), (15, 143, "graphmem: terminated")],
    ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_imports_is_answered_in_one_line(tmp_path, module, signum,
                                                             code, line):
    model = tmp_path / "m.onnx"
    model.write_bytes(fault_suite.small_model())
    proc = _signal_when_imported(module, signum, tmp_path, model)
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (code, [line]), proc.stderr
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("signum, code, line", [
    (2, 130, "graphmem: interrupted"), (15, 143, "graphmem: terminated")],
    ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_runpy_looks_for_graphmem_main_is_answered(tmp_path, signum, code,
                                                                  line):
    # the moment between the package's first line and its __main__'s: ``python -m
    # graphmem`` itself, sent the signal by a finder put first by a sitecustomize
    model, env = _killed_on_import(tmp_path, "graphmem.__main__", signum)
    proc = subprocess.run([sys.executable, "-m", "graphmem", "plan", str(model), "-o",
                           "p.json"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120, preexec_fn=_default_sigint)
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (code, [line]), proc.stderr
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("signum, code, line", [
    (2, 130, "graphmem: interrupted"), (15, 143, "graphmem: terminated")],
    ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_graphmem_script_imports_the_cli_is_answered(tmp_path, signum,
                                                                        code, line):
    # the installed script imports graphmem.cli before it calls entry(): the package
    # holds signals from its first line there too
    script = os.path.join(os.path.dirname(sys.executable), "graphmem")
    if not os.path.exists(script):
        pytest.skip(f"no graphmem script beside {sys.executable}")
    model, env = _killed_on_import(tmp_path, "graphmem.streams", signum)
    proc = subprocess.run([script, "plan", str(model), "-o", "p.json"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120, env=env,
                          preexec_fn=_default_sigint)
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (code, [line]), proc.stderr
    assert not (tmp_path / "p.json").exists()


def test_a_script_named_graphmem_that_imports_the_library_holds_nothing(tmp_path):
    script = tmp_path / "graphmem"
    script.write_text("import signal, graphmem\n"
                      "print(hasattr(graphmem, '_held'), signal.getsignal(signal.SIGTERM))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.split() == ["False", "0"], proc.stderr


@pytest.mark.parametrize("orig, starting", [
    (["python", "-m", "graphmem", "plan"], True),
    (["python", "-mgraphmem"], True),
    (["python", "-X", "importtime", "-Bm", "graphmem"], True),
    (["python", "-Ximporttime", "-W", "ignore", "-m", "graphmem"], True),
    (["python", "-m", "graphmem.cli"], False),
    (["python", "-m", "pytest"], False),
    (["python", "-c", "import graphmem"], False),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_the_package_knows_python_m_graphmem_is_starting(monkeypatch, orig, starting):
    import graphmem
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setattr(sys, "orig_argv", orig)
    assert graphmem._cli_starting() is starting
    monkeypatch.setattr(sys, "argv", ["prog"])  # a library import: never
    assert graphmem._cli_starting() is False


def test_a_signal_as_the_process_exits_is_answered():
    # os._exit is one instruction: a signal during it would pass unanswered; the last
    # step blocks both and answers one pending
    script = ("import os, signal, sys\n"
              "from graphmem import cli\n"
              "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
              "os.kill(os.getpid(), signal.SIGTERM)\n"
              "os._exit(cli._last_signal(0))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stderr.strip()) == (143, "graphmem: terminated")


def test_the_signal_campaign_tells_a_process_that_ended_from_a_lost_signal():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    while fault_suite._state(proc.pid) not in ("Z", None):
        time.sleep(0.01)
    assert fault_suite.send_exactly(proc, signal.SIGTERM) is False
    proc.wait()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert fault_suite.send_exactly(proc, signal.SIGTERM) is True
        assert proc.wait(timeout=60) == -signal.SIGTERM
    finally:
        proc.kill()


# ------------------------------------------------------------------------ output faults

def _small(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(fault_suite.small_model())
    return p


@pytest.mark.parametrize("command", ["plan", "report", "train", "models"])
def test_stdout_on_a_full_device_is_one_line_and_exit_74(tmp_path, command):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    args = [command] if command == "models" else [command, _small(tmp_path)]
    if command == "plan":
        args += ["-o", tmp_path / "p.json"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "graphmem", *map(str, args)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 74, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "graphmem: cannot write the output to stdout: no space left on device"]


def test_a_closed_stdout_is_one_line_and_exit_74(tmp_path):
    proc = subprocess.run(f'"{sys.executable}" -m graphmem report "{_small(tmp_path)}" >&-',
                          shell=True, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 74, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "graphmem: cannot write the output to stdout: it is closed"]


@pytest.mark.parametrize("command", ["report", "verify"])
def test_a_broken_pipe_is_one_line_and_verify_keeps_its_verdict(tmp_path, command):
    model = _small(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "graphmem", command, str(model)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader goes away before anything is written (| head)
    _, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert lines == ["graphmem: cannot write the output to stdout: its reader closed "
                     "the pipe"], err
    assert proc.returncode == (0 if command == "verify" else 74)


@pytest.mark.parametrize("limit", [600 << 20, 900 << 20])
def test_running_out_of_memory_is_one_line(tmp_path, limit):
    p = tmp_path / "flood.onnx"
    p.write_bytes(fault_suite.flood(2_000_000))
    proc = fault_suite.run_one(fault_suite.command("plan", p, tmp_path), tmp_path, limit)
    assert fault_suite.outcome(proc) == "one line, exit 2", proc.stderr


# ------------------------------------------------- --recompute optimal at its time limit

def test_the_program_stopped_by_its_time_limit_still_gives_a_choice(monkeypatch):
    from test_training import _widening_chain
    from graphmem.training import optimal
    from graphmem.training.build import build_training
    from graphmem.training.cuts import cuts, segment_model
    tg = build_training(_widening_chain(), 8, loss="sum")
    model = segment_model(tg, cuts(tg))
    chosen, info = optimal.solve(model, time_limit=0.0)
    assert chosen is not None and "Time limit" in info["status"], info
    peak, _ = optimal.evaluate(model, chosen)
    assert peak == info["modelled_peak_bytes"] and 0 <= info["mip_gap"]


def test_train_recompute_optimal_under_a_tiny_limit_returns_a_plan(tmp_path, capfd,
                                                                     monkeypatch):
    import json
    import onnx as _onnx
    from test_training import _widening_chain
    from graphmem.cli import main
    from graphmem.training import optimal
    monkeypatch.setattr(optimal, "TIME_LIMIT", 0.0)
    path = tmp_path / "chain.onnx"
    _onnx.save(_widening_chain(), str(path))
    assert main(["train", str(path), "--batch", "8", "--loss", "sum",
                 "--recompute", "optimal", "--json"]) == 0
    captured = capfd.readouterr()
    out = json.loads(captured.out)
    assert out["arena_bytes"] <= out["chen_arena_bytes"]
    assert "--recompute optimal: HiGHS stopped before proving its choice" in captured.err
    assert "Time limit" in out["optimal"]["status"]


def test_no_choice_found_leaves_the_heuristic_cuts_with_a_note(monkeypatch, capsys):
    from test_training import _widening_chain
    from graphmem import notes
    from graphmem.training import optimal
    from graphmem.training.build import build_training
    from graphmem.training.recompute import recompute_planned
    tg = build_training(_widening_chain(), 8, loss="sum")
    monkeypatch.setattr(optimal, "solve", lambda model, limit=None: (
        None, {"status": "Time limit reached", "solve_seconds": 1.0}))
    notes.clear()
    try:
        info = recompute_planned(tg, "sgd", 8, optimal=True).info
        notes.flush()
    finally:
        notes.drop()
    assert info["optimal"]["status"] == "Time limit reached"
    assert "the heuristic cuts (sqrt, balanced) are used" in capsys.readouterr().err


# ------------------------------------------------------------------- smaller refusals

@pytest.mark.parametrize("make, says", [
    (lambda d: "/dev/zero", "is a device, not a plan file"),
    (lambda d: os.mkfifo(d / "p.json") or d / "p.json", "is a FIFO, not a plan file"),
    (lambda d: (d / "p.json").mkdir() or d / "p.json", "is a folder, not a plan file"),
    (lambda d: d / "none.json", "no such plan file"),
], ids=["/dev/zero", "FIFO", "folder", "missing"])
def test_a_plan_that_is_not_a_file_says_what_it_is(tmp_path, capsys, make, says):
    from graphmem.cli import main
    model = _small(tmp_path)
    plan = make(tmp_path)
    assert main(["verify", str(model), "--plan", str(plan)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_verify_refuses_the_plan_of_another_model(tmp_path, capsys):
    """A plan without a graph digest (written before graphmem recorded one) is refused by
    the model its "model" field names; a plan with one is judged by the digest alone, so
    the same graph under another name is its graph."""
    import json
    from graphmem.cli import main
    model = _small(tmp_path)
    other = tmp_path / "other.onnx"
    other.write_bytes(model.read_bytes())
    assert main(["plan", str(model), "-q", "-o", str(tmp_path / "p.json")]) == 0
    old = json.loads((tmp_path / "p.json").read_text())
    assert old.pop("graph").startswith("sha256:")
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert main(["verify", str(model), "--plan", str(tmp_path / "old.json")]) == 0
    capsys.readouterr()
    assert main(["verify", str(other), "--plan", str(tmp_path / "old.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "made for another model, 'm.onnx'" in err[0], err
    assert main(["verify", str(other), "--plan", str(tmp_path / "p.json")]) == 0


def test_a_dimension_bound_to_zero_is_named(capsys):
    from pathlib import Path
    from graphmem.cli import main
    bert = Path(__file__).parent / "data" / "corpus" / "bert-ts.onnx"
    assert main(["report", str(bert), "--dim", "seq=0", "--dim", "batch=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graphmem: seq=0: with a dimension bound "
                                               "to 0"), err
    assert "IndexError" not in err[0]


# ------------------------------------------------------------------------- the suite

def test_ci_runs_the_heavy_stage_then_the_readmes_test_command_last():
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    lines = [ln.strip() for ln in (root / ".ci" / "run").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    readme = (root / "README.md").read_text()
    assert "pip install -e '.[dev]' && python -m pytest -q" in readme
    assert lines[-1] == "python -m pytest -q"
    assert any(ln.startswith("timeout ") and ln.endswith("python -m pytest -q -m heavy")
               for ln in lines[:-1])
    pyproject = (root / "pyproject.toml").read_text()
    assert "addopts = \"-m 'not slow and not heavy'\"" in pyproject
    # the heavy marker selects the sanitizers and the fuzz replays (a stage that selects
    # nothing would exit 5)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-m",
                           "heavy", "tests/test_sanitizers.py", "tests/test_hostile_models.py"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and " collected" in proc.stdout, proc.stdout[-2000:]


def test_train_reads_a_node_flood_as_plan_does(tmp_path):
    # 3 M empty nodes: train checked the file only after protobuf had parsed and
    # copied it (a SIGSEGV under a 2 GB limit); now the compiled reader refuses it first
    p = tmp_path / "flood.onnx"
    p.write_bytes(fault_suite.node_flood(200_000))
    line = _one_line(_cli("train", p))
    assert "node 0" in line and "no op type" in line
