"""Storage groups (a root tensor and everything aliased or sliced into it) and the
placement records made from them.

A :class:`~graphmem.planning.group_table.GroupTable` holds the groups of one assignment
as int64 columns over the context's positions (tensor ids); the pipeline makes it once after the aliasing passes
(``Assignment.groups``) and the layout passes and the plan writer read it.
:class:`Record` is all placement sees of a buffer: its size and inclusive live range
(TFLite GPU's ``TensorUsageRecord``).
"""
from __future__ import annotations

from functools import partial
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import NamedTuple

import numpy as np

from graphmem.planning.assignment import Assignment, linked_roots
from graphmem.planning.context import Context, align_up, aligned_total
from graphmem.planning.group_table import GroupTable


class Record(NamedTuple):
    """What placement sees of a buffer: its size and inclusive live range. Nothing else.

    A named tuple: a large graph makes one per storage group, several times over."""

    id: int
    bytes: int
    first: int
    last: int


class Group(NamedTuple):
    """Tensors that share one storage (a root and everything aliased into it)."""

    root: str
    members: tuple[str, ...]
    bytes: int  # the root's bytes; members lie inside it
    first: int
    last: int


def group_table(ctx: Context, a: Assignment) -> GroupTable:
    """The storage groups that ``a``'s aliases and slices make."""
    n = len(ctx.intervals)
    first, last = ctx.first, ctx.last
    root = np.arange(n, dtype=np.int64)
    rel = np.zeros(n, dtype=np.int64)
    if not a.alias and not a.slice_of:  # every tensor is its own group
        return GroupTable(root, rel, root, root, root + 1, first, last, root)
    # each linked tensor's position and its root's (the others are their own root)
    ids = ctx.index.ids
    linked = linked_roots(a)
    t_pos = np.fromiter(map(ids.get, linked, repeat(n)), np.int64, len(linked))
    r_pos = np.fromiter(map(ids.__getitem__, map(_ROOT, linked.values())), np.int64,
                        len(linked))
    moved = t_pos < n  # linked tensors that are not arena tensors have no group
    root[t_pos[moved]] = r_pos[moved]
    rel[t_pos[moved]] = np.fromiter(map(_OFFSET, linked.values()), np.int64,
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
                      g_last[by_lead], group)


_ROOT, _OFFSET = itemgetter(0), itemgetter(1)


def groups(ctx: Context, table: GroupTable) -> list[Group]:
    """The groups of ``table`` as named :class:`Group` tuples, in the table's order."""
    names = ctx.names
    sizes = ctx.nbytes.tolist()
    first, last = table.group_first.tolist(), table.group_last.tolist()
    if len(table.start) == len(names):  # every tensor is its own group, in order
        return list(map(_make_group, zip(names, zip(names), sizes, first, last)))
    root_pos = table.group_root().tolist()
    in_order = list(map(names.__getitem__, table.member.tolist()))
    members = map(tuple, map(in_order.__getitem__, map(slice, table.start.tolist(),
                                                       table.stop.tolist())))
    return list(map(_make_group, zip(map(names.__getitem__, root_pos), members,
                                     map(sizes.__getitem__, root_pos), first, last)))


def group_roots(ctx: Context, table: GroupTable) -> list[str]:
    """The root of each group of ``table``, in the table's order."""
    return list(map(ctx.names.__getitem__, table.group_root().tolist()))


# Record's fields as getters (for C-level maps over many records)
ID, BYTES, FIRST, LAST = (attrgetter("id"), attrgetter("bytes"), attrgetter("first"),
                          attrgetter("last"))
# Group._make and Record._make without a Python-level call
_make_group, make_record = partial(tuple.__new__, Group), partial(tuple.__new__, Record)


class RecordColumns(NamedTuple):
    """The placement records of a group table as int64 arrays."""

    id: np.ndarray  # the group's index in the table
    bytes: np.ndarray  # aligned
    first: np.ndarray
    last: np.ndarray


def group_records(ctx: Context, table: GroupTable) -> tuple[list[Record], RecordColumns]:
    """A :class:`Record` per group with bytes (aligned size, the group's life; id: the
    group's index), and the same as columns."""
    group_bytes = ctx.nbytes[table.group_root()]
    ids = np.flatnonzero(group_bytes > 0)
    cols = RecordColumns(ids, align_up(group_bytes[ids], ctx.alignment),
                         table.group_first[ids], table.group_last[ids])
    return list(map(make_record, zip(*(c.tolist() for c in cols)))), cols


def layout_bytes(ctx: Context, a: Assignment) -> int:
    """The arena this assignment needs as it stands: placed, or one buffer each."""
    if a.arena_bytes is not None:
        return a.arena_bytes
    if a.storage_bytes is not None:
        return aligned_total(a.storage_bytes, ctx.alignment)
    # one buffer per storage group, the size of its root: every tensor's buffer but
    # those of the linked ones (only they are visited: the report after each pass asks)
    n = len(ctx.intervals)
    linked = a.linked()
    at = np.fromiter(map(ctx.index.ids.get, linked, repeat(n)), np.int64, len(linked))
    return ctx.naive_layout - aligned_total(ctx.nbytes[at[at < n]], ctx.alignment)
