"""Planning time vs graph size on synthetic graphs built directly as graphmem IR.

    python -m tools.bench --scale [--sizes 1000,10000,100000,1000000] [--no-write]
    python -m tools.bench.scale FAMILY NODES     # one measurement, JSON (used by the above)

Six families (all deterministic): ``chain`` (Conv, Relu, Conv, ... with varying
channel counts), ``eltwise`` (one run of element-wise ops, Relu, Sigmoid, Tanh, ...,
each of which may overwrite its input: one in-place group as long as the graph),
``residual`` (ResNet-style blocks: Conv, Relu, Conv, Add with the
block input, Relu), ``random`` (a wide random DAG: each node reads one or two of
the last 64 tensors, random sizes, random ops) and ``transformer`` (a layer stack:
LayerNorm, Q/K/V MatMuls, Transpose, scores, Softmax, context, projection,
residual Add, LayerNorm, MLP up, Gelu, down, residual Add, and one attention mask
read by every layer) and ``fanout`` (Relu nodes all reading one input, every output a
graph output: all buffers live at once). Each measurement runs in its own process so its peak RSS
is its own (below 1M nodes the fastest of three such processes); the time is ``graphmem.plan_graph(graph)`` with the default passes and
the plan's validation (load, i.e. building the graph, excluded).
"""
from __future__ import annotations

import json
import math
import random
import resource
import subprocess
import sys
import time


from graphmem.core.ir import Graph, Node, Tensor

FAMILIES = ("chain", "eltwise", "residual", "random", "transformer", "fanout")
# Timings on a shared machine move by a quarter between runs of the same code: below
# REPEAT_BELOW nodes each measurement is the fastest of REPEATS fresh processes (as
# timeit takes the minimum); the 1M-node ones run once.
REPEATS = 3
REPEAT_BELOW = 1_000_000


