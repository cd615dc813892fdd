"""The independent check of a plan: every rule of ``graphmem.plan/1`` (docs/plan-format.md).

``validate(plan, graph)`` recomputes the order check and the live ranges
(:mod:`graphmem.plan.live`), the statistics and the aliasing rules from the graph itself and
knows nothing of how the plan was made; every test and the verifier call it on every
plan, and the planner on every plan it writes (:func:`validate_built`).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from graphmem.core.index import GraphIndex, index_graph
from graphmem.core.ops import (DEFAULT_TABLE, INPLACE_TABLES, AliasEdges, alias_edges,
                               table_id, table_of_id)
from graphmem.core.ir import Graph
from graphmem.core.liveness import count_overlapping_pairs, overlapping_pairs
from graphmem.core.nogc import gc_paused
from graphmem.core.order import check_order
from graphmem.errors import PlanInvalid
from graphmem.plan.columns import KIND, PlanColumns, columns
from graphmem.plan.format import FORMAT, Plan
from graphmem.plan.graph_digest import check_graph
from graphmem.plan.links import link_problems
from graphmem.plan.live import live_ranges
from graphmem.core.scopes import graph_for_plan, workspace_name
from graphmem.plan.stats import stats_of


@gc_paused
def problems(plan: Plan, graph: Graph, *, index: GraphIndex | None = None) -> list[str]:
    """Every rule of ``graphmem.plan/1`` that ``plan`` breaks for ``graph`` (empty: valid).

    ``index``: the graph's :class:`~graphmem.core.index.GraphIndex`, built if not given.
    A plan that records the digest of another graph is not judged: that raises
    :class:`~graphmem.plan.graph_digest.PlanForAnotherGraph` (bad input, not a broken
    rule: :func:`~graphmem.plan.graph_digest.check_graph`).
    """
    check_graph(plan, graph)
    if graph.scopes or plan.scopes:
        found = scope_problems(plan, graph)
        if found:
            return found
        graph, index = graph_for_plan(graph, plan), None
    index = index if index is not None else index_graph(graph)
    return _problems_or_range(plan, graph, index, None, None)


def scope_problems(plan: Plan, graph: Graph) -> list[str]:
    """The nested scopes: one plan for each body of each control-flow node, each valid
    for its body (recursively), each naming its node's workspace tensor. That each
    body's arena fits its workspace, and the workspace is placed like any tensor, is
    checked on the enclosing graph with the workspaces (``graph_for_plan``)."""
    want = {(idx, s.attr): s for idx, ss in graph.scopes.items() for s in ss}
    seen = set()
    out = []
    for i, sp in enumerate(plan.scopes):
        key = (sp.node, sp.attr)
        if key not in want:
            return [f"scopes[{i}]: node {sp.node} has no body {sp.attr!r} in the model"]
        if key in seen:
            return [f"scopes[{i}]: a second plan for the {sp.attr} of node {sp.node}"]
        seen.add(key)
        ws = workspace_name(graph, sp.node)
        if sp.workspace != ws:
            out.append(f"scopes[{i}]: workspace {sp.workspace!r}, expected {ws!r}")
        if sp.plan.alignment != plan.alignment:
            out.append(f"scopes[{i}]: alignment {sp.plan.alignment}, the plan's is "
                       f"{plan.alignment}")
        out += [f"scope {sp.attr} of node {sp.node}: {p}"
                for p in problems(sp.plan, want[key].graph)]
    for idx, attr in want:
        if (idx, attr) not in seen:
            out.append(f"scopes: the {attr} of node {idx} has no plan")
    return out


def validate(plan: Plan, graph: Graph, *, index: GraphIndex | None = None) -> None:
    """Raise :class:`PlanInvalid` naming each broken rule; return None for a valid plan."""
    found = problems(plan, graph, index=index)
    if found:
        raise PlanInvalid(found)


@gc_paused
def validate_built(plan: Plan, graph: Graph, index: GraphIndex,
                   cols: PlanColumns | None = None, *,
                   edges: tuple[Sequence[int], str, Callable[[], AliasEdges]] | None = None
                   ) -> None:
    """:func:`validate` of the plan the planner has just built (its scopes checked when
    they were planned), given what is the graph's or the plan's own and so need not be
    made twice: ``index``, the graph's index; ``cols``, the plan's columns
    (:func:`~graphmem.plan.columns.columns` of it, made if not given); ``edges``,
    ``(order, table, get)`` where ``get()`` gives the alias edges of that order under
    that in-place table, used only if they are the plan's order and table.

    Everything checked is computed here from the graph and the plan: the order check,
    the live ranges (from the graph's reads and writes in the plan's order), the
    statistics, and every rule about what the passes decided. Nothing the planner
    computed while planning (its liveness, its groups) is taken on trust. The plan's
    graph digest is not compared: the planner has just computed it from ``graph``."""
    found = _problems_or_range(plan, graph, index, cols, edges)
    if found:
        raise PlanInvalid(found)


def _problems_or_range(plan: Plan, graph: Graph, index, cols, edges) -> list[str]:
    try:
        return _problems(plan, graph, index, cols, edges)
    except OverflowError:  # the checks use 64-bit arrays
        return [_out_of_range(plan)]


def _out_of_range(plan: Plan) -> str:
    """The first integer of the plan too large for the 64-bit checks (none is right)."""
    limit = 2 ** 63
    if not -limit < plan.arena_bytes < limit:
        return f"arena_bytes {plan.arena_bytes} is out of range"
    for name, t in plan.tensors.items():
        for what, v in (("offset", t.offset), ("bytes", t.bytes), ("live", t.live[0]),
                        ("live", t.live[1])):
            if not -limit < v < limit:
                return f"tensor {name!r}: {what} {v} is out of range"
    return "an integer of the plan is out of range"


def _problems(plan: Plan, graph: Graph, topo: GraphIndex, cols, edges) -> list[str]:
    out: list[str] = []
    if plan.format != FORMAT:
        return [f"format is {plan.format!r}, not {FORMAT!r}"]
    if plan.alignment <= 0:
        return [f"alignment {plan.alignment} is not positive"]
    table = DEFAULT_TABLE
    if plan.target is not None and "inplace_table" in plan.target:
        table = table_of_id(plan.target["inplace_table"])
        if table is None:
            known = ", ".join(table_id(t) for t in INPLACE_TABLES if "@" not in t)
            return [f"target: inplace_table {plan.target['inplace_table']!r} is not a table "
                    f"graphmem knows (today: {known})"]
    out += check_order(graph, plan.order, topo)
    if out:
        return out
    live = live_ranges(topo, plan.order)
    const_expected = set(graph.constants)
    if set(plan.constants) != const_expected:
        extra = sorted(set(plan.constants) - const_expected)
        miss = sorted(const_expected - set(plan.constants))
        out.append(f"constants: {extra[0]!r} is not a foldable constant" if extra else
                   f"constants: {miss[0]!r} is computed from weights alone but not listed")
    first, last, present = live
    arena = topo.arena_names()
    # the usual plan lists every arena tensor in the graph's order; then positions in
    # the plan are graph-index ids, and the set checks hold
    in_order = bool(present.all()) and list(plan.tensors) == arena
    if not in_order:
        names = set(arena) if present.all() else {arena[k] for k in np.flatnonzero(present)}
        if set(plan.tensors) != names:
            extra = sorted(set(plan.tensors) - names)
            miss = sorted(names - set(plan.tensors))
            if extra:
                out.append(f"tensors: {extra[0]!r} is not a tensor the graph computes or "
                           "takes as input")
            if miss:
                out.append(f"tensors: {miss[0]!r} is missing")
            return out
    position = topo.ids if in_order else dict(zip(plan.tensors, range(len(plan.tensors))))
    try:
        if cols is None:
            cols = columns(plan, position)
        pid = (np.arange(len(cols.names)) if in_order
               else np.fromiter(map(topo.ids.__getitem__, cols.names), np.int64, len(cols.names)))
        out += _tensor_problems(plan, graph, topo, (first, last), cols, pid)
    except OverflowError:  # a value past the 64-bit columns (none is right)
        return out + [_out_of_range(plan)]
    if not out:
        out += _arena_problems(plan, cols)
    if out:
        return out
    out += link_problems(plan, graph, topo, cols, pid, position,
                         lambda: _edges(graph, plan.order, topo, table, edges))
    if out:
        return out
    out += _overlap_problems(cols)
    out += _stats_problems(plan, cols)
    return out


def _edges(graph: Graph, order: list[int], topo: GraphIndex, table: str, known) -> AliasEdges:
    """The alias edges of ``order`` under ``table``: ``known`` ones (order, table, get)
    where they are of this order and table, else computed."""
    if known is not None and known[1] == table and tuple(known[0]) == tuple(order):
        return known[2]()
    return alias_edges(graph, order, topo, table)


def _tensor_problems(plan: Plan, graph: Graph, topo: GraphIndex, live, cols: PlanColumns,
                     pid: np.ndarray) -> list[str]:
    """Kind, bytes, offset, end and live range of every tensor: decided on whole columns
    (``pid``: each plan position's id in ``topo``), worded for the tensors that break
    one, in plan order. Raises OverflowError for a value past 64 bits."""
    n = len(cols.names)
    if not -2 ** 63 < plan.arena_bytes < 2 ** 63:
        raise OverflowError("arena_bytes")
    in_order = n == topo.arena and bool((pid == np.arange(n)).all())
    kinds = topo.kinds()
    plan_kinds = list(map(KIND, cols.ts))
    if not in_order:
        kinds = list(map(kinds.__getitem__, pid.tolist()))
    bad_kind = (np.zeros(n, dtype=bool) if plan_kinds == kinds
                else np.fromiter(map(str.__ne__, plan_kinds, kinds), bool, n))
    want_bytes = topo.nbytes if topo.nbytes is not None else np.array(
        [graph.tensors[t].bytes for t in topo.arena_names()], dtype=object)
    want_bytes = want_bytes[pid]
    bad_bytes = cols.size != want_bytes
    off, size = cols.offset, cols.size
    bad_offset = (off < 0) | (off % plan.alignment != 0)
    small = (np.abs(off) < 2 ** 62) & (np.abs(size) < 2 ** 62)  # their sum fits 64 bits
    bad_end = np.where(small, np.where(small, off, 0) + np.where(small, size, 0)
                       > plan.arena_bytes, False)
    for k in np.flatnonzero(~small).tolist():  # Python integers: no wrap
        bad_end[k] = int(off[k]) + int(size[k]) > plan.arena_bytes
    iv_first, iv_last = live  # per graph-index id, from the graph (plan/live.py)
    bad_live = (cols.first != iv_first[pid]) | (cols.last != iv_last[pid])
    out = []
    for k in np.flatnonzero(bad_kind | bad_bytes | bad_offset | bad_end | bad_live).tolist():
        name, t = cols.names[k], cols.ts[k]
        if bad_kind[k]:
            out.append(f"tensor {name!r}: kind {t.kind!r}, expected {kinds[k]!r}")
        if bad_bytes[k]:
            info = graph.tensors[name]
            out.append(f"tensor {name!r}: bytes {t.bytes}, but {info.dtype}{list(info.shape)} "
                       f"is {info.bytes}")
        if bad_offset[k]:
            out.append(f"tensor {name!r}: offset {t.offset} is not a non-negative multiple "
                       f"of the alignment {plan.alignment}")
        if bad_end[k]:
            out.append(f"tensor {name!r}: ends at {t.offset + t.bytes}, past the arena "
                       f"({plan.arena_bytes} bytes)")
        if bad_live[k]:
            first, last = int(iv_first[pid[k]]), int(iv_last[pid[k]])
            out.append(f"tensor {name!r}: live {list(t.live)}, expected [{first}, {last}]")
    return out


def _arena_problems(plan: Plan, cols: PlanColumns) -> list[str]:
    """The arena ends where its last tensor ends, rounded up to the alignment: a larger
    one is memory no tensor uses (and a verifier would allocate)."""
    end = int((cols.offset + cols.size).max()) if len(cols.size) else 0
    top = -(-end // plan.alignment) * plan.alignment
    if plan.arena_bytes > top:
        return [f"arena_bytes {plan.arena_bytes} is past the end of its last tensor "
                f"({end} bytes, {top} aligned)"]
    return []


def _overlap_problems(cols: PlanColumns) -> list[str]:
    """Tensors of different groups live at the same time on the same bytes.

    The pairs that overlap in one dimension are walked and checked in the other: in
    time or in bytes, whichever has fewer pairs (tens of thousands of outputs all live
    to the end overlap in time pairwise, but each sits on its own bytes). The clash
    reported is the earliest, ties broken by plan position, whichever way is walked."""
    keep = np.flatnonzero(cols.size > 0)
    first, last, start = cols.first[keep], cols.last[keep], cols.offset[keep]
    end = start + cols.size[keep]
    group = cols.group[keep]
    by_bytes = count_overlapping_pairs(start, end - 1) < count_overlapping_pairs(first, last)
    walk = overlapping_pairs(start, end - 1) if by_bytes else overlapping_pairs(first, last)
    worst = None  # the clash that starts earliest: (position, a, b), a < b
    for a, b in walk:
        clash = ((first[a] <= last[b]) & (first[b] <= last[a]) & (start[a] < end[b])
                 & (start[b] < end[a]) & (group[a] != group[b]))
        if clash.any():
            a, b = np.minimum(a[clash], b[clash]), np.maximum(a[clash], b[clash])
            at = np.maximum(first[a], first[b])
            k = np.lexsort((b, a, at))[0]
            found = (int(at[k]), int(a[k]), int(b[k]))
            if worst is None or found < worst:
                worst = found
    if worst is None:
        return []
    at, a, b = worst
    a, b = sorted((a, b), key=lambda k: (first[k], k))
    names = cols.names
    return [f"tensors {names[keep[a]]!r} and {names[keep[b]]!r} are live at the same time "
            f"(from position {at}) and overlap in bytes "
            f"[{max(start[a], start[b])}, {min(end[a], end[b])})"]


def _stats_problems(plan: Plan, cols: PlanColumns) -> list[str]:
    if not plan.stats:
        return []
    want = stats_of(plan, cols)
    for key, value in want.items():
        if key in plan.stats and plan.stats[key] != value:
            return [f"stats.{key} is {plan.stats[key]}, the plan's own tensors give {value}"]
    return []


