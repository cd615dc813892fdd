"""Exact placement on dense random record sets: every heuristic, the MIP and CP-SAT.

    python -m tools.bench.exact [--quick] [--sizes 20,40,60] [--sets 30] [--time-limit 30] [--write]

Each set is ``n`` records (bytes, first, last) over ``n`` steps: a life of a quarter to
a half of the steps (cut at the last step), so many records overlap; sizes 64 bytes
times 1..64; alignment 64. All seeded, so every run sees the same sets. For each set
it runs every placement strategy alone, graphmem's default (``place_records(recs,
"best")``: the best strategy, then hill climbing), and ``place_optimal`` with the MIP
(HiGHS) and with CP-SAT (OR-tools), each under the same time limit, one thread. The
reference is the proven optimum (either exact solver proving it; when both do they
must agree). Printed per size and method: the mean and largest gap to that optimum,
how many sets it reached the optimum on and how many it proved (a heuristic proves
only by meeting the max-live floor), and the mean and largest seconds. ``--write``
puts the table into docs/benchmarks.md between ``<!-- bench:exact -->`` markers.
``--quick`` (6 sets per size, 5 s limit) finishes in about a minute.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from importlib.metadata import version


from graphmem.planning.groups import Record
from graphmem.passes.placement.optimal import place_optimal
from graphmem.passes.placement.search import (SHORT, STRATEGIES, max_live,
                                              place_records)

ALIGNMENT = 64
EXACT = {"mip": "MIP (HiGHS)", "cpsat": "CP-SAT"}


def dense_records(n: int, seed: int) -> list[Record]:
    """``n`` records over ``n`` steps with long lives (a quarter to a half of the steps)."""
    rng = random.Random(1_000_003 * seed + n)
    steps = n
    recs = []
    for i in range(n):
        life = rng.randint(max(1, steps // 4), max(1, steps // 2))
        first = rng.randrange(steps)
        recs.append(Record(i, ALIGNMENT * rng.randint(1, 64), first, min(first + life, steps - 1)))
    return recs


@dataclass
class Outcome:
    total: int
    seconds: float
    proven: bool


@dataclass
class SetResult:
    n: int
    seed: int
    floor: int
    methods: dict[str, Outcome] = field(default_factory=dict)

    @property
    def optimum(self) -> int | None:
        """The proven optimum, or None when no exact method proved one."""
        proven = {o.total for k, o in self.methods.items() if k in EXACT and o.proven}
        if len(proven) > 1:
            raise AssertionError(f"n={self.n} seed={self.seed}: the solvers prove "
                                 f"different optima {sorted(proven)}")
        return proven.pop() if proven else None


def run_set(n: int, seed: int, time_limit: float) -> SetResult:
    recs = dense_records(n, seed)
    floor = max_live(recs)
    res = SetResult(n, seed, floor)
    for name in STRATEGIES:
        t = time.perf_counter()
        total = place_records(recs, name, ALIGNMENT)[1]
        res.methods[SHORT.get(name, name)] = Outcome(total, time.perf_counter() - t, total <= floor)
    t = time.perf_counter()
    total = place_records(recs, "best", ALIGNMENT)[1]
    res.methods["graphmem default"] = Outcome(total, time.perf_counter() - t, total <= floor)
    for solver in EXACT:
        t = time.perf_counter()
        exact = place_optimal(recs, ALIGNMENT, time_limit, threads=1, solver=solver)
        seconds = time.perf_counter() - t
        _check(recs, exact.offsets, exact.total)
        res.methods[solver] = Outcome(exact.total, seconds, exact.optimal)
    return res


def _check(recs, offsets, total) -> None:
    """Independent of graphmem: aligned, inside the arena, no two live-at-once records touch."""
    for r in recs:
        o = offsets[r.id]
        assert o % ALIGNMENT == 0 and 0 <= o and o + r.bytes <= total, r
    for i, a in enumerate(recs):
        for b in recs[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                assert (offsets[a.id] + a.bytes <= offsets[b.id]
                        or offsets[b.id] + b.bytes <= offsets[a.id]), (a, b)


def summarize(results: list[SetResult]) -> list[dict]:
    """One row per size and method."""
    rows = []
    for n in sorted({r.n for r in results}):
        sets = [r for r in results if r.n == n]
        known = [r for r in sets if r.optimum is not None]
        above = sum(r.methods["graphmem default"].total > r.floor for r in sets)
        for method in sets[0].methods:
            gaps = [100.0 * (r.methods[method].total - r.optimum) / r.optimum for r in known]
            secs = [r.methods[method].seconds for r in sets]
            rows.append({
                "n": n, "sets": len(sets), "known": len(known), "above_floor": above,
                "method": EXACT.get(method, method),
                "exact": method in EXACT,
                "mean_gap": statistics.fmean(gaps) if gaps else float("nan"),
                "max_gap": max(gaps) if gaps else float("nan"),
                "at_opt": sum(g <= 0 for g in gaps),
                "proved": sum(r.methods[method].proven for r in sets),
                "mean_s": statistics.fmean(secs), "max_s": max(secs)})
    return rows


HEADER = ["records", "sets (default above floor)", "method", "mean gap", "max gap", "at optimum", "proved", "mean s", "max s"]


def cells(row: dict, first: bool) -> list[str]:
    label = [str(row["n"]), f"{row['sets']} ({row['above_floor']})"] if first else ["", ""]
    return [*label, row["method"], f"{row['mean_gap']:.2f}%", f"{row['max_gap']:.2f}%",
            f"{row['at_opt']}/{row['known']}", f"{row['proved']}/{row['sets']}",
            f"{row['mean_s']:.2f}", f"{row['max_s']:.2f}"]


def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    last = None
    for row in rows:
        c = cells(row, row["n"] != last)
        last = row["n"]
        if row["exact"]:
            c[2] = f"**{c[2]}**"
        lines.append("| " + " | ".join(c) + " |")
    return "\n".join(lines)


def environment(argv: list[str]) -> str:
    from tools.docs.sections import cpu_name
    cpu = cpu_name()
    return (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by "
            f"`{' '.join(['python -m tools.bench.exact', *argv])}` on {cpu}, "
            f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
            f"highspy {version('highspy')}, ortools {version('ortools')}.")


def section(table: str, env: str, limit: float) -> str:
    """The docs/benchmarks.md section (between the bench:exact markers)."""
    return f"""## Exact placement: MIP and CP-SAT on dense random record sets

