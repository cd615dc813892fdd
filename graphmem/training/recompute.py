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

import onnx

from graphmem.analysis.macs import MATRIX_OPS
from graphmem.errors import GraphmemError
from graphmem.training.build import TrainingGraph

# MATRIX_OPS: ops whose outputs are costly to recompute. A trimmed segment keeps their
# outputs and recomputes only the cheap ops between them (BatchNormalization, ReLU,
# Add, ...): the ops the MAC count counts, so what it recomputes costs no MACs.


def _forward(g: onnx.GraphProto):
    """Forward nodes, and the activations they make: tensors computed from constants
    only (the ``Constant`` nodes of a Clip's bounds) are not activations: they are
    neither checkpoint candidates nor recomputed."""
    fwd = [n for n in g.node if n.name.startswith("f:")]
    static = {i.name for i in g.initializer}
    for n in fwd:
        if all(t in static for t in n.input if t):
            static.update(t for t in n.output if t)
    produced = {t: n for n in fwd for t in n.output if t not in static}
    return fwd, produced


# A cut may hold small tensors besides its main one (BERT's extended attention mask,
# read by every layer): at most this fraction of the main tensor's bytes.
CUT_SLACK = 1 / 8


def cuts(tg: TrainingGraph) -> list[tuple[str, tuple[str, ...]]]:
    """Where the forward pass can be cut: ``(main, live)`` after each node whose output
    ``main`` is live with only small other activations (together at most
    :data:`CUT_SLACK` of ``main``'s bytes), in forward order; ``live`` is everything
    live there, ``main`` first. Keeping ``live`` lets backward recompute what follows.

    Without the slack these are the articulation tensors (ResNet block outputs, not the
    tensors inside a block); with it a transformer's layer outputs are cuts too, though
    the attention mask made from the input before the first layer is read by all.
    """
    from graphmem.frontend.reader import from_model

    g = tg.model.graph
    fwd, produced = _forward(g)
    tensors = from_model(tg.model, check=False).tensors
    size = {t: tensors[t].bytes if t in tensors else 0 for t in produced}
    last_read: dict[str, int] = {}
    for i, n in enumerate(fwd):
        for t in n.input:
            if t in produced:
                last_read[t] = i
    out, live = [], set()
    for i, n in enumerate(fwd):
        live = {t for t in live if last_read.get(t, -1) > i}
        live.update(t for t in n.output if last_read.get(t, -1) > i)
        main = n.output[0]
        if main in live and size[main] > 0 and \
                sum(size[t] for t in live if t != main) <= CUT_SLACK * size[main]:
            out.append((main, (main, *sorted(live - {main}))))
    return out


def candidates(tg: TrainingGraph) -> list[str]:
    """The main tensors of :func:`cuts`, in forward order."""
    return [main for main, _ in cuts(tg)]


def choose_sqrt(tg: TrainingGraph, segments: int | None = None,
                found: list | None = None) -> list[str]:
    """About ``segments`` (default sqrt(forward nodes)) evenly spaced cuts; returns what
    they keep, in forward order (each cut's small companions too). ``found``: the
    graph's :func:`cuts`, when already computed."""
    fwd, _ = _forward(tg.model.graph)
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
    fwd, produced = _forward(g)
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
    return TrainingGraph(m, tg.loss, tg.weights, dict(tg.gradients), tg.data_inputs, tg.seed,
                         tg.recomputable)


