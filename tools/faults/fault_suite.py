"""Issue 55's fault classes as reproducers, and a campaign that runs every command on them.

Classes (each a function that makes the files): ``converter`` -- models whose nodes carry
wrong-typed attributes, at an old opset, with a trainable weight, so that ``train`` would
hand them to onnx's version converter (which crashed on them: SIGSEGV); ``functions`` --
local functions calling each other twice per level (2**depth nodes once inlined) and a
function calling itself; ``floods`` -- a 6 MB file of 3 M empty subgraphs; ``output``
-- every command (plan, report, verify, train, fit, export, probe, models, place) with
its stdout on /dev/full, closed, and a pipe whose reader has gone.

    python -m tools.faults.fault_suite run [--out DIR]      # every command on every file
    python -m tools.faults.fault_suite signals MODEL --runs N --commands plan,verify,train
    python -m tools.faults.fault_suite signals MODEL --commands plan:60,verify:60,train:20

prints, per class and command, how the runs ended (one line exit 2, plan, traceback,
several lines, signal, timeout). Each run is limited to 2 GB of address space and 60 s.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tools import ROOT

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info

# (op, attribute, wrong value, opset): an attribute of another type than the schema's
CONVERTER_CASES = [
    ("Pad", "pads", 1, 2), ("Pad", "pads", "one", 2), ("Pad", "mode", 3, 2),
    ("Squeeze", "axes", "abc", 11), ("Squeeze", "axes", 1.5, 11), ("Squeeze", "axes", 1, 11),
    ("Unsqueeze", "axes", 1.5, 11), ("Unsqueeze", "axes", "x", 11),
    ("ReduceSum", "axes", "a", 11), ("ReduceMean", "axes", 2.0, 11),
    ("ReduceMax", "keepdims", "yes", 11), ("Split", "split", 2, 11),
    ("Split", "axis", "z", 11), ("Softmax", "axis", 1.0, 11),
    ("Transpose", "perm", 1, 9), ("Concat", "axis", "q", 9),
    ("Gemm", "transB", 1.0, 9), ("LeakyRelu", "alpha", "a", 9),
]


def converter_model(op: str, attr: str, value, opset: int) -> bytes:
    """x -> Mul by a weight W -> ``op`` with ``attr`` set to ``value`` -> y, at ``opset``
    (IR version 6): the model a user trains, with one wrong-typed attribute."""
    w = numpy_helper.from_array(np.ones([1, 3, 4, 4], np.float32), "W")
    node = helper.make_node(op, ["h"] + (["h"] if op in ("Concat", "Gemm") else []), ["y"])
    node.attribute.append(helper.make_attribute(attr, value))
    g = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["h"]), node], "g",
                          [vi("x", F, [1, 3, 4, 4])], [vi("y", F, [1, 3, 4, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 6
    return m.SerializeToString()


def function_bomb(depth: int, *, weight: bool = True) -> bytes:
    """Local functions f0..f{depth-1}, each f{i} calling f{i-1} twice: one call of the
    last is 2**(depth-1) Relus once inlined."""
    funcs = []
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    for i in range(depth):
        nodes = ([helper.make_node("Relu", ["a"], ["b"])] if i == 0 else
                 [helper.make_node(f"f{i - 1}", ["a"], ["t"], domain="local"),
                  helper.make_node(f"f{i - 1}", ["t"], ["b"], domain="local")])
        funcs.append(helper.make_function("local", f"f{i}", ["a"], ["b"], nodes, opsets))
    nodes = [helper.make_node("Mul", ["x", "W"], ["h"]),
             helper.make_node(f"f{depth - 1}", ["h"], ["y"], domain="local")]
    g = helper.make_graph(nodes, "g", [vi("x", F, [4])], [vi("y", F, [4])],
                          [numpy_helper.from_array(np.ones(4, np.float32), "W")])
    m = helper.make_model(g, opset_imports=opsets, functions=funcs)
    return m.SerializeToString()


def flood(graphs: int = 3_000_000) -> bytes:
    """A Relu with an attribute of ``graphs`` empty subgraphs (two bytes each in the
    file, records of a few hundred bytes each once read): a 6 MB file that needs more
    than 0.7 GB."""
    from graphmem.frontend.protowire import message, varint
    attr = message(1, b"branches") + b"\x50" + varint(10) + b"\x5a\x00" * graphs
    node = helper.make_node("Relu", ["x"], ["y"]).SerializeToString() + message(5, attr)
    graph = (message(1, node) + message(2, b"g")
             + message(11, vi("x", F, [4]).SerializeToString())
             + message(12, vi("y", F, [4]).SerializeToString()))
    return (b"\x08\x08" + message(7, graph)
            + message(8, helper.make_opsetid("", 17).SerializeToString()))


def function_bomb_fan(depth: int, fan: int = 3) -> bytes:
    """Like :func:`function_bomb`, each function calling the one below ``fan`` times,
    the top one called inside an If's branch (a call in a subgraph)."""
    funcs = []
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    for i in range(depth):
        if i == 0:
            nodes = [helper.make_node("Relu", ["a"], ["b"])]
        else:
            names = ["a"] + [f"t{k}" for k in range(fan - 1)] + ["b"]
            nodes = [helper.make_node(f"f{i - 1}", [names[k]], [names[k + 1]],
                                      domain="local") for k in range(fan)]
        funcs.append(helper.make_function("local", f"f{i}", ["a"], ["b"], nodes, opsets))
    branch = helper.make_graph(
        [helper.make_node(f"f{depth - 1}", ["h"], ["z"], domain="local")], "then", [],
        [vi("z", F, [4])])
    other = helper.make_graph([helper.make_node("Identity", ["h"], ["z2"])], "else", [],
                              [vi("z2", F, [4])])
    nodes = [helper.make_node("Mul", ["x", "W"], ["h"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)]
    g = helper.make_graph(nodes, "g", [vi("x", F, [4]), vi("c", TensorProto.BOOL, [])],
                          [vi("y", F, [4])],
                          [numpy_helper.from_array(np.ones(4, np.float32), "W")])
    return helper.make_model(g, opset_imports=opsets, functions=funcs).SerializeToString()


def node_flood(nodes: int = 3_000_000) -> bytes:
    """A graph of ``nodes`` empty nodes (two bytes each in the file) before a Relu."""
    from graphmem.frontend.protowire import message
    graph = (b"\x0a\x00" * nodes
             + message(1, helper.make_node("Relu", ["x"], ["y"]).SerializeToString())
             + message(2, b"g") + message(11, vi("x", F, [4]).SerializeToString())
             + message(12, vi("y", F, [4]).SerializeToString()))
    return (b"\x08\x08" + message(7, graph)
            + message(8, helper.make_opsetid("", 17).SerializeToString()))


def small_model() -> bytes:
    """x * W -> Relu -> y: a model every command runs (the output and signal faults)."""
    g = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["h"]),
                           helper.make_node("Relu", ["h"], ["y"])], "g",
                          [vi("x", F, [2, 4])], [vi("y", F, [2, 4])],
                          [numpy_helper.from_array(np.ones([2, 4], np.float32), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def recursive_function() -> bytes:
    """A local function that calls itself."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    f = helper.make_function("local", "f", ["a"], ["b"],
                             [helper.make_node("f", ["a"], ["b"], domain="local")], opsets)
    g = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["h"]),
                           helper.make_node("f", ["h"], ["y"], domain="local")], "g",
                          [vi("x", F, [4])], [vi("y", F, [4])],
                          [numpy_helper.from_array(np.ones(4, np.float32), "W")])
    return helper.make_model(g, opset_imports=opsets, functions=[f]).SerializeToString()


def files(out: Path) -> dict[str, list[Path]]:
    """Every reproducer written under ``out``, by class."""
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[Path]] = {"converter": [], "functions": []}
    for op, attr, value, opset in CONVERTER_CASES:
        p = out / f"convert_{op}_{attr}_{type(value).__name__}.onnx"
        p.write_bytes(converter_model(op, attr, value, opset))
        made["converter"].append(p)
    for depth in (22, 24, 64, 200):
        p = out / f"functions_depth{depth}.onnx"
        p.write_bytes(function_bomb(depth))
        made["functions"].append(p)
    p = out / "functions_recursive.onnx"
    p.write_bytes(recursive_function())
    made["functions"].append(p)
    for depth in (14, 40):
        p = out / f"functions_fan3_depth{depth}_in_if.onnx"
        p.write_bytes(function_bomb_fan(depth))
        made["functions"].append(p)
    p = out / "flood.onnx"
    p.write_bytes(flood())
    made["floods"] = [p]
    p = out / "flood_nodes.onnx"
    p.write_bytes(node_flood())
    made["floods"].append(p)
    return made


ADDRESS_LIMIT = 2 << 30
TIME_LIMIT = 60


def _limit(address: int = ADDRESS_LIMIT) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (address, address))


# how a command is started: ``python -m graphmem`` or, set by ``signals --script``, the
# installed ``graphmem`` script beside this interpreter
START = [sys.executable, "-m", "graphmem"]


def command(name: str, model: Path, work: Path) -> list[str]:
    args = {"plan": ["-o", str(work / "p.json")], "report": [], "verify": [],
            "train": []}[name]
    return [*START, name, str(model), *args]


# a long command's heartbeat on stderr: "graphmem: train: planning ..., 10 s"
PROGRESS = re.compile(r"^graphmem: [a-z]+: .*, \d+ s$")


def outcome(proc: subprocess.CompletedProcess | None) -> str:
    """How one run ended, in the campaign's words."""
    if proc is None:
        return "timeout"
    err = proc.stderr.decode("utf-8", "replace")
    if "Traceback" in err:
        return "traceback"
    if proc.returncode < 0:
        return f"signal ({signal.Signals(-proc.returncode).name})"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    # a long command's progress lines ("graphmem: report: reading the model, 10 s",
    # every 10 s) come before its answer: counted apart
    answer = [ln for ln in lines if not PROGRESS.match(ln)]
    after = ", after progress lines" if len(answer) < len(lines) else ""
    if proc.returncode == 0:
        return "ran"
    if proc.returncode == 2 and len(answer) == 1 and answer[0].startswith("graphmem: "):
        return "one line, exit 2" + after
    return f"exit {proc.returncode}, {len(lines)} lines"


def run_one(argv: list[str], cwd: Path,
            address: int = ADDRESS_LIMIT) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(argv, capture_output=True, timeout=TIME_LIMIT, cwd=cwd,
                              preexec_fn=lambda: _limit(address))
    except subprocess.TimeoutExpired:
        return None


def campaign(out: Path, commands=("plan", "report", "verify", "train")) -> Counter:
    counts: Counter = Counter()
    for cls, paths in files(out).items():
        for p in paths:
            for name in commands:
                counts[(cls, name, outcome(run_one(command(name, p, out), out)))] += 1
    counts.update(output_campaign(out))
    return counts


def batched_model() -> bytes:
    """x[N, 4] * W[4] -> Relu -> y: a model with a batch for ``fit``."""
    g = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["h"]),
                           helper.make_node("Relu", ["h"], ["y"])], "g",
                          [vi("x", F, ["N", 4])], [vi("y", F, ["N", 4])],
                          [numpy_helper.from_array(np.ones([4], np.float32), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


# every command, run as a user would on a small input (its outputs beside it)
OUTPUT_COMMANDS = {
    "plan": ["plan", "{m}", "-o", "p.json"], "report": ["report", "{m}"],
    "verify": ["verify", "{m}"], "train": ["train", "{m}"],
    "fit": ["fit", "{b}", "--budget", "1MiB"],
    "export": ["export", "{m}", "--annotated", "a.onnx"],
    "probe": ["probe", "--ops", "Relu"], "models": ["models"], "place": ["place", "{r}"],
}
OUTPUT_FAULTS = ("/dev/full", "closed", "broken pipe")


def output_run(argv: list[str], fault: str, cwd: Path) -> tuple[int | None, str]:
    """``argv`` with its stdout on /dev/full, closed (``>&-``) or a pipe whose reader
    has gone: (exit status, stderr); None for a run past the time limit."""
    kw = dict(cwd=cwd, stderr=subprocess.PIPE, text=True, errors="replace",
              preexec_fn=_limit)
    if fault == "/dev/full":
        with open("/dev/full", "w") as full:
            proc = subprocess.Popen(argv, stdout=full, **kw)
    elif fault == "closed":
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, **dict(
            kw, preexec_fn=lambda: (_limit(), os.close(1))))
    else:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, **kw)
        proc.stdout.close()  # the reader goes away before anything is written (| head)
    try:
        _, err = proc.communicate(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, ""
    return proc.returncode, err


def output_outcome(code: int | None, err: str, name: str) -> str:
    """One fault line (``graphmem: cannot write the output to stdout: ...``) and exit
    74, verify's verdict kept (0 here): "one line"; anything else said as it is."""
    if code is None:
        return "timeout"
    if "Traceback" in err:
        return "traceback"
    if code < 0:
        return "signal"
    said = [ln for ln in err.splitlines() if ln.startswith("graphmem: cannot write")]
    want = 0 if name == "verify" else 74
    if len(said) == 1 and code == want:
        return f"one line, exit {code}"
    return f"exit {code}, {len(said)} fault lines"


def output_campaign(out: Path) -> Counter:
    """Every command with its stdout on a full device, closed, and a broken pipe."""
    work = out / "output"
    work.mkdir(parents=True, exist_ok=True)
    (work / "m.onnx").write_bytes(small_model())
    (work / "b.onnx").write_bytes(batched_model())
    (work / "r.csv").write_text("id,lower,upper,size\n0,0,2,16\n1,1,3,32\n2,2,4,16\n")
    counts: Counter = Counter()
    for name, args in OUTPUT_COMMANDS.items():
        argv = [sys.executable, "-m", "graphmem",
                *(a.format(m="m.onnx", b="b.onnx", r="r.csv") for a in args)]
        for fault in OUTPUT_FAULTS:
            code, err = output_run(argv, fault, work)
            counts[(f"output: {fault}", name, output_outcome(code, err, name))] += 1
    return counts


def signal_outcome(proc: subprocess.Popen, err: str, signum: int,
                   left: list[str] = ()) -> str:
    """How a run sent ``signum`` ended: answered (130/143, one line, no temporary left),
    lost (exit 0), the signal's own exit (the interpreter's start, before graphmem holds
    signals: a shell reports it as 130/143 too), a traceback (in the interpreter's start
    where none of its frames is graphmem's), temporaries left or another exit."""
    # a long command's progress lines ("graphmem: train: planning ..., 10 s") and a note
    # of the run are not the answer
    lines = [ln for ln in err.splitlines() if ln.strip() and "IR version" not in ln
             and not PROGRESS.match(ln)]
    if "Traceback" in err:
        frames = re.findall(r'^  File "([^"]*)"', err, re.M)
        if not any(f"{os.sep}graphmem{os.sep}" in f for f in frames):
            return "traceback, interpreter's start"  # site's imports, runpy
        return "traceback"
    want = {signal.SIGINT: (130, "graphmem: interrupted"),
            signal.SIGTERM: (143, "graphmem: terminated")}[signum]
    if proc.returncode == want[0] and lines == [want[1]]:
        return "temporaries left" if left else "answered"
    if proc.returncode == 0:
        return "lost"
    if proc.returncode == -signum:
        # SIGTERM's default action: graphmem holds it from its first line to its last
        return "killed by the signal, interpreter's start"
    return f"exit {proc.returncode}, {len(lines)} lines"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _state(pid: int) -> str | None:
    """The process's state letter in /proc (R, S, D, T, Z ...), None once reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return None


def send_exactly(proc: subprocess.Popen, signum: int) -> bool:
    """Send ``signum`` to ``proc`` now, knowing whether it was still running: it is
    stopped (SIGSTOP), found stopped or ended (a zombie, not reaped), sent the signal
    and continued. False: it had ended, and nothing was sent (a signal sent to a process
    that has just exited would read as lost)."""
    try:
        os.kill(proc.pid, signal.SIGSTOP)
    except ProcessLookupError:
        return False
    while True:
        state = _state(proc.pid)
        if state in (None, "Z", "X"):
            return False
        if state in ("T", "t"):
            break
        time.sleep(0.0001)
    os.kill(proc.pid, signum)
    os.kill(proc.pid, signal.SIGCONT)
    return True


def _leftovers(work: Path, outputs: set[str]) -> list[str]:
    """What a run left in its folder and its TMPDIR besides its outputs."""
    return sorted(str(p.relative_to(work)) for p in work.rglob("*")
                  if p.name not in outputs and p.name != "tmp")


def signal_campaign(models: dict[str, Path], runs: dict[str, int], seed: int) -> Counter:
    """``runs[command]`` signals delivered (SIGINT and SIGTERM in turn) at moments
    uniform over the command's run on ``models[command]`` (the median of three runs),
    from the process's start (imports included); a moment that falls after the run's end
    is counted as "ended first" and drawn again (at most twice as many draws as signals).
    Each run is in a fresh folder with its own TMPDIR, checked for temporaries left."""
    import random
    import statistics
    rng = random.Random(seed)
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, n in runs.items():
            argv = command(name, models[name], Path(tmp))
            lengths = []
            for _ in range(3):
                start = time.perf_counter()
                subprocess.run(argv, capture_output=True, cwd=tmp, timeout=TIME_LIMIT)
                lengths.append(time.perf_counter() - start)
            duration = statistics.median(lengths)
            delivered = 0
            for i in range(3 * n):
                if delivered == n:
                    break
                signum = (signal.SIGINT, signal.SIGTERM)[delivered % 2]
                work = Path(tmp) / f"{name}{i}"
                (work / "tmp").mkdir(parents=True)
                argv = command(name, models[name], work)
                # SIGINT as a terminal's Ctrl-C finds it (a background job of a shell
                # starts with it ignored, and Python keeps it so)
                start = time.perf_counter()
                proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True, errors="replace",
                                        env=dict(os.environ, TMPDIR=str(work / "tmp")),
                                        preexec_fn=_default_sigint)
                time.sleep(rng.uniform(0, duration))
                sent = time.perf_counter() - start
                if not send_exactly(proc, signum):
                    proc.communicate()
                    counts[(name, signum.name, "ended first (drawn again)")] += 1
                    shutil.rmtree(work)
                    continue
                delivered += 1
                _, err = proc.communicate(timeout=TIME_LIMIT)
                left = _leftovers(work, {"p.json"})
                how = signal_outcome(proc, err, signum, left)
                counts[(name, signum.name, how)] += 1
                if how != "answered":
                    UNANSWERED.append((name, signum.name, how, round(1000 * sent)))
                    DETAILS.append((name, signum.name, how, round(1000 * sent),
                                    err[-2000:], left))
                shutil.rmtree(work)
    return counts


def window_sweep(model: Path, runs: int, upto_ms: float, seed: int) -> list[tuple]:
    """``runs`` plans of ``model``, each sent SIGINT or SIGTERM (in turn) at a moment
    uniform in [0, ``upto_ms``] after the process is started: (ms, signal, outcome) of
    each, the measure of the start that graphmem does not cover."""
    import random
    rng = random.Random(seed)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            signum = (signal.SIGINT, signal.SIGTERM)[i % 2]
            argv = command("plan", model, Path(tmp))
            delay = rng.uniform(0, upto_ms / 1000)
            start = time.perf_counter()
            proc = subprocess.Popen(argv, cwd=tmp, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True, errors="replace",
                                    preexec_fn=_default_sigint)
            time.sleep(delay)
            sent = time.perf_counter() - start
            if not send_exactly(proc, signum):
                proc.communicate()
                out.append((1000 * sent, signum.name, "ended first"))
                continue
            _, err = proc.communicate(timeout=TIME_LIMIT)
            out.append((1000 * sent, signum.name, signal_outcome(proc, err, signum)))
    return out


# (command, signal, outcome, ms from the process's start to the signal) of every signal
# not answered in one line, and the same with its stderr's end and the files left
UNANSWERED: list = []
DETAILS: list = []


DOC = ROOT / "docs" / "hostile-input.md"


def _write_doc(key: str, command: str, lines: list[str]) -> None:
    """Rewrite this tool's section ``bench:key`` of docs/hostile-input.md."""
    import datetime
    import platform
    from tools.docs.sections import cpu_name, write_doc
    stamp = (f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} "
             f"by `{command}` on {cpu_name()}, {os.cpu_count()} CPUs, Python "
             f"{platform.python_version()}.")
    write_doc(DOC, f"bench:{key}", stamp + "\n\n" + "\n".join(lines))


