"""graphmem side by side with onnx-tool and ONNX Runtime on the zoo, and at scale.

    python -m tools.bench                  # all nine zoo models, all planners; docs/benchmarks.md
    python -m tools.bench --scale          # planning time vs graph size; docs/benchmarks.md + SVG
    python -m tools.bench --whole          # the whole command from a file beside ORT (--zoo)
    python -m tools.bench --models resnet50,squeezenet --no-write

Each run rewrites only its own section of docs/benchmarks.md, between
``<!-- bench:zoo -->`` / ``<!-- /bench:zoo -->`` (or ``bench:scale``); other
sections of the file are kept as they are.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path


import numpy as np
import onnx
from onnx import helper, numpy_helper

import graphmem
from graphmem.core.order import file_order
from graphmem.frontend.folding import evaluate_constants
from graphmem.frontend.reader import read_model
from graphmem.frontend.zoo import ZOO, zoo_path
from graphmem.passes.registry import PASSES
from graphmem.passes.placement.search import (SHORT, STRATEGIES, max_live,
                                              place_records)
from graphmem.plan.io import write_atomic
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.groups import group_records, group_table

from tools import ROOT

from tools.docs.sections import BENCHMARKS, environment, write_doc

MIB = 2 ** 20


# ------------------------------------------------------------------ the same graph for everyone

def folded_model(path: Path, graph) -> onnx.ModelProto:
    """The model as graphmem plans it: folded constants become initializers.

    The zoo graphs compute their weights with ConstantOfShape at run time;
    graphmem folds those into weights, so the peers get the folded graph too
    (otherwise every weight would count as an activation for them).
    """
    model = read_model(path, load_weights=True)
    folded = [model.graph.node[i] for i in sorted(graph.folded_nodes)]
    values = evaluate_constants(model, folded, graph.tensors, base_dir=str(path.parent))
    keep = [model.graph.node[n.index] for n in graph.nodes]
    reads = {t for n in keep for t in n.input if t}
    inits = [i for i in model.graph.initializer if i.name in reads]
    have = {i.name for i in inits}
    inits += [numpy_helper.from_array(np.asarray(values[c]), c) for c in graph.constants
              if c in reads and c not in have]
    g = helper.make_graph(keep, model.graph.name,
                          [i for i in model.graph.input if i.name in graph.inputs],
                          list(model.graph.output), inits, value_info=list(model.graph.value_info))
    return helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)


# ------------------------------------------------------------------ the planners

def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def intermediates_arena(graph, alignment: int = 64) -> int:
    """graphmem's arena with graph inputs and outputs left to the caller, as ORT sees them:
    the in-place pass, then the storage groups that hold no graph input or output placed."""
    ctx = Context.for_order(graph, file_order(graph), alignment)
    a, _ = PASSES["inplace"](ctx, Assignment())
    tab = group_table(ctx, a)
    io = np.zeros(len(ctx.names), dtype=bool)
    io[ctx.index.inputs] = True
    io[ctx.index.outputs[ctx.index.outputs < len(io)]] = True
    held = np.zeros(len(tab.start), dtype=bool)
    held[tab.group[io]] = True
    recs = [r for r in group_records(ctx, tab)[0] if not held[r.id]]
    return place_records(recs, "best", alignment)[1]


def onnx_tool_arena(path: Path, model: onnx.ModelProto) -> tuple[int | None, float, str]:
    """onnx-tool's activation memory compression (``Graph.compress_memory``), 64-byte padding."""
    try:
        import onnx_tool
    except ImportError:
        return None, 0.0, "onnx-tool not installed (pip install '.[bench]')"
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        m = onnx_tool.Model(str(path))
        g = m.graph
        shapes = {}
        for i in model.graph.input:
            dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
            dtype = helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
            shapes[i.name] = np.zeros(dims, dtype)
        g.shape_infer(shapes)
        _, seconds = timed(g.compress_memory, 64)
        _, size = g.compress_memory(64)
    return int(size), seconds, ""


