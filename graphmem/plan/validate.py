"""The independent check of a plan: every rule of ``graphmem.plan/1`` (docs/plan-format.md).

``validate(plan, graph)`` recomputes the order check, liveness and the aliasing rules
from the graph itself and knows nothing of how the plan was made; every test and the
verifier call it on every plan.
"""
from __future__ import annotations

import bisect
from typing import Callable

import numpy as np

from graphmem.core import ops
from graphmem.core.index import GraphIndex, index_graph
from graphmem.core.ops import AliasEdges, alias_edges, concat_axis, is_concat
from graphmem.core.ir import Graph
from graphmem.core.liveness import liveness, overlapping_pairs
from graphmem.core.nogc import gc_paused
from graphmem.core.order import check_order
from graphmem.errors import PlanInvalid
from graphmem.plan.columns import KIND, LIVE, PlanColumns, columns
from graphmem.plan.format import FORMAT, Plan
from graphmem.plan.links import links_hold
from graphmem.plan.stats import stats_of


def expected_kind(graph: Graph, tensor: str, io: tuple[set, set] | None = None) -> str:
    """input, output or activation; ``io`` is ``io_sets(graph)``, to ask for many tensors."""
    inputs, outputs = io if io is not None else (graph.inputs, graph.outputs)
    if tensor in inputs:
        return "input"
    if tensor in outputs:
        return "output"
    return "activation"


def io_sets(graph: Graph) -> tuple[set, set]:
    """The graph's inputs and outputs as sets (they are tuples: a lookup per tensor
    would cost O(outputs), quadratic for a graph with many outputs)."""
    return set(graph.inputs), set(graph.outputs)


@gc_paused
def problems(plan: Plan, graph: Graph, *, index: GraphIndex | None = None) -> list[str]:
    """Every rule of ``graphmem.plan/1`` that ``plan`` breaks for ``graph`` (empty: valid).

    ``index``: the graph's :class:`~graphmem.core.index.GraphIndex`, built if not given.
    """
    index = index if index is not None else index_graph(graph)
    return _problems_or_range(plan, graph, index, None, None, None)


def validate(plan: Plan, graph: Graph, *, index: GraphIndex | None = None) -> None:
    """Raise :class:`PlanInvalid` naming each broken rule; return None for a valid plan."""
    found = problems(plan, graph, index=index)
    if found:
        raise PlanInvalid(found)


@gc_paused
def validate_built(plan: Plan, graph: Graph, cols: PlanColumns, index: GraphIndex,
                   intervals, edges: Callable[[], AliasEdges]) -> None:
    """:func:`validate` of the plan the planner has just built, from what the planner
    computed with the same functions on the same input: ``intervals``, the liveness of
    ``plan.order`` (after checking that order), from which it wrote the plan's stats;
    ``edges``, a function giving the order's alias edges (asked only when the plan has
    aliases); ``cols``, the plan's own columns. The order check, the liveness and the
    stats are not computed a second time; every rule about what the passes decided
    (kinds, bytes, offsets, live ranges, aliases, slices, overlaps) still is."""
    found = _problems_or_range(plan, graph, index, intervals, edges, cols)
    if found:
        raise PlanInvalid(found)


def _problems_or_range(plan: Plan, graph: Graph, index, intervals, edges, cols) -> list[str]:
    try:
        return _problems(plan, graph, index, intervals, edges, cols)
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