def startup_ms(runs: int = 20, flags: tuple = ()) -> float:
    """The interpreter's start with site's imports (``python -c pass``; ``flags=("-S",)``:
    without site), median ms: the part of a command's life before graphmem holds signals
    back."""
    import statistics
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *flags, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _signals(args) -> int:
    # --commands plan,verify (--runs each) or plan:60,train:20 (runs by command)
    named = [c.split(":") for c in args.commands.split(",")]
    runs = {c[0]: int(c[1]) if len(c) > 1 else args.runs for c in named}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: args.model.resolve() for name in runs}
        if args.train_model is not None:
            models["train"] = args.train_model.resolve()
        else:
            models["train"] = Path(tmp) / "small.onnx"
            models["train"].write_bytes(small_model())
        counts = signal_campaign(models, runs, args.seed)
        sweep = (window_sweep(args.model.resolve(), args.window_runs, args.window_ms,
                              args.seed) if args.window_runs else [])
    label = {name: "x * W -> Relu" if args.train_model is None and name == "train"
             else models[name].name for name in runs}
    lines = ["| command | model | signal | outcome | runs |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {label[name]} | {sig} | {how} | {n} |"
              for (name, sig, how), n in sorted(counts.items())]
    by_signal = Counter()
    for (name, sig, how), n in counts.items():
        by_signal[(sig, how)] += n
    delivered = Counter()
    for (name, sig, how), n in counts.items():
        if not how.startswith("ended first"):
            delivered[sig] += n
    lines += ["", "All commands: " + ", ".join(
        f"{delivered[sig]} {sig}s delivered" for sig in sorted(delivered)) + "; " + "; ".join(
        f"{sig} {how} {n}" for (sig, how), n in sorted(by_signal.items())) + "."]
    lines += ["", f"The interpreter's start with site's imports (`python -c pass`, "
                  f"median of 20): {startup_ms():.0f} ms; without site (`python -S -c "
                  f"pass`): {startup_ms(flags=('-S',)):.0f} ms (measured after the "
                  f"campaign; the machine's 1-minute load average was {load_before:.1f} "
                  f"at its start, {os.getloadavg()[0]:.1f} at its end)."]
    if UNANSWERED:
        lines += ["", "Signals not answered in one line, by the moment they were sent "
                      "(ms after the process was started): " + ", ".join(
                          f"{ms} ({name} {sig}, {how})"
                          for name, sig, how, ms in sorted(UNANSWERED, key=lambda u: u[3]))
                  + "."]
    if sweep:
        lines += ["", _window_summary(sweep, args.window_ms)]
    print("\n".join(lines))
    for name, sig, how, ms, err, left in DETAILS:
        print(f"\n--- {name} {sig} at {ms} ms: {how}; left {left}\n{err}", file=sys.stderr)
    if args.write:
        _write_doc("fault-signals",
                   f"python -m tools.faults.fault_suite signals {args.model.name} "
                   f"--seed {args.seed} --commands {args.commands}"
                   + (" --script" if args.script else "")
                   + (f" --window-runs {args.window_runs} --window-ms {args.window_ms:g}"
                      if args.window_runs else "") + " --write", lines)
    return 0