Generated {env}

`--placement optimal` solves the exact placement of a fixed set of buffer records
(bytes, first step, last step): the smallest arena in which no two buffers that live
at the same time share a byte. Here on seeded random sets of n records over n steps,
each living a quarter to a half of the steps (so many overlap), sizes 64 B times
1..64, alignment 64 (`dense_records` in tools/bench/exact.py). Per set: every
placement strategy alone; graphmem's default (`place_records(recs, "best")`: the best
strategy, then hill climbing); and `place_optimal` with the big-M MIP (HiGHS) and
with CP-SAT (OR-tools, 2-D no-overlap), each with a {limit:g} s limit, one thread,
warm-started by the default. Gap: arena above the set's proven optimum (where both
solvers prove one they must agree; sets with none are left out of the gaps). 'at
optimum': sets where the method's arena is the optimum, out of the sets with a
proven optimum; 'proved': sets where it also
proved it (a heuristic proves only by meeting the max-live floor); 'default above
floor': sets where graphmem's default is above the max-live floor, the only ones an
exact solver has work on (on the others it returns at once). Seconds of the exact
methods include their warm start and their own check of each solution; every result
is also checked again by the tool, untimed.

{table}"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="6 sets per size and a 5 s limit (about a minute)")
    p.add_argument("--sizes", default="20,40,60", help="records per set (default 20,40,60)")
    p.add_argument("--sets", type=int, default=None, help="sets per size (default 30)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="seconds per exact solve (default 30)")
    p.add_argument("--write", action="store_true",
                   help="write the table into docs/benchmarks.md (bench:exact section)")
    args = p.parse_args(argv)
    sets = args.sets if args.sets is not None else (6 if args.quick else 30)
    limit = args.time_limit if args.time_limit is not None else (5.0 if args.quick else 30.0)
    sizes = [int(s) for s in args.sizes.split(",")]

    results = []
    for n in sizes:
        for seed in range(sets):
            r = run_set(n, seed, limit)
            results.append(r)
            print(f"n={n} seed={seed}: floor {r.floor:,} optimum "
                  f"{r.optimum if r.optimum is not None else 'unknown'}; "
                  + ", ".join(f"{k} {o.total:,} {'proven' if o.proven else ''} {o.seconds:.2f}s"
                              for k, o in r.methods.items() if k in EXACT or k == "graphmem default"),
                  file=sys.stderr, flush=True)
    rows = summarize(results)

    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"Exact placement on dense random record sets, {limit:g} s limit")
    for h in HEADER:
        table.add_column(h, justify="left" if h == "method" else "right")
    last = None
    for row in rows:
        table.add_row(*cells(row, row["n"] != last), end_section=False)
        last = row["n"]
    Console(width=max(Console().width, 110)).print(table)
    env = environment(argv)
    print(env)
    body = section(markdown(rows), env, limit)
    if args.write:
        from tools.docs.sections import BENCHMARKS, write_doc
        write_doc(BENCHMARKS, "bench:exact", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
