"""From a finished assignment to the plan file's data: every tensor's offset, live range,
alias and slice, and the plan's statistics."""
from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Mapping

import numpy as np

from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context, align_up
from graphmem.planning.groups import group_table, groups
from graphmem.plan.columns import PlanColumns
from graphmem.plan.format import Plan, tensor_plans
from graphmem.plan.stats import built_stats


def finish_layout(ctx: Context, a: Assignment) -> Assignment:
    """``a`` with its storage groups, and, where no layout pass placed them, offsets:
    one buffer per storage block (after ``share``) or per group, one above another."""
    if a.groups is None:
        a = a.with_(groups=group_table(ctx, a))
    if a.offsets is not None:
        return a
    gs = groups(ctx, a.groups)
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


def write_plan(ctx: Context, a: Assignment, passes: list[dict], model: str,
               bindings: Mapping[str, int], target: Mapping[str, str] | None = None
               ) -> tuple[Plan, PlanColumns]:
    """The Plan of a finished assignment (:func:`finish_layout`), and the columns its
    stats were read from (for the validation to reuse)."""
    graph, index, tab = ctx.graph, ctx.index, a.groups
    names = ctx.names
    n = len(names)
    # a tensor's offset is its group root's plus its place inside the root
    root_pos = tab.group_root()
    group_offset = np.fromiter(map(a.offsets.get, map(names.__getitem__, root_pos.tolist()),
                                   repeat(0)), np.int64, len(root_pos))
    offs = group_offset[tab.group] + tab.rel
    offs[ctx.nbytes == 0] = 0
    lives = list(zip(ctx.first.tolist(), ctx.last.tolist()))  # the context's liveness
    alias, ids = a.alias, index.ids
    at = _positions(n, ids, alias)  # once for both of the alias columns
    alias_of = _column(n, at, map(_ALIAS_SOURCE, alias.values()))
    alias_kind = _column(n, at, map(_ALIAS_KIND, alias.values()))
    slices = _column(n, _positions(n, ids, a.slice_of), a.slice_of.values())
    tensors = dict(zip(names, tensor_plans(index.kinds(), ctx.nbytes.tolist(), offs.tolist(),
                                           lives, alias_of, alias_kind, slices)))
    plan = Plan(model=model, bindings=dict(bindings), alignment=ctx.alignment,
                order=list(ctx.order), constants=list(graph.constants),
                arena_bytes=a.arena_bytes or 0, tensors=tensors, passes=passes,
                target=dict(target) if target else None)
    if graph.data_bounds is not None:  # issue 53: the tensors planned at a bound, marked
        from graphmem.plan.bounded import with_bounds
        plan = with_bounds(plan, graph)
    stats, cols = built_stats(plan, ids)
    return Plan(**{**plan.__dict__, "stats": stats}), cols


def _positions(n: int, position: Mapping[str, int], keys) -> np.ndarray:
    """The positions of ``keys`` (``n`` for a key not in ``position``)."""
    return np.fromiter(map(position.get, keys, repeat(n)), np.int64, len(keys))


def _column(n: int, at: np.ndarray, values) -> list:
    """A list of ``n`` Nones with ``values`` at the positions ``at`` (those past ``n``
    are left out)."""
    out = np.full(n, None, dtype=object)
    if len(at):
        vals = np.empty(len(at), dtype=object)
        vals[:] = list(values)
        keep = at < n
        out[at[keep]] = vals[keep]
    return out.tolist()


_ALIAS_SOURCE, _ALIAS_KIND = itemgetter(0), itemgetter(1)  # of an (alias_of, alias) pair