def bench_model(name: str, time_limit: float, tmp: Path) -> dict:
    path = zoo_path(name)
    graph, load_s = timed(graphmem.load, path)
    row: dict = {"model": name, "nodes": len(graph.nodes), "load_s": load_s}
    res, row["graphmem_s"] = timed(graphmem.plan_graph, graph)
    s = res.plan.stats
    row.update(naive=s["naive_bytes"], unaliased=s["unaliased_peak_bytes"],
               aliased=s["aliased_peak_bytes"], graphmem=s["arena_bytes"],
               strategy=res.assignment.strategy)
    naive, row["naive_s"] = timed(graphmem.plan_graph, graph, [])
    assert naive.plan.arena_bytes >= s["naive_bytes"]
    for strat in STRATEGIES:
        r, t = timed(graphmem.plan_graph, graph, placement=strat)
        row[strat], row[strat + "_s"] = r.plan.arena_bytes, t
    r, row["optimal_s"] = timed(graphmem.plan_graph, graph, placement="optimal",
                                time_limit=time_limit)
    place = next(p for p in r.reports if p.name == "place").detail
    # the bound and gap of the arena the plan reports (the solver's own are of the
    # placement without Concat slices, which a heuristic with them may beat)
    from graphmem.commands.plan import placement_bound
    bound = placement_bound(place, r.plan)
    row.update(optimal=r.plan.arena_bytes, optimal_proven=bound["proven"],
               optimal_gap=bound["gap"])
    r, row["share_s"] = timed(graphmem.plan_graph, graph, ["inplace", "share"])
    row["share"] = r.plan.arena_bytes
    row["graphmem_io"], row["graphmem_io_s"] = timed(intermediates_arena, graph)

    model = folded_model(path, graph)
    folded_path = tmp / f"{name}.onnx"
    write_atomic(folded_path, model.SerializeToString())
    row["onnx_tool"], row["onnx_tool_s"], row["onnx_tool_note"] = onnx_tool_arena(folded_path, model)
    from tools.bench import ort_pattern
    for opt in ("off", "on"):
        m = ort_pattern.measure(folded_path, opt == "on")
        row[f"ort_{opt}"] = m.get("pattern_bytes")
        row[f"ort_{opt}_s"] = m.get("session_seconds")
        row[f"ort_{opt}_other"] = m.get("other_bytes")
        row[f"ort_{opt}_note"] = m.get("error", "")
        row["ort_version"] = m.get("version", row.get("ort_version"))
    folded_path.unlink()
    return row


# ------------------------------------------------------------------ heuristics vs the exact placement

# (nodes, width, seed) of the random DAGs (tools/bench/scale.py) used as small references
OPTIMAL_CASES = ((60, 8, 5), (100, 8, 0), (150, 8, 3), (200, 16, 1), (300, 16, 2))
# a literal (bytes in units of 64, first, last) where every heuristic needs 12 units and
# the optimum is 11 (tests/test_place_exact.py checks it by brute force)
HARD = ((5, 0, 3), (4, 0, 1), (4, 4, 5), (3, 4, 4), (2, 1, 2), (4, 3, 4))