class _Builder:
    """Append nodes and tensors; weights are shared so they cost nothing."""

    def __init__(self, name: str):
        self.name = name
        self.nodes: list[Node] = []
        self.tensors: dict[str, Tensor] = {}
        self.weights: set[str] = set()

    def tensor(self, name: str, shape: tuple[int, ...]) -> str:
        self.tensors[name] = Tensor(name, "float32", shape, 32)
        return name

    def weight(self, name: str) -> str:
        if name not in self.weights:
            self.weights.add(name)
            self.tensor(name, (64, 64))
        return name

    def node(self, op: str, inputs: tuple[str, ...], out: str, shape: tuple[int, ...]) -> str:
        self.tensor(out, shape)
        i = len(self.nodes)
        self.nodes.append(Node(i, f"n{i}", op, "", inputs, (out,)))
        return out

    def graph(self, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> Graph:
        return Graph(self.name, tuple(self.nodes), self.tensors, inputs, outputs,
                     frozenset(self.weights), (), opset=17, node_count=len(self.nodes))


def chain(n: int) -> Graph:
    b = _Builder("chain")
    x = b.tensor("x", (1, 16, 56, 56))
    w = b.weight("w")
    channels = (16, 32, 24, 64, 48)
    for i in range(n):
        if i % 2 == 0:
            x = b.node("Conv", (x, w), f"t{i}", (1, channels[(i // 2) % 5], 56, 56))
        else:
            x = b.node("Relu", (x,), f"t{i}", b.tensors[x].shape)
    return b.graph(("x",), (x,))


def eltwise(n: int) -> Graph:
    b = _Builder("eltwise")
    x = b.tensor("x", (1, 16, 56, 56))
    ops = ("Relu", "Sigmoid", "Tanh", "Neg")
    for i in range(n):
        x = b.node(ops[i % len(ops)], (x,), f"t{i}", (1, 16, 56, 56))
    return b.graph(("x",), (x,))


def fanout(n: int) -> Graph:
    """n Relu nodes reading one input, each output a graph output: every buffer live at
    once, so the pairs of buffers live together grow as n^2 (issue 25)."""
    b = _Builder("fanout")
    b.tensor("x", (1, 64))
    outs = tuple(b.node("Relu", ("x",), f"y{i}", (1, 64)) for i in range(n))
    return b.graph(("x",), outs)


def residual(n: int) -> Graph:
    b = _Builder("residual")
    x = b.tensor("x", (1, 64, 28, 28))
    w = b.weight("w")
    i = 0
    while i < n:
        shape = b.tensors[x].shape
        wide = (1, 4 * shape[1], shape[2], shape[3])
        steps = [("Conv", lambda cur: (cur, w), wide), ("Relu", lambda cur: (cur,), wide),
                 ("Conv", lambda cur: (cur, w), shape), ("Add", lambda cur: (cur, x), shape),
                 ("Relu", lambda cur: (cur,), shape)]
        cur = x
        for op, ins, shp in steps:
            if i >= n:
                break
            cur = b.node(op, ins(cur), f"t{i}", shp)
            i += 1
        x = cur
    return b.graph(("x",), (x,))


def random_dag(n: int, width: int = 64, seed: int = 0) -> Graph:
    rng = random.Random(seed)
    b = _Builder("random")
    w = b.weight("w")
    recent = [b.tensor(f"x{k}", (1, 8 * rng.randrange(1, 9), 28, 28)) for k in range(4)]
    inputs = tuple(recent)
    for i in range(n):
        a = recent[-1 - rng.randrange(min(width, len(recent)))]
        op = rng.choice(("Conv", "Conv", "Relu", "Add", "Concat"))
        if op == "Conv":
            out = b.node(op, (a, w), f"t{i}", (1, 8 * rng.randrange(1, 9), 28, 28))
        elif op == "Relu":
            out = b.node(op, (a,), f"t{i}", b.tensors[a].shape)
        else:
            c = recent[-1 - rng.randrange(min(width, len(recent)))]
            if op == "Add":
                out = b.node("Add", (a, c), f"t{i}", b.tensors[a].shape)
            else:
                ch = b.tensors[a].shape[1] + b.tensors[c].shape[1]
                out = b.node("Concat", (a, c), f"t{i}", (1, ch, 28, 28))
        recent.append(out)
        if len(recent) > 4 * width:
            del recent[:-width]
    return b.graph(inputs, (recent[-1],))


def transformer(n: int, seq: int = 128, hidden: int = 256, heads: int = 4) -> Graph:
    b = _Builder("transformer")
    x = b.tensor("x", (seq, hidden))
    mask = b.tensor("mask", (heads, seq, seq))
    w = b.weight("w")
    hs, att = (seq, hidden), (heads, seq, seq)
    layer = [("LayerNormalization", "x", hs), ("MatMul", "ln", hs), ("MatMul", "ln", hs),
             ("MatMul", "ln", hs), ("Transpose", "k", hs), ("MatMul", "qk", att),
             ("Add", "scores+mask", att), ("Softmax", "prev", att), ("MatMul", "pv", hs),
             ("MatMul", "prev", hs), ("Add", "prev+x", hs), ("LayerNormalization", "prev", hs),
             ("MatMul", "prev", (seq, 4 * hidden)), ("Gelu", "prev", (seq, 4 * hidden)),
             ("MatMul", "prev", hs), ("Add", "prev+mid", hs)]
    i = 0
    while i < n:
        got: dict[str, str] = {}
        prev = x
        for k, (op, src, shape) in enumerate(layer):
            if i >= n:
                break
            if src == "x":
                ins = (x,)
            elif src == "ln":
                ins = (got["ln"], w)
            elif src == "k":
                ins = (got["k"],)
            elif src == "qk":
                ins = (got["q"], got["kt"])
            elif src == "scores+mask":
                ins = (prev, mask)
            elif src == "pv":
                ins = (prev, got["v"])
            elif src == "prev+x":
                ins = (prev, x)
            elif src == "prev+mid":
                ins = (prev, got["mid"])
            else:
                ins = (prev, w) if op == "MatMul" else (prev,)
            prev = b.node(op, ins, f"t{i}", shape)
            i += 1
            name = {0: "ln", 1: "q", 2: "k", 3: "v", 4: "kt", 10: "mid"}.get(k)
            if name:
                got[name] = prev
        x = prev
    return b.graph(("x", "mask"), (x,))


BUILD = {"chain": chain, "eltwise": eltwise, "residual": residual, "random": random_dag,
         "transformer": transformer, "fanout": fanout}


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2 ** 20


def _peak_rss_mib() -> float:
    """This process's RSS high-water mark. VmHWM, not ru_maxrss: ru_maxrss survives
    execve, so a child would report its parent's peak when that is larger."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_one(family: str, n: int) -> dict:
    """Build one graph and plan it (in this process); times in seconds, memory in MiB."""
    import graphmem
    t0 = time.perf_counter()
    graph = BUILD[family](n)
    build_s = time.perf_counter() - t0
    before = _rss_mib()
    result = graphmem.plan_graph(graph)
    peak = _peak_rss_mib()
    check = reference_workload()  # the machine's speed at this moment (after the peak)
    stats = result.plan.stats
    passes = {r.name: round(r.seconds, 3) for r in result.reports}
    reordered = any(r.detail.get("reordered") for r in result.reports if r.name == "reorder")
    return {"family": family, "nodes": len(graph.nodes), "tensors": len(result.plan.tensors),
            "build_s": build_s, "plan_s": result.seconds, "passes_s": passes,
            "rss_before_mib": before, "peak_rss_mib": peak,
            "arena_over_peak": stats["arena_bytes"] / stats["aliased_peak_bytes"],
            "strategy": result.assignment.strategy, "reordered": reordered,
            "check_s": check}


def reference_workload(n: int = 1_000_000) -> float:
    """Seconds for a fixed workload shaped like planning's Python work, without graphmem
    code: dicts of ``n`` string keys, a pass of lookups, a sort by a looked-up key.

    The bench times it in fresh processes before and after its measurements, so that a
    reader can tell this shared machine's drift (which moves every row) from a change
    in the code (which moves graphmem's rows only)."""
    t0 = time.perf_counter()
    names = [f"t{i}" for i in range(n)]
    life = {name: (i, i + 3) for i, name in enumerate(names)}
    rank = {name: n - i for i, name in enumerate(names)}
    total = 0
    for name in names:
        first, last = life[name]
        total += rank[name] + last - first
    names.sort(key=rank.__getitem__)
    assert total > 0 and names[0] == f"t{n - 1}"
    return time.perf_counter() - t0


def _machine_check() -> float:
    """The fastest of ``REPEATS`` fresh processes running :func:`reference_workload`."""
    times = []
    for _ in range(REPEATS):
        proc = subprocess.run([sys.executable, "-m", __spec__.name, "--reference"], capture_output=True,
                              text=True, check=True)
        times.append(float(proc.stdout.strip().splitlines()[-1]))
    return min(times)


def run(args) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    args.check_before = _machine_check()
    args.check_after = None
    print(f"machine check (reference workload) {args.check_before:.2f} s", file=sys.stderr)
    todo = [(family, n) for n in sizes for family in FAMILIES]  # small sizes first
    for k, (family, n) in enumerate(todo):
        best = None
        for _ in range(REPEATS if n < REPEAT_BELOW else 1):
            proc = subprocess.run([sys.executable, "-m", __spec__.name, family, str(n)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"scale {family} {n}: {proc.stderr.strip()[-500:]}")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{family:12s} {n:>9,d}  plan {row['plan_s']:8.2f} s  peak RSS "
                  f"{row['peak_rss_mib']:7.0f} MiB  {row['passes_s']}", file=sys.stderr)
            if best is None or row["plan_s"] < best["plan_s"]:
                best = row
        rows.append(best)
        if k < len(todo) - 1:  # keep what is measured so far, marked as partial
            _report(args, sorted(rows, key=lambda r: (FAMILIES.index(r["family"]), r["nodes"])),
                    f"Partial: {k + 1} of {len(todo)} measurements done; the run goes on.")
    rows.sort(key=lambda r: (FAMILIES.index(r["family"]), r["nodes"]))
    args.check_after = _machine_check()
    print(f"machine check (reference workload) {args.check_after:.2f} s", file=sys.stderr)
    _report(args, rows, "")


def _report(args, rows: list[dict], status: str) -> None:
    from tools import ROOT
    from tools.docs.sections import BENCHMARKS, environment, write_doc
    table = ["| family | nodes | tensors | plan s | s per 1k nodes | reorder s | concat s "
             "| inplace s | share s | place s | rest s | placement used | peak RSS MiB "
             "| graph alone MiB | arena / aliased peak | check s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        p = r["passes_s"]
        # a reorder that kept its order timed the other passes inside its own time
        rest = "(reordered)" if r.get("reordered") else f"{r['plan_s'] - sum(p.values()):.2f}"
        table.append(f"| {r['family']} | {r['nodes']:,} | {r['tensors']:,} | {r['plan_s']:.2f} "
                     f"| {r['plan_s'] / r['nodes'] * 1000:.3f} | {p.get('reorder', 0):.2f} "
                     f"| {p.get('concat', 0):.2f} "
                     f"| {p.get('inplace', 0):.2f} | {p.get('share', 0):.2f} "
                     f"| {p.get('place', 0):.2f} | {rest} | {r['strategy']} "
                     f"| {r['peak_rss_mib']:.0f} | {r['rss_before_mib']:.0f} "
                     f"| {r['arena_over_peak']:.4f} | {r['check_s']:.2f} |")
    svg = loglog_svg(rows)
    verdict = []
    for target_n, limit in ((100_000, 2.0), (1_000_000, 30.0)):
        got = [r for r in rows if r["nodes"] == target_n]
        if got:
            worst = max(got, key=lambda r: r["plan_s"])
            ok = worst["plan_s"] < limit
            verdict.append(f"- {target_n:,} nodes: slowest family {worst['family']} "
                           f"{worst['plan_s']:.2f} s, target < {limit:.0f} s: "
                           f"{'met' if ok else 'NOT met'}.")
    slopes = []
    for family in FAMILIES:
        pts = [(r["nodes"], r["plan_s"]) for r in rows if r["family"] == family]
        if len(pts) >= 2:
            (n0, t0), (n1, t1) = pts[-2], pts[-1]
            slopes.append(f"{family} {math.log(t1 / t0) / math.log(n1 / n0):.2f}")
    # imported here, not at the top: a measured process's "graph alone" RSS is taken
    # before planning imports the planner (and numpy)
    from graphmem.planning.loop import TRIAL_TENSORS
    body = "\n".join([
        "## Planning at scale", "",
        environment(), "", *([f"**{status}**", ""] if status else []),
        "Synthetic graphs built directly as graphmem IR (tools/bench/scale.py; no ONNX file, "
        "so no load time), planned by `graphmem.plan_graph(graph)` as `graphmem plan` does: "
        "the default passes (reorder, which skips graphs over 4,000 nodes; concat, whose "
        "trial, the rest planned again without its slices and counted in its column, runs "
        f"up to {TRIAL_TENSORS:,} arena tensors; inplace; share; place, best of all "
        "strategies within its work budget) and the validation of the finished plan. "
        "*rest* is everything but the passes: the order check, liveness, the storage "
        "groups, writing the Plan and validating it (not given "
        "where reorder kept a new order: its time then includes planning that order). "
        "*placement used* is the strategy whose arena was kept: on inputs over "
        "`STRATEGY_WORK` (passes/placement/search.py) fewer strategies run, and hill climbing "
        "only below about 4,500 buffers. Each measurement is a fresh process; peak RSS is "
        "that process's high-water mark (graph included), *graph alone* its RSS before "
        "planning. Below 1M nodes each row is the fastest of three fresh processes "
        "(timings on this shared machine move by a quarter between runs), 1M-node rows "
        "are one run. Best fit and the storage pool run compiled (graphmem/fitloops.c), "
        "and so do the reorder searches (graphmem/orderloops.c). "
        + _check_line(args),
        "", "\n".join(table), "",
        "Log-log slope of plan time between the two largest sizes (1.0 is linear): "
        + ", ".join(slopes) + ".", "",
        *verdict, "",
        "![plan time vs nodes, log-log](scale.svg)", ""])
    if not status:
        print(body)
    if not args.no_write:
        from graphmem.plan.io import write_atomic
        write_atomic(ROOT / "docs" / "scale.svg", svg)
        write_doc(BENCHMARKS, "bench:scale", body)
        if not status:
            print("wrote docs/benchmarks.md and docs/scale.svg", file=sys.stderr)


def _check_line(args) -> str:
    after = ("" if args.check_after is None
             else f" and {args.check_after:.2f} s after them")
    return ("Machine check: a fixed workload with no graphmem code in it "
            "(`reference_workload` in tools/bench/scale.py: million-key dicts, lookups, a sort; "
            f"the fastest of {REPEATS} processes) took {args.check_before:.2f} s before the "
            f"measurements{after}. *check s* is the same workload timed in each row's "
            "process right after its planning: that process still holds the graph and "
            "the plan, which slows the workload too (most at 1M nodes), so compare a "
            "row's check with the same row's in another run. Compare the checks between "
            "runs before comparing their rows: a slower machine moves them, a change in "
            "graphmem does not.")


def loglog_svg(rows: list[dict], width: int = 640, height: int = 420) -> str:
    """A small log-log plot of plan seconds vs nodes, one line per family, as SVG text."""
    colors = {"chain": "#1f77b4", "eltwise": "#9467bd", "residual": "#ff7f0e",
              "random": "#2ca02c", "transformer": "#d62728", "fanout": "#8c564b"}
    xs = [r["nodes"] for r in rows]
    ys = [max(r["plan_s"], 1e-4) for r in rows]
    x0, x1 = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    y1 = max(y1, y0 + 1)
    x1 = max(x1, x0 + 1)
    left, right, top, bottom = 70, 150, 20, 50

    def px(n):
        return left + (math.log10(n) - x0) / (x1 - x0) * (width - left - right)

    def py(s):
        return height - bottom - (math.log10(max(s, 1e-4)) - y0) / (y1 - y0) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for e in range(x0, x1 + 1):
        x = px(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" '
                   f'stroke="#ddd"/><text x="{x:.1f}" y="{height - bottom + 16}" '
                   f'text-anchor="middle">1e{e}</text>')
    for e in range(y0, y1 + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" '
                   f'stroke="#ddd"/><text x="{left - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{10 ** e:g} s</text>')
    # a reference line of slope 1 (linear time) through the smallest chain point
    ref = min(rows, key=lambda r: r["nodes"])
    n_a, n_b = 10 ** x0, 10 ** x1
    s_a = ref["plan_s"] * n_a / ref["nodes"]
    s_b = ref["plan_s"] * n_b / ref["nodes"]
    out.append(f'<line x1="{px(n_a):.1f}" y1="{py(s_a):.1f}" x2="{px(n_b):.1f}" '
               f'y2="{py(s_b):.1f}" stroke="#999" stroke-dasharray="4 4"/>')
    for family, color in colors.items():
        pts = [(px(r["nodes"]), py(r["plan_s"])) for r in rows if r["family"] == family]
        if not pts:
            continue
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
                   + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in pts]
    for k, (family, color) in enumerate(colors.items()):
        y = top + 20 + 18 * k
        out.append(f'<line x1="{width - right + 10}" y1="{y}" x2="{width - right + 30}" y2="{y}" '
                   f'stroke="{color}" stroke-width="2"/><text x="{width - right + 36}" '
                   f'y="{y + 4}">{family}</text>')
    y = top + 20 + 18 * len(colors)
    out.append(f'<line x1="{width - right + 10}" y1="{y}" x2="{width - right + 30}" y2="{y}" '
               f'stroke="#999" stroke-dasharray="4 4"/><text x="{width - right + 36}" '
               f'y="{y + 4}">linear</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 12}" '
               f'text-anchor="middle">nodes</text>')
    out.append(f'<text x="16" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(top + height - bottom) / 2:.0f})">plan seconds</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--reference"]:
        print(reference_workload())
        sys.exit(0)
    if len(sys.argv) != 3 or sys.argv[1] not in BUILD:
        sys.exit(f"usage: python -m {__spec__.name} {'|'.join(FAMILIES)} NODES | --reference")
    print(json.dumps(measure_one(sys.argv[1], int(sys.argv[2]))))
