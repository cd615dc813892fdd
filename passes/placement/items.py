"""What placement places: a :class:`Record` per storage group, a :class:`Tied` set per group
whose members cover different bytes (Concat slices), and the index of every pair of
their parts whose lives overlap (:class:`PartPairs`), which every best-fit run shares.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from graphmem.core.liveness import count_overlapping_pairs, overlapping_pairs
from graphmem.core.records import record
from graphmem.core.regions import NO_SPAN, byte_regions
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context, align_up
from graphmem.planning.groups import (BYTES, FIRST, ID, LAST, Record, group_records,
                                      make_record)


@record
class Tied:
    """Records that must sit at fixed offsets from one another (XLA-style colocation).

    A Concat output with slices is one ``Tied``: a part per byte region, each live
    from the first write into that region, so other buffers may use a slice's bytes
    before the slice is produced. ``bytes``/``first``/``last`` describe the envelope,
    which is what the ordering strategies see; ``parts`` are ``(relative offset,
    Record)`` pairs, and best fit places them all at one base offset.
    """

    id: int
    bytes: int
    first: int
    last: int
    parts: tuple[tuple[int, Record], ...]


class PartPairs(NamedTuple):
    """What every best-fit run over the same items shares, whatever their order.

    A part is a plain record or one part of a Tied set. Parts are numbered item by
    item (``start[k]``: the first part of item ``k``, in the items' own order);
    ``a``/``b`` hold every pair of parts of different items whose lives overlap.
    """

    ids: list[int]  # item id per item
    tied: np.ndarray  # uint8 per item: a Tied set (placed whole at the lowest base that fits)
    start: np.ndarray  # len(items) + 1 bounds into the part columns
    rel: np.ndarray  # part offset inside its item
    nbytes: np.ndarray
    owner: np.ndarray  # item index per part
    first: np.ndarray  # per part: its live range
    last: np.ndarray
    a: np.ndarray
    b: np.ndarray


def part_pairs(items: Sequence[Record | Tied]) -> PartPairs:
    """Index the items' parts and all their time-overlapping pairs (numpy, O(n log n + E))."""
    tied = [type(r) is Tied for r in items]
    if True not in tied:  # plain records only: one part each, columns at C speed
        n = len(items)
        return _index(list(map(ID, items)), tied, range(n + 1), [0] * n,
                      list(map(BYTES, items)), list(map(FIRST, items)),
                      list(map(LAST, items)))
    ids, start, rel, nbytes, first, last = [], [0], [], [], [], []
    for r, is_tied in zip(items, tied):
        ids.append(r.id)
        for off, p in (r.parts if is_tied else ((0, r),)):
            rel.append(off)
            nbytes.append(p.bytes)
            first.append(p.first)
            last.append(p.last)
        start.append(len(rel))
    return _index(ids, tied, start, rel, nbytes, first, last)


# The most time-overlapping part pairs an index holds (two int32 each, and best fit's
# own int32 per pair: 25M pairs is about 300 MB; a fan-out of 7,000 graph outputs,
# 24.5M pairs, plans in 349 MB peak RSS). Past it, as when tens of thousands of
# buffers are live at once, placement uses a layout that needs no pairs (see
# passes/place.py): memory stays linear.
PAIR_LIMIT = 25_000_000


# Pairs made at a time (their int64 temporaries are about 50 bytes a pair).
PAIR_CHUNK = 1 << 20


class TooManyPairs(Exception):
    """The items overlap in time in more pairs than ``PAIR_LIMIT``: args (parts, limit)."""


def _index(ids, tied, start, rel, nbytes, first, last) -> PartPairs:
    start = np.asarray(start, dtype=np.int64)
    owner = np.repeat(np.arange(len(ids), dtype=np.int32), np.diff(start))
    first, last = np.asarray(first, dtype=np.int64), np.asarray(last, dtype=np.int64)
    count = count_overlapping_pairs(first, last)
    if count > PAIR_LIMIT:
        raise TooManyPairs(len(first), PAIR_LIMIT)
    # filled in place, in small chunks: the pairs' memory is their two int32 columns
    # (joining a list of chunks held them twice at the peak)
    pair_a, pair_b = np.empty(count, dtype=np.int32), np.empty(count, dtype=np.int32)
    k = 0
    for a, b in overlapping_pairs(first, last, PAIR_CHUNK):
        keep = owner[a] != owner[b]  # parts of one Tied set sit at fixed offsets: no conflict
        n = int(np.count_nonzero(keep))
        pair_a[k:k + n] = a[keep]
        pair_b[k:k + n] = b[keep]
        k += n
    return PartPairs(list(ids), np.asarray(tied, dtype=np.uint8), start,
                     np.asarray(rel, dtype=np.int64), np.asarray(nbytes, dtype=np.int64),
                     owner, first, last, pair_a[:k], pair_b[:k])


def items(ctx: Context, a: Assignment) -> tuple[list[Record | Tied], PartPairs]:
    """Placement items for the storage groups ``a.groups``: a Record each, a Tied set for
    a group whose members cover different bytes; and their :class:`PartPairs`.

    A group's bytes are cut at every member's start and end, rounded up to the
    alignment (so every part, and every gap another record may take, is aligned; a
    part then also covers the bytes up to the next cut: its life only grows); each
    region lives from the first to the last use of any member on its bytes (the
    group's life where none is). Adjacent regions with the same life are merged.
    Item ids are group indices; zero-sized groups are left out.
    """
    tab = a.groups
    recs, rec_cols = group_records(ctx, tab)
    n = len(recs)

    def plain() -> PartPairs:
        return _index(rec_cols.id.tolist(), [False] * n, range(n + 1), [0] * n,
                      rec_cols.bytes, rec_cols.first, rec_cols.last)

    if not a.slice_of:  # no Concat slices: every member sits at its group's offset 0
        return recs, plain()
    al, nb = ctx.alignment, ctx.nbytes
    group_root = tab.group_root()
    group_bytes = nb[group_root]
    # a group is split when a member with bytes does not cover it whole
    root_bytes = nb[tab.root]
    cut = (nb > 0) & (root_bytes > 0) & ((tab.rel != 0) | (nb != root_bytes))
    if not cut.any():
        return recs, plain()
    split_root = np.zeros(len(nb), dtype=bool)
    split_root[tab.root[cut]] = True
    split = np.flatnonzero(split_root[group_root])  # group indices, in order
    # the members with bytes of the split groups, group by group
    count = tab.stop[split] - tab.start[split]
    at = np.repeat(tab.start[split] - (np.cumsum(count) - count), count) + np.arange(
        int(count.sum()))
    pos, sg = tab.member[at], np.repeat(split, count)
    keep = nb[pos] > 0
    pos, sg = pos[keep], sg[keep]
    lo = tab.rel[pos]
    hi = lo + nb[pos]
    size = align_up(group_bytes[split], al)
    group_size = size[np.searchsorted(split, sg)]  # per span
    cut_group = np.concatenate((sg, sg, split, split))
    cuts = np.concatenate((np.minimum(align_up(lo, al), group_size),
                           np.minimum(align_up(hi, al), group_size),
                           np.zeros(len(split), dtype=np.int64), size))
    rg, start, end, rf, rl = byte_regions(cut_group, cuts, sg, lo, hi, ctx.first[pos],
                                          ctx.last[pos])
    bare = rf == NO_SPAN  # no member on these bytes: the group's life
    rf[bare] = tab.group_first[rg[bare]]
    rl[bare] = tab.group_last[rg[bare]]
    # merge each run of adjacent regions with the same life (within a group)
    new = np.concatenate(
        ([True], (rg[1:] != rg[:-1]) | (rf[1:] != rf[:-1]) | (rl[1:] != rl[:-1])))
    stop = np.concatenate((new[1:], [True]))
    rg, start, rf, rl, end = rg[new], start[new], rf[new], rl[new], end[stop]
    # a group left with one region is a plain record; the others become Tied sets
    tied_group, n_parts = np.unique(rg, return_counts=True)
    several = n_parts > 1
    tied_group, n_parts = tied_group[several], n_parts[several]
    of_tied = np.zeros(len(tab.start), dtype=bool)  # per group: made a Tied set
    of_tied[tied_group] = True
    keep = of_tied[rg]
    rg, start, rf, rl, end = rg[keep], start[keep], rf[keep], rl[keep], end[keep]
    bounds = np.concatenate(([0], np.cumsum(n_parts)))
    local = np.arange(len(rg)) - np.repeat(bounds[:-1], n_parts)  # part index in its set
    parts = list(zip(start.tolist(), map(make_record, zip(
        local.tolist(), (end - start).tolist(), rf.tolist(), rl.tolist()))))
    item_at = np.searchsorted(rec_cols.id, tied_group).tolist()
    out = list(recs)
    for k, i, lo_, hi_ in zip(item_at, tied_group.tolist(), bounds[:-1].tolist(),
                              bounds[1:].tolist()):
        r = recs[k]
        out[k] = Tied(i, r.bytes, r.first, r.last, tuple(parts[lo_:hi_]))
    # the part columns of part_pairs, item by item: one part per record, the regions
    # of each Tied set in order
    per_item = np.ones(n, dtype=np.int64)
    per_item[item_at] = n_parts
    is_tied = np.zeros(n, dtype=bool)
    is_tied[item_at] = True
    part_tied = np.repeat(is_tied, per_item)
    columns = []
    for values, tied_values in ((0, start), (rec_cols.bytes, end - start),
                                (rec_cols.first, rf), (rec_cols.last, rl)):
        col = np.empty(len(part_tied), dtype=np.int64)
        col[~part_tied] = values if np.isscalar(values) else values[~is_tied]
        col[part_tied] = tied_values
        columns.append(col)
    rel, nbytes, first, last = columns
    return out, _index(rec_cols.id.tolist(), is_tied,
                       np.concatenate(([0], np.cumsum(per_item))), rel, nbytes, first, last)