def _window_summary(sweep: list[tuple], upto_ms: float) -> str:
    """The start window's sweep in one paragraph: how its signals ended, and the span of
    moments at which one was not answered by graphmem."""
    counts = Counter(how for _, _, how in sweep)
    missed = sorted(ms for ms, _, how in sweep if how not in ("answered", "ended first"))
    answered = sorted(ms for ms, _, how in sweep if how == "answered")
    text = (f"The start window: {len(sweep)} plans, each signalled (SIGINT and SIGTERM in "
            f"turn) at a moment uniform in the first {upto_ms:g} ms: "
            + ", ".join(f"{how} {n}" for how, n in sorted(counts.items())) + ".")
    if missed:
        text += (f" Not answered by graphmem: signals sent {missed[0]:.0f} to "
                 f"{missed[-1]:.0f} ms after the start")
        if answered:
            text += f"; the first answered was sent at {answered[0]:.0f} ms"
        text += "."
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, default=None)
    r.add_argument("--write", action="store_true", help="rewrite docs/hostile-input.md's table")
    sg = sub.add_parser("signals")
    sg.add_argument("model", type=Path)
    sg.add_argument("--runs", type=int, default=100, help="per command")
    sg.add_argument("--seed", type=int, default=55)
    sg.add_argument("--commands", default="plan")
    sg.add_argument("--train-model", type=Path, default=None,
                    help="the model train runs on (default: the suite's small model, "
                         "x * W -> Relu: a zoo model's step takes tens of seconds)")
    sg.add_argument("--window-runs", type=int, default=0,
                    help="also this many plans signalled in the first --window-ms")
    sg.add_argument("--window-ms", type=float, default=150)
    sg.add_argument("--script", action="store_true",
                    help="start the commands with the installed graphmem script")
    sg.add_argument("--write", action="store_true", help="rewrite docs/hostile-input.md's table")
    args = ap.parse_args(argv)
    if args.what == "signals":
        if args.script:
            START[:] = [str(Path(sys.executable).parent / "graphmem")]
        return _signals(args)
    with tempfile.TemporaryDirectory() as tmp:
        counts = campaign(args.out or Path(tmp))
    lines = ["| class | command | outcome | runs |", "|---|---|---|---|"]
    lines += [f"| {cls} | {name} | {how} | {n} |" for (cls, name, how), n in sorted(counts.items())]
    lines += ["", f"Each run limited to {ADDRESS_LIMIT >> 30} GB of address space and "
                  f"{TIME_LIMIT} s."]
    print("\n".join(lines))
    if args.write:
        _write_doc("fault-suite", "python -m tools.faults.fault_suite run --write", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
