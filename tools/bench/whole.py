"""The whole command from a file, beside ONNX Runtime opening the same file (issue 23).

    python -m tools.bench --whole [--sizes 100000,1000000] [--ort-max 1000000]
    python -m tools.bench --whole --zoo          # the zoo models, beside onnx-tool too
    python -m tools.bench --whole --files DIR|F.onnx ... [--repeats 5]   # model files

What a user waits for: a fresh process running ``graphmem plan FILE -o PLAN -q``, timed
from outside, beside a fresh process that imports onnxruntime and creates an
``InferenceSession`` (CPU provider) on the same file: its graph optimizations and its
own memory planning included, no inference. Both are timed in the same run, the
fastest of ``--repeats`` processes each (one at 1M nodes); peak RSS is each process's
high-water mark (VmHWM), read by the process itself at exit.

The graphs are written as ONNX files with onnx.helper, valid models that ONNX Runtime
loads (no value_info, so both tools infer every shape):

- chain: Relu/Neg alternating on [1, 64], the graph issue 23 measured;
- eltwise: Relu, Sigmoid, Tanh, Neg in turn on [1, 16, 56, 56];
- residual: blocks of 1x1 Conv 64->256, Relu, Conv 256->64, Add of the block's input,
  Relu on [1, 64, 28, 28] (two shared weights);
- random: a seeded random DAG of Relu, Add and Concat-then-Split over [1, 64, 28, 28]
  tensors, each reading one of the last 64;
- fanout: one input read by n Relu nodes, every output a graph output.

The section of docs/benchmarks.md between ``<!-- bench:whole -->`` markers is rewritten.
"""
from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

# onnx is imported only where a graph is built: a timed child process must not pay for
# an import that its tool does not make itself (ONNX Runtime does not import onnx)
FAMILIES = ("chain", "eltwise", "residual", "random", "fanout")
F = 1  # onnx.TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    from onnx import helper
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    # IR 8 goes with opset 17; onnx's newest IR may be newer than ONNX Runtime reads
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    from onnx import helper
    return helper.make_tensor_value_info(name, F, list(shape))


def chain(n: int) -> onnx.ModelProto:
    from onnx import helper
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Relu" if i % 2 == 0 else "Neg", [prev], [f"t{i}"],
                                      name=f"n{i}"))
        prev = f"t{i}"
    return _model(nodes, [_vi("x", [1, 64])], [_vi(prev, [1, 64])])


def eltwise(n: int) -> onnx.ModelProto:
    from onnx import helper
    ops = ("Relu", "Sigmoid", "Tanh", "Neg")
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node(ops[i % 4], [prev], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    shape = [1, 16, 56, 56]
    return _model(nodes, [_vi("x", shape)], [_vi(prev, shape)])


def residual(n: int) -> onnx.ModelProto:
    from onnx import helper, numpy_helper
    import numpy as np
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((256, 64, 1, 1)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 256, 1, 1)).astype(np.float32), "w2")
    nodes, x, i, channels = [], "x", 0, 64
    while i < n:
        cur = x
        for op, extra, width in (("Conv", "w1", 256), ("Relu", None, 256),
                                 ("Conv", "w2", 64), ("Add", "x", 64), ("Relu", None, 64)):
            if i >= n:
                break
            ins = [cur] + ([x if extra == "x" else extra] if extra else [])
            nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"n{i}"))
            cur, channels = f"t{i}", width
            i += 1
        x = cur
    # a block cut short may end on a 256-channel tensor
    return _model(nodes, [_vi("x", [1, 64, 28, 28])], [_vi(x, [1, channels, 28, 28])],
                  [w1, w2])


