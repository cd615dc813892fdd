"""The plan's alias and slice rules: which links break them, and how to say so.

Each rule is decided once, for every link at once (numpy over the plan's columns and the
graph index), and the tensors that break one are then worded in plan order. The rules
are the in-place rule of docs/plan-format.md ("The in-place rule"), implemented here
apart from the passes (this module imports nothing of the planner; its two tests of
storage, a member live across a write and bytes that overlap, are
:mod:`graphmem.core.inplace_rule`'s, which the passes' storage groups ask too;
tests/test_inplace_rule.py gives both the same cases):

- alias: ``alias_of`` and ``alias`` come together; the source is an arena tensor,
  read by the tensor's producer, at the same offset; ``"view"``: a pair of
  ``ops.view_pairs``, the same bytes; ``"inplace"``: a pair of ``ops.overwrite_pairs``,
  the source's dtype and shape and more than zero bytes, no member of the storage
  group a graph input, and no member whose bytes overlap the overwritten input's live
  across the write (:func:`~graphmem.core.inplace_rule.live_across`).
- slice: ``slice_of`` is an activation's Concat output, produced by a Concat that reads
  the tensor once, whose axis is in range for the output's rank and whose dimensions
  before the axis are 1 (contiguous slices), and the tensor sits at the output's offset
  plus the bytes of the inputs before it.

Per link the first rule broken is reported (the alias rules in the order above, then
the slice rules), as one line naming the tensor.
"""
from __future__ import annotations

from itertools import repeat
from operator import attrgetter, is_not, ne
from typing import Callable, Mapping

import numpy as np

from graphmem.core.index import GraphIndex, edges_in_order
from graphmem.core.inplace_rule import live_across, overlaps
from graphmem.core.ir import Graph
from graphmem.core.ops import AliasEdges, concat_axis, is_concat
from graphmem.plan.columns import PlanColumns
from graphmem.plan.format import Plan

_ALIAS_OF, _ALIAS, _SLICE_OF = attrgetter("alias_of"), attrgetter("alias"), attrgetter("slice_of")
_IMPLICIT = attrgetter("implicit_inputs")

# what breaks an alias, in the order the rules are checked (0: nothing)
(_FINE, _NOT_TOGETHER, _NO_SOURCE, _NOT_READ, _OFFSET, _NOT_VIEW, _VIEW_BYTES, _KIND,
 _NOT_OVERWRITE, _DTYPE, _SHAPE, _EMPTY, _GROUP) = range(13)
_WORDS = {
    _NO_SOURCE: "alias_of {src!r} is not an arena tensor",
    _NOT_READ: "alias_of {src!r}, but its producer does not read {src!r}",
    _OFFSET: "alias of {src!r} at offset {offset}, not {src_offset}",
    _NOT_VIEW: "{op} is not a view op for input {src!r}",
    _VIEW_BYTES: "a view must have the bytes of {src!r}",
    _KIND: "alias {alias!r} is neither 'view' nor 'inplace'",
    _NOT_OVERWRITE: "{op} may not overwrite its input {src!r}",
    _DTYPE: "written in place over {src!r} of dtype {src_dtype}, but it is {dtype}",
    _SHAPE: "written in place over {src!r} of shape {src_shape}, but its shape is {shape}",
    _EMPTY: "written in place over {src!r}, which has no bytes",
}