def segment_model(tg: TrainingGraph, found: list) -> dict:
    """What the segment models (Chen's, :func:`choose_balanced`; the program of
    :mod:`.optimal`) see of the forward pass: ``p``, the forward position after which
    each cut sits (index 0 the start, -1 the end); ``kept``, the bytes each cut keeps;
    ``made`` and ``macs``, the activation bytes and matrix MACs made up to each
    position (cumulative, ``[0]`` first); ``pos``, each forward tensor's position."""
    from graphmem.analysis.macs import matrix_macs
    from graphmem.frontend.reader import from_model

    graph = from_model(tg.model, check=False)
    fwd, produced = _forward(tg.model.graph)
    size = {t: graph.tensors[t].bytes if t in graph.tensors else 0 for t in produced}
    by_name = {n.name: n for n in graph.nodes}
    pos = {t: i for i, n in enumerate(fwd) for t in n.output}
    made, macs = [0], [0]
    for n in fwd:
        made.append(made[-1] + sum(size.get(t, 0) for t in n.output))
        node = by_name.get(n.name)
        macs.append(macs[-1] + (matrix_macs(node, graph.tensors) if node is not None else 0))
    return {"p": [-1] + [pos[main] for main, _ in found] + [len(fwd) - 1],
            "kept": [0] + [sum(size.get(t, 0) for t in live) for _, live in found] + [0],
            "made": made, "macs": macs, "pos": pos}


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
    fwd, produced = _forward(tg.model.graph)
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
            "matrix_outputs_kept": len(extra), "_chosen": chosen}
    return rewrite(tg, chosen, extra), info


def _planned(tg, optimizer, batch):
    from graphmem.training.report import account, load_training, plan_training

    graph = load_training(tg)
    result, order = plan_training(graph)
    rep = account(tg, graph, result, order, batch, optimizer)
    total = rep.weight_bytes + rep.optimizer_bytes + rep.constant_bytes + rep.arena_bytes
    return total, rep, (tg, graph, result, order)


def _attempt(tg, chosen, found, optimizer, batch, full=None, **more):
    t, info = recompute_chosen(tg, chosen, found, full)
    total, rep, planned = _planned(t, optimizer, batch)
    return total, rep, planned, {**info, **more}


def _trim(tg, found, optimizer, batch, limit, whole, key):
    """The fewest whole segments (``full``) whose plan keeps ``key(total, report)`` at
    most ``limit``, by binary search from ``whole`` (a plan known to meet it, and its
    ``full``) down to 0; returns that attempt and the number of plans made."""
    best, plans = whole, 0
    lo, hi = 0, whole[3]["whole_segments"] - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        got = _attempt(tg, whole[3]["_chosen"], found, optimizer, batch, mid,
                       choice=whole[3].get("choice"))
        plans += 1
        if key(got[0], got[1]) <= limit:
            best = got
            hi = mid - 1
        else:
            lo = mid + 1
    return best, plans


def _public(info: dict) -> dict:
    return {k: v for k, v in info.items() if not k.startswith("_")}


def _unsegmented(tg, plain, optimizer, batch):
    """The step without checkpoints as an attempt: ``plain`` (``(tg, graph, result,
    order, report)`` of :func:`graphmem.training.selective.selective_planned`), or
    that function's choice for ``tg``; and the ``tg`` the checkpoints build on."""
    if plain is None:
        from graphmem.training.selective import selective_planned
        tg, plain, _ = selective_planned(tg, optimizer, batch)
    rep = plain[4]
    total = rep.weight_bytes + rep.optimizer_bytes + rep.constant_bytes + rep.arena_bytes
    return tg, (total, rep, plain[:4], {"choice": "none", "checkpoints": 0, "segments": 1,
                                        "whole_segments": 0})


