"""Storage groups grown one join at a time under the in-place rule of
docs/plan-format.md ("The in-place rule"): :class:`StorageGroups`, which the in-place
pass (``passes/inplace.py``) asks whether an output may share its input's storage and
tells when it does.

A storage group is a root tensor and every tensor joined to it (aliased, or a Concat
slice), each at a byte offset inside the root's bytes. Its two tests of the rule, a
member live across a write and two byte ranges that overlap, are
:mod:`graphmem.core.inplace_rule`'s, which the plan validator asks too.
"""
from __future__ import annotations

from graphmem.core.inplace_rule import live_across, overlaps
from graphmem.planning.assignment import Assignment, linked_roots
from graphmem.planning.context import Context


class StorageGroups:
    """The storage groups of an assignment over the context's tensor ids, joined one
    at a time: :meth:`may_join` (the in-place rule for one join), :meth:`join`,
    :meth:`live_across` and :meth:`overlaps`.

    A tensor alone is its own group and costs nothing until it joins one. Per group
    are kept its root (a union-find), the latest last use of a member, whether a member
    is a graph input (such a group is never written in place) and whether one is a
    Concat slice; with ``ranges``, also every member's life and byte range and every
    in-place write's position and bytes, in the root's byte coordinates (so a Concat
    branch may write in place inside its own slice while the other slices wait).

    ``ranges=False`` keeps no lives, byte ranges or writes. It is right only when the
    assignment links nothing yet and every write asked about is by an output at its
    own first position: every member of a group then covers the same bytes, and
    :meth:`may_join` decides every join from the groups' last uses alone.
    """

    def __init__(self, ctx: Context, a: Assignment, ranges: bool = True):
        ids, arena = ctx.index.ids, ctx.index.arena
        self._first, self._last = ctx.first.tolist(), ctx.last.tolist()
        self._nb = ctx.nbytes.tolist()
        self._ranges = ranges
        self._parent: dict[int, int] = {}  # tensor -> a tensor of its group nearer the root
        self._last_use: dict[int, int] = {}  # root -> latest last use (absent: its own)
        self._off: dict[int, int] = {}  # tensor -> byte offset from its root (absent: 0)
        # with ranges, per group with more than one member (or asked about): its
        # members, their lives and byte ranges (first, last, lo, hi) and its in-place
        # writes (position, lo, hi)
        self._members: dict[int, list[int]] = {}
        self._lives: dict[int, list[tuple[int, int, int, int]]] = {}
        self._writes: dict[int, list[tuple[int, int, int]]] = {}

        def arena_id(name: str) -> int | None:
            t = ids.get(name)
            return t if t is not None and t < arena else None

        if (a.alias or a.slice_of) and not ranges:
            raise ValueError("an assignment with links needs the groups' byte ranges")
        root_of = linked_roots(a) if a.alias or a.slice_of else {}
        parent, last_use, off = self._parent, self._last_use, self._off
        first, last, nb = self._first, self._last, self._nb
        for name in a.linked():  # the others are their own root
            t, (root, at) = arena_id(name), root_of[name]
            r = ids[root]
            if t is not None and r != t:
                parent[t] = r
                self._state(r)
                if at:
                    off[t] = at
                self._members[r].append(t)
                self._lives[r].append((first[t], last[t], at, at + nb[t]))
                if last[t] > last_use.get(r, last[r]):
                    last_use[r] = last[t]
        self._pinned = {parent.get(t, t) for t in map(arena_id, ctx.graph.inputs)
                        if t is not None}
        self._sliced = {parent.get(t, t) for t in map(arena_id, a.slice_of) if t is not None}
        # alias groups (alias links only), each to hold one Concat slice at most
        self._alias_root = {ids[t]: ids[s] for t, (s, _) in a.alias.items()}
        self._slice_in_alias = {self._alias_group(ids[t]) for t in a.slice_of}

    def root(self, t: int) -> int:
        """The root of ``t``'s storage group."""
        return _find(self._parent, t) if t in self._parent else t

    def live_across(self, t: int, pos: int) -> bool:
        """Is a member of ``t``'s storage group whose bytes overlap ``t``'s live across
        position ``pos`` (produced before it, read after it)? Asked before a write over
        ``t`` at ``pos``: the members are tensors made before ``pos``."""
        return self._live_across(self.root(t), t, pos)

    def overlaps(self, t: int, u: int) -> bool:
        """Do tensors ``t`` and ``u`` share a byte of storage (one group, overlapping
        byte ranges)?"""
        if self.root(t) != self.root(u):
            return False
        lo, ulo = self._off.get(t, 0), self._off.get(u, 0)
        return bool(overlaps(lo, lo + self._nb[t], ulo, ulo + self._nb[u]))

    def may_join(self, out: int, src: int, pos: int | None = None) -> bool:
        """May ``out``'s group join ``src``'s storage, with ``out`` at ``src``'s bytes:
        as a view (``pos`` None), or by an in-place write of ``out`` over ``src`` at
        position ``pos``? (The pair's op, dtypes and shapes are the caller's to check.)

        Refused: the two are one group already; for a write, a member of ``src``'s
        group is a graph input, or one whose bytes overlap ``src``'s is live across
        ``pos``; the joined group would hold two Concat slices in one alias group, or a
        graph input and a Concat slice; or, in the joined group, a member would be live
        across an in-place write (one already made in either group, or this one) with
        bytes that overlap the written ones.
        """
        parent = self._parent
        go = _find(parent, out) if out in parent else out
        gs = _find(parent, src) if src in parent else src
        if go == gs:
            return False
        if pos is not None and (gs in self._pinned or self._live_across(gs, src, pos)):
            return False
        in_alias = self._slice_in_alias
        if in_alias and self._alias_group(out) in in_alias and self._alias_group(src) in in_alias:
            return False  # one alias group, two Concat slices: two places at once
        sliced, pinned = self._sliced, self._pinned
        if sliced and (go in sliced or gs in sliced) and (go in pinned or gs in pinned):
            return False  # a graph input must not move into a Concat output
        if go not in self._lives and (pos is None or (
                self._first[go] == pos and not self._read_after(gs, pos))):
            # out is alone and, for a write at pos, produced there, onto a group no
            # member of which is read after pos: no member of either group can be live
            # across a write of the other or this one
            return True
        if not self._ranges:
            raise AssertionError("a join that needs byte ranges, in groups kept without")
        # the rule over the merged group, by bytes: out's group moves by ``shift`` to
        # put out over src
        self._state(go)
        self._state(gs)
        at = self._off.get(src, 0)
        shift = at - self._off.get(out, 0)
        lives_o, lives_s = self._lives[go], self._lives[gs]
        writes_o, writes_s = self._writes[go], self._writes[gs]
        if (writes_s and _crosses(lives_o, writes_s, shift)) or (
                writes_o and _crosses(lives_s, writes_o, -shift)):
            return False
        if pos is None:
            return True
        write = ((pos, at, at + self._nb[src]),)
        return not (_crosses(lives_o, write, shift) or _crosses(lives_s, write))

    def join(self, out: int, src: int, pos: int | None = None) -> None:
        """``out``'s group joins ``src``'s storage, ``out`` at ``src``'s bytes: as a
        view (``pos`` None) or by an in-place write at ``pos``."""
        parent, last, last_use = self._parent, self._last, self._last_use
        old = _find(parent, out) if out in parent else out
        new = _find(parent, src) if src in parent else src
        parent[old] = new
        last_use[new] = max(last_use.get(new, last[new]), last_use.pop(old, last[old]))
        if self._ranges:
            self._join_ranges(out, src, old, new, pos)
        if old in self._pinned:
            self._pinned.add(new)
        if old in self._sliced:
            self._sliced.add(new)
        if self._slice_in_alias:  # else never needed: without slices the set stays empty
            ao, as_ = self._alias_group(out), self._alias_group(src)
            self._alias_root[ao] = as_
            if ao in self._slice_in_alias:
                self._slice_in_alias.add(as_)

    def _join_ranges(self, out: int, src: int, old: int, new: int, pos: int | None) -> None:
        """The members, lives and writes of group ``old`` (``out``'s) moved into group
        ``new`` (``src``'s), shifted to put ``out`` over ``src``; the write at ``pos``."""
        off, lives, writes, members = self._off, self._lives, self._writes, self._members
        self._state(new)
        at = off.get(src, 0)
        shift = at - off.get(out, 0)
        if old in lives:
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
            lives[new].append((self._first[old], self._last[old], shift, shift + self._nb[old]))
        if pos is not None:
            writes[new].append((pos, at, at + self._nb[src]))

    def _state(self, r: int) -> None:
        """Make root ``r``'s lives and writes if it has none yet (a tensor alone)."""
        if r not in self._lives:
            self._members[r], self._writes[r] = [r], []
            self._lives[r] = [(self._first[r], self._last[r], 0, self._nb[r])]

    def _read_after(self, g: int, pos: int) -> bool:
        """Is a member of group ``g`` read after position ``pos``?"""
        return self._last_use.get(g, self._last[g]) > pos

    def _live_across(self, g: int, t: int, pos: int) -> bool:
        """:meth:`live_across` for ``t`` of group ``g``: no member read after ``pos``, no
        member live across it; in a group without Concat slices every member covers
        ``t``'s bytes and (for a write at ``pos`` over ``t``) was produced before
        ``pos``, so one read after it is live across it."""
        if not self._read_after(g, pos):
            return False
        if g not in self._sliced or g not in self._lives:
            return True
        lo = self._off.get(t, 0)
        return _crosses(self._lives[g], ((pos, lo, lo + self._nb[t]),))

    def _alias_group(self, t: int) -> int:
        """The root of ``t``'s alias group (alias links only, no slices)."""
        alias_root = self._alias_root
        while t in alias_root:
            t = alias_root[t]
        return t


def _find(parent: dict[int, int], t: int) -> int:
    """The root of ``t`` in the union-find ``parent`` (path halving)."""
    while t in parent:
        up = parent[t]
        if up in parent:
            parent[t] = parent[up]
        t = up
    return t


def _crosses(lives, writes, shift: int = 0) -> bool:
    """Is one of ``lives`` (first, last, lo, hi), its bytes moved by ``shift``, live
    across one of ``writes`` (position, lo, hi) with bytes that overlap the written
    ones?"""
    return any(live_across(first, last, p) and overlaps(lo + shift, hi + shift, wlo, whi)
               for p, wlo, whi in writes for first, last, lo, hi in lives)
