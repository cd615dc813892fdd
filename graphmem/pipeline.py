"""One planning run: load -> index -> order check and liveness -> passes -> plan -> validation.

The pipeline knows the passes only by their contract
(:class:`~graphmem.planning.contract.Pass`): it resolves the chosen names to passes in
stage order and checks that their contracts fit together before anything runs
(:func:`~graphmem.planning.contract.check_pipeline`), plans the bodies of control-flow
nodes first (:mod:`graphmem.planning.scopes`), runs the passes
(:func:`~graphmem.planning.loop.run_passes`: the loop, the reports, the smaller of two
plans where an order or trial pass chose), writes the plan and validates it from the
graph alone.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from graphmem.core.ir import Graph
from graphmem.core.nogc import gc_paused
from graphmem.core.order import file_order
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.frontend.reader import load
from graphmem.passes.registry import DEFAULT_PASSES, PASSES
from graphmem.plan.format import Plan
from graphmem.plan.graph_digest import graph_digest
from graphmem.plan.validate import validate_built
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions, check_pipeline
from graphmem.planning.loop import PassReport, Planned, run_passes
from graphmem.planning.scopes import plan_scopes
from graphmem.planning.target import DEFAULT_INPLACE, InplaceTable, target
from graphmem.planning.writer import write_plan

__all__ = ["DEFAULT_INPLACE", "DEFAULT_PASSES", "InplaceTable", "PassReport", "Result",
           "plan_graph", "plan_model", "resolve_passes"]


@record
class Result:
    plan: Plan
    graph: Graph
    assignment: Assignment
    reports: tuple[PassReport, ...]
    seconds: float  # planning time, load excluded


def resolve_passes(names: Sequence[str]) -> list[Pass]:
    """The passes of these names, in pipeline order (stage by stage), their contracts
    checked (:func:`~graphmem.planning.contract.check_pipeline`)."""
    for n in names:
        if n not in PASSES:
            raise GraphmemError(f"unknown pass {n!r}; choose from {', '.join(PASSES)}")
    chosen = [p for n, p in PASSES.items() if n in set(names)]
    check_pipeline(chosen, PASSES.values())
    return chosen


def _quiet(stage: str) -> None:
    """The default ``progress``: say nothing."""


@gc_paused
def plan_graph(graph: Graph, passes: Sequence[str] = DEFAULT_PASSES, *,
               order: Sequence[int] | None = None, alignment: int = 64,
               placement: str = "best", time_limit: float = 10.0,
               capacity: int | None = None, model_name: str | None = None,
               bindings: Mapping[str, int] | None = None, check: bool = True,
               progress: Callable[[str], None] | None = None,
               table: InplaceTable | None = None, provider: str | None = None,
               inplace_table: str | None = None) -> Result:
    """Run the chosen passes on a loaded graph and return the plan and per-pass reports.

    ``order`` defaults to the file order. ``table`` (an
    :class:`~graphmem.planning.target.InplaceTable`, default the CPU provider's default
    table) is the in-place table the plan trusts, named in the plan's ``target``;
    ``provider`` ("cpu" or "cuda") and ``inplace_table`` ("default" or "probed") are a
    shorthand for ``table=InplaceTable(provider, inplace_table)``, given instead of it.
    ``time_limit`` bounds the solver of
    ``placement="optimal"`` (seconds). ``capacity`` (bytes): where the arena placed
    is larger, the complete search tries to place it within (the place pass's report
    says whether it fits, proven or not: ``placement.algorithm.within``). With ``check`` (the default) the plan is
    validated independently before it is returned. ``progress``, if given, is called
    with the name of each stage as it starts ("liveness", "pass inplace", "validation",
    ...): the CLI shows it on large graphs, where planning takes seconds.
    """
    stage = progress or _quiet
    start = time.perf_counter()
    table = _table(table, provider, inplace_table)
    chosen = resolve_passes(passes)
    model_name = model_name or _model_name(graph)
    bindings = bindings if bindings is not None else graph.bindings
    scope_plans = ()
    made_for = graph_digest(graph)  # the graph as loaded, before the bodies' workspaces
    if graph.scopes:  # each body planned on its own, into its node's workspace
        stage("bodies of control-flow nodes")
        scope_plans, graph = plan_scopes(graph, functools.partial(
            plan_graph, passes=passes, alignment=alignment, placement=placement,
            time_limit=time_limit, model_name=model_name, bindings=bindings, check=check,
            table=table))
    ctx = Context.for_order(graph, order if order is not None else file_order(graph),
                            alignment, stage=stage, table=table.key)
    planned = run_passes(ctx, chosen, PassOptions(placement, time_limit, capacity), stage)
    plan = _written(planned, model_name, bindings, scope_plans, made_for, check, stage)
    return Result(plan, graph, planned.assignment, planned.reports,
                  time.perf_counter() - start)


def _table(table: InplaceTable | None, provider: str | None,
           which: str | None) -> InplaceTable:
    """``plan_graph``'s in-place table: ``table``, or the one ``provider`` and ``which``
    name (the defaults where not given); not both."""
    if table is not None:
        if provider is not None or which is not None:
            raise GraphmemError("plan_graph: give table=, or provider= and inplace_table=, "
                                "not both")
        return table
    if provider is None and which is None:
        return DEFAULT_INPLACE
    return InplaceTable(provider or "cpu", which or "default")


def _written(planned: Planned, model_name: str, bindings: Mapping[str, int],
             scope_plans: tuple, made_for: str, check: bool,
             stage: Callable[[str], None]) -> Plan:
    """The plan file's data of the passes' result, for the graph of digest ``made_for``,
    validated from the graph alone if ``check``."""
    ctx = planned.ctx
    stage("writing the plan")
    passes = [{"name": r.name, "bytes_saved": r.bytes_saved} for r in planned.reports]
    plan, cols = write_plan(ctx, planned.assignment, passes, model_name, bindings,
                            target(ctx.table))
    plan = dataclasses.replace(plan, scopes=scope_plans, graph=made_for)
    if check:
        stage("validation")
        validate_built(plan, ctx.graph, ctx.index, cols,
                       edges=(ctx.order, ctx.table, lambda: ctx.edges))
    return plan


def plan_model(path: str | os.PathLike, dims: Mapping[str, int] | None = None,
               **options) -> Result:
    """Load an ONNX file and plan it (see :func:`plan_graph` for the options)."""
    graph = load(path, dims)
    options.setdefault("model_name", Path(path).name)
    return plan_graph(graph, bindings=dims, **options)


def _model_name(graph: Graph) -> str:
    return Path(graph.model_path).name if graph.model_path else graph.name