def _problems(plan: Plan, graph: Graph, topo: GraphIndex, intervals, edges, cols) -> list[str]:
    out: list[str] = []
    if plan.format != FORMAT:
        return [f"format is {plan.format!r}, not {FORMAT!r}"]
    if plan.alignment <= 0:
        return [f"alignment {plan.alignment} is not positive"]
    fresh = intervals is not None
    if not fresh:
        out += check_order(graph, plan.order, topo)
    if out:
        return out
    const_expected = set(graph.constants)
    if set(plan.constants) != const_expected:
        extra = sorted(set(plan.constants) - const_expected)
        miss = sorted(const_expected - set(plan.constants))
        out.append(f"constants: {extra[0]!r} is not a foldable constant" if extra else
                   f"constants: {miss[0]!r} is computed from weights alone but not listed")
    if not fresh:
        intervals = liveness(graph, plan.order, topo)
    arena = topo.arena_names()
    # the usual plan lists every arena tensor in the graph's order (what liveness
    # gives); then positions in the plan are graph-index ids, and the set checks hold
    in_order = len(intervals) == len(arena) and list(plan.tensors) == arena
    if not in_order:
        names = set(intervals)
        if set(plan.tensors) != names:
            extra = sorted(set(plan.tensors) - names)
            miss = sorted(names - set(plan.tensors))
            if extra:
                out.append(f"tensors: {extra[0]!r} is not a tensor the graph computes or "
                           "takes as input")
            if miss:
                out.append(f"tensors: {miss[0]!r} is missing")
            return out
    try:
        if cols is None:
            cols = columns(plan, topo.ids if in_order else None)
        if edges is None:
            def edges():
                return alias_edges(graph, plan.order, topo)
    except OverflowError:  # past 64 bits: the loop words the rule broken, if any
        return out + _tensor_problems(plan, graph, intervals) or [_out_of_range(plan)]
    if not (in_order and _tensor_rules_hold(plan, topo, cols, intervals)):
        out += _tensor_problems(plan, graph, intervals)
    if out:
        return out
    if not (in_order and links_hold(plan, graph, topo, cols, edges)):
        out += link_problems(plan, graph, topo, cols)
    if out:
        return out
    out += _overlap_problems(cols)
    if not fresh:
        out += _stats_problems(plan, cols)
    return out


def _tensor_rules_hold(plan: Plan, topo, cols: PlanColumns, intervals) -> bool:
    """The per-tensor rules of :func:`_tensor_problems` on whole columns (numpy), for a
    plan in the graph's order: True when none is broken (else that loop words them)."""
    if topo.nbytes is None or not np.array_equal(cols.size, topo.nbytes):
        return False
    n = len(cols.ts)
    if list(map(KIND, cols.ts)) != topo.kinds():
        return False
    if list(map(LIVE, cols.ts)) != list(intervals.values()):  # Interval == tuple
        return False
    off, size = cols.offset, cols.size
    if n and max(int(off.max()), int(size.max())) >= 2 ** 62:  # the sum below would wrap
        return False
    return not (((off < 0) | (off % plan.alignment != 0)).any()
                or (off + size > plan.arena_bytes).any())


def _tensor_problems(plan: Plan, graph: Graph, intervals) -> list[str]:
    """Kind, bytes, offset, end and live range of every tensor, one by one."""
    out = []
    io = io_sets(graph)
    for name, t in plan.tensors.items():
        info = graph.tensors[name]
        want_kind = expected_kind(graph, name, io)
        if t.kind != want_kind:
            out.append(f"tensor {name!r}: kind {t.kind!r}, expected {want_kind!r}")
        if t.bytes != info.bytes:
            out.append(f"tensor {name!r}: bytes {t.bytes}, but {info.dtype}{list(info.shape)} "
                       f"is {info.bytes}")
        if t.offset < 0 or t.offset % plan.alignment:
            out.append(f"tensor {name!r}: offset {t.offset} is not a non-negative multiple "
                       f"of the alignment {plan.alignment}")
        if t.offset + t.bytes > plan.arena_bytes:
            out.append(f"tensor {name!r}: ends at {t.offset + t.bytes}, past the arena "
                       f"({plan.arena_bytes} bytes)")
        iv = intervals[name]
        if t.live != (iv.first, iv.last):
            out.append(f"tensor {name!r}: live {list(t.live)}, expected [{iv.first}, {iv.last}]")
    return out


class _Producers:
    """``{tensor: the node writing it}`` of the graph, looked up in its index."""

    def __init__(self, graph: Graph, topo: GraphIndex):
        self.nodes, self.topo = graph.nodes, topo
        self.rows = self.topo.producer_rows().tolist()  # a list: one lookup per call

    def get(self, name: str):
        i = self.topo.ids.get(name)
        row = -1 if i is None else self.rows[i]
        return None if row < 0 else self.nodes[row]