def recompute_planned(tg: TrainingGraph, optimizer: str, batch: int,
                      segments: int | None = None, optimal: bool = False, plain=None):
    """``--recompute sqrt``: Chen's evenly spaced cuts and the cuts of
    :func:`choose_balanced`, each planned; the smaller arena (then fewer recomputed
    MACs) wins, so the result is never worse than Chen's; then as few of its segments
    recomputed whole as keep that arena (the rest keep their matrix ops' outputs; both
    choices are trimmed where their arenas tie, and the fewer MACs win). ``optimal``
    (``--recompute optimal``): the cuts of the mixed-integer program
    (:mod:`graphmem.training.optimal`) are planned beside those two, and the info says
    what the program's own choice planned to (``optimal_arena_bytes``).

    The step without checkpoints (``plain``: ``selective_planned``'s planned step for
    this ``tg``, else planned here) is a candidate too, so recomputation never plans
    larger than none (``choice`` ``none``: vgg19 at batch 32 planned 2,083.6 MiB with
    Chen's cuts against 2,045.6 without). Returns ``(tg, graph, result, order, info)``."""
    tg, unsegmented = _unsegmented(tg, plain, optimizer, batch)
    found = cuts(tg)
    chen = _attempt(tg, choose_sqrt(tg, segments, found), found, optimizer, batch,
                    choice="sqrt")
    tried = [unsegmented, chen]
    if segments is None and found:
        tried.append(_attempt(tg, choose_balanced(tg, found), found, optimizer, batch,
                              choice="balanced"))
    solver: dict = {}
    if optimal and found:
        from graphmem.training.optimal import choose_optimal
        chosen, solver = choose_optimal(tg, found)
        tried.append(_attempt(tg, chosen, found, optimizer, batch, choice="optimal"))
        solver = {**solver, "optimal_arena_bytes": tried[-1][1].arena_bytes,
                  "optimal_recompute_macs": tried[-1][1].recompute_macs,
                  **{f"{x[3]['choice']}_arena_bytes": x[1].arena_bytes
                     for x in tried[1:-1]}}
    arena = min(x[1].arena_bytes for x in tried)
    trimmed = [_trim(tg, found, optimizer, batch, arena, x, lambda total, r: r.arena_bytes)[0]
               for x in tried if x[1].arena_bytes == arena]  # each tie is trimmed
    best = min(trimmed, key=lambda x: (x[1].arena_bytes, x[1].recompute_macs))
    total, rep, planned, info = best
    info = {**_public(info), "chen_arena_bytes": chen[1].arena_bytes,
            "chen_recompute_macs": chen[1].recompute_macs,
            "unsegmented_arena_bytes": unsegmented[1].arena_bytes}
    if solver:
        info["optimal"] = solver
    return (*planned, info)


def fit_budget(tg: TrainingGraph, budget: int, optimizer: str, batch: int, plain=None):
    """Choose the recomputation whose planned step (weights, optimizer state, folded
    constants, arena) fits ``budget``: none first (``plain``, as in
    :func:`recompute_planned`), then :func:`choose_balanced`'s cuts and the cuts of the
    program of :mod:`graphmem.training.optimal`, then a binary search over Chen's
    segment counts, each scored by a real plan; among those that fit the one with the
    fewest recomputed MACs, else the smallest step found. Then as few of its segments
    are recomputed whole as still fit (as in :func:`recompute_planned`)."""
    tg, unsegmented = _unsegmented(tg, plain, optimizer, batch)
    found = cuts(tg)
    tried = [unsegmented]
    if tried[0][0] > budget and found:
        from graphmem.training.optimal import choose_optimal
        tried.append(_attempt(tg, choose_balanced(tg, found), found, optimizer, batch,
                              choice="balanced"))
        tried.append(_attempt(tg, choose_optimal(tg, found)[0], found, optimizer, batch,
                              choice="optimal"))
        n = len(_forward(tg.model.graph)[0])
        # Between 2 and about sqrt(n) segments the step shrinks as segments are added
        # (shorter stretches recomputed at once); beyond that the checkpoints dominate.
        # Search that range for the fewest segments that fit (fewest recomputed MACs).
        lo, hi = 2, max(2, min(len(found) + 1, 2 * round(math.sqrt(n))))
        while lo <= hi:
            mid = (lo + hi) // 2
            tried.append(_attempt(tg, choose_sqrt(tg, mid, found), found, optimizer, batch,
                                  choice="sqrt"))
            if tried[-1][0] <= budget:
                hi = mid - 1
            else:
                lo = mid + 1
    tried_public = [{"choice": x[3].get("choice"), "segments": x[3].get("segments"),
                     "step_bytes": x[0], "arena_bytes": x[1].arena_bytes} for x in tried]
    fits = [x for x in tried if x[0] <= budget]
    best = min(fits, key=lambda x: x[1].recompute_macs) if fits else \
        min(tried, key=lambda x: x[0])
    trials = len(tried)
    if best[3].get("whole_segments"):
        limit = budget if fits else best[0]
        best, plans = _trim(tg, found, optimizer, batch, limit, best,
                            lambda total, r: total)
        trials += plans
    total, rep, planned, info = best
    info = {**_public(info), "budget_bytes": budget, "fits_budget": total <= budget,
            "step_bytes": total, "budget_trials": trials, "budget_tried": tried_public}
    return (*planned, info)
