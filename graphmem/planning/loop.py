"""The pass loop: a checked list of passes (:func:`~graphmem.planning.contract.check_pipeline`)
run one after another for one execution order, and the reports of what each saved.

Two kinds of pass make a choice that can cost elsewhere, and the loop plans the rest
of the passes both ways and keeps the smaller arena (:func:`keep_smaller`):

- an ``order`` pass finds another execution order: the rest is planned for the given
  order and for the found one (a context of its own);
- a ``trial`` pass that changed the assignment (``concat``: its slices lengthen the
  branches' lives): the rest is planned with its decisions and without them, except on
  graphs of more than :data:`TRIAL_TENSORS` arena tensors, where planning the rest twice
  would double its time (``python -m tools.bench --scale`` times such graphs), and the
  report says ``"tried": false``.

A tie keeps the given order and the trial pass's decisions. The loop names no pass.
"""
from __future__ import annotations

import time
from dataclasses import field
from typing import Callable, Sequence

from graphmem.core.records import record
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions
from graphmem.planning.groups import layout_bytes
from graphmem.planning.writer import finish_layout

# The most arena tensors for which a trial pass is also planned away (module docstring)
TRIAL_TENSORS = 50_000


@record
class PassReport:
    name: str
    bytes_saved: int  # arena before the pass minus after it (one buffer per group if unplaced)
    bytes_after: int
    seconds: float
    detail: dict = field(default_factory=dict)


@record
class Planned:
    """The passes' result for one context: the finished assignment (every storage group
    placed) and one report per pass, in the order they ran."""

    ctx: Context
    assignment: Assignment
    reports: tuple[PassReport, ...]

    @property
    def arena_bytes(self) -> int:
        return self.assignment.arena_bytes


def keep_smaller(incumbent: Planned, challenger: Planned) -> tuple[Planned, bool]:
    """The plan with the smaller arena, and whether that is ``challenger``: a tie keeps
    ``incumbent`` (the given order, the trial pass's decisions)."""
    if challenger.arena_bytes < incumbent.arena_bytes:
        return challenger, True
    return incumbent, False


def _quiet(stage: str) -> None:
    """The default ``stage`` callback: say nothing."""


def run_passes(ctx: Context, passes: Sequence[Pass], options: PassOptions = PassOptions(),
               stage: Callable[[str], None] = _quiet) -> Planned:
    """Run ``passes`` (checked, in stage order) for ``ctx``'s order, from an empty
    assignment; ``stage`` is told the name of each pass as it starts."""
    return _plan(ctx, tuple(passes), Assignment(), None, options, stage)


def _plan(ctx: Context, passes: tuple[Pass, ...], a: Assignment, before: int | None,
          options: PassOptions, stage: Callable[[str], None]) -> Planned:
    """The passes one after another from ``a`` (whose layout is ``before`` bytes, if
    known); an order pass, or a trial pass that changed something, hands the rest to
    :func:`_choose_order` or :func:`_try_away`, which plan it both ways."""
    reports: list[PassReport] = []
    if before is None:
        before = layout_bytes(ctx, a)
    for at, p in enumerate(passes):
        stage(f"pass {p.name}")
        t0 = time.perf_counter()
        new, detail = p(ctx, a, options)
        rest = passes[at + 1:]
        if p.stage == "order":
            ran = _choose_order(ctx, p, a, new, detail, time.perf_counter() - t0, rest,
                                options, stage)
            return Planned(ran.ctx, ran.assignment, (*reports, *ran.reports))
        after = layout_bytes(ctx, new)
        report = PassReport(p.name, before - after, after, time.perf_counter() - t0, detail)
        if p.trial and new is not a and new != a:
            if len(ctx.intervals) <= TRIAL_TENSORS:
                ran = _try_away(ctx, p, a, before, new, report, rest, options, stage)
                return Planned(ran.ctx, ran.assignment, (*reports, *ran.reports))
            report = PassReport(p.name, report.bytes_saved, after, report.seconds,
                                {**detail, "tried": False})
        reports.append(report)
        a, before = new, after
    return Planned(ctx, finish_layout(ctx, a), tuple(reports))


def _choose_order(ctx: Context, p: Pass, a: Assignment, chose: Assignment, detail: dict,
                  seconds: float, rest: tuple[Pass, ...], options: PassOptions,
                  stage: Callable[[str], None]) -> Planned:
    """The rest planned for the given order and, if the order pass ``p`` found another
    (``chose.order``), for that one; the smaller kept. The pass's report comes first and
    counts the planning of the found order in its time."""
    given = _plan(ctx, rest, a, None, options, stage)
    best, moved = given, False
    if chose.order is not None and chose.order != ctx.order:
        t0 = time.perf_counter()
        cand = Context.for_order(ctx.graph, chose.order, ctx.alignment, ctx.index,
                                 table=ctx.table)
        found = _plan(cand, rest, a, None, options,
                      lambda s: stage(f"{s} (the order {p.name} found)"))
        best, moved = keep_smaller(given, found)
        seconds += time.perf_counter() - t0
        detail = {**detail, "arena_file_order": given.arena_bytes}
    report = PassReport(p.name, given.arena_bytes - best.arena_bytes, best.arena_bytes,
                        seconds, {**detail, "reordered": moved})
    return Planned(best.ctx, best.assignment, (report, *best.reports))


def _try_away(ctx: Context, p: Pass, a: Assignment, before: int, new: Assignment,
              report: PassReport, rest: tuple[Pass, ...], options: PassOptions,
              stage: Callable[[str], None]) -> Planned:
    """The rest planned with the trial pass ``p``'s decisions (``new``) and without them
    (from ``a``, whose layout is ``before`` bytes); the smaller kept. The pass's report
    says which (``kept``) and both arenas, and counts the planning without it in its
    time; dropped, it saved nothing."""
    with_it = _plan(ctx, rest, new, report.bytes_after, options, stage)
    t0 = time.perf_counter()
    without = _plan(ctx, rest, a, before, options,
                    lambda s: stage(f"{s} (without {p.name})"))
    seconds = report.seconds + time.perf_counter() - t0
    best, dropped = keep_smaller(with_it, without)
    detail = {**report.detail, f"arena_with_{p.name}": with_it.arena_bytes,
              f"arena_without_{p.name}": without.arena_bytes, "kept": not dropped}
    if dropped:
        mine = PassReport(p.name, 0, before, seconds, detail)
    else:
        mine = PassReport(p.name, report.bytes_saved, report.bytes_after, seconds, detail)
    return Planned(best.ctx, best.assignment, (mine, *best.reports))
