"""In-place and view aliasing, driven by the op tables in ``graphmem.core.ops``.

Walks the order's view and overwrite pairs once (``Context.edges``: the pairs of every
node, in order, as one table, the overwrites from the table of the context's provider).
A view output joins its input's storage group. An element-wise output overwrites an
input's storage when every tensor of that group is read for the last time at this step,
the group holds no graph input, and the sizes and dtypes match exactly.

A storage group can hold Concat slices (the ``concat`` pass runs first). The plan's
in-place rule covers the whole group: at the step of every in-place write, no member
of the group may be live across it (produced before and read after). Each join
checks that rule for the merged group, so no in-place op can overwrite bytes of a
Concat output while a slice or the output is still to be read. A join never puts
two Concat slices into one alias group, nor a graph input into a group with slices.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from graphmem.planning.assignment import Assignment, linked_roots
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions


def run(ctx: Context, a: Assignment, options: PassOptions) -> tuple[Assignment, dict]:
    graph, iv = ctx.graph, ctx.intervals
    alias = dict(a.alias)
    # groups the earlier passes made (Concat slices); none: every tensor alone
    root_of = linked_roots(a) if a.alias or a.slice_of else {}
    # union-find over storage groups; a group's state (member lives, in-place write
    # positions, last use) is made when the group first has two members or is asked
    # about (a tensor alone is its own root, lives [its life] and has no writes): on a
    # large graph most tensors never join, and that saves a few dict entries per tensor
    parent: dict[str, str] = {}  # tensor -> a tensor of its group nearer the root
    group_last: dict[str, int] = {}
    # per storage group: its members' live ranges and the positions of in-place writes
    lives: dict[str, list[tuple[int, int]]] = {}
    writes: dict[str, list[int]] = {}

    def state(r: str) -> None:
        if r not in lives:
            lives[r], writes[r], group_last[r] = [iv[r]], [], iv[r][1]

    for t in a.linked():  # the others are their own root: no visit
        r = root_of[t][0]
        if r != t and t in iv:
            parent[t] = r
            state(r)
            lives[r].append(iv[t])
            group_last[r] = max(group_last[r], iv[t][1])
    pinned = {parent.get(t, t) for t in graph.inputs if t in iv}
    sliced = {parent.get(t, t) for t in a.slice_of if t in iv}
    # alias groups (alias edges only): at most one Concat slice each
    alias_root: dict[str, str] = {t: s for t, (s, _) in a.alias.items()}
    views = overwrites = 0

    def find(t: str) -> str:
        while t in parent:
            up = parent[t]
            if up in parent:
                parent[t] = parent[up]  # path halving
            t = up
        return t

    def afind(t: str) -> str:
        while t in alias_root:
            t = alias_root[t]
        return t

    slice_in_alias = {afind(t) for t in a.slice_of}

    def allowed(out: str, src: str, pos: int | None) -> bool:
        """May ``out`` join ``src``'s storage (an in-place write at ``pos`` if given)?"""
        go, gs = find(out), find(src)
        if go == gs:
            return False
        if slice_in_alias and afind(out) in slice_in_alias and afind(src) in slice_in_alias:
            return False  # one alias group, two Concat slices: two places at once
        if sliced and (go in sliced or gs in sliced) and (go in pinned or gs in pinned):
            return False  # a graph input must not move into a Concat output
        if go not in lives and (pos is None or (
                iv[go][0] == pos and group_last.get(gs, iv[gs][1]) <= pos)):
            # out is a lone tensor produced at this step: it cannot be live across an
            # earlier write, has no writes of its own, and for a write at pos no member
            # of src's group is read after pos. Without this, every join onto a long
            # chain of in-place ops scanned the whole chain (20,000 Relu/Sigmoid in a
            # row took 33 s).
            return True
        # the in-place rule over the merged group (pairs within one old group held already)
        state(go)
        state(gs)
        lo, ls, wo, ws = lives[go], lives[gs], writes[go], writes[gs]
        if (ws and _crosses(lo, ws)) or (wo and _crosses(ls, wo)):
            return False
        return pos is None or not (_crosses(lo, (pos,)) or _crosses(ls, (pos,)))

    def join(out: str, src: str, kind: str, pos: int | None = None) -> None:
        old, new = find(out), find(src)
        state(new)
        alias[out] = (src, kind)
        parent[old] = new
        if old in lives:
            group_last[new] = max(group_last[new], group_last.pop(old))
            lives[new].extend(lives.pop(old))  # each list belongs to its group alone
            writes[new].extend(writes.pop(old))
        else:  # a lone tensor (no state made): its life, and no writes of its own
            lives[new].append(iv[old])
            if iv[old][1] > group_last[new]:
                group_last[new] = iv[old][1]
        if pos is not None:
            writes[new].append(pos)
        if old in pinned:
            pinned.add(new)
        if old in sliced:
            sliced.add(new)
        if slice_in_alias:  # else never needed: without slices the set stays empty
            ao, as_ = afind(out), afind(src)
            alias_root[ao] = as_
            if ao in slice_in_alias:
                slice_in_alias.add(as_)

    tensors = graph.tensors
    for pos, overwrite, src, out in _candidates(ctx):
        if src not in iv or out not in iv or out in alias or src == out:
            continue
        s, d = tensors[src], tensors[out]
        if not overwrite:  # a view: the same bytes
            if s.bytes == d.bytes and allowed(out, src, None):
                join(out, src, "view")
                views += 1
            continue
        if (s.bytes != d.bytes or s.bytes == 0 or s.dtype != d.dtype
                or s.shape != d.shape):
            continue
        r = find(src)
        if (r in pinned or group_last.get(r, iv[r][1]) > pos
                or not allowed(out, src, pos)):
            continue
        join(out, src, "inplace", pos)
        overwrites += 1
    new = a.with_(alias=alias)
    return new, {"views": views, "inplace": overwrites}


def _candidates(ctx: Context) -> Iterator[tuple[int, bool, str, str]]:
    """(position, overwrite?, input, output) for each pair ``view_pairs`` and
    ``overwrite_pairs`` give, node by node in the order (views first: the rows of
    ``ctx.edges``), leaving out pairs that fail a test of ``run`` that no join can
    change: not two arena tensors of equal bytes, an overwrite of nothing, or of an
    input whose own last use is after this step (its group's last use is no earlier).
    ``run`` still checks every rule; this only spares it the walk over every node.
    """
    pos, overwrite, src, out = ctx.edges
    arena, nb = ctx.index.arena, ctx.nbytes
    keep = (src >= 0) & (out >= 0) & (src != out) & (src < arena) & (out < arena)
    s, o = np.where(keep, src, 0), np.where(keep, out, 0)
    keep &= (nb[s] == nb[o]) & (~overwrite | ((nb[s] > 0) & (ctx.last[s] <= pos)))
    names = ctx.index.names
    yield from zip(pos[keep].tolist(), overwrite[keep].tolist(),
                   map(names.__getitem__, src[keep].tolist()),
                   map(names.__getitem__, out[keep].tolist()))


def _crosses(members, positions) -> bool:
    """Is some member live across one of the positions (produced before, read after)?"""
    return any(first < p < last for p in positions for first, last in members)



PASS = Pass("inplace", "alias", reads=("slices",), provides=("aliases",), run=run,
            summary="views share their input's storage; element-wise ops overwrite a dying input")