def random_dag(n: int, width: int = 64, seed: int = 0) -> onnx.ModelProto:
    from onnx import helper, numpy_helper
    import numpy as np
    rng = random.Random(seed)
    halves = numpy_helper.from_array(np.array([64, 64], dtype=np.int64), "halves")
    recent = ["x0", "x1", "x2", "x3"]
    nodes: list[onnx.NodeProto] = []
    while len(nodes) < n:
        i = len(nodes)
        a = recent[-1 - rng.randrange(min(width, len(recent)))]
        b = recent[-1 - rng.randrange(min(width, len(recent)))]
        op = rng.choice(("Relu", "Add", "Concat"))
        if op == "Relu":
            nodes.append(helper.make_node("Relu", [a], [f"t{i}"], name=f"n{i}"))
            recent.append(f"t{i}")
        elif op == "Add":
            nodes.append(helper.make_node("Add", [a, b], [f"t{i}"], name=f"n{i}"))
            recent.append(f"t{i}")
        else:  # Concat, then Split back into two [1, 64, 28, 28] tensors
            nodes.append(helper.make_node("Concat", [a, b], [f"c{i}"], axis=1, name=f"n{i}"))
            nodes.append(helper.make_node("Split", [f"c{i}", "halves"], [f"t{i}", f"u{i}"],
                                          axis=1, name=f"s{i}"))
            recent.extend((f"t{i}", f"u{i}"))
        if len(recent) > 4 * width:
            del recent[:-width]
    shape = [1, 64, 28, 28]
    return _model(nodes, [_vi(f"x{k}", shape) for k in range(4)], [_vi(recent[-1], shape)],
                  [halves])


def fanout(n: int) -> onnx.ModelProto:
    from onnx import helper
    nodes = [helper.make_node("Relu", ["x"], [f"y{i}"], name=f"n{i}") for i in range(n)]
    return _model(nodes, [_vi("x", [1, 64])], [_vi(f"y{i}", [1, 64]) for i in range(n)])


BUILD = {"chain": chain, "eltwise": eltwise, "residual": residual, "random": random_dag,
         "fanout": fanout}


# ------------------------------------------------------------------ the timed processes

def _peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(kind: str, path: str, out: str) -> None:
    """One timed process: ``graphmem`` runs ``graphmem plan``; ``ort`` opens a session."""
    if kind == "graphmem":  # as the graphmem command runs it (graphmem.cli.entry)
        from graphmem.cli import exit_now, main
        rc = main(["plan", path, "-o", out, "-q"])
        print(json.dumps({"peak_mib": _peak_mib()}))
        exit_now(rc)
    elif kind == "ort":
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.log_severity_level = 3
        ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    else:  # onnx-tool, as tools/bench/zoo.py runs it: shapes, then its memory compression
        import contextlib
        import io

        import numpy as np
        import onnx
        import onnx_tool
        from onnx import helper
        with contextlib.redirect_stdout(io.StringIO()):
            model = onnx.load(path, load_external_data=False)
            g = onnx_tool.Model(path).graph
            g.shape_infer({i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim],
                                            helper.tensor_dtype_to_np_dtype(
                                                i.type.tensor_type.elem_type))
                           for i in model.graph.input
                           if i.name not in {t.name for t in model.graph.initializer}})
            g.compress_memory(64)
    print(json.dumps({"peak_mib": _peak_mib()}))


# A process that takes longer than this is not run again: its noise is small beside it
REPEAT_UNDER = 20.0
# The children may write bytecode (a user's Python does; an environment that forbids it
# would make every graphmem process compile its modules again, while pip compiled
# onnxruntime's and onnx's at install), and graphmem's is written before timing.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def compile_graphmem() -> None:
    """Bytecode for graphmem's modules, as its first run on a machine leaves it."""
    import compileall
    from tools import ROOT
    for folder in ("graphmem", "passes"):
        compileall.compile_dir(str(ROOT / folder), quiet=1)


