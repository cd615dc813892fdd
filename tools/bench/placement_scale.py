"""Placement at scale: arenas against the max-live floor, and CPU seconds, on generated
instances of thousands to a hundred thousand buffers (no ONNX graph: buffers as
columns, as ``graphmem place`` takes them).

    python -m tools.bench.placement_scale [--quick] [--write] [--json OUT]

Instances (seeded, made here):

- ``dense``: buffers born at random steps with random lives of up to half the steps
  and sizes of 64 bytes times a log-uniform factor (1 to 4,096): tens of thousands
  live at once, far past ``items.PAIR_LIMIT`` pairs at 100k;
- ``training``: a compiler's training step: per layer, activations kept from the
  forward step to its backward step (nested lives), short temporaries in both
  passes, gradients that live to the optimizer's step at the end; layers of a few
  shapes, as a transformer's;
- ``minimalloc-tiled``: MiniMalloc's 11 challenging instances (tests/data/minimalloc,
  production ML workloads) one after another in time, the whole repeated: real
  lifetimes and sizes, tens of thousands of buffers (``x2 mirrored``: the second copy
  mirrored in time, so that no time partition has a copy alike: ``place_buffers``
  places partitions alike once).

Per instance: the max-live floor, then each placement's arena over it and its CPU
seconds: ``sweep`` (passes/placement/sweep.py, what the place pass runs past
``PAIR_LIMIT``), ``place_buffers`` (what ``graphmem place`` runs: best fit and the
search where the pairs allow, else the sweep). ``--write`` puts the table into
docs/benchmarks.md (the bench:placement-scale section).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import time

import numpy as np

from graphmem.planning.groups import Record
from graphmem.passes.placement.buffers import place_buffers
from graphmem.passes.placement.search import peak_live
from graphmem.passes.placement.sweep import sweep_fit
from tools import ROOT

DATA = ROOT / "tests" / "data" / "minimalloc"


def dense(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` buffers over ``n // 10`` steps (see the module docstring)."""
    rng = np.random.default_rng(seed)
    steps = max(n // 10, 2)
    lower = rng.integers(0, steps, n)
    life = rng.integers(1, steps // 2 + 1, n)
    size = 64 * np.exp(rng.uniform(0, math.log(4096), n)).astype(np.int64)
    return {"size": size, "lower": lower, "upper": lower + life}


def training(layers: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A training step of ``layers`` layers (see the module docstring)."""
    rng = np.random.default_rng(seed)
    shapes = [(4, 1 << 20), (6, 1 << 18), (3, 3 << 19)]  # (kept per layer, bytes)
    size, lower, upper = [], [], []
    total_fwd = layers * 4
    end = 2 * total_fwd + 4

    def add(nbytes: int, lo: int, hi: int) -> None:
        size.append(int(nbytes))
        lower.append(lo)
        upper.append(hi)

    for layer in range(layers):
        kept, unit = shapes[layer % len(shapes)]
        f = layer * 4  # its forward steps: f .. f + 3
        b = end - 4 - f  # its backward steps: b - 3 .. b
        for k in range(kept):
            add(unit * rng.integers(1, 5) // 4 * 4, f + rng.integers(0, 4),
                b - rng.integers(0, 3))
        for _ in range(rng.integers(4, 12)):  # forward temporaries
            lo = f + rng.integers(0, 4)
            add(64 * rng.integers(1, unit // 64), lo, lo + rng.integers(1, 3))
        for _ in range(rng.integers(4, 12)):  # backward temporaries
            lo = b - 3 + rng.integers(0, 3)
            add(64 * rng.integers(1, unit // 64), lo, lo + rng.integers(1, 3))
        for _ in range(rng.integers(1, 4)):  # weight gradients, to the optimizer step
            add(64 * rng.integers(1, unit // 256), b - rng.integers(0, 3), end)
    return {"size": np.array(size), "lower": np.array(lower), "upper": np.array(upper)}


def minimalloc_tiled(repeat: int, mirror: bool = False) -> dict[str, np.ndarray]:
    """MiniMalloc's instances A..K one after another in time, ``repeat`` times; with
    ``mirror``, every other time over mirrored in time (each lifespan ``[lo, up)`` of an
    instance ending at ``T`` becomes ``[T - up, T - lo)``), so that no two copies are
    alike."""
    parts = []
    for path in sorted(DATA.glob("*.csv")):
        with open(path) as f:
            rows = list(csv.DictReader(f))
        parts.append({c: np.array([int(r[c]) for r in rows]) for c in ("size", "lower", "upper")})
    size, lower, upper, at = [], [], [], 0
    for copy in range(repeat):
        for p in parts:
            lo, up = p["lower"], p["upper"]
            if mirror and copy % 2:
                lo, up = up.max() - up, up.max() - lo
            size.append(p["size"])
            lower.append(lo - lo.min() + at)
            upper.append(up - lo.min() + at)
            at = int(upper[-1].max()) + 1
    return {"size": np.concatenate(size), "lower": np.concatenate(lower),
            "upper": np.concatenate(upper)}


def instances(quick: bool) -> list[tuple[str, dict]]:
    out = [("dense 20k", dense(20_000, 1)), ("training 500 layers", training(500, 2)),
           ("minimalloc-tiled x2", minimalloc_tiled(2))]
    if not quick:
        out += [("dense 100k", dense(100_000, 0)), ("training 4000 layers", training(4000, 3)),
                ("minimalloc-tiled x10", minimalloc_tiled(10)),
                ("minimalloc-tiled x2 mirrored", minimalloc_tiled(2, mirror=True))]
    return out


def clash(cols: dict, offsets: np.ndarray) -> str | None:
    """The first clash of a placement, or None: an independent check in O(n log n) (no
    pairs): the buffers in time order, each checked against its neighbours by offset
    among those live at its birth."""
    import bisect
    size, lower, upper = cols["size"], cols["lower"], cols["upper"]
    if (offsets < 0).any():
        return "an offset below 0"
    keep = np.flatnonzero(size > 0)
    order = keep[np.lexsort((offsets[keep], lower[keep]))]
    by_end = keep[np.argsort(upper[keep], kind="stable")]
    starts: list[int] = []  # offsets of the live buffers, sorted
    who: dict[int, int] = {}
    k = 0
    for i in order.tolist():
        t = lower[i]
        while k < len(by_end) and upper[by_end[k]] <= t:
            j = int(by_end[k])
            k += 1
            if who.get(int(offsets[j])) == j:
                del starts[bisect.bisect_left(starts, int(offsets[j]))]
                del who[int(offsets[j])]
        o, e = int(offsets[i]), int(offsets[i] + size[i])
        at = bisect.bisect_left(starts, o)
        if at < len(starts) and starts[at] < e:
            return f"buffers {who[starts[at]]} and {i} share bytes"
        if at > 0 and starts[at - 1] + size[who[starts[at - 1]]] > o:
            return f"buffers {who[starts[at - 1]]} and {i} share bytes"
        starts.insert(at, o)
        who[o] = i
    return None


def cpu() -> float:
    return time.process_time()


def run_sweep(cols: dict) -> tuple[np.ndarray, float]:
    t = cpu()
    n = len(cols["size"])
    recs = [Record(i, int(s), int(lo), int(hi) - 1)
            for i, (s, lo, hi) in enumerate(zip(cols["size"].tolist(), cols["lower"].tolist(),
                                                cols["upper"].tolist())) if s > 0]
    found, _ = sweep_fit(recs)
    offsets = np.zeros(n, dtype=np.int64)
    for i, off in found.items():
        offsets[i] = off
    return offsets, cpu() - t


def run_forward(cols: dict) -> tuple[np.ndarray, float]:
    """The forward sweep alone (sweep.py's last candidate; the whole sweep before the
    split sweep), for comparison."""
    from graphmem.passes.placement.sweep import sweep_from
    t = cpu()
    arrivals = [(int(lo), int(hi) - 1, int(s), i) for i, (s, lo, hi) in enumerate(zip(
        cols["size"].tolist(), cols["lower"].tolist(), cols["upper"].tolist())) if s > 0]
    found, _ = sweep_from(arrivals, ())
    offsets = np.zeros(len(cols["size"]), dtype=np.int64)
    for i, off in found.items():
        offsets[i] = off
    return offsets, cpu() - t


def run_place(cols: dict) -> tuple[np.ndarray, float, str]:
    t = cpu()
    got = place_buffers(cols["size"], cols["lower"], cols["upper"])
    return got.offsets, cpu() - t, got.method


def measure(name: str, cols: dict) -> dict:
    size = cols["size"]
    floor = peak_live(size, cols["lower"], cols["upper"] - 1)
    from graphmem.core.liveness import count_overlapping_pairs
    from graphmem.passes.placement.buffers import time_partitions
    parts = time_partitions(cols["lower"], cols["upper"])
    alike = {(cols["size"][p].tobytes(), (cols["lower"][p] - cols["lower"][p].min()).tobytes(),
              (cols["upper"][p] - cols["lower"][p].min()).tobytes()) for p in parts}
    row = {"instance": name, "buffers": len(size), "floor": floor,
           "partitions": len(parts), "distinct": len(alike),
           "steps": int(cols["upper"].max() - cols["lower"].min()),
           "pairs": int(count_overlapping_pairs(cols["lower"], cols["upper"] - 1))}
    for label, runner in (("forward", run_forward), ("sweep", run_sweep),
                          ("place", run_place)):
        offsets, seconds, *method = runner(cols)
        arena = int((offsets + size).max())
        wrong = clash(cols, offsets)
        row[label] = {"arena": arena, "ratio": arena / floor, "cpu_s": seconds,
                      "valid": wrong is None, "method": method[0] if method else label}
        print(f"{name}: {label} {arena / floor:.4f} in {seconds:.2f} s"
              f"{'' if wrong is None else ' INVALID: ' + wrong}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the small instances only")
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    rows = [measure(name, cols) for name, cols in instances(args.quick)]
    from tools.docs.sections import BENCHMARKS, environment, publish
    return publish(BENCHMARKS, "bench:placement-scale", section(rows, environment()),
                   args.write, rows, args.json)


def section(rows: list[dict], env: str) -> str:
    """The bench:placement-scale section of docs/benchmarks.md."""
    from graphmem.passes.placement.buffers import PARTITION_ITEMS
    from graphmem.passes.placement.items import PAIR_LIMIT
    lines = [
        "## Placement at scale: the sweep and `place_buffers` against the max-live floor",
        "", env, "",
        "Generated instances (tools/bench/placement_scale.py: `dense`, random lives over "
        "a tenth as many steps as buffers; `training`, a compiler's training step, "
        "activations kept from each layer's forward step to its backward step, "
        "temporaries, gradients to the end; `minimalloc-tiled`, MiniMalloc's 11 "
        "challenging instances one after another in time, repeated). Each arena over the "
        "max-live floor, CPU seconds of this process: *forward sweep*, one sweep from the "
        "first step (the sweep before the split sweep); *sweep*, passes/placement/"
        "sweep.py's `sweep_fit` (what the place pass runs past items.PAIR_LIMIT, "
        f"{PAIR_LIMIT:,} pairs); *place_buffers*, what `graphmem place` runs (best fit "
        "and the search where the pairs allow, else the sweep; past "
        f"{PARTITION_ITEMS:,} buffers time partition by time partition, each fit under the "
        "highest floor, partitions alike placed once). Every placement is "
        "checked by an independent O(n log n) validator (`clash`).", "",
        "| instance | buffers | pairs live together | max-live floor | forward sweep | s | "
        "sweep | s | place_buffers | by | s | valid |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        f, sw, p = r["forward"], r["sweep"], r["place"]
        lines.append(
            f"| {r['instance']} | {r['buffers']:,} | {r['pairs']:,} | {r['floor']:,} | "
            f"{f['ratio']:.4f} | {f['cpu_s']:.2f} | {sw['ratio']:.4f} | {sw['cpu_s']:.2f} | "
            f"{p['ratio']:.4f} | {p['method']} | {p['cpu_s']:.2f} | "
            f"{'yes' if f['valid'] and sw['valid'] and p['valid'] else 'NO'} |")
    lines.append("")
    for r in rows:
        if r["instance"].startswith("dense 100k"):
            ok = r["sweep"]["ratio"] <= 1.02
            lines.append(f"- {r['instance']}: the sweep within 2 % of the floor: "
                         f"{'met' if ok else 'NOT met'} ({r['sweep']['ratio']:.4f}, "
                         f"{r['sweep']['cpu_s']:.2f} s).")
    compiler = [r for r in rows if not r["instance"].startswith("dense")]
    for r in compiler:
        ok = r["place"]["ratio"] <= 1.01 and r["place"]["cpu_s"] < 10
        lines.append(f"- {r['instance']}: place_buffers within 1 % of the floor in under "
                     f"10 s: {'met' if ok else 'NOT met'} ({r['place']['ratio']:.4f}, "
                     f"{r['place']['cpu_s']:.2f} s; {r['partitions']:,} time "
                     f"partition{'s' if r['partitions'] != 1 else ''}, "
                     f"{r['distinct']:,} distinct).")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