def link_problems(plan: Plan, graph: Graph, topo: GraphIndex, cols: PlanColumns,
                  pid: np.ndarray, position: Mapping[str, int],
                  edges: Callable[[], AliasEdges]) -> list[str]:
    """Every alias and slice rule the plan's links break, one line per broken link.

    ``pid``: each plan position's id in ``topo``; ``position``: tensor -> plan position
    (it may name more tensors, at positions past the plan's); ``edges``: a function
    giving the alias edges of ``plan.order`` (asked only when the plan has aliases).
    Kinds, bytes and live ranges are already checked.
    """
    if not cols.linked:
        return []
    linked = np.asarray(cols.linked, dtype=np.int64)
    ts = list(map(cols.ts.__getitem__, cols.linked))
    alias_of, alias, slice_of = (list(map(f, ts)) for f in (_ALIAS_OF, _ALIAS, _SLICE_OF))
    has_alias_of, has_alias = _given(alias_of), _given(alias)
    code = np.where(has_alias_of != has_alias, _NOT_TOGETHER, _FINE)
    at = np.flatnonzero(has_alias_of & has_alias)
    facts = None
    if len(at):
        facts = _AliasFacts(plan, graph, topo, cols, pid, position, edges(), linked[at],
                            [alias_of[k] for k in at.tolist()], [alias[k] for k in at.tolist()])
        code[at] = facts.code
    out: list[str] = []
    slices = _SliceFacts(plan, graph, topo, cols, pid, position)
    alias_row = dict(zip(at.tolist(), range(len(at))))
    for k in np.flatnonzero((code != _FINE) | _given(slice_of)).tolist():
        i, name, t = int(linked[k]), cols.names[linked[k]], ts[k]
        if code[k] == _NOT_TOGETHER:
            out.append(f"tensor {name!r}: alias_of and alias must be given together")
            continue
        if code[k] != _FINE:
            out.append(facts.words(alias_row[k], name, t))
        if t.slice_of is not None:
            found = slices.problem(i, name, t)
            if found:
                out.append(found)
    return out


def _given(values: list) -> np.ndarray:
    """Which values are not None."""
    return np.fromiter(map(is_not, values, repeat(None)), bool, len(values))


