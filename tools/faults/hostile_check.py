"""Issue 25's hostile and careless inputs, rebuilt from scratch and run through the CLI.

    python -m tools.faults.hostile_check                 # every case, a table on stdout
    python -m tools.faults.hostile_check --only names    # cases whose name contains a word
    python -m tools.faults.hostile_check --fanout 40000  # the fan-out size (default 40,000)

Independent of graphmem's own tests: it imports nothing from graphmem, builds every
model with onnx.helper in a scratch folder, runs ``python -m graphmem`` as a user
would, and judges what comes back: the exit status, exactly one ``graphmem:`` line on
stderr for an exit of 2, no traceback, no escape character reaching the terminal, no
file in the folder changed but the outputs asked for, devices and FIFOs left what they
are, and peak RSS (each process's own VmHWM, written at its exit). External data outside the model's
folder points at a FIFO: a command that opens it blocks, and the case fails on its
time limit. Cases that need root (device nodes made with mknod) are skipped, with the
reason, when not run as root. Exit status 1 when a case fails.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GB = 1 << 30
CASES: list[tuple[str, str, object]] = []


def case(item: str, name: str):
    def register(fn):
        CASES.append((item, name, fn))
        return fn
    return register


# ------------------------------------------------------------------ running the CLI

@dataclass
class Run:
    rc: int | None  # None: stopped at its time limit
    out: str
    err: str
    rss_mb: float
    seconds: float

    def lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("graphmem:")]

    def clean(self) -> bool:
        """No traceback, no escape character on either stream."""
        return ("Traceback" not in self.err and "\x1b" not in self.err
                and "\x1b" not in self.out)

    def got(self) -> str:
        last = (self.err.strip().splitlines() or [""])[-1]
        rc = "timeout" if self.rc is None else self.rc
        return f"{rc}; {len(self.lines())} graphmem: line(s); {last[:110]!r}"


# ``python -m graphmem`` that also writes the process's peak RSS (VmHWM, kB) to the file
# named by HOSTILE_PEAK at exit. wait4's ru_maxrss is not the child's own: Linux carries
# the parent's high-water mark through fork and exec, and this checker holds the large
# models it builds (a 40,000-output fan-out put 206 MB on every child).
PEAK_MAIN = """import atexit, os, runpy, sys
def peak():
    with open('/proc/self/status') as f:
        kb = next((line.split()[1] for line in f if line.startswith('VmHWM:')), '')
    with open(os.environ['HOSTILE_PEAK'], 'w') as f:
        f.write(kb)
atexit.register(peak)
sys.argv[0] = 'graphmem'
runpy.run_module('graphmem', run_name='__main__', alter_sys=True)
"""


def gm(args: list[str], cwd: Path, timeout: float = 120, signal_when=None) -> Run:
    """``python -m graphmem ARGS`` in ``cwd``; ``signal_when`` (a function called every
    few ms with the process, returning a signal number or None) may send one signal.
    Peak RSS is the process's own where it ran its atexit functions, else wait4's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORCE_COLOR")}
    env["TERM"] = "xterm-256color"  # escapes would be allowed: they must still not show
    fd, peak_file = tempfile.mkstemp(prefix="peak-")
    os.close(fd)
    env["HOSTILE_PEAK"] = peak_file
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([PYTHON, "-c", PEAK_MAIN, *args], cwd=cwd, stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL, env=env)
        sent = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                status = None
                break
            if signal_when is not None and not sent:
                sig = signal_when(proc)
                if sig:
                    proc.send_signal(sig)
                    sent = True
            time.sleep(0.002)
        proc.returncode = 0  # reaped by wait4; Popen must not wait again
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        rc = None if status is None else os.waitstatus_to_exitcode(status)
        with open(peak_file) as f:
            kb = f.read().strip()
        os.unlink(peak_file)
        return Run(rc, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                   int(kb) / 1024 if kb else usage.ru_maxrss / 1024, seconds)


# ------------------------------------------------------------------ the folder's state

