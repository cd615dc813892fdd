"""The plan's alias and slice rules on whole columns: do they all hold?

``validate`` checks each ``alias_of`` and ``slice_of`` of a plan one tensor at a time
(``validate``'s ``_check_alias`` and ``_check_slice``), and words every broken rule. At 100k
nodes that loop took a sixth of the planning time. :func:`links_hold` asks the same
questions of every link at once, in numpy, for a plan in the graph's order (positions
are graph-index ids): True means no rule is broken; False means the loop must run, as it
words the problem (it also answers for every case this leaves to it, such as a Concat
reading a weight). It may say False where the loop finds nothing, never True where
the loop finds something.

The rules (``../shared/plan-format.md``):

- alias: ``alias_of`` and ``alias`` come together; the source is an arena tensor at
  the same offset, read by the tensor's producer through one of the pairs
  ``ops.view_pairs`` (``"view"``, same bytes) or ``ops.overwrite_pairs``
  (``"inplace"``, no more bytes) give; an in-place write at position p needs every
  member of its storage group to be no graph input and not live across p (produced
  before p, read after it).
- slice: ``slice_of`` is an activation's Concat output, produced by a Concat that reads
  the tensor once, whose dimensions before the axis are 1 (contiguous slices), and
  the tensor sits at the output's offset plus the bytes of the inputs before it.
"""
from __future__ import annotations

from itertools import repeat
from operator import attrgetter, is_not

import numpy as np

from typing import Callable

from graphmem.core.index import GraphIndex
from graphmem.core.ir import Graph
from graphmem.core.ops import AliasEdges, concat_axis, is_concat

_ALIAS_OF, _ALIAS, _SLICE_OF = attrgetter("alias_of"), attrgetter("alias"), attrgetter("slice_of")
_INPUTS = attrgetter("inputs")


def links_hold(plan, graph: Graph, topo: GraphIndex, cols,
               edges: Callable[[], AliasEdges]) -> bool:
    """Whether every alias and slice rule holds for ``plan`` (whose tensors are the
    index's arena tensors in its order, with the columns ``cols`` of
    ``plan.columns.columns``; kinds, bytes and lives already checked). ``edges`` gives
    the alias edges of ``plan.order``."""
    n = len(cols.names)
    if n != topo.arena or not cols.linked:
        return n == topo.arena
    if len(topo.writes) and np.bincount(topo.writes).max() > 1:
        return False  # a tensor written twice: the producer is the loop's question
    linked = np.asarray(cols.linked, dtype=np.int64)
    ts = list(map(cols.ts.__getitem__, cols.linked))
    alias_of, alias, slice_of = (list(map(f, ts)) for f in (_ALIAS_OF, _ALIAS, _SLICE_OF))
    has_alias = _given(alias_of)
    if not np.array_equal(has_alias, _given(alias)):
        return False
    is_input = np.zeros(n, dtype=bool)
    is_input[topo.inputs] = True
    ids = topo.ids
    at = np.flatnonzero(has_alias)
    if len(at) and not _aliases_hold(edges(), topo, cols, is_input, linked[at],
                                     [alias_of[k] for k in at.tolist()],
                                     [alias[k] for k in at.tolist()]):
        return False
    at = np.flatnonzero(_given(slice_of))
    if len(at):
        target = _ids(ids, (slice_of[k] for k in at.tolist()), len(at), n)
        if target is None:
            return False
        return _slices_hold(graph, topo, cols, is_input, linked[at], target)
    return True


def _given(values: list) -> np.ndarray:
    """Which values are not None."""
    return np.fromiter(map(is_not, values, repeat(None)), bool, len(values))


def _ids(ids, names, count: int, n: int) -> np.ndarray | None:
    """Positions of names in a plan of the index's ``n`` arena tensors (None when
    one is not among them)."""
    out = np.fromiter(map(ids.get, names, repeat(-1)), np.int64, count)
    return None if ((out < 0) | (out >= n)).any() else out


