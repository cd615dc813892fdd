"""The data that passes hand each other: a context they read, an assignment they refine.

Each pass is a function ``(Context, Assignment) -> (Assignment, detail)``; an
Assignment is immutable, so no pass can change what an earlier one decided.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from itertools import chain, repeat
from operator import itemgetter
from typing import Mapping, NamedTuple

import numpy as np

from graphmem.core.ir import Graph
from graphmem.core.liveness import Interval, live_columns
from graphmem.core.index import topology


# The most bytes a graph's arena tensors may hold together (one aligned buffer each)
# for graphmem to plan it: half the signed 64-bit range, so that no offset, sum or
# difference in the array and compiled code can overflow. No device comes near it.
MAX_PLAN_BYTES = 2 ** 62


def align_up(n: int, alignment: int) -> int:
    """``n`` rounded up to a multiple of ``alignment`` (element-wise for a numpy array)."""
    return -(-n // alignment) * alignment


def aligned_total(sizes, alignment: int) -> int:
    """``sum(align_up(b, alignment) for b in sizes)`` for non-negative sizes (a
    sequence or an array): numpy when no sum can leave 64-bit integers, Python
    integers otherwise."""
    n = len(sizes)
    if n:
        try:
            arr = np.asarray(sizes, dtype=np.int64)
        except OverflowError:  # a size past 64 bits
            arr = None
        if arr is not None and (int(arr.max()) + alignment) * n < MAX_PLAN_BYTES:
            return int(align_up(arr, alignment).sum())
    return sum(align_up(int(b), alignment) for b in sizes)


class Record(NamedTuple):
    """What placement sees of a buffer: its size and inclusive live range. Nothing else.

    A named tuple: a large graph makes one per storage group, several times over."""

    id: int
    bytes: int
    first: int
    last: int


@dataclass(frozen=True)
class Context:
    graph: Graph
    order: tuple[int, ...]
    intervals: Mapping[str, Interval]  # per arena tensor
    alignment: int = 64

    @cached_property
    def whole(self) -> bool:
        """Whether ``intervals`` lists every arena tensor in the topology's order (as
        :func:`~graphmem.liveness.liveness` of a whole order does) and the topology
        knows their bytes: then a tensor's position is its topology id, and columns
        of the topology are columns of the intervals."""
        topo = topology(self.graph)
        return (len(self.intervals) == topo.arena and topo.nbytes is not None
                and list(self.intervals) == topo.arena_names())  # same strings: fast

    @cached_property
    def positions(self) -> Mapping[str, int]:
        """Tensor -> its position in ``intervals``: the topology's ids when ``whole``
        (they may name more tensors, at positions past the intervals)."""
        if self.whole:
            return topology(self.graph).ids
        return dict(zip(self.intervals, range(len(self.intervals))))

    @cached_property
    def sizes(self) -> dict[str, int]:
        # cached: every pass asks, for every tensor
        if self.whole:
            return dict(zip(self.intervals, topology(self.graph).nbytes.tolist()))
        return {t: self.graph.tensors[t].bytes for t in self.intervals}

    @cached_property
    def naive_layout(self) -> int:
        """One aligned buffer per tensor: the arena before any pass."""
        if self.whole:
            return aligned_total(topology(self.graph).nbytes, self.alignment)
        return aligned_total(list(self.sizes.values()), self.alignment)

    @cached_property
    def roots_memo(self) -> list:
        """[alias, slice_of, roots] of the last :func:`root_map` call."""
        return []

    @cached_property
    def groups_memo(self) -> list:
        """[alias, slice_of, [GroupTable, groups]] of the last :func:`groups` call."""
        return []


@dataclass(frozen=True)
class Assignment:
    """Where every arena tensor lives, as decided so far.

    - ``alias``: tensor -> (tensor it shares storage with, "view" | "inplace")
    - ``slice_of``: tensor -> the Concat output it is written into, and
      ``slice_offset``: its byte offset inside that output
    - ``storage``: group root -> storage block id (the ``share`` pass), with
      ``storage_bytes`` per block
    - ``offsets``: group root -> arena offset (the ``place`` pass), ``arena_bytes``
    """

    alias: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    slice_of: Mapping[str, str] = field(default_factory=dict)
    slice_offset: Mapping[str, int] = field(default_factory=dict)
    storage: Mapping[str, int] | None = None
    storage_bytes: tuple[int, ...] | None = None
    offsets: Mapping[str, int] | None = None
    arena_bytes: int | None = None
    strategy: str = ""

    def with_(self, **changes) -> "Assignment":
        return replace(self, **changes)

    def root_of(self, tensor: str) -> tuple[str, int]:
        """(root tensor, byte offset of ``tensor`` inside the root's storage).

        Aliases share their source's offset; a Concat slice sits inside the Concat
        output. When a member of an alias group is a slice (an in-place Relu written
        into a Concat), the whole alias group lives in that slice.
        """
        offset = 0
        while True:
            if tensor in self.slice_of:
                offset += self.slice_offset[tensor]
                tensor = self.slice_of[tensor]
            elif tensor in self.alias:
                tensor = self.alias[tensor][0]
            elif tensor in self._sliced_member:
                tensor = self._sliced_member[tensor]
            else:
                return tensor, offset

    @cached_property
    def linked(self) -> tuple[str, ...]:
        """The tensors that may have another root: aliases, Concat slices, and the
        roots of alias groups living in a slice (each once). Every other tensor is a
        root of its own, so the walks over roots visit only these."""
        sliced = self._sliced_member if self.slice_of else {}
        return tuple(dict.fromkeys(chain(self.slice_of, self.alias, sliced)))

    @cached_property
    def _sliced_member(self) -> dict[str, str]:
        """Alias-group root -> the member of its alias group that is a Concat slice."""
        out: dict[str, str] = {}
        for t in self.slice_of:
            r = t
            while r in self.alias:
                r = self.alias[r][0]
            if r != t:
                assert out.setdefault(r, t) == t, f"two slices in the alias group of {r!r}"
        return out


class Group(NamedTuple):
    """Tensors that share one storage (a root and everything aliased into it)."""

    root: str
    members: tuple[str, ...]
    bytes: int  # the root's bytes; members lie inside it
    first: int
    last: int


def roots(a: Assignment, names) -> dict[str, tuple[str, int]]:
    """``a.root_of(t)`` for every name, sharing the walk up each alias chain.

    Linear in the number of names even for one long chain of in-place ops, where
    calling ``root_of`` per tensor would be quadratic. Only ``a.linked`` is walked
    (:func:`linked_roots`); every other name is its own root, filled in by one
    C-level dict build.
    """
    out = dict(zip(names, zip(names, repeat(0))))
    out.update(linked_roots(a))
    return out


def linked_roots(a: Assignment) -> dict[str, tuple[str, int]]:
    """``a.root_of(t)`` for the linked tensors (and the roots they reach): every
    tensor not a key is its own root, at offset 0."""
    memo: dict[str, tuple[str, int]] = {}
    alias, slice_of = a.alias, a.slice_of
    sliced = a._sliced_member if slice_of else {}
    for t in a.linked:
        path = []
        cur = t
        while cur not in memo:
            if cur in slice_of:
                path.append((cur, a.slice_offset[cur]))
                cur = slice_of[cur]
            elif cur in alias:
                path.append((cur, 0))
                cur = alias[cur][0]
            elif cur in sliced:  # an alias group that lives in a Concat slice
                path.append((cur, 0))
                cur = sliced[cur]
            else:
                memo[cur] = (cur, 0)
                break
        root, offset = memo[cur]
        for name, delta in reversed(path):
            offset += delta
            memo[name] = (root, offset)
    return memo


def root_map(ctx: Context, a: Assignment) -> dict[str, tuple[str, int]]:
    """:func:`linked_roots`, kept on ``ctx`` while the alias and slice maps are the
    same objects (passes after inplace and the plan writer ask for the same). A
    tensor that is not a key is its own root at offset 0 (``root_map(...).get(t,
    (t, 0))``). The caller must not change the returned dict."""
    memo = ctx.roots_memo
    if memo and memo[0] is a.alias and memo[1] is a.slice_of:
        return memo[2]
    out = linked_roots(a)
    memo[:] = [a.alias, a.slice_of, out]
    return out


class GroupTable(NamedTuple):
    """The storage groups of an assignment as arrays over the tensors' positions in
    ``ctx.intervals``: what :func:`groups` lists, for numpy work on all of them."""

    root: np.ndarray  # per position: the position of its group's root
    rel: np.ndarray  # per position: its byte offset inside the root's storage
    member: np.ndarray  # positions grouped: group k is member[start[k]:stop[k]]
    start: np.ndarray  # per group, in the order of groups()
    stop: np.ndarray
    group_first: np.ndarray  # per group: the first step of any member
    group_last: np.ndarray  # per group: the last step of any member
    first: np.ndarray  # per position: its first step
    last: np.ndarray  # per position: its last step
    group: np.ndarray  # per position: the index of its group

    def group_root(self) -> np.ndarray:
        """Per group: the position of its root."""
        return self.root[self.member[self.start]]


def groups(ctx: Context, a: Assignment) -> list[Group]:
    """Storage groups in the order of their first member in ``ctx.intervals``."""
    memo = _group_memo(ctx, a)
    if len(memo) == 1:  # the Group objects are made when first asked for
        memo.append(_groups(ctx, memo[0]))
    return list(memo[1])


def group_table(ctx: Context, a: Assignment) -> GroupTable:
    """:func:`groups` as a :class:`GroupTable` (the same groups, in the same order)."""
    return _group_memo(ctx, a)[0]


def group_roots(ctx: Context, a: Assignment) -> list[str]:
    """The root of each group of :func:`groups`, in that order."""
    tab, names = group_table(ctx, a), list(ctx.intervals)
    return list(map(names.__getitem__, tab.group_root().tolist()))


def _group_memo(ctx: Context, a: Assignment) -> list:
    """[GroupTable] or [GroupTable, groups] of ``a``'s alias and slice maps."""
    memo = ctx.groups_memo  # the report after a pass, share and place ask for the same
    if memo and memo[0] is a.alias and memo[1] is a.slice_of:
        return memo[2]
    out = [_group_table(ctx, a)]
    memo[:] = [a.alias, a.slice_of, out]
    return out


def _group_table(ctx: Context, a: Assignment) -> GroupTable:
    intervals = ctx.intervals
    n = len(intervals)
    first, last = live_columns(intervals)
    root = np.arange(n, dtype=np.int64)
    rel = np.zeros(n, dtype=np.int64)
    if not a.alias and not a.slice_of:  # every tensor is its own group
        return GroupTable(root, rel, root, root, root + 1, first, last, first, last, root)
    # each tensor's position and its root's (only the linked tensors have another root)
    pos = ctx.positions
    linked = root_map(ctx, a)
    t_pos = np.fromiter(map(pos.get, linked, repeat(n)), np.int64, len(linked))
    r_pos = np.fromiter(map(pos.__getitem__, map(_FIRST, linked.values())), np.int64,
                        len(linked))
    moved = t_pos < n  # linked tensors that are not in the intervals have no group
    root[t_pos[moved]] = r_pos[moved]
    rel[t_pos[moved]] = np.fromiter(map(_LAST, linked.values()), np.int64,
                                    len(linked))[moved]
    # members grouped by root, each group in position order; groups in the order of
    # their first member
    member = np.argsort(root, kind="stable")
    grouped = root[member]
    start = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    stop = np.r_[start[1:], n]
    g_first = np.minimum.reduceat(first[member], start)
    g_last = np.maximum.reduceat(last[member], start)
    by_lead = np.argsort(member[start])
    group = np.empty(n, dtype=np.int64)
    rank = np.empty(len(start), dtype=np.int64)
    rank[by_lead] = np.arange(len(start))  # group index of each run of ``member``
    group[member] = np.repeat(rank, stop - start)
    return GroupTable(root, rel, member, start[by_lead], stop[by_lead], g_first[by_lead],
                      g_last[by_lead], first, last, group)


def _groups(ctx: Context, table: GroupTable) -> list[Group]:
    names = list(ctx.intervals)
    sizes = (topology(ctx.graph).nbytes.tolist() if ctx.whole
             else list(map(ctx.sizes.__getitem__, names)))
    first, last = table.group_first.tolist(), table.group_last.tolist()
    if len(table.start) == len(names):  # every tensor is its own group, in order
        return list(map(_make_group, zip(names, zip(names), sizes, first, last)))
    root_pos = table.group_root().tolist()
    in_order = list(map(names.__getitem__, table.member.tolist()))
    members = map(tuple, map(in_order.__getitem__, map(slice, table.start.tolist(),
                                                       table.stop.tolist())))
    return list(map(_make_group, zip(map(names.__getitem__, root_pos), members,
                                     map(sizes.__getitem__, root_pos), first, last)))


# Group._make and Record._make without a Python-level call
_make_group, make_record = partial(tuple.__new__, Group), partial(tuple.__new__, Record)
_FIRST, _LAST = itemgetter(0), itemgetter(1)


def records(ctx: Context, gs: list[Group]) -> list[Record]:
    """Placement records (aligned sizes) for groups; zero-sized groups are left out."""
    al = ctx.alignment
    return [make_record((i, -(-g.bytes // al) * al, g.first, g.last))
            for i, g in enumerate(gs) if g.bytes > 0]


class RecordColumns(NamedTuple):
    """:func:`records` of the groups of an assignment as int64 arrays."""

    id: np.ndarray  # the group's index in groups()
    bytes: np.ndarray  # aligned
    first: np.ndarray
    last: np.ndarray


def group_records(ctx: Context, a: Assignment) -> tuple[list[Record], RecordColumns | None]:
    """``records(ctx, groups(ctx, a))``, made from the group table, and the same as
    columns (None where a size does not fit 64-bit integers: then only the records)."""
    nb = position_bytes(ctx)
    if nb is None:
        return records(ctx, groups(ctx, a)), None
    tab = group_table(ctx, a)
    group_bytes = nb[tab.group_root()]
    ids = np.flatnonzero(group_bytes > 0)
    cols = RecordColumns(ids, align_up(group_bytes[ids], ctx.alignment),
                         tab.group_first[ids], tab.group_last[ids])
    return list(map(make_record, zip(*(c.tolist() for c in cols)))), cols


def position_bytes(ctx: Context) -> np.ndarray | None:
    """Per position in ``ctx.intervals``: the tensor's bytes, int64; None where one
    (aligned) does not stay below ``MAX_PLAN_BYTES``."""
    if ctx.whole:
        nb = topology(ctx.graph).nbytes
    else:
        try:
            nb = np.fromiter(ctx.sizes.values(), np.int64, len(ctx.sizes))
        except OverflowError:
            return None
    if len(nb) and int(nb.max()) + ctx.alignment >= MAX_PLAN_BYTES:
        return None
    return nb


def layout_bytes(ctx: Context, a: Assignment) -> int:
    """The arena this assignment needs as it stands: placed, or one buffer each."""
    if a.arena_bytes is not None:
        return a.arena_bytes
    if a.storage_bytes is not None:
        return sum(align_up(b, ctx.alignment) for b in a.storage_bytes)
    # one buffer per storage group, the size of its root: every tensor's buffer but
    # those of the linked ones. The groups themselves are not needed, and the report
    # after each pass asks, so only the linked tensors are visited (in the topology's
    # bytes where it can: no million-entry sizes dict for a report)
    n = len(ctx.intervals)
    if ctx.whole:
        at = np.fromiter(map(ctx.positions.get, a.linked, repeat(n)), np.int64,
                         len(a.linked))
        linked = topology(ctx.graph).nbytes[at[at < n]]
    else:
        linked = [b for b in map(ctx.sizes.get, a.linked) if b is not None]
    return ctx.naive_layout - aligned_total(linked, ctx.alignment)
