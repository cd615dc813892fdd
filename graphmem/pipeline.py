"""load -> order -> liveness -> passes -> Plan: the data flow of one planning run."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from graphmem.planning.assignment import (MAX_PLAN_BYTES, Assignment, Context, align_up, group_table,
                         groups, layout_bytes)
from graphmem.errors import GraphmemError
from graphmem.core.nogc import gc_paused
from graphmem.core.ir import Graph
from graphmem.core.liveness import liveness
from graphmem.frontend.reader import load
from graphmem.plan.format import Plan, tensor_plans
from graphmem.plan.stats import built_stats
from graphmem.plan.validate import expected_kind, io_sets, validate_built
from graphmem.core.order import check_order, file_order
from graphmem.core.index import topology

DEFAULT_PASSES = ("reorder", "concat", "inplace", "share", "place")
# Passes that choose the execution order: they run first, on the file order, and
# return their order in detail["order"]; the rest is then planned for both orders
# and the smaller arena kept, so such a pass never makes a plan worse.
ORDER_PASSES = ("reorder",)


@dataclass(frozen=True)
class PassReport:
    name: str
    bytes_saved: int  # arena before the pass minus after it (one buffer per group if unplaced)
    bytes_after: int
    seconds: float
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    plan: Plan
    graph: Graph
    assignment: Assignment
    reports: tuple[PassReport, ...]
    seconds: float  # planning time, load excluded


def available_passes() -> dict:
    from graphmem.passes import PASSES
    return dict(PASSES)


def resolve_passes(names: Sequence[str]) -> list[str]:
    """Check pass names; return them in pipeline order (aliasing before placement)."""
    known = list(available_passes())
    for n in names:
        if n not in known:
            raise GraphmemError(f"unknown pass {n!r}; choose from {', '.join(known)}")
    return [n for n in known if n in set(names)]


def _quiet(stage: str) -> None:
    """The default ``progress``: say nothing."""


@gc_paused
def plan_graph(graph: Graph, passes: Sequence[str] = DEFAULT_PASSES, *,
               order: Sequence[int] | None = None, alignment: int = 64,
               placement: str = "best", time_limit: float = 10.0,
               model_name: str | None = None,
               bindings: Mapping[str, int] | None = None, check: bool = True,
               progress: Callable[[str], None] | None = None) -> Result:
    """Run the chosen passes on a loaded graph and return the plan and per-pass reports.

    ``order`` defaults to the file order. ``time_limit`` bounds the solver of
    ``placement="optimal"`` (seconds). With ``check`` (the default) the plan is
    validated independently before it is returned. ``progress``, if given, is called
    with the name of each stage as it starts ("liveness", "pass inplace", "validation",
    ...): the CLI shows it on large graphs, where planning takes seconds.
    """
    if alignment <= 0:
        raise GraphmemError(f"alignment must be positive, not {alignment}")
    stage = progress or _quiet
    start = time.perf_counter()
    order = list(order) if order is not None else file_order(graph)
    stage("order check")
    bad = check_order(graph, order)
    if bad:
        raise GraphmemError(bad[0])
    stage("liveness")
    ctx = Context(graph, tuple(order), liveness(graph, order), alignment)
    _check_size(ctx)
    registry = available_passes()
    names = resolve_passes(passes)
    order_passes = [n for n in names if n in ORDER_PASSES]
    names = [n for n in names if n not in ORDER_PASSES]
    ctx, a, reports = _run_passes(ctx, names, registry, placement, time_limit, stage)
    for name in order_passes:
        stage(f"pass {name}")
        t0 = time.perf_counter()
        _, detail = registry[name](ctx, Assignment())
        new_order = list(detail.pop("order", ctx.order))
        saved = 0
        if tuple(new_order) != ctx.order:
            bad = check_order(graph, new_order)
            assert not bad, f"pass {name} returned an invalid order: {bad[0]}"
            cand = Context(graph, tuple(new_order), liveness(graph, new_order), alignment)
            cand_ctx, cand_a, cand_reports = _run_passes(
                cand, names, registry, placement, time_limit,
                lambda s: stage(f"{s} (the order {name} found)"))
            saved = a.arena_bytes - cand_a.arena_bytes
            if saved > 0:
                ctx, a, reports = cand_ctx, cand_a, cand_reports
            detail["arena_file_order"] = a.arena_bytes + max(saved, 0)
        detail["reordered"] = saved > 0
        reports.insert(0, PassReport(name, max(saved, 0), a.arena_bytes,
                                     time.perf_counter() - t0, detail))
    stage("writing the plan")
    plan, cols = _to_plan(ctx, a, reports, model_name or _model_name(graph),
                          dict(bindings if bindings is not None else graph.bindings))
    if check:
        stage("validation")
        validate_built(plan, graph, ctx.intervals, cols)
    return Result(plan, graph, a, tuple(reports), time.perf_counter() - start)


def _check_size(ctx: Context) -> None:
    """Refuse a graph whose tensors, one aligned buffer each, reach ``MAX_PLAN_BYTES``."""
    if ctx.naive_layout < MAX_PLAN_BYTES:
        return
    name, size = max(ctx.sizes.items(), key=lambda kv: kv[1])
    raise GraphmemError(f"the graph's tensors need {ctx.naive_layout} bytes together (the "
                        f"largest, {name!r}, {size}): past the 2**62 bytes graphmem can plan")


def _run_passes(ctx: Context, names, registry, placement: str, time_limit: float = 10.0,
                stage: Callable[[str], None] = _quiet):
    """Run the passes in order for one execution order; the layout is finished."""
    a = Assignment()
    reports = []
    before = layout_bytes(ctx, a)
    for name in names:
        stage(f"pass {name}")
        fn = registry[name]
        if name == "place":
            fn = partial(fn, strategy=placement, time_limit=time_limit)
        t0 = time.perf_counter()
        a, detail = fn(ctx, a)
        after = layout_bytes(ctx, a)
        reports.append(PassReport(name, before - after, after, time.perf_counter() - t0, detail))
        before = after
    return ctx, _finish_layout(ctx, a), reports


def plan_model(path: str | os.PathLike, dims: Mapping[str, int] | None = None,
               **options) -> Result:
    """Load an ONNX file and plan it (see :func:`plan_graph` for the options)."""
    graph = load(path, dims)
    options.setdefault("model_name", Path(path).name)
    return plan_graph(graph, bindings=dims, **options)


def _model_name(graph: Graph) -> str:
    return Path(graph.model_path).name if graph.model_path else graph.name


def _finish_layout(ctx: Context, a: Assignment) -> Assignment:
    """Offsets for an assignment that no placement pass placed: one buffer per block."""
    if a.offsets is not None:
        return a
    gs = groups(ctx, a)
    offsets: dict[str, int] = {}
    top = 0
    if a.storage is not None:
        block_offset = []
        for b in a.storage_bytes:
            block_offset.append(top)
            top += align_up(b, ctx.alignment)
        for g in gs:
            offsets[g.root] = block_offset[a.storage[g.root]] if g.root in a.storage else 0
    else:
        for g in gs:
            offsets[g.root] = top if g.bytes else 0
            top += align_up(g.bytes, ctx.alignment)
    return a.with_(offsets=offsets, arena_bytes=top)


def _to_plan(ctx: Context, a: Assignment, reports, model: str, bindings):
    """The Plan of a finished assignment, and the columns its stats were read from."""
    graph = ctx.graph
    topo = topology(graph)
    names = list(ctx.intervals)
    n = len(names)
    # every arena tensor, in the topology's order (as liveness gives them)
    whole = ctx.whole
    if whole:
        kinds, sizes = topo.kinds(), topo.nbytes
    else:
        io = io_sets(graph)
        kinds = [expected_kind(graph, t, io) for t in names]
        sizes = np.fromiter(map(ctx.sizes.__getitem__, names), np.int64, n)
    position = ctx.positions
    # a tensor's offset is its group root's plus its place inside the root
    tab = group_table(ctx, a)
    root_pos = tab.group_root()
    group_offset = np.fromiter(map(a.offsets.get, map(names.__getitem__, root_pos.tolist()),
                                   repeat(0)), np.int64, len(root_pos))
    offs = group_offset[tab.group] + tab.rel
    offs[sizes == 0] = 0
    lives = list(map(tuple, ctx.intervals.values()))
    alias = a.alias
    alias_of = _column(n, position, alias, map(_first, alias.values()))
    alias_kind = _column(n, position, alias, map(_second, alias.values()))
    slices = _column(n, position, a.slice_of, a.slice_of.values())
    tensors = dict(zip(names, tensor_plans(kinds, sizes.tolist(), offs.tolist(), lives,
                                           alias_of, alias_kind, slices)))
    arena = a.arena_bytes or 0
    plan = Plan(model=model, bindings=bindings, alignment=ctx.alignment,
                order=list(ctx.order), constants=list(graph.constants), arena_bytes=arena,
                tensors=tensors,
                passes=[{"name": r.name, "bytes_saved": r.bytes_saved} for r in reports])
    stats, cols = built_stats(plan, topo.ids if whole else None)
    return Plan(**{**plan.__dict__, "stats": stats}), cols


def _column(n: int, position: Mapping[str, int], keys, values) -> list:
    """A list of ``n`` Nones with ``values`` at the positions of ``keys`` (keys not in
    ``position``, or past ``n``, are left out)."""
    out = np.full(n, None, dtype=object)
    if keys:
        at = np.fromiter(map(position.get, keys, repeat(n)), np.int64, len(keys))
        vals = np.empty(len(keys), dtype=object)
        vals[:] = list(values)
        keep = at < n
        out[at[keep]] = vals[keep]
    return out.tolist()


_first, _second = itemgetter(0), itemgetter(1)