def link_problems(plan: Plan, graph: Graph, topo: GraphIndex, cols: PlanColumns) -> list[str]:
    out: list[str] = []
    if not cols.linked:
        return out
    producer = _Producers(graph, topo)
    pos_of_row = np.full(len(topo.node_index), -1, dtype=np.int64)
    pos_of_row[topo.rows(plan.order)] = np.arange(len(plan.order))
    position = _Positions(topo, pos_of_row)
    group = cols.group
    members = _members(cols)  # group root -> member names, for groups of more than one
    guard = _OverwriteGuard(plan, members)
    concats: dict[str, tuple | None] = {}  # per Concat output: see _concat_slices
    for i in cols.linked:
        name, t = cols.names[i], cols.ts[i]
        if (t.alias_of is None) != (t.alias is None):
            out.append(f"tensor {name!r}: alias_of and alias must be given together")
            continue
        if t.alias_of is not None:
            out += _check_alias(plan, graph, producer, position, members, int(group[i]),
                                name, t, guard)
        if t.slice_of is not None:
            out += _check_slice(plan, graph, producer, name, t, concats)
    return out


class _Positions:
    """``{Node.index: its position in the plan's order}``, from the index's rows."""

    def __init__(self, topo, pos_of_row: np.ndarray):
        self.row_of, self.pos_of_row = topo.row_of.tolist(), pos_of_row.tolist()

    def __getitem__(self, index: int) -> int:
        return self.pos_of_row[self.row_of[index]]


def _members(cols: PlanColumns) -> dict[int, list[str]]:
    """Group root -> its members' names in plan order, for the groups of more than one."""
    group = cols.group
    shared = np.flatnonzero(np.bincount(group, minlength=len(group))[group] > 1)
    if not len(shared):
        return {}
    shared = shared[np.argsort(group[shared], kind="stable")]
    g = group[shared]
    cuts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    names = list(map(cols.names.__getitem__, shared.tolist()))
    bounds = np.r_[cuts, len(shared)].tolist()
    # each group's names, sliced out of one list (no per-group numpy call)
    return dict(zip(g[cuts].tolist(), map(names.__getitem__,
                                          map(slice, bounds[:-1], bounds[1:]))))


class _OverwriteGuard:
    """Per storage group: does any member hold a graph input, or live across a step?

    Answers in O(log n) what the member loop of ``_check_alias`` answers in O(group),
    so a long chain of in-place ops is not quadratic; the loop still runs (and words
    the problem) whenever this says a problem is possible.
    """

    def __init__(self, plan: Plan, members: dict[int, list[str]]):
        self.plan, self.members = plan, members
        self.cache: dict[int, tuple[bool, list[int], list[int]]] = {}

    def may_break(self, root: int, pos: int) -> bool:
        if root not in self.cache:
            tensors = self.plan.tensors
            ms = sorted((tensors[m].live[0], tensors[m].live[1]) for m in self.members[root])
            firsts, reach, best = [], [], None
            for first, last in ms:
                best = last if best is None else max(best, last)
                firsts.append(first)
                reach.append(best)  # the latest last use among members starting by here
            has_input = any(tensors[m].kind == "input" for m in self.members[root])
            self.cache[root] = (has_input, firsts, reach)
        has_input, firsts, reach = self.cache[root]
        k = bisect.bisect_left(firsts, pos)  # members with first < pos
        return has_input or (k > 0 and reach[k - 1] > pos)