def optimal_reference(time_limit: float) -> str:
    """Each strategy, the default (best + hill climbing) and the exact placement on small random DAGs."""
    from graphmem.passes.placement.optimal import place_optimal
    from tools.bench import scale
    lines = ["| graph | buffers | overlapping pairs | floor (max live) | "
             + " | ".join(SHORT[s] for s in STRATEGIES)
             + " | graphmem default | optimal (CP-SAT) | proven? | CP-SAT s |",
             "|---|---:|---:|---:|" + "---:|" * len(STRATEGIES) + "---:|---:|---|---:|"]
    from graphmem.planning.groups import Record
    cases = [("literal of tests/test_place_exact.py",
              [Record(i, 64 * b, f, last) for i, (b, f, last) in enumerate(HARD)])]
    for n, width, seed in OPTIMAL_CASES:
        graph = scale.random_dag(n, width, seed)
        res = graphmem.plan_graph(graph, ["inplace"])
        ctx = Context.for_order(graph, res.plan.order, 64)
        cases.append((f"random DAG n={n} w={width} seed={seed}",
                      group_records(ctx, res.assignment.groups)[0]))
    for label, recs in cases:
        floor = max_live(recs)
        singles = [place_records(recs, s, 64)[1] for s in STRATEGIES]
        default = place_records(recs, "best", 64)
        exact = place_optimal(recs, 64, time_limit)

        def pct(v):
            return f"{v / floor * 100 - 100:+.1f}%"
        proven = "yes" if exact.optimal else f"no, gap {exact.gap * 100:.2f}%"
        values = [*singles, default[1], exact.total]
        cells = [f"**{pct(v)}**" if v == min(values) else pct(v) for v in values]
        lines.append(f"| {label} | {len(recs)} | {exact.pairs} | {floor:,} B | "
                     + " | ".join(cells) + f" | {proven} | {exact.seconds:.1f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ tables

def mib(v) -> str:
    return "n/a" if v is None else f"{v / MIB:.2f}"


def ms(v) -> str:
    return "n/a" if v is None else f"{v * 1000:.0f}" if v >= 0.0995 else f"{v * 1000:.1f}"


def zoo_tables(rows: list[dict]) -> tuple[str, list[str]]:
    a_cols = ["graphmem", *STRATEGIES, "optimal", "share", "onnx_tool"]
    head = ("| model | nodes | naive | unaliased peak | aliased peak | **graphmem** | "
            + " | ".join(f"{SHORT[s]} only" for s in STRATEGIES)
            + " | optimal | MXNet share | onnx-tool |")
    lines = ["Whole arena, graph inputs and outputs included (MiB):", "", head,
             "|---|---:|" + "---:|" * (len(a_cols) + 3)]
    notes = []
    for r in rows:
        best = min(r[c] for c in a_cols if r.get(c) is not None)
        cells = []
        for c in a_cols:
            v = mib(r.get(c))
            if c == "optimal" and r.get("optimal") is not None:
                v += "" if r["optimal_proven"] else f" (gap {r['optimal_gap'] * 100:.1f}%)"
            cells.append(f"**{v}**" if r.get(c) == best else v)
        lines.append(f"| {r['model']} | {r['nodes']} | {mib(r['naive'])} | {mib(r['unaliased'])} "
                     f"| {mib(r['aliased'])} | " + " | ".join(cells) + " |")
        if r["graphmem"] > best:
            notes.append(f"{r['model']}: graphmem {mib(r['graphmem'])} MiB is not the smallest "
                         f"({mib(best)} MiB).")
    lines += ["", "Intermediates only, graph inputs and outputs held by the caller, as ONNX "
              "Runtime plans them (MiB):", "",
              "| model | **graphmem** | ORT, optimizations off | ORT, optimizations on "
              "| ORT other run-time allocations (off / on) |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        vals = [r["graphmem_io"], r.get("ort_off"), r.get("ort_on")]
        best = min(v for v in vals if v is not None)
        cells = [f"**{mib(v)}**" if v == best else mib(v) for v in vals]
        lines.append(f"| {r['model']} | " + " | ".join(cells)
                     + f" | {mib(r.get('ort_off_other'))} / {mib(r.get('ort_on_other'))} |")
        if r.get("ort_off") is not None and r["graphmem_io"] > r["ort_off"]:
            notes.append(f"{r['model']}: ORT with optimizations off needs {mib(r['ort_off'])} MiB, "
                         f"graphmem {mib(r['graphmem_io'])} MiB for the same graph.")
        if r.get("ort_on") is not None and r["graphmem_io"] > r["ort_on"]:
            notes.append(f"{r['model']}: ORT with optimizations on needs {mib(r['ort_on'])} MiB, "
                         f"graphmem {mib(r['graphmem_io'])} MiB: ORT plans its fused graph "
                         f"(Conv+Relu, Conv+Add+Relu, ... in one kernel), which has fewer "
                         f"intermediates; graphmem plans the graph as given. Planning the "
                         f"fused graph (or an ORT-optimized model file) would close it.")
        for opt in ("off", "on"):
            if r.get(f"ort_{opt}_note"):
                notes.append(f"{r['model']}: ORT {opt}: {r[f'ort_{opt}_note']}")
        if r.get("onnx_tool_note"):
            notes.append(f"{r['model']}: onnx-tool: {r['onnx_tool_note']}")
    t_cols = ["graphmem_s", *[s + "_s" for s in STRATEGIES], "optimal_s", "share_s", "naive_s",
              "onnx_tool_s", "ort_off_s", "ort_on_s"]
    lines += ["", "Planning time (ms; graphmem columns include its own validation of the plan, "
              "load excluded; onnx-tool: `compress_memory` alone; ORT: the whole session "
              "creation, which includes its planner but also kernel creation and, when on, "
              "graph optimization):", "",
              "| model | load | **graphmem** | " + " | ".join(f"{SHORT[s]} only" for s in STRATEGIES)
              + " | optimal | MXNet share | naive | onnx-tool | ORT off | ORT on |",
              "|---|---:|" + "---:|" * len(t_cols)]
    for r in rows:
        lines.append(f"| {r['model']} | {ms(r['load_s'])} | "
                     + " | ".join(ms(r.get(c)) for c in t_cols) + " |")
    return "\n".join(lines), notes


# ------------------------------------------------------------------ the doc

ZOO_METHOD = """\
### How each figure is made

All planners see the same graph: graphmem's, the zoo model with its constant
subgraphs (the zoo computes its weights with `ConstantOfShape`) folded into
initializers; that folded model is written to a temporary file and given to
onnx-tool and ONNX Runtime. Execution order: the file's. Alignment: 64 bytes.

- **naive**: one buffer per tensor. **unaliased peak**: the largest total of tensor
  bytes live at one step, every tensor counted alone (no bound: aliases share bytes,
  so the arena is often smaller). **aliased peak**: the same with every group
  of aliased tensors (views, in-place) counted once: with graphmem's aliasing, no
  arena for this order can be smaller.
- **graphmem**: `graphmem.plan_graph(graph)`, the default passes (inplace, share,
  place with the best of all strategies). **X only**: `--placement X`.
  **optimal**: `--placement optimal --time-limit T`, the exact offsets for
  this order and these aliases (passes/placement/optimal.py, CP-SAT), warm-started by the
  heuristics; where the heuristic already reaches the aliased peak no solver is
  needed (it is the optimum). A gap is printed where the optimum was not proven.
- **MXNet share**: graphmem's inplace + share passes without placement, the
  storage pool of MXNet's `plan_memory` (sum of the storage blocks).
- **onnx-tool**: `onnx_tool.Model(path).graph.shape_infer(...)` then
  `graph.compress_memory(64)`, which returns the compressed activation size
  (inputs and outputs included; 64-byte padding like ours).
- **ORT**: ONNX Runtime CPU's own allocation planner and memory pattern
  (tools/bench/ort_pattern.py, one subprocess per figure). The CPU arena is on, with
  `arena_extend_strategy` kSameAsRequested (each arena region is exactly one
  request), one thread, sequential execution, VERBOSE logging; graph inputs and
  outputs are pre-bound with IOBinding, so they are outside the pattern. Run 0
  builds the memory pattern and ends with arena shrinkage
  (`memory.enable_memory_arena_shrinkage`), so run 1 starts with an empty arena:
  its first `Extending BFCArena ... (requested) num_bytes: N` line is the
  memory-pattern block holding every intermediate. Run 2 must repeat N to the byte
  or the figure is refused (n/a). Allocations after the block in the same run are
  kernel scratch space (im2col buffers, ...) and are listed separately, not
  counted. Without the shrinkage the block can fit into regions run 0 left free,
  and no extension is logged. graphmem's figure in that table is its arena when
  graph inputs and outputs are left out of it, as they are left out of ORT's.
"""


def run_zoo(args) -> None:
    names = args.models.split(",") if args.models else list(ZOO)
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphmem-bench-") as tmp:
        for name in names:
            if name not in ZOO:
                sys.exit(f"graphmem: unknown zoo model {name!r}; choose from {', '.join(ZOO)}")
            t0 = time.perf_counter()
            rows.append(bench_model(name, args.time_limit, Path(tmp)))
            print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    tables, notes = zoo_tables(rows)
    reference = optimal_reference(args.time_limit)
    total = time.perf_counter() - start
    body = "\n".join([
        "## The zoo: graphmem, onnx-tool and ONNX Runtime side by side", "",
        environment() + f" Whole run: {total:.0f} s. MiB = 2^20 bytes; the smallest "
        "figure of each row is bold.", "", tables, "",
        "### Where graphmem is not the smallest", "",
        "\n".join(f"- {n}" for n in notes) if notes else "- nowhere: graphmem's figure is the "
        "smallest (or tied) on every model in both tables.", "",
        "### Heuristics against the exact placement", "",
        "On the zoo every graph is at its floor (the aliased peak) already, so the exact placement only "
        "confirms it. Off the floor, on small random DAGs (tools/bench/scale.py `random_dag`, "
        "after the inplace pass): arena above the max-live floor for each strategy alone, "
        f"graphmem's default (best of all, then hill climbing) and the exact placement "
        f"(passes/placement/optimal.py, CP-SAT, {args.time_limit:g} s limit, warm-started by the "
        "default; 'proven' means its lower bound meets the arena).", "",
        reference, "", ZOO_METHOD])
    print(body)
    if not args.no_write:
        write_doc(BENCHMARKS, "bench:zoo", body)
        print(f"wrote {BENCHMARKS.relative_to(ROOT)}", file=sys.stderr)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--scale", action="store_true", help="planning time vs graph size")
    ap.add_argument("--models", help="comma-separated zoo models (default: all nine)")
    ap.add_argument("--time-limit", type=float, default=10.0,
                    help="seconds for each exact (--placement optimal) placement (default 10)")
    ap.add_argument("--sizes", default="1000,10000,100000,1000000",
                    help="node counts for --scale (default 1k, 10k, 100k, 1M)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    ap.add_argument("--whole", action="store_true",
                    help="the whole 'graphmem plan' process from a file beside ONNX Runtime "
                         "opening it (tools/bench/whole.py); with --zoo on the zoo, onnx-tool too")
    ap.add_argument("--zoo", action="store_true", help="with --whole: the zoo models")
    ap.add_argument("--files", nargs="+", metavar="PATH",
                    help="with --whole: these model files (a folder: its *.onnx), "
                         "interleaved with ONNX Runtime (tools/corpus/speed_files.py builds them)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="with --whole: processes per measurement, the fastest kept")
    ap.add_argument("--ort-max", type=int, default=100_000,
                    help="with --whole: time ONNX Runtime up to this many nodes")
    ap.add_argument("--ort-chain-max", type=int, default=1_000_000,
                    help="with --whole: ... and on the chain up to this many")
    ap.add_argument("--ort-timeout", type=float, default=None, metavar="SECONDS",
                    help="with --whole: stop an ONNX Runtime process after this long "
                         "(its session on a 100k-node residual net took 536 s)")
    args = ap.parse_args(argv)
    if args.whole:
        from tools.bench import whole
        if args.sizes == ap.get_default("sizes"):
            args.sizes = "100000,1000000"
        (whole.run_files if args.files else whole.run_zoo if args.zoo else whole.run)(args)
    elif args.scale:
        from tools.bench import scale
        scale.run(args)
    else:
        run_zoo(args)


if __name__ == "__main__":
    main()