def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder``: its kind, mode, and for files size and digest."""
    state = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            state[str(p.relative_to(folder))] = (stat.S_IFMT(st.st_mode), st.st_mode & 0o7777,
                                                 st.st_size, digest)
    return state


def changed(before: dict, after: dict, allowed: set[str] = frozenset()) -> list[str]:
    names = set(before) | set(after)
    return sorted(n for n in names if before.get(n) != after.get(n) and n not in allowed)


# ------------------------------------------------------------------ models

def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def make(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def vi(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def relu_model(xname="x", yname="y") -> onnx.ModelProto:
    return make([helper.make_node("Relu", [xname], ["h"]), helper.make_node("Neg", ["h"], [yname])],
                [vi(xname, [1, 8])], [vi(yname, [1, 8])])


def fanout_model(n: int) -> onnx.ModelProto:
    return make([helper.make_node("Relu", ["x"], [f"y{i}"]) for i in range(n)],
                [vi("x", [1, 64])], [vi(f"y{i}", [1, 64]) for i in range(n)])


def squeezenet() -> Path:
    return Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"


# ------------------------------------------------------------------ verdicts

def refused(run: Run, before: dict, after: dict, says: str = "") -> tuple[bool, str]:
    """Exit 2, one graphmem: line (naming ``says``), clean, nothing changed."""
    bad = changed(before, after)
    ok = (run.rc == 2 and len(run.lines()) == 1 and run.clean() and not bad
          and says in run.err)
    return ok, run.got() + (f"; changed {bad}" if bad else "")


def expect_refusal(folder: Path, args: list[str], says: str = "", timeout: float = 120):
    before = snapshot(folder)
    run = gm(args, folder, timeout)
    return ("2, one line" + (f" naming {says!r}" if says else "") + ", nothing changed",
            *refused(run, before, snapshot(folder), says))


# ------------------------------------------------------------------ 1. destroying files

def _folder_with_model(work: Path, name: str) -> Path:
    d = work / name
    d.mkdir()
    shutil.copy(squeezenet(), d / "M.onnx")
    return d


@case("1", "output is the input")
def outputs_that_are_inputs(work: Path):
    rows = []
    d = _folder_with_model(work, "same")
    os.symlink("M.onnx", d / "link.onnx")
    os.link(d / "M.onnx", d / "hard.onnx")
    save(relu_model(), d / "R.onnx")
    assert gm(["export", "M.onnx", "--annotated", "A.onnx"], d).rc == 0
    assert gm(["plan", "M.onnx", "-o", "P.json", "-q"], d).rc == 0
    for args in (["plan", "M.onnx", "-o", "M.onnx", "-q"],
                 ["plan", "M.onnx", "-o", "./sub/../M.onnx", "-q"],
                 ["plan", "M.onnx", "-o", "link.onnx", "-q"],
                 ["plan", "link.onnx", "-o", "M.onnx", "-q"],
                 ["plan", "M.onnx", "-o", "hard.onnx", "-q"],
                 ["export", "M.onnx", "--html", "M.onnx"],
                 ["export", "M.onnx", "--graphml", "link.onnx"],
                 ["export", "M.onnx", "--annotated", "hard.onnx"],
                 ["export", "M.onnx", "--plan", "P.json", "--html", "P.json"],
                 ["report", "M.onnx", "--html", "M.onnx"],
                 ["export", "--plan-from", "A.onnx", "--plan-out", "A.onnx"],
                 ["train", "R.onnx", "--save", "R.onnx"]):
        (d / "sub").mkdir(exist_ok=True)
        rows.append((" ".join(args), *expect_refusal(d, args, "cannot write")))
    return rows


@case("1", "devices and FIFOs")
def devices_and_fifos(work: Path):
    d = _folder_with_model(work, "devices")
    rows = []
    # A FIFO with a reader: written into, still a FIFO.
    os.mkfifo(d / "fifo")
    got = []
    reader = threading.Thread(target=lambda: got.append((d / "fifo").read_bytes()))
    reader.start()
    run = gm(["plan", "M.onnx", "-o", "fifo", "-q"], d, timeout=60)
    if run.rc is None or reader.is_alive():  # never opened: let the reader go
        with open(d / "fifo", "wb"):
            pass
    reader.join()
    is_fifo = stat.S_ISFIFO(os.lstat(d / "fifo").st_mode)
    data = got[0] if got else b""
    ok = run.rc == 0 and is_fifo and data.startswith(b"{") and run.clean()
    if run.rc == 2:  # refusing is allowed too
        ok = len(run.lines()) == 1 and is_fifo and run.clean()
    rows.append(("plan -o FIFO", "0 and the plan read from it, or 2; still a FIFO", ok,
                 run.got() + f"; fifo={is_fifo}; {len(data)} bytes read"))
    if os.geteuid() != 0:
        rows.append(("plan -o a null/full device", "needs root (mknod)", None,
                     "skipped: not root"))
        return rows
    # Private device nodes (mknod), never /dev itself: a broken writer replaces these.
    try:
        os.mknod(d / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.mknod(d / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except OSError as exc:  # a container without CAP_MKNOD
        rows.append(("plan -o a null/full device", "needs mknod", None,
                     f"skipped: {exc.strerror}"))
        return rows
    for args, want in ((["plan", "M.onnx", "-o", "null", "-q"], 0),
                       (["export", "M.onnx", "--html", "null", "--graphml", "null2.graphml"], 0),
                       (["plan", "M.onnx", "-o", "full", "-q"], 2),
                       (["export", "M.onnx", "--html", "H.html", "--graphml", "full"], 2)):
        before = snapshot(d)
        run = gm(args, d)
        after = snapshot(d)
        allowed = {"null2.graphml"} if want == 0 else set()
        bad = changed(before, after, allowed)
        ok = run.rc == want and run.clean() and not bad and (want == 0 or len(run.lines()) == 1)
        rows.append((" ".join(args), f"{want}, devices stay devices, nothing else written",
                     ok, run.got() + (f"; changed {bad}" if bad else "")))
    return rows


@case("1", "read-only output")
def read_only_output(work: Path):
    d = _folder_with_model(work, "readonly")
    (d / "P.json").write_text("keep me")
    os.chmod(d / "P.json", 0o444)
    return [("plan -o read-only file", *expect_refusal(d, ["plan", "M.onnx", "-o", "P.json",
                                                            "-q"]))]


@case("1", "export all-or-nothing")
def export_all_or_nothing(work: Path):
    d = _folder_with_model(work, "allornothing")
    rows = [("export, one output in a missing folder (none existed)",
             *expect_refusal(d, ["export", "M.onnx", "--annotated", "A.onnx", "--html", "H.html",
                                 "--graphml", "missing/G.graphml"]))]
    (d / "A.onnx").write_bytes(b"old annotated")
    (d / "H.html").write_text("old html")
    rows.append(("export, one output in a missing folder (the others existed)",
                 *expect_refusal(d, ["export", "M.onnx", "--annotated", "A.onnx", "--html",
                                     "H.html", "--graphml", "missing/G.graphml"])))
    return rows


# ------------------------------------------------------------------ 2. plans not trusted

def _hostile_plans(plan: dict) -> dict[str, str]:
    text = json.dumps(plan)
    last = max(t["offset"] + t["bytes"] for t in plan["tensors"].values())
    first = next(iter(plan["tensors"]))
    big = dict(plan, arena_bytes=2 ** 32, stats=dict(plan["stats"], arena_bytes=2 ** 32))
    far = json.loads(text)
    far["tensors"][first]["offset"] = 2 ** 60
    alias = json.loads(text)
    alias["tensors"][first]["alias_of"] = ["x"]
    slice_of = json.loads(text)
    slice_of["tensors"][first]["slice_of"] = {"a": 1}
    passes = dict(plan, passes=["inplace", 3])
    huge = dict(plan, arena_bytes=2 ** 64)
    return {"arena_bytes 2^32 (stats to match)": json.dumps(big),
            "arena_bytes 2^64": json.dumps(huge),
            "an offset of 2^60": json.dumps(far),
            "nested 100,000 deep": "[" * 100_000 + "]" * 100_000,
            "a 4,400-digit integer": text.replace(f'"arena_bytes": {plan["arena_bytes"]}',
                                                  '"arena_bytes": ' + "9" * 4400, 1),
            "alias_of a list": json.dumps(alias),
            "slice_of an object": json.dumps(slice_of),
            "passes not objects": json.dumps(passes),
            "arena past its last tensor": json.dumps(dict(plan, arena_bytes=last + 4096))}


@case("2", "hostile plans")
def hostile_plans(work: Path):
    d = _folder_with_model(work, "plans")
    assert gm(["plan", "M.onnx", "-o", "good.json", "-q"], d).rc == 0
    plan = json.loads((d / "good.json").read_text())
    rows = []
    for what, text in _hostile_plans(plan).items():
        (d / "bad.json").write_text(text)
        for args in (["verify", "M.onnx", "--plan", "bad.json"],
                     ["report", "M.onnx", "--plan", "bad.json"],
                     ["export", "M.onnx", "--plan", "bad.json", "--html", "H.html"]):
            before = snapshot(d)
            run = gm(args, d)
            bad = changed(before, snapshot(d))
            # verify may say "the plan is wrong" (1) or refuse the input (2)
            rcs = (1, 2) if args[0] == "verify" else (2,)
            ok = (run.rc in rcs and run.clean() and not bad and run.rss_mb < 1024
                  and (run.rc != 2 or len(run.lines()) == 1)
                  and (run.rc != 1 or "FAIL" in run.out))  # 1: the report says why
            rows.append((f"{args[0]} --plan: {what}", f"{rcs}, one line, < 1 GB, nothing written",
                         ok, run.got() + f"; {run.rss_mb:.0f} MB"
                         + (f"; changed {bad}" if bad else "")))
    # the same plans inside an annotated model, extracted with --plan-from
    for what in ("an offset of 2^60", "alias_of a list", "nested 100,000 deep"):
        text = _hostile_plans(plan)[what]
        m = onnx.load(d / "M.onnx")
        m.metadata_props.add(key="graphmem.plan", value=text)
        save(m, d / "annotated.onnx")
        rows.append((f"export --plan-from: {what}",
                     *expect_refusal(d, ["export", "--plan-from", "annotated.onnx", "--plan-out",
                                         "out.json"])))
        (d / "annotated.onnx").unlink()
    return rows


# ------------------------------------------------------------------ 3. names are data

HOSTILE_NAMES = ["[bold red]x[/] [/] [link=http://evil]y[/link]", "a\x1b[31mred\x1b[0m",
                 "osc\x1b]8;;http://evil\x07z", "ctl\x01\x02", "nul\x00z"]


@case("3", "names are data")
def names_are_data(work: Path):
    rows = []
    for i, name in enumerate(HOSTILE_NAMES):
        d = work / f"names{i}"
        d.mkdir()
        save(relu_model(xname=name, yname=name + "_out"), d / "N.onnx")
        for args in (["plan", "N.onnx", "-o", "p.json"], ["report", "N.onnx"],
                     ["verify", "N.onnx"], ["export", "N.onnx", "--graphml", "g.graphml"]):
            run = gm(args, d)
            ok = run.rc in (0, 2) and run.clean() and (run.rc == 0 or len(run.lines()) == 1)
            note = run.got()
            if args[0] == "export" and run.rc == 0:
                import xml.etree.ElementTree as ET
                try:
                    ET.parse(d / "g.graphml")
                except ET.ParseError as exc:
                    ok, note = False, f"{note}; GraphML not well-formed: {exc}"
            rows.append((f"{args[0]}: name {name!r}", "0 (or 2, one line), no escape or "
                         "traceback, GraphML well-formed", ok, note))
    return rows


# ------------------------------------------------------------------ 4. cost past the machine

@case("4", "huge Range")
def huge_range(work: Path):
    d = work / "range"
    d.mkdir()
    c = [numpy_helper.from_array(np.array(v, dtype=np.int64), n)
         for n, v in (("start", 0), ("limit", 2 ** 40), ("delta", 1))]
    save(make([helper.make_node("Range", ["start", "limit", "delta"], ["r"])], [],
              [vi("r", ["n"], TensorProto.INT64)], c), d / "R.onnx")
    rows = []
    for args in (["plan", "R.onnx", "-o", "p.json", "-q"], ["report", "R.onnx"],
                 ["verify", "R.onnx"]):
        run = gm(args, d, timeout=120)
        ok = (run.rc in (0, 2) and run.rss_mb < 2048 and run.clean()
              and (run.rc == 0 or len(run.lines()) == 1))
        rows.append((f"{args[0]}: Range(0, 2^40)", "0 or 2 (one line), peak RSS < 2 GB", ok,
                     f"{run.got()}; {run.rss_mb:.0f} MB, {run.seconds:.1f} s"))
    return rows


@case("4", "fan-out")
def fan_out(work: Path):
    d = work / "fanout"
    d.mkdir()
    n = ARGS.fanout
    save(fanout_model(n), d / "F.onnx")
    rows = []
    for args, limit in ((["plan", "F.onnx", "-o", "p.json", "-q"], 120),
                        (["report", "F.onnx"], 300), (["verify", "F.onnx"], 600)):
        run = gm(args, d, timeout=limit)
        ok = run.rc == 0 and run.rss_mb < 2048 and run.clean()
        progress = sum("graphmem: verify:" in line for line in run.err.splitlines())
        if args[0] == "verify":
            # without a terminal verify says where it is every 10 s
            ok = ok and (run.seconds < 10 or progress > 0)
        rows.append((f"{args[0]}: {n:,} Relu outputs of one input",
                     f"0, peak RSS < 2 GB, within {limit} s"
                     + (", progress shown" if args[0] == "verify" else ""), ok,
                     f"{run.rc}; {run.rss_mb:.0f} MB, {run.seconds:.1f} s"
                     + (f", {progress} progress lines" if args[0] == "verify" else "")))
    return rows


# ------------------------------------------------------------------ 5. tracebacks, logs, data

@case("5", "bad numbers")
def bad_numbers(work: Path):
    d = work / "numbers"
    d.mkdir()
    save(relu_model(), d / "R.onnx")
    sym = make([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 8])], [vi("y", ["N", 8])])
    save(sym, d / "S.onnx")
    rows = []
    for args, says in ((["fit", "R.onnx", "--budget", "1e400"], "budget"),
                       (["fit", "R.onnx", "--budget", "-5GiB"], "budget"),
                       (["verify", "R.onnx", "--seed", "-1"], "seed"),
                       (["plan", "S.onnx", "-o", "p.json", "--dim-default", str(2 ** 62)], ""),
                       (["plan", "S.onnx", "-o", "p.json", "--dim", "N=-3"], "")):
        rows.append((" ".join(args), *expect_refusal(d, args, says)))
    return rows


@case("5", "runtime logs")
def runtime_logs(work: Path):
    """A declared shape ONNX Runtime disagrees with: its log must not come first."""
    d = work / "ortlog"
    d.mkdir()
    m = make([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
             [vi("x", [1, 8])], [vi("y", [1, 8])])
    m.graph.value_info.append(vi("h", [1, 9]))
    save(m, d / "V.onnx")
    run = gm(["verify", "V.onnx"], d)
    lines = [line for line in run.err.splitlines() if line.strip()]
    ok = run.rc in (1, 2) and run.clean() and lines and lines[0].startswith("graphmem:") \
        and (run.rc != 2 or len(lines) == 1)
    return [("verify, a declared shape ORT disagrees with", "1 or 2, stderr only graphmem: "
             "lines, no ORT log", ok, run.got())]


@case("5", "external data outside the folder")
def external_outside(work: Path):
    rows = []
    outside = work / "outside"
    outside.mkdir()
    os.mkfifo(outside / "w.bin")  # opening it for reading blocks: the case times out
    for how in ("../", "absolute", "symlink"):
        d = work / f"ext-{how}"
        d.mkdir()
        w = numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "w")
        if how == "../":
            location = "../outside/w.bin"
        elif how == "absolute":
            location = str(outside / "w.bin")
        else:
            os.symlink(outside, d / "lnk")
            location = "lnk/w.bin"
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", "0"), ("length", "256")):
            w.external_data.add(key=k, value=v)
        save(make([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [1, 8])],
                  [vi("y", [1, 8])], [w]), d / "E.onnx")
        for args in (["plan", "E.onnx", "-o", "p.json", "-q"], ["report", "E.onnx"],
                     ["export", "E.onnx", "--html", "h.html"], ["verify", "E.onnx"]):
            expected, ok, got = expect_refusal(d, args, "'w'", timeout=60)
            rows.append((f"{args[0]}: external data at {location}", expected
                         + ", location named, never opened", ok and "w.bin" in got, got))
    return rows


@case("5", "external data shorter than its dims")
def external_short(work: Path):
    d = work / "ext-short"
    d.mkdir()
    (d / "w.bin").write_bytes(np.ones(10, dtype=np.float32).tobytes())
    w = numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", "40")):
        w.external_data.add(key=k, value=v)
    save(make([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [1, 8])],
              [vi("y", [1, 8])], [w]), d / "E.onnx")
    return [("verify: external data of 40 bytes for 256", *expect_refusal(d, ["verify",
                                                                              "E.onnx"]))]


def _temp_appeared(folder: Path):
    def when(proc):
        return sig_of[0] if any(p.name.endswith(".tmp") for p in folder.iterdir()) else None
    sig_of = [None]
    return when, sig_of


@case("5", "signals")
def signals(work: Path):
    d = work / "signals"
    d.mkdir()
    save(fanout_model(20_000), d / "F.onnx")
    out = d / "out"
    out.mkdir()
    rows = []
    for sig, want in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        for k in range(3):
            for p in out.iterdir():
                p.unlink()
            when, sig_of = _temp_appeared(out)
            sig_of[0] = sig
            run = gm(["plan", "F.onnx", "-o", "out/p.json", "-q"], d, signal_when=when)
            left = sorted(p.name for p in out.iterdir())
            # the signal may come after the rename: then the plan is complete, 0 or 130
            ok = run.clean() and ((run.rc == want and not left)
                                  or (run.rc in (0, want) and left == ["p.json"]))
            rows.append((f"{signal.Signals(sig).name} as the temporary plan appears ({k + 1})",
                         f"{want} and no file, or a complete plan", ok,
                         f"{run.got()}; left {left}"))
    # Ctrl-C at spread-out moments, from start-up to the end of the process
    full = gm(["plan", "F.onnx", "-o", "out/p.json", "-q"], d).seconds
    for k in range(8):
        for p in out.iterdir():
            p.unlink()
        at = full * (k + 0.5) / 8
        t0 = time.perf_counter()
        run = gm(["plan", "F.onnx", "-o", "out/p.json", "-q"], d,
                 signal_when=lambda p: signal.SIGINT if time.perf_counter() - t0 > at else None)
        left = sorted(p.name for p in out.iterdir())
        ok = run.clean() and (run.rc == 130 or (run.rc == 0 and left == ["p.json"])) \
            and left in ([], ["p.json"])
        rows.append((f"SIGINT at {at:.2f} s of {full:.2f}", "130 (or 0 if it ended first), "
                     "no temporary file", ok, f"{run.got()}; left {left}"))
    return rows


# ------------------------------------------------------------------ the table

def main() -> int:
    global ARGS, PYTHON
    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run cases whose name contains this")
    parser.add_argument("--fanout", type=int, default=40_000)
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs graphmem (default: this one)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ARGS = parser.parse_args()
    PYTHON = ARGS.python
    work = Path(tempfile.mkdtemp(prefix="graphmem-hostile-"))
    rows, failed = [], 0
    try:
        for item, name, fn in CASES:
            if ARGS.only and ARGS.only not in name:
                continue
            t0 = time.perf_counter()
            for what, expected, ok, got in fn(work):
                rows.append((item, what, expected, ok, got))
                failed += ok is False
            print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    finally:
        if ARGS.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("| item | case | expected | result | got |")
    print("|---|---|---|---|---|")
    for item, what, expected, ok, got in rows:
        verdict = "skip" if ok is None else "ok" if ok else "**FAIL**"
        print(f"| {item} | {_cell(what)} | {_cell(expected)} | {verdict} | {_cell(got)} |")
    skipped = sum(r[3] is None for r in rows)
    print(f"\n{len(rows) - failed - skipped} ok, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


def _cell(text: str) -> str:
    return ascii(text)[1:-1].replace("|", "\\|") if not text.isprintable() else \
        text.replace("|", "\\|")


ARGS = argparse.Namespace(fanout=40_000)
PYTHON = sys.executable

if __name__ == "__main__":
    sys.exit(main())
