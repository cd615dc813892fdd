"""In-place and view aliasing, driven by the op tables in ``graphmem.core.ops``, under the
in-place rule of docs/plan-format.md ("The in-place rule"); tests/test_inplace_rule.py
gives this pass and the validator (``graphmem/plan/links.py``) the same cases.

Walks the order's view and overwrite pairs once (``Context.edges``: the pairs of every
node, in order, as one table, the overwrites from the table of the context's provider),
over the assignment's storage groups
(:class:`~graphmem.planning.storage_groups.StorageGroups`, which the ``concat`` pass's
slices may have started). A view output of the input's bytes joins its input's storage
group. An element-wise output overwrites an input's storage when it has the input's
dtype and shape (and more than zero bytes) and the groups allow the join
(:meth:`~graphmem.planning.storage_groups.StorageGroups.may_join`: the group holds no
graph input, no member whose bytes overlap the input's is live across the write, and
the merged group keeps the rule for every byte range). An output joins one storage at
most: the first pair in the order that may.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions
from graphmem.planning.storage_groups import StorageGroups


def run(ctx: Context, a: Assignment, options: PassOptions) -> tuple[Assignment, dict]:
    return _join_pairs(ctx, a)


def _join_pairs(ctx: Context, a: Assignment, ranges: bool | None = None
                ) -> tuple[Assignment, dict]:
    """The pass; ``ranges``: whether the storage groups keep byte ranges and writes
    (None: only where they can be needed, i.e. groups exist already or an output is
    written in place after its first position)."""
    c = _candidates(ctx)
    if ranges is None:
        ranges = bool(a.alias or a.slice_of
                      or (c.overwrite & (ctx.first[c.out] != c.pos)).any())
    groups = StorageGroups(ctx, a, ranges)
    names, ids, tensors = ctx.index.names, ctx.index.ids, ctx.graph.tensors
    alias = dict(a.alias)  # the pass's answer, keyed by name like the assignment
    joined = {ids[t] for t in alias}
    views = overwrites = 0
    for pos, overwrite, src, out in zip(c.pos.tolist(), c.overwrite.tolist(),
                                        c.src.tolist(), c.out.tolist()):
        if out in joined:
            continue
        if overwrite:
            s, d = tensors[names[src]], tensors[names[out]]
            if s.dtype != d.dtype or s.shape != d.shape or not groups.may_join(out, src, pos):
                continue
            groups.join(out, src, pos)
            overwrites += 1
        elif groups.may_join(out, src):  # a view: the same bytes (equal sizes, below)
            groups.join(out, src)
            views += 1
        else:
            continue
        alias[names[out]] = (names[src], "inplace" if overwrite else "view")
        joined.add(out)
    return a.with_(alias=alias), {"views": views, "inplace": overwrites}


class Candidates(NamedTuple):
    """Pairs of the order that may join, as columns: the node's position, whether the
    output overwrites (else views) the input, the input's id and the output's."""

    pos: np.ndarray
    overwrite: np.ndarray
    src: np.ndarray
    out: np.ndarray


def _candidates(ctx: Context) -> Candidates:
    """The pairs ``view_pairs`` and ``overwrite_pairs`` give, node by node in the order
    (views first: the rows of ``ctx.edges``), leaving out pairs that fail a test of
    ``run`` that no join can change: not two distinct arena tensors of equal bytes, an
    overwrite of nothing, or of an input whose own last use is after this step (its
    group's last use is no earlier). ``run`` still checks every rule; this only spares
    it the walk over every node.
    """
    pos, overwrite, src, out = ctx.edges
    arena, nb = ctx.index.arena, ctx.nbytes
    keep = (src >= 0) & (out >= 0) & (src != out) & (src < arena) & (out < arena)
    s, o = np.where(keep, src, 0), np.where(keep, out, 0)
    keep &= (nb[s] == nb[o]) & (~overwrite | ((nb[s] > 0) & (ctx.last[s] <= pos)))
    return Candidates(pos[keep], overwrite[keep], src[keep], out[keep])


PASS = Pass("inplace", "alias", reads=(), uses=("slices",), provides=("aliases",), run=run,
            summary="views share their input's storage; element-wise ops overwrite a dying input")
