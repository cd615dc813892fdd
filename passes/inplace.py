"""In-place and view aliasing, driven by the op tables in ``graphmem.core.ops``, under the
in-place rule of docs/plan-format.md ("The in-place rule"), which the validator
(``graphmem/plan/links.py``) implements apart; tests/test_inplace_rule.py gives both the
same cases.

Walks the order's view and overwrite pairs once (``Context.edges``: the pairs of every
node, in order, as one table, the overwrites from the table of the context's provider).
A view output of the input's bytes joins its input's storage group. An element-wise
output overwrites an input's storage when it has the input's dtype and shape (and more
than zero bytes), the group holds no graph input, and no member of the group whose
bytes overlap the input's is live across the write (produced before it, read after it).

A storage group can hold Concat slices (the ``concat`` pass runs first), so the rule is
kept per byte range: each Concat branch may run its own in-place op inside its own
slice while the other slices wait. Each join checks that rule for the merged group,
every member's byte range kept relative to the group's root, so no in-place op can
overwrite bytes of a Concat output while a slice over them or the output is still to
be read. A join never puts two Concat slices into one alias group, nor a graph input
into a group with slices.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from graphmem.planning.assignment import Assignment, linked_roots
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions


def run(ctx: Context, a: Assignment, options: PassOptions) -> tuple[Assignment, dict]:
    if not a.alias and not a.slice_of:  # no groups yet (no Concat slices): no byte ranges
        candidates = list(_candidates(ctx))
        first = ctx.first.tolist()
        if all(first[out] == pos for pos, overwrite, _, out in candidates if overwrite):
            return _plain(ctx, a, candidates)
        return _general(ctx, a, candidates)
    return _general(ctx, a, _candidates(ctx))


def _plain(ctx: Context, a: Assignment, candidates) -> tuple[Assignment, dict]:
    """The pass where no earlier pass made groups: every member of a storage group then
    covers the same bytes, and a write at ``pos`` by an output made at ``pos`` onto a
    group read for the last time at ``pos`` crosses no member's life, so
    :func:`_general`'s byte-range bookkeeping always allows the join. This gives the same
    answer (tests/test_inplace.py compares them) at a third of the cost per join, which
    on a 100,000-node chain is most of the pass."""
    graph, names, tensors = ctx.graph, ctx.index.names, ctx.graph.tensors
    ids, arena = ctx.index.ids, ctx.index.arena
    last = ctx.last.tolist()
    parent: dict[int, int] = {}
    group_last: dict[int, int] = {}
    pinned = {t for t in map(ids.get, graph.inputs) if t is not None and t < arena}
    alias: dict[str, tuple[str, str]] = {}
    aliased: set[int] = set()
    views = overwrites = 0

    def find(t: int) -> int:
        return _find(parent, t)

    for pos, overwrite, src, out in candidates:
        if out in aliased:
            continue
        go = find(out) if out in parent else out
        gs = find(src) if src in parent else src
        if go == gs:
            continue
        if overwrite:
            s, d = tensors[names[src]], tensors[names[out]]
            if (s.dtype != d.dtype or s.shape != d.shape or gs in pinned
                    or group_last.get(gs, last[gs]) > pos):
                continue
            overwrites += 1
        else:
            views += 1
        alias[names[out]] = (names[src], "inplace" if overwrite else "view")
        aliased.add(out)
        parent[go] = gs
        group_last[gs] = max(group_last.get(gs, last[gs]), group_last.pop(go, last[go]))
        if go in pinned:
            pinned.add(gs)
    return a.with_(alias=alias), {"views": views, "inplace": overwrites}


def _general(ctx: Context, a: Assignment, candidates) -> tuple[Assignment, dict]:
    graph = ctx.graph
    names, ids, arena = ctx.index.names, ctx.index.ids, ctx.index.arena
    # tensors by id (the context's positions): a tensor's life is (first[t], last[t])
    first, last = ctx.first.tolist(), ctx.last.tolist()

    def arena_id(name: str) -> int | None:
        t = ids.get(name)
        return t if t is not None and t < arena else None

    alias = dict(a.alias)  # the pass's answer, keyed by name like the assignment
    aliased = {ids[t] for t in alias}
    # groups the earlier passes made (Concat slices); none: every tensor alone
    root_of = linked_roots(a) if a.alias or a.slice_of else {}
    # union-find over storage groups; a group's state (member lives, in-place write
    # positions, last use) is made when the group first has two members or is asked
    # about (a tensor alone is its own root, lives [its life] and has no writes): on a
    # large graph most tensors never join, and that saves a few dict entries per tensor
    parent: dict[int, int] = {}  # tensor -> a tensor of its group nearer the root
    group_last: dict[int, int] = {}
    nb = ctx.nbytes.tolist()
    # a tensor's byte offset from its group's root (absent: 0, as for a tensor alone)
    off: dict[int, int] = {}
    # per storage group: its members, their lives and byte ranges (first, last, lo,
    # hi), and the in-place writes (position, lo, hi), in the root's byte coordinates
    members: dict[int, list[int]] = {}
    lives: dict[int, list[tuple[int, int, int, int]]] = {}
    writes: dict[int, list[tuple[int, int, int]]] = {}

    def state(r: int) -> None:
        if r not in lives:
            members[r], writes[r], group_last[r] = [r], [], last[r]
            lives[r] = [(first[r], last[r], 0, nb[r])]

    for name in a.linked():  # the others are their own root: no visit
        t, (root, at) = arena_id(name), root_of[name]
        r = ids[root]
        if t is not None and r != t:
            parent[t] = r
            state(r)
            if at:
                off[t] = at
            members[r].append(t)
            lives[r].append((first[t], last[t], at, at + nb[t]))
            group_last[r] = max(group_last[r], last[t])
    pinned = {parent.get(t, t) for t in map(arena_id, graph.inputs) if t is not None}
    sliced = {parent.get(t, t) for t in map(arena_id, a.slice_of) if t is not None}
    # alias groups (alias edges only): at most one Concat slice each
    alias_root: dict[int, int] = {ids[t]: ids[s] for t, (s, _) in a.alias.items()}
    views = overwrites = 0

    def find(t: int) -> int:
        return _find(parent, t)

    def afind(t: int) -> int:
        while t in alias_root:
            t = alias_root[t]
        return t

    slice_in_alias = {afind(ids[t]) for t in a.slice_of}

    def allowed(out: int, src: int, go: int, gs: int, pos: int | None) -> bool:
        """May ``out`` (its group's root ``go``) join ``src``'s storage (root ``gs``),
        by an in-place write at ``pos`` if given?"""
        if go == gs:
            return False
        if slice_in_alias and afind(out) in slice_in_alias and afind(src) in slice_in_alias:
            return False  # one alias group, two Concat slices: two places at once
        if sliced and (go in sliced or gs in sliced) and (go in pinned or gs in pinned):
            return False  # a graph input must not move into a Concat output
        if go not in lives and (pos is None or (
                first[go] == pos and group_last.get(gs, last[gs]) <= pos)):
            # out is a lone tensor produced at this step: it cannot be live across an
            # earlier write, has no writes of its own, and for a write at pos no member
            # of src's group is read after pos. Without this, every join onto a long
            # chain of in-place ops scanned the whole chain (20,000 Relu/Sigmoid in a
            # row took 33 s).
            return True
        # the in-place rule over the merged group (pairs within one old group held
        # already), by bytes: out's group moves by ``shift`` to put out over src
        state(go)
        state(gs)
        at = off.get(src, 0)
        shift = at - off.get(out, 0)
        lo, ls, wo, ws = lives[go], lives[gs], writes[go], writes[gs]
        if (ws and _crosses(lo, ws, shift, 0)) or (wo and _crosses(ls, wo, 0, shift)):
            return False
        write = ((pos, at, at + nb[src]),)
        return pos is None or not (_crosses(lo, write, shift, 0) or _crosses(ls, write, 0, 0))

    def join(out: int, src: int, old: int, new: int, kind: str, pos: int | None = None
             ) -> None:
        """``out`` (root ``old``) joins ``src``'s storage (root ``new``), at src's bytes."""
        state(new)
        alias[names[out]] = (names[src], kind)
        aliased.add(out)
        parent[old] = new
        at = off.get(src, 0)
        shift = at - off.get(out, 0)
        if old in lives:
            group_last[new] = max(group_last[new], group_last.pop(old))
            moved = members.pop(old)
            if shift:
                for m in moved:
                    off[m] = off.get(m, 0) + shift
                lives[new].extend([(f, l, lo + shift, hi + shift)
                                   for f, l, lo, hi in lives.pop(old)])
                writes[new].extend([(p, lo + shift, hi + shift)
                                    for p, lo, hi in writes.pop(old)])
            else:  # each list belongs to its group alone
                lives[new].extend(lives.pop(old))
                writes[new].extend(writes.pop(old))
            members[new].extend(moved)
        else:  # a lone tensor (no state made): its life, and no writes of its own
            if shift:
                off[old] = shift
            members[new].append(old)
            lives[new].append((first[old], last[old], shift, shift + nb[old]))
            if last[old] > group_last[new]:
                group_last[new] = last[old]
        if pos is not None:
            writes[new].append((pos, at, at + nb[src]))
        if old in pinned:
            pinned.add(new)
        if old in sliced:
            sliced.add(new)
        if slice_in_alias:  # else never needed: without slices the set stays empty
            ao, as_ = afind(out), afind(src)
            alias_root[ao] = as_
            if ao in slice_in_alias:
                slice_in_alias.add(as_)

    def _read_later(g: int, src: int, pos: int) -> bool:
        """Is a member of group ``g`` whose bytes overlap ``src``'s live across ``pos``
        (produced before it, read after it)? In a group without Concat slices every
        member covers src's bytes and was produced before ``pos`` (the writer, made at
        ``pos``, is not in it yet): its last use decides."""
        if g not in sliced or g not in lives:
            return group_last.get(g, last[g]) > pos
        lo, hi = off.get(src, 0), off.get(src, 0) + nb[src]
        return any(f < pos < l and a < hi and lo < b and a < b for f, l, a, b in lives[g])

    tensors = graph.tensors
    for pos, overwrite, src, out in candidates:
        if out in aliased:
            continue
        go = find(out) if out in parent else out
        gs = find(src) if src in parent else src
        if not overwrite:  # a view: the same bytes (the candidates have equal sizes)
            if allowed(out, src, go, gs, None):
                join(out, src, go, gs, "view")
                views += 1
            continue
        s, d = tensors[names[src]], tensors[names[out]]
        if s.dtype != d.dtype or s.shape != d.shape:  # the rule: the same dtype and shape
            continue
        if (gs in pinned or _read_later(gs, src, pos)
                or not allowed(out, src, go, gs, pos)):
            continue
        join(out, src, go, gs, "inplace", pos)
        overwrites += 1
    new = a.with_(alias=alias)
    return new, {"views": views, "inplace": overwrites}


def _find(parent: dict[int, int], t: int) -> int:
    """The root of ``t``'s storage group in the union-find ``parent`` (path halving)."""
    while t in parent:
        up = parent[t]
        if up in parent:
            parent[t] = parent[up]
        t = up
    return t