class _AliasFacts:
    """The alias rules decided for a set of links (plan positions ``out`` with sources
    named ``src_names`` and kinds ``kinds``): ``code``, per link, the first rule broken."""

    def __init__(self, plan, graph, topo, cols, pid, position, e: AliasEdges, out,
                 src_names, kinds):
        n = len(cols.names)
        self.plan, self.graph, self.cols = plan, graph, cols
        self.src_names = src_names
        src = np.fromiter(map(position.get, src_names, repeat(n)), np.int64, len(out))
        code = np.full(len(out), _FINE, dtype=np.int64)

        def rule(broken: np.ndarray, what: int) -> None:
            code[(code == _FINE) & broken] = what

        rule(src >= n, _NO_SOURCE)
        # where the source is missing (already _NO_SOURCE), point at the tensor itself so
        # the later rules index safely; rule() never overwrites that first code
        src = np.where(src < n, src, out)
        out_id, src_id = pid[out], pid[src]
        rows_of = topo.rows(plan.order)
        self.prow = prow = topo.producer_rows()[out_id]
        rule((prow < 0) | ~_reads_explicitly(graph, topo, prow, src_id), _NOT_READ)
        rule(cols.offset[out] != cols.offset[src], _OFFSET)
        view = np.fromiter(map("view".__eq__, kinds), bool, len(kinds))
        overwrite = np.fromiter(map("inplace".__eq__, kinds), bool, len(kinds))
        paired = _in_edges(e, rows_of, prow, out_id, src_id, overwrite)
        rule(view & ~paired, _NOT_VIEW)
        rule(view & (cols.size[out] != cols.size[src]), _VIEW_BYTES)
        rule(~view & ~overwrite, _KIND)
        rule(overwrite & ~paired, _NOT_OVERWRITE)
        asked = np.flatnonzero((code == _FINE) & overwrite)
        if len(asked):  # the dtype and shape of each in-place pair, from the graph
            dtype, shape = _differ(graph, list(map(cols.names.__getitem__, out[asked].tolist())),
                                   list(map(src_names.__getitem__, asked.tolist())))
            for broken, what in ((dtype, _DTYPE), (shape, _SHAPE)):
                at = np.zeros(len(out), dtype=bool)
                at[asked] = broken
                rule(at, what)
        rule(overwrite & (cols.size[src] == 0), _EMPTY)
        pos_of_row = np.full(len(topo.node_index), -1, dtype=np.int64)
        pos_of_row[rows_of] = np.arange(len(rows_of))
        self.pos = pos_of_row[np.maximum(prow, 0)]
        writes = np.flatnonzero(code == _FINE)
        writes = writes[overwrite[writes]]
        if len(writes):
            broken = np.zeros(len(out), dtype=bool)
            broken[writes] = _group_breaks(cols, _input_positions(topo, pid), out[writes],
                                           self.pos[writes], src[writes])
            rule(broken, _GROUP)
        self.code, self.src, self.out = code, src, out

    def words(self, k: int, name: str, t) -> str:
        """The line for link ``k``, which breaks rule ``code[k]``."""
        code, src = int(self.code[k]), self.src_names[k]
        if code != _GROUP:
            s = self.plan.tensors.get(src) if code > _NOT_READ else None
            op = self.graph.nodes[int(self.prow[k])].op_type if code > _NOT_READ else ""
            mine, theirs = (self.graph.tensors.get(name), self.graph.tensors.get(src)) \
                if code in (_DTYPE, _SHAPE) else (None, None)
            return f"tensor {name!r}: " + _WORDS[code].format(
                src=src, op=op, offset=t.offset, src_offset=s.offset if s else None,
                alias=t.alias, dtype=mine and mine.dtype, src_dtype=theirs and theirs.dtype,
                shape=mine and list(mine.shape), src_shape=theirs and list(theirs.shape))
        # _GROUP: the first member of the storage group (in plan order) that breaks it
        cols, pos = self.cols, int(self.pos[k])
        group, s = cols.group, int(self.src[k])
        for m in np.flatnonzero(group == group[self.out[k]]).tolist():
            mt = cols.ts[m]
            if mt.kind == "input" or (live_across(mt.live[0], mt.live[1], pos)
                                      and _overlaps(cols, m, s)):
                if mt.kind == "input":
                    return (f"tensor {name!r}: overwrites the storage of graph input "
                            f"{cols.names[m]!r}")
                return (f"tensor {name!r}: overwrites {src!r} in place at position {pos}, but "
                        f"{cols.names[m]!r}, which shares that storage, is read later "
                        f"(at {mt.live[1]})")
        raise AssertionError("a broken in-place group with no member that breaks it")


def _overlaps(cols: PlanColumns, m, s):
    """Do the bytes of plan positions ``m`` overlap those of ``s`` (scalars or arrays)?"""
    offset, size = cols.offset, cols.size
    return overlaps(offset[m], offset[m] + size[m], offset[s], offset[s] + size[s])


# Above this many (write, member) pairs to look at, a write that the group-wide rule
# refuses is refused without asking which members' bytes it overlaps: a hostile plan
# must not make validation quadratic (every plan graphmem writes stays far below it).
BYTE_CHECK_LIMIT = 20_000_000


