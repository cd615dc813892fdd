"""Checkpoints chosen by a mixed-integer program (HiGHS): ``train --recompute optimal``.

Checkmate (Jain et al. 2020) decides, for every tensor and every stage, whether it is
computed or kept, with the memory at each stage summed over what is live. Our rewriter
(:func:`graphmem.training.recompute.rewrite`) builds the schedules that keep a set of
activations and recompute every other one once, just before its first reader. This
program chooses among one family of those, the segment schedules: the forward pass cut
at some of its :func:`~graphmem.training.cuts.cuts`, the tensors live at a chosen
cut kept for backward, each segment between two chosen cuts recomputed once just
before its backward (the last segment kept whole); so its answer is a graph we can
build, plan and run. (A program over every keep set, on the training schedule's
liveness, was tried and planned worse than this one on all four batch-32 networks of
docs/training.md: its model of the backward's helper tensors missed the plan.)

Model. Cut positions ``0 = start, 1..m-2 = the cuts, m-1 = end``; a choice is a path
``0 -> ... -> m-1`` through them, one binary ``z[a, b]`` per segment ``(a, b]``; a cut
is chosen when a segment ends at it. While segment ``(a, b]``'s backward runs, the
tensors kept at the chosen cuts up to ``a`` are still held (the later ones were read
by the backward of their segments and freed), and the segment's activations are live
again (recomputed, or for the last segment never freed). So the modelled peak is

    P >= sum_{chosen j <= a} kept[j] + made(a, b)      for every chosen (a, b]

(a big-M row per segment). Chen's segment model, which :func:`choose_balanced`
minimises exactly, charges every chosen cut at every segment; this one charges only
those still held, which is what a backward pass in reverse order does. The program is
solved twice: the least peak, then, with the peak held to it, the fewest recomputed
MACs (the matrix ops of the segments recomputed; the last is not).

What it does not see, and why the plan judges: the backward's own temporaries and
the gradients (about the same under every choice), placement's fragmentation and
in-place reuse. ``--recompute optimal`` plans the program's choice beside Chen's and
the balanced cuts and keeps the smallest planned arena, so it is never worse than
``--recompute sqrt`` on the same graph.
"""
from __future__ import annotations

import math
import time

from graphmem.core.highs import quiet_highs
from graphmem.errors import GraphmemError
from graphmem.notes import note
from graphmem.training.build import TrainingGraph
from graphmem.training.cuts import cuts, segment_model

MIB = float(2 ** 20)
GIGA = 1e9


# seconds HiGHS may take for each of the two solves
TIME_LIMIT = 60.0


