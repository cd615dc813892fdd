"""Recomputation (Chen et al. 2016): keep only checkpoint activations for backward and
recompute the rest from them, by rewriting the training ONNX graph.

Checkpoint candidates are the forward chain's articulation tensors: after the node that
makes one, it is the only activation a later forward node still reads (ResNet block
outputs, not the tensors inside a block). ``sqrt`` picks about sqrt(n) evenly spaced
ones for n forward nodes. Every other activation a backward node reads is replaced by a
copy made by cloned forward nodes (``r:`` names); the schedule (:mod:`.schedule`)
places each clone just before its first reader, so a segment is recomputed just before
its backward runs.
"""
from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Callable, Sequence

import onnx

from graphmem.analysis.macs import MATRIX_OPS
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.training.build import TrainingGraph
from graphmem.training.cuts import cuts, forward_pass, segment_model
from graphmem.training.optimal import choose_optimal
from graphmem.training.report import PlannedStep, TrainingReport, plan_step

# MATRIX_OPS: ops whose outputs are costly to recompute. A trimmed segment keeps their
# outputs and recomputes only the cheap ops between them (BatchNormalization, ReLU,
# Add, ...): the ops the MAC count counts, so what it recomputes costs no MACs.


def choose_sqrt(tg: TrainingGraph, segments: int | None = None,
                found: list | None = None) -> list[str]:
    """About ``segments`` (default sqrt(forward nodes)) evenly spaced cuts; returns what
    they keep, in forward order (each cut's small companions too). ``found``: the
    graph's :func:`cuts`, when already computed."""
    fwd, _ = forward_pass(tg.model.graph)
    pos = {t: i for i, n in enumerate(fwd) for t in n.output}
    found = cuts(tg) if found is None else found
    if not found:
        return []
    k = segments or max(1, round(math.sqrt(len(fwd))))
    chosen = []
    for j in range(1, k):
        target = j * len(fwd) / k
        best = min(found, key=lambda c: abs(pos[c[0]] - target))
        if best not in chosen:
            chosen.append(best)
    kept = {t for _, live in chosen for t in live}
    return sorted(kept, key=pos.__getitem__)


def rewrite(tg: TrainingGraph, checkpoints: list[str], also_keep=()) -> TrainingGraph:
    """A copy of ``tg`` whose backward reads only ``checkpoints`` (in forward order), the
    last segment (but ``tg.recomputable``), ``also_keep`` and graph inputs of the forward
    pass; every other activation it reads is recomputed from them."""
    m = onnx.ModelProto()
    m.CopyFrom(tg.model)
    g = m.graph
    fwd, produced = forward_pass(g)
    keep = set(checkpoints) | set(also_keep)
    # The last segment (after the last checkpoint) is still in memory when backward
    # starts: Chen keeps it rather than recompute it.
    if checkpoints:
        last = max(i for i, n in enumerate(fwd) if checkpoints[-1] in n.output)
        keep.update(t for n in fwd[last + 1:] for t in n.output
                    if t not in tg.recomputable)
    clones: dict[str, str] = {}
    new_nodes: list[onnx.NodeProto] = []
    # tg.recomputable values get a copy of their own for each backward node that reads
    # them (made just before it, dead right after), not one copy shared from the first
    # reader to the last: a GELU's backward then holds its input, not the four
    # intermediates its rule reads at different steps (PyTorch's fused kernel recomputes
    # them the same way).
    fresh = tg.recomputable
    copies = [0]

    def clone(t: str, local: dict[str, str]) -> str:
        def made(i):
            return (local if i in fresh else clones).get(i)

        if t not in produced or t in keep:
            return t
        if made(t):
            return made(t)
        stack = [(produced[t], False)]
        # Iterative post-order: a segment can be hundreds of nodes deep.
        while stack:
            n, ready = stack.pop()
            if made(n.output[0]):
                continue
            deps = [produced[i] for i in n.input
                    if i in produced and i not in keep and not made(i)]
            if deps and not ready:
                stack.append((n, True))
                stack.extend((d, False) for d in deps)
                continue
            c = onnx.NodeProto()
            c.CopyFrom(n)
            own = n.output[0] in fresh
            suffix = ""
            if own:
                copies[0] += 1
                suffix = f".{copies[0]}"
            c.name = "r:" + n.name[2:] + suffix
            for k, i in enumerate(n.input):
                if made(i):
                    c.input[k] = made(i)
                elif i in produced and i not in keep:
                    raise GraphmemError(f"recompute: {i!r} is needed before it is cloned")
            for k, o in enumerate(n.output):
                if o:
                    c.output[k] = f"{o}@rc{suffix}"
                    (local if own else clones)[o] = c.output[k]
            new_nodes.append(c)
        return made(t)

    backward = [n for n in g.node if not n.name.startswith("f:")]
    for n in backward:
        local: dict[str, str] = {}
        for k, t in enumerate(n.input):
            if t in produced and t not in keep:
                n.input[k] = clone(t, local)
    first_b = next(i for i, n in enumerate(g.node) if not n.name.startswith("f:"))
    nodes = list(g.node[:first_b]) + new_nodes + list(g.node[first_b:])
    del g.node[:]
    g.node.extend(nodes)
    return replace(tg, model=m, gradients=dict(tg.gradients))