def _aliases_hold(e: AliasEdges, topo, cols, is_input, out, src_names, kinds) -> bool:
    n = len(cols.names)
    src = _ids(topo.ids, src_names, len(out), n)
    if src is None:
        return False
    overwrite = np.fromiter(map("inplace".__eq__, kinds), bool, len(kinds))
    if not (overwrite | np.fromiter(map("view".__eq__, kinds), bool, len(kinds))).all():
        return False  # an alias that is neither
    # the pair (src -> out) must be one the producer's op table gives, of that kind
    width = len(topo.names) + 1
    edge_key = ((e.out * width + (e.src + 1)) * 2 + e.overwrite)
    by = np.argsort(edge_key, kind="stable")
    edge_key = edge_key[by]
    key = (out * width + (src + 1)) * 2 + overwrite
    k = np.searchsorted(edge_key, key)
    if not (k < len(edge_key)).all() or not np.array_equal(edge_key[k], key):
        return False
    size, offset = cols.size, cols.offset
    if (offset[out] != offset[src]).any():
        return False
    if ((size[out] != size[src]) & ~overwrite).any() or (size[out] > size[src]).any():
        return False
    # an in-place write at position p: no member of the storage group is a graph
    # input or live across p
    writes, pos = out[overwrite], e.pos[by][k[overwrite]]
    if not len(writes):
        return True
    group = cols.group
    w_group = group[writes]
    tainted = np.zeros(n, dtype=bool)
    tainted[group[is_input]] = True
    if tainted[w_group].any():
        return False
    # members of the written groups by (group, first); per group the latest last use of
    # the members that start by each one; a write at p is safe when the members
    # starting before p all end by p
    member = np.flatnonzero(np.isin(group, w_group))
    first, last = cols.first[member], cols.last[member]
    g = group[member]
    span = int(max(last.max(), pos.max())) - int(min(first.min(), pos.min())) + 2
    base = int(min(first.min(), pos.min()))
    by_first = np.lexsort((first, g))
    g, first, last = g[by_first], first[by_first], last[by_first]
    # a running maximum of last within each group: groups are kept apart by their rank
    rank = np.cumsum(np.r_[True, g[1:] != g[:-1]])
    reach = np.maximum.accumulate(rank * span + (last - base)) - rank * span
    start = np.searchsorted(g * span + (first - base), w_group * span + (pos - base))
    before = start > np.searchsorted(g, w_group)  # some member of the group starts before p
    return not (before & (reach[np.maximum(start - 1, 0)] + base > pos)).any()


def _slices_hold(graph, topo, cols, is_input, sl, target) -> bool:
    n = len(cols.names)
    is_output = np.zeros(n, dtype=bool)
    is_output[topo.outputs[topo.outputs < n]] = True
    if (is_input[sl] | is_output[sl]).any():
        return False  # a graph input or output is no slice
    rows = topo.producer_rows()[target]
    if (rows < 0).any():
        return False
    nodes = graph.nodes
    concats, row_of = np.unique(rows, return_inverse=True)
    tensors = graph.tensors
    out_names = [topo.names[t] for t in target[np.unique(row_of, return_index=True)[1]]]
    contiguous: dict[tuple, bool] = {}  # (shape, axis) -> are the slices contiguous?
    for row, name in zip(concats.tolist(), out_names):
        node = nodes[row]
        if not is_concat(node):
            return False
        key = (tensors[name].shape, node.attrs.get("axis", 0))
        if key not in contiguous:
            contiguous[key] = concat_axis(*key)[1]
        if not contiguous[key]:
            return False
    # each Concat's reads, their byte starts, and the slices among them
    lo, hi = topo.read_start[concats], topo.read_start[concats + 1]
    count = hi - lo
    n_in = np.fromiter(map(len, map(_INPUTS, map(nodes.__getitem__, concats.tolist()))),
                       np.int64, len(concats))
    if not np.array_equal(count, n_in) or not count.all():
        return False  # a blank input (or none)
    seg = np.cumsum(count) - count  # where each Concat's reads begin
    read = topo.reads[np.repeat(lo - seg, count) + np.arange(int(count.sum()))]
    if ((read < 0) | (read >= n)).any():
        return False  # a weight or constant among the inputs: the loop sums its bytes
    nbytes = cols.size[read]
    before = np.cumsum(nbytes) - nbytes  # bytes of all reads before each
    start = before - np.repeat(before[seg], count)  # ... within its Concat
    which = np.repeat(np.arange(len(concats)), count)
    width = n + 1
    read_key = which * width + read
    by = np.argsort(read_key, kind="stable")
    read_key, start = read_key[by], start[by]
    key = row_of * width + sl
    k = np.searchsorted(read_key, key)
    if (np.searchsorted(read_key, key, side="right") - k != 1).any():
        return False  # not read by that Concat, or read more than once
    return np.array_equal(cols.offset[sl], cols.offset[target] + start[k])