def _check_alias(plan, graph, producer, position, members, gid, name, t, guard) -> list[str]:
    src = t.alias_of
    if src not in plan.tensors:
        return [f"tensor {name!r}: alias_of {src!r} is not an arena tensor"]
    node = producer.get(name)
    if node is None or src not in node.inputs:
        return [f"tensor {name!r}: alias_of {src!r}, but its producer does not read {src!r}"]
    o = node.outputs.index(name)
    s = plan.tensors[src]
    if t.offset != s.offset:
        return [f"tensor {name!r}: alias of {src!r} at offset {t.offset}, not {s.offset}"]
    if t.alias == "view":
        pairs = ops.view_pairs(node)
        if not any(src == node.inputs[a] and b == o for a, b in pairs):
            return [f"tensor {name!r}: {node.op_type} is not a view op for input {src!r}"]
        if t.bytes != s.bytes:
            return [f"tensor {name!r}: a view must have the bytes of {src!r}"]
        return []
    if t.alias != "inplace":
        return [f"tensor {name!r}: alias {t.alias!r} is neither 'view' nor 'inplace'"]
    pairs = ops.overwrite_pairs(node)
    if not any(src == node.inputs[a] and b == o for a, b in pairs):
        return [f"tensor {name!r}: {node.op_type} may not overwrite its input {src!r}"]
    if t.bytes > s.bytes:
        return [f"tensor {name!r}: in-place output larger than {src!r}"]
    pos = position[node.index]
    group = members[gid]
    if len(group) > 8 and not guard.may_break(gid, pos):
        return []  # a large group that the guard clears without the member loop
    for m in group:
        mt = plan.tensors[m]
        if mt.kind == "input":
            return [f"tensor {name!r}: overwrites the storage of graph input {m!r}"]
        if mt.live[0] < pos and mt.live[1] > pos:
            return [f"tensor {name!r}: overwrites {src!r} in place at position {pos}, but "
                    f"{m!r}, which shares that storage, is read later (at {mt.live[1]})"]
    return []


def _check_slice(plan, graph, producer, name, t, concats) -> list[str]:
    out_name = t.slice_of
    if out_name not in plan.tensors:
        return [f"tensor {name!r}: slice_of {out_name!r} is not an arena tensor"]
    concat = concats.get(out_name)
    if concat is None:  # once per Concat, not once per slice
        node = producer.get(out_name)
        concat = concats[out_name] = (
            None if node is None or not is_concat(node)
            else _concat_slices(plan, graph, node, out_name))
    if concat is None:
        return [f"tensor {name!r}: slice_of {out_name!r}, which is not a Concat reading it once"]
    starts, axis, contiguous, base = concat
    if starts.get(name) is None:
        return [f"tensor {name!r}: slice_of {out_name!r}, which is not a Concat reading it once"]
    if t.kind != "activation":
        return [f"tensor {name!r}: a graph input or output cannot be a Concat slice"]
    if not contiguous:
        return [f"tensor {name!r}: the slices of {out_name!r} are not contiguous "
                f"(a dimension before axis {axis} is not 1)"]
    want = base + starts[name]
    if t.offset != want:
        return [f"tensor {name!r}: slice of {out_name!r} at offset {t.offset}, expected {want}"]
    return []


def _concat_slices(plan, graph, node, out_name) -> tuple[dict[str, int | None], int, bool, int]:
    """What every slice check of one Concat needs: each input's byte start (None for an
    input read more than once), the axis, whether the slices are contiguous, and the
    output's offset."""
    starts: dict[str, int | None] = {}
    before = 0
    for inp in node.inputs:
        starts[inp] = None if inp in starts else before  # None: read more than once
        before += graph.tensors[inp].bytes
    shape = graph.tensors[out_name].shape
    axis, contiguous = concat_axis(shape, node.attrs.get("axis", 0))
    return starts, axis, contiguous, plan.tensors[out_name].offset


def _overlap_problems(cols: PlanColumns) -> list[str]:
    """Tensors of different groups live at the same time on the same bytes."""
    keep = np.flatnonzero(cols.size > 0)
    first, last, start = cols.first[keep], cols.last[keep], cols.offset[keep]
    end = start + cols.size[keep]
    group = cols.group[keep]
    worst = None  # the clash that starts earliest: (position, a, b)
    for a, b in overlapping_pairs(first, last):
        clash = (start[a] < end[b]) & (start[b] < end[a]) & (group[a] != group[b])
        if clash.any():
            a, b = a[clash], b[clash]
            at = np.maximum(first[a], first[b])
            k = int(np.argmin(at))
            if worst is None or at[k] < worst[0]:
                worst = (int(at[k]), int(a[k]), int(b[k]))
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