def _differ(graph: Graph, outs: list[str], srcs: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per (output, source) pair of arena tensors: (their dtypes differ, their shapes
    differ), read from the graph: one pass over (dtype, shape) for all pairs, then the
    few that differ told apart."""
    get = graph.tensors.__getitem__
    n = len(outs)
    differ = np.fromiter(map(ne, map(_TYPE_OF, map(get, outs)), map(_TYPE_OF, map(get, srcs))),
                         bool, n)
    dtype, shape = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for k in np.flatnonzero(differ).tolist():
        o, s = get(outs[k]), get(srcs[k])
        dtype[k], shape[k] = o.dtype != s.dtype, o.shape != s.shape
    return dtype, shape


_TYPE_OF = attrgetter("dtype", "shape")


def _input_positions(topo: GraphIndex, pid: np.ndarray) -> np.ndarray:
    """The plan positions of the graph inputs."""
    is_input = np.zeros(len(topo.names), dtype=bool)
    is_input[topo.inputs] = True
    return np.flatnonzero(is_input[pid])


def _group_breaks(cols: PlanColumns, inputs: np.ndarray, out: np.ndarray,
                  pos: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Per in-place write (output ``out`` over ``src`` at position ``pos``): does a
    member of its storage group hold a graph input, or live across ``pos`` with bytes
    that overlap ``src``'s? First for all writes at once in O(n log n) without the
    bytes (where asking every member of every write's group would be quadratic in a
    long in-place chain: per group, the latest last use of the members that start
    before ``pos`` decides whether one is live across it); then the writes that this
    refuses in a group whose members cover different bytes (Concat slices) are asked
    member by member which bytes they overlap."""
    broken = _group_breaks_anywhere(cols, inputs, out, pos)
    group = cols.group
    tainted = np.zeros(len(group), dtype=bool)
    tainted[group[inputs]] = True
    again = np.flatnonzero(broken & ~tainted[group[out]])
    if not len(again):
        return broken
    by_group = np.argsort(group, kind="stable")
    grouped = group[by_group]
    g = group[out[again]]
    lo, hi = np.searchsorted(grouped, g, "left"), np.searchsorted(grouped, g, "right")
    if int((hi - lo).sum()) > BYTE_CHECK_LIMIT:
        return broken
    for k, a, b in zip(again.tolist(), lo.tolist(), hi.tolist()):
        m = by_group[a:b]
        if (cols.offset[m] == cols.offset[m[0]]).all() and (cols.size[m] == cols.size[m[0]]).all():
            continue  # every member covers the same bytes: the answer stands
        broken[k] = bool((live_across(cols.first[m], cols.last[m], pos[k])
                          & _overlaps(cols, m, src[k])).any())
    return broken


def _group_breaks_anywhere(cols: PlanColumns, inputs: np.ndarray, out: np.ndarray,
                           pos: np.ndarray) -> np.ndarray:
    """:func:`_group_breaks` without the bytes: a member that holds a graph input or
    is live across ``pos`` anywhere in the group."""
    group = cols.group
    w_group = group[out]
    tainted = np.zeros(len(group), dtype=bool)
    tainted[group[inputs]] = True
    broken = tainted[w_group].copy()
    asked = np.zeros(len(group), dtype=bool)
    asked[w_group] = True  # group ids are plan positions
    member = np.flatnonzero(asked[group])
    first, last, g = cols.first[member], cols.last[member], group[member]
    base = int(min(first.min(), pos.min()))
    span = int(max(last.max(), pos.max())) - base + 2
    by_first = np.lexsort((first, g))
    g, first, last = g[by_first], first[by_first], last[by_first]
    # a running maximum of last within each group: groups are kept apart by their rank
    rank = np.cumsum(np.concatenate(([True], g[1:] != g[:-1])))
    reach = np.maximum.accumulate(rank * span + (last - base)) - rank * span
    start = np.searchsorted(g * span + (first - base), w_group * span + (pos - base))
    before = start > np.searchsorted(g, w_group)  # some member of the group starts before pos
    broken |= before & (reach[np.maximum(start - 1, 0)] + base > pos)
    return broken


def _reads_explicitly(graph: Graph, topo: GraphIndex, rows: np.ndarray,
                      ids: np.ndarray) -> np.ndarray:
    """Per (row, id): is ``id`` among the explicit inputs of node ``rows[k]`` (rows < 0:
    False)? A node's reads are its explicit inputs (blanks left out), then its implicit
    ones."""
    ok = rows >= 0
    r = np.where(ok, rows, 0)
    values, which = edges_in_order(topo.read_start, topo.reads, r)
    implicit = np.fromiter(map(len, map(_IMPLICIT, graph.nodes)), np.int64, len(graph.nodes))
    count = np.diff(topo.read_start)[r]
    explicit = count - implicit[r]
    within = np.arange(len(values)) - np.repeat(np.cumsum(count) - count, count)
    hit = np.zeros(len(rows), dtype=bool)
    match = (values == ids[which]) & (within < explicit[which])
    hit[which[match]] = True
    return hit & ok


def _in_edges(e: AliasEdges, rows_of: np.ndarray, rows: np.ndarray, out_id: np.ndarray,
              src_id: np.ndarray, overwrite: np.ndarray) -> np.ndarray:
    """Per link: is (its producer's row, output, source, view or overwrite) a pair of the
    edge table?"""
    width = int(max(e.out.max(initial=0), e.src.max(initial=0), out_id.max(initial=0),
                    src_id.max(initial=0))) + 2
    e_key = (e.out * width + (e.src + 1)) * 2 + e.overwrite
    by = np.argsort(e_key, kind="stable")
    e_key, e_row = e_key[by], rows_of[e.pos[by]]
    key = (out_id * width + (src_id + 1)) * 2 + overwrite
    lo, hi = np.searchsorted(e_key, key), np.searchsorted(e_key, key, side="right")
    found = (hi > lo) & (e_row[np.minimum(lo, len(e_row) - 1)] == rows) if len(e_row) \
        else np.zeros(len(key), dtype=bool)
    for k in np.flatnonzero(hi - lo > 1).tolist():  # a tensor written twice: any writer
        found[k] = bool((e_row[lo[k]:hi[k]] == rows[k]).any())
    return found


_UNSEEN = object()  # a Concat output not looked at yet


class _SliceFacts:
    """The slice rules, per Concat output computed once (the starts of its inputs, its
    axis and contiguity), checked per slice."""

    def __init__(self, plan, graph, topo, cols, pid, position):
        self.plan, self.graph, self.cols, self.position = plan, graph, cols, position
        self.n, self.pid = len(cols.names), pid
        self.producer = topo.producer_rows()
        self.concats: dict[str, tuple | None] = {}

    def problem(self, i: int, name: str, t) -> str | None:
        out_name = t.slice_of
        target = self.position.get(out_name, self.n)
        if target >= self.n:
            return f"tensor {name!r}: slice_of {out_name!r} is not an arena tensor"
        concat = self.concats.get(out_name, _UNSEEN)
        if concat is _UNSEEN:  # once per Concat, not once per slice
            row = int(self.producer[self.pid[target]])
            node = self.graph.nodes[row] if row >= 0 else None
            concat = self.concats[out_name] = (
                self._starts(node, out_name, target) if node is not None and is_concat(node)
                else None)
        if concat is None or concat[0].get(name) is None:
            return f"tensor {name!r}: slice_of {out_name!r}, which is not a Concat reading it once"
        starts, axis, rank, contiguous, base = concat
        if t.kind != "activation":
            return f"tensor {name!r}: a graph input or output cannot be a Concat slice"
        if not 0 <= axis < rank:
            return (f"tensor {name!r}: slice_of {out_name!r}, whose Concat axis is out of "
                    f"range for its rank {rank}")
        if not contiguous:
            return (f"tensor {name!r}: the slices of {out_name!r} are not contiguous "
                    f"(a dimension before axis {axis} is not 1)")
        want = base + starts[name]
        if t.offset != want:
            return f"tensor {name!r}: slice of {out_name!r} at offset {t.offset}, expected {want}"
        return None

    def _starts(self, node, out_name: str, target: int) -> tuple:
        """Each input's byte start (None for an input read more than once), the axis
        (made non-negative) and the output's rank, whether the slices are contiguous,
        and the output's offset."""
        tensors = self.graph.tensors
        starts: dict[str, int | None] = {}
        before = 0
        for inp in node.inputs:
            starts[inp] = None if inp in starts else before  # None: read more than once
            before += tensors[inp].bytes
        shape = tensors[out_name].shape
        axis, contiguous = concat_axis(shape, node.attrs.get("axis", 0))
        return starts, axis, len(shape), contiguous, int(self.cols.offset[target])