def solve(model: dict, time_limit: float | None = None) -> tuple[list[int] | None, dict]:
    """The chosen cut indices (into ``found``) and what the solver said: the best choice
    found within ``time_limit`` (``status`` says whether it is proven, ``mip_gap`` how
    far from proven it may be), or None where HiGHS found none."""
    time_limit = TIME_LIMIT if time_limit is None else time_limit
    try:
        import highspy
    except ImportError:  # pragma: no cover - highspy is a declared dependency
        raise GraphmemError("--recompute optimal needs highspy (pip install highspy)") from None
    p, kept, made, macs = model["p"], model["kept"], model["made"], model["macs"]
    m = len(p)
    edges = [(a, b) for a in range(m) for b in range(a + 1, m)]
    seg = [(made[p[b] + 1] - made[p[a] + 1]) / MIB for a, b in edges]
    cost = [0.0 if b == m - 1 else (macs[p[b] + 1] - macs[p[a] + 1]) / GIGA for a, b in edges]
    held = [k / MIB for k in kept]
    big = sum(held) + max(seg)
    n, peak = len(edges), len(edges)
    into = {v: [] for v in range(m)}
    out = {v: [] for v in range(m)}
    for k, (a, b) in enumerate(edges):
        out[a].append(k)
        into[b].append(k)

    inf = highspy.kHighsInf
    h = quiet_highs()
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("threads", 1)
    h.addVars(n + 1, [0.0] * (n + 1), [1.0] * n + [inf])
    h.changeColsIntegrality(n, list(range(n)), [highspy.HighsVarType.kInteger] * n)
    lo, hi, starts, index, value = [], [], [], [], []

    def row(low, high, coefs):
        starts.append(len(index))
        lo.append(low)
        hi.append(high)
        for k, v in coefs:
            index.append(k)
            value.append(v)

    for v in range(m):  # one path from the start to the end
        rhs = -1.0 if v == 0 else 1.0 if v == m - 1 else 0.0
        row(rhs, rhs, [(k, 1.0) for k in into[v]] + [(k, -1.0) for k in out[v]])
    for k, (a, b) in enumerate(edges):  # held cuts + the segment <= P when chosen
        coefs = {k: seg[k] + big}
        for j in range(1, a + 1):
            for e in into[j]:
                coefs[e] = coefs.get(e, 0.0) + held[j]
        row(-inf, big, list(coefs.items()) + [(peak, -1.0)])
    h.addRows(len(hi), lo, hi, len(index), starts, index, value)

    t0 = time.perf_counter()
    h.changeColsCost(n + 1, list(range(n + 1)), [0.0] * n + [1.0])
    # a choice to start from, feasible by construction: no cut, the one segment kept
    # whole (so a solver stopped by its time limit has a choice to give, and its gap)
    whole = edges.index((0, m - 1))
    start = highspy.HighsSolution()
    start.col_value = [1.0 if k == whole else 0.0 for k in range(n)] + [seg[whole] + 1.0]
    start.value_valid = True
    h.setSolution(start)
    h.run()
    first = h.modelStatusToString(h.getModelStatus())
    if h.getInfo().primal_solution_status < 1:
        return None, {"status": first, "solve_seconds": round(time.perf_counter() - t0, 3)}
    best_peak, gap = h.getInfo().objective_function_value, h.getInfo().mip_gap
    values = list(h.getSolution().col_value)
    # then the fewest recomputed MACs at that peak (a byte of slack for the tolerances)
    h.changeColBounds(peak, 0.0, best_peak + 1.0 / MIB + 1e-9 * best_peak)
    h.changeColsCost(n + 1, list(range(n + 1)), cost + [0.0])
    h.setOptionValue("time_limit", float(max(1.0, time_limit - (time.perf_counter() - t0))))
    h.run()
    second = h.modelStatusToString(h.getModelStatus())
    if h.getInfo().primal_solution_status >= 1:
        values = list(h.getSolution().col_value)
    chosen, v = [], 0
    while v != m - 1:
        k = max(out[v], key=lambda e: values[e])
        v = edges[k][1]
        if v != m - 1:
            chosen.append(v - 1)
    modelled_peak, modelled_macs = evaluate(model, chosen)
    return chosen, {"status": f"{first}, then {second}", "mip_gap": gap,
                    "segments_modelled": n, "cuts_modelled": m - 2,
                    "modelled_peak_bytes": modelled_peak,
                    "modelled_recompute_macs": modelled_macs,
                    "solve_seconds": round(time.perf_counter() - t0, 3)}


def evaluate(model: dict, chosen: list[int]) -> tuple[int, int]:
    """The program's peak (bytes) and recomputed MACs for the cut indices ``chosen``."""
    p, kept, made, macs = model["p"], model["kept"], model["made"], model["macs"]
    m = len(p)
    path = [0, *[j + 1 for j in sorted(chosen)], m - 1]
    peak = max(sum(kept[j] for j in path[1:k + 1]) + made[p[b] + 1] - made[p[a] + 1]
               for k, (a, b) in enumerate(zip(path, path[1:])))
    cost = sum(macs[p[b] + 1] - macs[p[a] + 1] for a, b in zip(path, path[1:]) if b != m - 1)
    return peak, cost


def choose_optimal(tg: TrainingGraph, found: list | None = None,
                   time_limit: float | None = None) -> tuple[list[str], dict]:
    """What the program's cuts keep (in forward order, like
    :func:`~graphmem.training.recompute.choose_sqrt`) and the solver's report.

    A solve stopped by its time limit gives the best choice found, with a note that
    says it is not proven and its gap; one that found none gives no cuts (the step
    without checkpoints) with a note: ``--recompute optimal`` plans the heuristic cuts
    beside it and keeps the smallest, so the command still answers with a plan."""
    found = cuts(tg) if found is None else found
    if not found:
        return [], {"status": "no cuts"}
    model = segment_model(tg, found)
    chosen, info = solve(model, time_limit)
    if chosen is None:
        note(f"--recompute optimal: HiGHS found no choice within its time limit "
             f"({info['status']}); the heuristic cuts (sqrt, balanced) are used")
        return [], info
    if not info["status"].startswith("Optimal"):
        gap = info["mip_gap"]
        bound = (f"its modelled peak at most {100 * gap:.1f}% above the least"
                 if math.isfinite(gap) else "no bound on how far it is from the least")
        note(f"--recompute optimal: HiGHS stopped before proving its choice "
             f"({info['status']}); the best found is used, {bound}")
    pos = model["pos"]
    picked = {t for k in chosen for t in found[k][1]}
    return sorted(picked, key=pos.__getitem__), info