def _candidates(ctx: Context) -> Iterator[tuple[int, bool, int, int]]:
    """(position, overwrite?, input id, output id) for each pair ``view_pairs`` and
    ``overwrite_pairs`` give, node by node in the order (views first: the rows of
    ``ctx.edges``), leaving out pairs that fail a test of ``run`` that no join can
    change: not two distinct arena tensors of equal bytes, an overwrite of nothing, or
    of an input whose own last use is after this step (its group's last use is no
    earlier). ``run`` still checks every rule; this only spares it the walk over every
    node.
    """
    pos, overwrite, src, out = ctx.edges
    arena, nb = ctx.index.arena, ctx.nbytes
    keep = (src >= 0) & (out >= 0) & (src != out) & (src < arena) & (out < arena)
    s, o = np.where(keep, src, 0), np.where(keep, out, 0)
    keep &= (nb[s] == nb[o]) & (~overwrite | ((nb[s] > 0) & (ctx.last[s] <= pos)))
    return zip(pos[keep].tolist(), overwrite[keep].tolist(), src[keep].tolist(),
               out[keep].tolist())


def _crosses(members, writes, member_shift: int, write_shift: int) -> bool:
    """Is some member live across one of the in-place writes (produced before it, read
    after it) with bytes that overlap the written ones? ``members`` (first, last, lo,
    hi) and ``writes`` (position, lo, hi) are moved by their shifts first; a member of
    no bytes overlaps nothing."""
    d = write_shift - member_shift  # compare in the members' coordinates
    return any(first < p < last and lo < whi + d and wlo + d < hi and lo < hi
               for p, wlo, whi in writes for first, last, lo, hi in members)



PASS = Pass("inplace", "alias", reads=(), uses=("slices",), provides=("aliases",), run=run,
            summary="views share their input's storage; element-wise ops overwrite a dying input")