def timed(kind: str, path: Path, out: Path, repeats: int, timeout: float | None = None) -> dict:
    """The fastest of ``repeats`` processes (one when the first takes REPEAT_UNDER s);
    a process still running after ``timeout`` seconds is stopped and reported as such."""
    best = None
    for _ in range(repeats):
        if best is not None and best["s"] > REPEAT_UNDER:
            break
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", __spec__.name, "--child", kind, str(path),
                                   str(out)], capture_output=True, text=True, env=CHILD_ENV,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"timeout": timeout}
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:200]}
        row = {"s": wall, **json.loads(proc.stdout.strip().splitlines()[-1])}
        if best is None or row["s"] < best["s"]:
            best = row
    return best


def _cell(r: dict | None, key: str, fmt: str) -> str:
    if r is None:
        return "not run"
    if "error" in r:
        return "failed"
    if "timeout" in r:
        return f"> {r['timeout']:.0f}" if key == "s" else "-"
    return format(r[key], fmt)


def run(args) -> None:
    from tools.docs.sections import BENCHMARKS, environment, write_doc
    sizes = [int(s) for s in args.sizes.split(",")]
    compile_graphmem()
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphmem-whole-") as tmp:
        for n in sizes:
            for family in FAMILIES:
                path, out = Path(tmp) / f"{family}-{n}.onnx", Path(tmp) / "plan.json"
                path.write_bytes(BUILD[family](n).SerializeToString())
                repeats = args.repeats if n < 1_000_000 else 1
                gm = timed("graphmem", path, out, repeats)
                ort = (timed("ort", path, out, repeats, args.ort_timeout)
                       if n <= args.ort_max or (family == "chain" and n <= args.ort_chain_max)
                       else None)
                rows.append({"family": family, "nodes": n, "mb": path.stat().st_size / 2**20,
                             "graphmem": gm, "ort": ort})
                print(f"{family:9s} {n:>9,d}  graphmem {_cell(gm, 's', '.2f')} s "
                      f"{_cell(gm, 'peak_mib', '.0f')} MiB   ORT {_cell(ort, 's', '.2f')} s "
                      f"{_cell(ort, 'peak_mib', '.0f')} MiB", file=sys.stderr)
                path.unlink()
    table = ["| family | nodes | file MiB | **graphmem plan** s | ORT session s | "
             "graphmem / ORT | graphmem peak RSS MiB | ORT peak RSS MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        gm, ort = r["graphmem"], r["ort"]
        ok = ort and "error" not in ort and "error" not in gm and "timeout" not in gm
        ratio = ("" if not ok else f"< {gm['s'] / ort['timeout']:.2f}" if "timeout" in ort
                 else f"{gm['s'] / ort['s']:.2f}")
        table.append(f"| {r['family']} | {r['nodes']:,} | {r['mb']:.1f} | "
                     f"**{_cell(gm, 's', '.2f')}** | {_cell(ort, 's', '.2f')} | {ratio} | "
                     f"{_cell(gm, 'peak_mib', '.0f')} | {_cell(ort, 'peak_mib', '.0f')} |")
    body = "\n".join([
        "## The whole command from a file, beside ONNX Runtime", "",
        environment(), "",
        "Fresh processes, timed from outside: `graphmem plan FILE -o PLAN -q` (load, "
        "shape inference, checks, the default passes, validation, writing the plan) "
        "beside a process that imports onnxruntime and creates an `InferenceSession` "
        "(CPU provider, default graph optimizations) on the same file. graphmem's modules "
        "are compiled to bytecode first, as its first run leaves them (pip compiled "
        "onnxruntime's at install). Fastest of "
        f"{args.repeats} processes below 1M nodes (one where a process takes over "
        f"{REPEAT_UNDER:.0f} s), one run at 1M. ONNX Runtime is "
        f"timed up to {args.ort_max:,} nodes (the chain up to {args.ort_chain_max:,}), "
        + (f"stopped after {args.ort_timeout:.0f} s ('> {args.ort_timeout:.0f}')"
           if args.ort_timeout else "without a time limit")
        + ". The graphs are described in tools/bench/whole.py.", "",
        "\n".join(table), ""])
    print(body)
    if not args.no_write:
        write_doc(BENCHMARKS, "bench:whole", body)
        print("wrote docs/benchmarks.md", file=sys.stderr)


def run_zoo(args) -> None:
    """Each zoo model: the whole ``graphmem plan`` process beside ORT's and onnx-tool's."""
    from tools.docs.sections import BENCHMARKS, environment, write_doc

    from graphmem.frontend.zoo import ZOO, zoo_path
    names = args.models.split(",") if args.models else list(ZOO)
    compile_graphmem()
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphmem-whole-") as tmp:
        out = Path(tmp) / "plan.json"
        for name in names:
            path = zoo_path(name)
            row = {"model": name, **{kind: timed(kind, path, out, args.repeats)
                                     for kind in ("graphmem", "ort", "onnx-tool")}}
            rows.append(row)
            print(f"{name:14s} " + "  ".join(f"{k} {_cell(row[k], 's', '.2f')} s"
                                             for k in ("graphmem", "ort", "onnx-tool")),
                  file=sys.stderr)
    table = ["| model | **graphmem plan** s | ORT session s | onnx-tool s | "
             "graphmem / ORT | peak RSS MiB: graphmem | ORT | onnx-tool |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        gm, ort = r["graphmem"], r["ort"]
        ratio = f"{gm['s'] / ort['s']:.2f}" if "error" not in gm and "error" not in ort else ""
        table.append(f"| {r['model']} | **{_cell(gm, 's', '.2f')}** | "
                     f"{_cell(ort, 's', '.2f')} | {_cell(r['onnx-tool'], 's', '.2f')} | "
                     f"{ratio} | {_cell(gm, 'peak_mib', '.0f')} | "
                     f"{_cell(ort, 'peak_mib', '.0f')} | "
                     f"{_cell(r['onnx-tool'], 'peak_mib', '.0f')} |")
    body = "\n".join([
        "## The zoo: whole processes", "",
        environment(), "",
        "Fresh processes timed from outside, the fastest of "
        f"{args.repeats} each: `graphmem plan MODEL -o PLAN -q`; a process that imports "
        "onnxruntime and creates an `InferenceSession` (CPU provider) on the model; a "
        "process that runs onnx-tool's shape inference and memory compression on it. "
        "Python's own start and each tool's imports are part of what a user waits for, "
        "and are included (graphmem's modules compiled to bytecode first, as its first "
        "run leaves them): `import onnx` alone, as a process, takes 0.16-0.19 s here.", "",
        "\n".join(table), ""])
    print(body)
    if not args.no_write:
        write_doc(BENCHMARKS, "bench:whole-zoo", body)
        print("wrote docs/benchmarks.md", file=sys.stderr)


def _load_average() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def file_list(paths) -> list[Path]:
    """The files named, a folder standing for its ``*.onnx`` (sorted by name)."""
    out = []
    for p in map(Path, paths):
        out.extend(sorted(p.glob("*.onnx")) if p.is_dir() else [p])
    return out


def interleaved(paths: list[Path], out: Path, repeats: int) -> list[dict]:
    """Each file's fastest ``graphmem plan`` process and fastest ONNX Runtime session
    process over ``repeats`` rounds; every round runs each file's two processes one
    after the other (which goes first alternates), so both see the same machine."""
    best: dict[tuple[Path, str], dict] = {}
    for r in range(repeats):
        for path in paths:
            kinds = ("graphmem", "ort") if r % 2 == 0 else ("ort", "graphmem")
            for kind in kinds:
                if "error" in best.get((path, kind), {}):
                    continue
                row = timed(kind, path, out, 1)
                old = best.get((path, kind))
                if old is None or "error" in row or row["s"] < old["s"]:
                    best[(path, kind)] = row
            print(f"round {r + 1} {path.name:40s} graphmem "
                  f"{_cell(best[(path, 'graphmem')], 's', '.2f')} s  ORT "
                  f"{_cell(best[(path, 'ort')], 's', '.2f')} s", file=sys.stderr, flush=True)
    return [{"file": p.name, "mb": p.stat().st_size / 2**20,
             "graphmem": best[(p, "graphmem")], "ort": best[(p, "ort")]} for p in paths]


def run_files(args) -> None:
    """Model files (the speed bar of issue 33): the whole ``graphmem plan`` process
    beside ONNX Runtime opening the same file, interleaved, the fastest of
    ``--repeats`` rounds each."""
    from tools.docs.sections import BENCHMARKS, environment, write_doc
    paths = file_list(args.files)
    if not paths:
        sys.exit("no .onnx files there")
    compile_graphmem()
    load_before = _load_average()
    with tempfile.TemporaryDirectory(prefix="graphmem-whole-") as tmp:
        rows = interleaved(paths, Path(tmp) / "plan.json", args.repeats)
    load_after = _load_average()
    table = ["| file | MiB | **graphmem plan** s | ORT session s | graphmem / ORT | "
             "peak RSS MiB: graphmem | ORT |", "|---|---:|---:|---:|---:|---:|---:|"]
    slower = []
    for r in rows:
        gm, ort = r["graphmem"], r["ort"]
        ok = "error" not in gm and "error" not in ort
        ratio = f"{gm['s'] / ort['s']:.2f}" if ok else ""
        if ok and gm["s"] > ort["s"]:
            slower.append(r["file"])
        table.append(f"| {r['file']} | {r['mb']:.0f} | **{_cell(gm, 's', '.2f')}** | "
                     f"{_cell(ort, 's', '.2f')} | {ratio} | {_cell(gm, 'peak_mib', '.0f')} | "
                     f"{_cell(ort, 'peak_mib', '.0f')} |")
    errors = [f"- {r['file']} ({kind}): {r[kind]['error']}" for r in rows
              for kind in ("graphmem", "ort") if "error" in r[kind]]
    body = "\n".join([
        "## Real model files: whole processes", "",
        environment(), "",
        "Fresh processes timed from outside on model files with their weights: the files "
        "of `python -m tools.corpus.speed_files build` (the sources of tools/corpus/deployment_corpus.py -- "
        "ResNet-50, a BERT-base-sized encoder, the GPT-2 decode step and the genai-style "
        "decoder -- in their fp32, fp16, int8 dynamic, int8 and int16 QDQ and int4 forms, "
        "each bound to static dims, with ONNX Runtime's optimizer's own saved graph of "
        "each at EXTENDED and ALL, and the transformer optimizer's form of the encoders), "
        "and where named the full-size torch exports of `tools/corpus/export_fullsize.py` with "
        "the forms `python -m tools.corpus.deploy_forms fullsize` writes (`-ts`/`-dynamo`: the exporter; "
        "`static`: dims bound; `fp16`, `qdq-int8`, `int8-dynamic`, `int4`, `transformers`, "
        "`transformers-int8`, `transformers-gpu-fp16`, `ort-basic`, `ort-extended`, `ort-all`): "
        "`graphmem plan FILE "
        "-o PLAN -q` "
        "beside a process that imports onnxruntime and creates an `InferenceSession` (CPU "
        "provider, default optimizations) on the same file. Interleaved: each of "
        f"{args.repeats} rounds runs every file's two processes one after the other (which "
        "goes first alternates), and each keeps its fastest. graphmem's modules are "
        "compiled to bytecode first. The machine is shared: load average (1/5/15 min) "
        f"{load_before} before the run, {load_after} after.", "",
        "\n".join(table), "",
        (f"graphmem is slower than ONNX Runtime on: {', '.join(slower)}." if slower else
         "graphmem is no slower than ONNX Runtime on any of these files."),
        *([""] + errors if errors else []), ""])
    print(body)
    if not args.no_write:
        write_doc(BENCHMARKS, "bench:whole-files", body)
        print("wrote docs/benchmarks.md", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:5])
    else:
        sys.exit("run it through python -m tools.bench --whole")