def choose_balanced(tg: TrainingGraph, found: list | None = None,
                    bounds_tried: int = 256) -> list[str]:
    """Cuts that minimize Chen's memory model exactly: the bytes kept at the chosen cuts
    plus the largest segment (the activations made between two chosen cuts, or after
    the last, all live while that segment's backward runs). For each bound B on the
    largest segment (up to ``bounds_tried`` of the distinct segment sizes), a dynamic
    program over the cuts finds the least kept bytes with every segment within B; the
    best B wins. Returns what the chosen cuts keep, in forward order, like
    :func:`choose_sqrt`."""
    found = cuts(tg) if found is None else found
    if not found:
        return []
    model = segment_model(tg, found)
    p, kept, made, pos = model["p"], model["kept"], model["made"], model["pos"]
    m = len(p)

    def seg(a, b):
        return made[p[b] + 1] - made[p[a] + 1]

    sizes = sorted({seg(a, b) for a in range(m) for b in range(a + 1, m)})
    step = max(1, len(sizes) // bounds_tried)
    best = None
    for bound in sizes[::step] + [sizes[-1]]:
        cost, back = [None] * m, [None] * m
        cost[0] = 0
        for b in range(1, m):
            for a in range(b):
                if cost[a] is not None and seg(a, b) <= bound:
                    c = cost[a] + kept[b]
                    if cost[b] is None or c < cost[b]:
                        cost[b], back[b] = c, a
        if cost[-1] is not None and (best is None or cost[-1] + bound < best[0]):
            chosen, k = [], back[-1]
            while k:
                chosen.append(k - 1)
                k = back[k]
            best = (cost[-1] + bound, chosen)
    picked = {t for k in best[1] for t in found[k][1]}
    return sorted(picked, key=pos.__getitem__)


def recompute_sqrt(tg: TrainingGraph, segments: int | None = None,
                   found: list | None = None, full: int | None = None
                   ) -> tuple[TrainingGraph, dict]:
    """Chen's sqrt(n) recomputation (:func:`choose_sqrt`); see :func:`recompute_chosen`."""
    found = cuts(tg) if found is None else found
    return recompute_chosen(tg, choose_sqrt(tg, segments, found), found, full)


def recompute_chosen(tg: TrainingGraph, chosen: list[str], found: list,
                     full: int | None = None) -> tuple[TrainingGraph, dict]:
    """Recompute from the cuts' tensors ``chosen`` (as :func:`choose_sqrt` returns them);
    returns the rewritten graph and what was chosen. ``checkpoints`` counts the kept
    tensors (a cut's small companions too).

    ``full``: only the first ``full`` segments are recomputed whole from their cut; the
    later ones (up to the last, which is kept) keep the outputs of their matrix ops
    (:data:`MATRIX_OPS`) and recompute only what lies between them, which costs no
    MACs. Default: every segment whole (Chen's rule).
    """
    mains = {main for main, _ in found}
    fwd, produced = forward_pass(tg.model.graph)
    pos = {t: i for i, n in enumerate(fwd) for t in n.output}
    bounds = [pos[t] for t in chosen if t in mains]
    extra: list[str] = []
    if full is not None and full < len(bounds):
        start = bounds[full - 1] if full > 0 else -1
        extra = [n.output[0] for i, n in enumerate(fwd)
                 if i > start and n.op_type in MATRIX_OPS and n.output[0] in produced]
    info = {"checkpoints": len(chosen), "candidates": len(found),
            "segments": len(bounds) + 1, "forward_nodes": len(fwd),
            "whole_segments": len(bounds) if full is None else min(full, len(bounds)),
            "matrix_outputs_kept": len(extra)}
    return rewrite(tg, chosen, extra), info


@record
class Attempt:
    """One recomputation choice, planned: the step (its total, report, graph and plan),
    the cuts' tensors it keeps (see :func:`recompute_chosen`) and what the command
    reports of it (``info``)."""

    step: PlannedStep
    chosen: Sequence[str] = ()
    info: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.step.total

    @property
    def report(self) -> TrainingReport:
        return self.step.report


def _planned(tg: TrainingGraph, optimizer: str, batch: int, chosen: Sequence[str] = (),
             info: dict | None = None) -> Attempt:
    return Attempt(plan_step(tg, optimizer, batch), chosen, info or {})


def _attempt(tg, chosen, found, optimizer, batch, full=None, **more) -> Attempt:
    t, info = recompute_chosen(tg, chosen, found, full)
    return _planned(t, optimizer, batch, chosen, {**info, **more})


def _trim(tg, found, optimizer, batch, limit, whole: Attempt,
          key: Callable[[Attempt], int]) -> tuple[Attempt, int]:
    """The fewest whole segments (``full``) whose plan keeps ``key(attempt)`` at most
    ``limit``, by binary search from ``whole`` (a plan known to meet it, and its
    ``full``) down to 0; returns that attempt and the number of plans made."""
    best, plans = whole, 0
    lo, hi = 0, whole.info["whole_segments"] - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        got = _attempt(tg, whole.chosen, found, optimizer, batch, mid,
                       choice=whole.info.get("choice"))
        plans += 1
        if key(got) <= limit:
            best = got
            hi = mid - 1
        else:
            lo = mid + 1
    return best, plans


def _unsegmented(tg: TrainingGraph, plain: PlannedStep | None, optimizer: str,
                 batch: int) -> Attempt:
    """The step without checkpoints as an attempt: ``plain`` (the step ``train`` plans,
    as :func:`graphmem.training.selective.selective_planned` returns it), else ``tg``
    planned as it is."""
    info = {"choice": "none", "checkpoints": 0, "segments": 1, "whole_segments": 0}
    if plain is None:
        return _planned(tg, optimizer, batch, info=info)
    return Attempt(plain, (), info)


def recompute_planned(tg: TrainingGraph, optimizer: str, batch: int,
                      segments: int | None = None, optimal: bool = False,
                      plain: PlannedStep | None = None) -> Attempt:
    """``--recompute sqrt``: Chen's evenly spaced cuts and the cuts of
    :func:`choose_balanced`, each planned; the smaller arena (then fewer recomputed
    MACs) wins, so the result is never worse than Chen's; then as few of its segments
    recomputed whole as keep that arena (the rest keep their matrix ops' outputs; both
    choices are trimmed where their arenas tie, and the fewer MACs win). ``optimal``
    (``--recompute optimal``): the cuts of the mixed-integer program
    (:mod:`graphmem.training.optimal`) are planned beside those two, and the info says
    what the program's own choice planned to (``optimal_arena_bytes``).

    The step without checkpoints (``plain``: ``selective_planned``'s planned step, whose
    marked ``tg`` the caller passes; else ``tg`` planned as it is) is a candidate too, so recomputation never plans
    larger than none (``choice`` ``none``). Returns the chosen :class:`Attempt`, its
    ``info`` with what was tried beside it."""
    unsegmented = _unsegmented(tg, plain, optimizer, batch)
    found = cuts(tg)
    chen = _attempt(tg, choose_sqrt(tg, segments, found), found, optimizer, batch,
                    choice="sqrt")
    tried = [unsegmented, chen]
    if segments is None and found:
        tried.append(_attempt(tg, choose_balanced(tg, found), found, optimizer, batch,
                              choice="balanced"))
    solver: dict = {}
    if optimal and found:
        chosen, solver = choose_optimal(tg, found)
        tried.append(_attempt(tg, chosen, found, optimizer, batch, choice="optimal"))
        solver = {**solver, "optimal_arena_bytes": tried[-1].report.arena_bytes,
                  "optimal_recompute_macs": tried[-1].report.recompute_macs,
                  **{f"{x.info['choice']}_arena_bytes": x.report.arena_bytes
                     for x in tried[1:-1]}}
    arena = min(x.report.arena_bytes for x in tried)
    trimmed = [_trim(tg, found, optimizer, batch, arena, x, lambda y: y.report.arena_bytes)[0]
               for x in tried if x.report.arena_bytes == arena]  # each tie is trimmed
    best = min(trimmed, key=lambda x: (x.report.arena_bytes, x.report.recompute_macs))
    info = {**best.info, "chen_arena_bytes": chen.report.arena_bytes,
            "chen_recompute_macs": chen.report.recompute_macs,
            "unsegmented_arena_bytes": unsegmented.report.arena_bytes}
    if solver:
        info["optimal"] = solver
    return replace(best, info=info)


def fit_budget(tg: TrainingGraph, budget: int, optimizer: str, batch: int,
               plain: PlannedStep | None = None) -> Attempt:
    """Choose the recomputation whose planned step (weights, optimizer state, folded
    constants, arena) fits ``budget``: none first (``plain``, as in
    :func:`recompute_planned`), then :func:`choose_balanced`'s cuts and the cuts of the
    program of :mod:`graphmem.training.optimal`, then a binary search over Chen's
    segment counts, each scored by a real plan; among those that fit the one with the
    fewest recomputed MACs, else the smallest step found. Then as few of its segments
    are recomputed whole as still fit (as in :func:`recompute_planned`). Every total is
    the planned step's (:attr:`PlannedStep.total`); returns the chosen :class:`Attempt`,
    its ``info`` with the budget and what was tried."""
    unsegmented = _unsegmented(tg, plain, optimizer, batch)
    found = cuts(tg)
    tried = [unsegmented]
    if tried[0].total > budget and found:
        tried.append(_attempt(tg, choose_balanced(tg, found), found, optimizer, batch,
                              choice="balanced"))
        tried.append(_attempt(tg, choose_optimal(tg, found)[0], found, optimizer, batch,
                              choice="optimal"))
        n = len(forward_pass(tg.model.graph)[0])
        # Between 2 and about sqrt(n) segments the step shrinks as segments are added
        # (shorter stretches recomputed at once); beyond that the checkpoints dominate.
        # Search that range for the fewest segments that fit (fewest recomputed MACs).
        lo, hi = 2, max(2, min(len(found) + 1, 2 * round(math.sqrt(n))))
        while lo <= hi:
            mid = (lo + hi) // 2
            tried.append(_attempt(tg, choose_sqrt(tg, mid, found), found, optimizer, batch,
                                  choice="sqrt"))
            if tried[-1].total <= budget:
                hi = mid - 1
            else:
                lo = mid + 1
    tried_public = [{"choice": x.info.get("choice"), "segments": x.info.get("segments"),
                     "step_bytes": x.total, "arena_bytes": x.report.arena_bytes}
                    for x in tried]
    fits = [x for x in tried if x.total <= budget]
    best = min(fits, key=lambda x: x.report.recompute_macs) if fits else \
        min(tried, key=lambda x: x.total)
    trials = len(tried)
    if best.info.get("whole_segments"):
        limit = budget if fits else best.total
        best, plans = _trim(tg, found, optimizer, batch, limit, best, lambda x: x.total)
        trials += plans
    info = {**best.info, "budget_bytes": budget, "fits_budget": best.total <= budget,
            "budget_trials": trials, "budget_tried": tried_public}
    return replace(best, info=info)
