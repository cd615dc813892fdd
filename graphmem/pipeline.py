"""One planning run: load -> index -> order check and liveness -> passes -> plan -> validation.

The pipeline knows the passes only by their contract
(:class:`~graphmem.planning.contract.Pass`): it runs the chosen ones stage by stage,
reports what each saved, and lets an order pass choose the order by planning the
rest for both orders and keeping the smaller arena.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from graphmem.core.ir import Graph
from graphmem.core.nogc import gc_paused
from graphmem.core.ops import (DEFAULT_TABLE, INPLACE_TABLES, provider_of, table_id,
                               table_key)
from graphmem.core.order import file_order
from graphmem.errors import GraphmemError
from graphmem.frontend.reader import load
from graphmem.passes.registry import DEFAULT_PASSES, PASSES
from graphmem.plan.format import Plan
from graphmem.plan.validate import validate_built
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions
from graphmem.planning.groups import layout_bytes
from graphmem.planning.scopes import plan_scopes
from graphmem.planning.writer import finish_layout, write_plan

__all__ = ["DEFAULT_PASSES", "PassReport", "Result", "plan_graph", "plan_model",
           "resolve_passes"]


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


def resolve_passes(names: Sequence[str]) -> list[Pass]:
    """The passes of these names, in pipeline order (stage by stage)."""
    for n in names:
        if n not in PASSES:
            raise GraphmemError(f"unknown pass {n!r}; choose from {', '.join(PASSES)}")
    return [p for n, p in PASSES.items() if n in set(names)]


def _quiet(stage: str) -> None:
    """The default ``progress``: say nothing."""


@gc_paused
def plan_graph(graph: Graph, passes: Sequence[str] = DEFAULT_PASSES, *,
               order: Sequence[int] | None = None, alignment: int = 64,
               placement: str = "best", time_limit: float = 10.0,
               model_name: str | None = None,
               bindings: Mapping[str, int] | None = None, check: bool = True,
               progress: Callable[[str], None] | None = None,
               provider: str = DEFAULT_TABLE, inplace_table: str = "default") -> Result:
    """Run the chosen passes on a loaded graph and return the plan and per-pass reports.

    ``order`` defaults to the file order. ``provider`` ("cpu" or "cuda") and
    ``inplace_table`` ("default": entries the runtime's kernels declare or their source
    backs; "probed": every element-wise candidate, see :mod:`graphmem.core.ops`) pick the
    in-place table the plan trusts, named in the plan's ``target``; ``provider`` may
    also be a table's key ("cpu-probed"), as :func:`graphmem.commands.common.plan_options`
    passes it. ``time_limit`` bounds the solver of
    ``placement="optimal"`` (seconds). With ``check`` (the default) the plan is
    validated independently before it is returned. ``progress``, if given, is called
    with the name of each stage as it starts ("liveness", "pass inplace", "validation",
    ...): the CLI shows it on large graphs, where planning takes seconds.
    """
    stage = progress or _quiet
    start = time.perf_counter()
    if provider in INPLACE_TABLES and provider not in PROVIDER_NAMES \
            and inplace_table == "default":
        table = provider  # a table's own key, "cpu-probed": what plan_options passes
    elif provider not in PROVIDER_NAMES:
        raise GraphmemError(f"no execution provider {provider!r}; choose "
                            f"{', '.join(PROVIDER_NAMES)}")
    else:
        try:
            table = table_key(provider, inplace_table)
        except ValueError as exc:
            raise GraphmemError(str(exc)) from None
    options = PassOptions(placement, time_limit)
    chosen = resolve_passes(passes)
    scope_plans = ()
    if graph.scopes:  # each body planned on its own, into its node's workspace
        stage("bodies of control-flow nodes")
        scope_plans, graph = plan_scopes(graph, functools.partial(
            plan_graph, passes=passes, alignment=alignment, placement=placement,
            time_limit=time_limit, model_name=model_name or _model_name(graph),
            bindings=bindings if bindings is not None else graph.bindings, check=check,
            provider=provider, inplace_table=inplace_table))
    ctx = Context.for_order(graph, order if order is not None else file_order(graph),
                            alignment, stage=stage, table=table)
    order_passes = [p for p in chosen if p.stage == "order"]
    rest = [p for p in chosen if p.stage != "order"]
    a, reports = _run_passes(ctx, rest, options, stage)
    for p in order_passes:
        stage(f"pass {p.name}")
        t0 = time.perf_counter()
        chose, detail = p(ctx, Assignment(), options)
        saved = 0
        if chose.order is not None and chose.order != ctx.order:
            cand = Context.for_order(graph, chose.order, alignment, ctx.index, table=table)
            cand_a, cand_reports = _run_passes(
                cand, rest, options, lambda s: stage(f"{s} (the order {p.name} found)"))
            saved = a.arena_bytes - cand_a.arena_bytes
            if saved > 0:
                ctx, a, reports = cand, cand_a, cand_reports
            detail["arena_file_order"] = a.arena_bytes + max(saved, 0)
        detail["reordered"] = saved > 0
        reports.insert(0, PassReport(p.name, max(saved, 0), a.arena_bytes,
                                     time.perf_counter() - t0, detail))
    stage("writing the plan")
    plan, cols = write_plan(ctx, a, [{"name": r.name, "bytes_saved": r.bytes_saved}
                                     for r in reports], model_name or _model_name(graph),
                            bindings if bindings is not None else graph.bindings,
                            target(table))
    if scope_plans:
        plan = dataclasses.replace(plan, scopes=scope_plans)
    if check:
        stage("validation")
        validate_built(plan, graph, cols, ctx.index, ctx.intervals, lambda: ctx.edges)
    return Result(plan, graph, a, tuple(reports), time.perf_counter() - start)


# The most arena tensors for which a trial pass is also planned away (see _run_passes)
TRIAL_TENSORS = 250_000


def _run_passes(ctx: Context, passes: list[Pass], options: PassOptions,
                stage: Callable[[str], None]) -> tuple[Assignment, list[PassReport]]:
    """Run the passes in order for one execution order; the layout is finished.

    A ``trial`` pass that changed the assignment is tried away too: the rest is
    planned without it and the smaller arena kept (a tie keeps the pass). Its report
    says which (``kept``) and both arenas; dropped, it saved nothing. On graphs of more
    than ``TRIAL_TENSORS`` arena tensors the trial is not made (it doubles the
    planning: a 1M-node random DAG took 62 s instead of about 35), and the report
    says ``"tried": false``.
    """
    a, reports, changed = _run_chain(ctx, passes, options, stage)
    at = next((i for i, p in enumerate(passes) if p.trial and changed[i]), None)
    if at is None:
        return a, reports
    if len(ctx.intervals) > TRIAL_TENSORS:
        reports[at].detail["tried"] = False
        return a, reports
    name = passes[at].name
    t0 = time.perf_counter()
    without, others = _run_passes(ctx, passes[:at] + passes[at + 1:], options,
                                  lambda s: stage(f"{s} (without {name})"))
    first = reports[at]
    detail = dict(first.detail, **{f"arena_with_{name}": a.arena_bytes,
                                   f"arena_without_{name}": without.arena_bytes})
    seconds = first.seconds + time.perf_counter() - t0
    if without.arena_bytes < a.arena_bytes:
        detail["kept"] = False
        before = others[at - 1].bytes_after if at else layout_bytes(ctx, Assignment())
        others.insert(at, PassReport(name, 0, before, seconds, detail))
        return without, others
    detail["kept"] = True
    reports[at] = PassReport(name, first.bytes_saved, first.bytes_after, seconds, detail)
    return a, reports


def _run_chain(ctx: Context, passes: list[Pass], options: PassOptions,
               stage: Callable[[str], None]
               ) -> tuple[Assignment, list[PassReport], list[bool]]:
    """The passes one after another, the layout finished; and whether each trial pass
    changed the assignment."""
    a = Assignment()
    reports, changed = [], []
    before = layout_bytes(ctx, a)
    for p in passes:
        stage(f"pass {p.name}")
        t0 = time.perf_counter()
        new, detail = p(ctx, a, options)
        changed.append(p.trial and new is not a and new != a)  # asked of trials only
        a = new
        after = layout_bytes(ctx, a)
        reports.append(PassReport(p.name, before - after, after, time.perf_counter() - t0,
                                  detail))
        before = after
    return finish_layout(ctx, a), reports, changed


def plan_model(path: str | os.PathLike, dims: Mapping[str, int] | None = None,
               **options) -> Result:
    """Load an ONNX file and plan it (see :func:`plan_graph` for the options)."""
    graph = load(path, dims)
    options.setdefault("model_name", Path(path).name)
    return plan_graph(graph, bindings=dims, **options)


@functools.cache
def _runtime() -> str:
    """"onnxruntime VERSION" of the installed ONNX Runtime (either wheel: both install the
    package ``onnxruntime``), read from its ``__init__.py`` where it is written as text:
    importing onnxruntime, or importlib.metadata's scan of every installed package, would
    cost more than planning a small model."""
    import importlib.util
    import re
    try:
        spec = importlib.util.find_spec("onnxruntime")
        if spec is not None and spec.origin:
            with open(spec.origin, encoding="utf-8") as f:
                found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", f.read(), re.M)
            if found:
                return f"onnxruntime {found.group(1)}"
    except (OSError, ImportError, ValueError):
        pass
    from importlib.metadata import PackageNotFoundError, version
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            return f"onnxruntime {version(dist)}"
        except PackageNotFoundError:
            continue
    return "onnxruntime"


def target(table: str) -> dict[str, str]:
    """The plan's ``target``: the runtime, its provider and the in-place table trusted
    (``table``: an :data:`~graphmem.core.ops.INPLACE_TABLES` key, "cpu", "cpu-probed", ...)."""
    return {"runtime": _runtime(), "provider": PROVIDER_NAMES[provider_of(table)],
            "inplace_table": table_id(table)}


# The ONNX Runtime execution provider of each in-place table
PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def _model_name(graph: Graph) -> str:
    return Path(graph.model_path).name if graph.model_path else graph.name

