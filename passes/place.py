"""Placement: an offset in one arena for every storage group.

Every strategy takes only ``Record(id, bytes, first, last)`` lists (TFLite GPU's
``TensorUsageRecord``), so they are interchangeable and compared on the same input.
Each sorts the records its own way, then puts each record in the best-fitting gap
among the already placed records whose lives overlap it (the smallest gap that is
large enough, lowest offset on ties), or on top. The pass runs them all and keeps
the smallest arena (the first in ``STRATEGIES`` order on ties), so it is deterministic.
"""
from __future__ import annotations

import random
from operator import attrgetter
from typing import Callable, NamedTuple, Sequence

from dataclasses import dataclass

import numpy as np

from graphmem.planning.assignment import (MAX_PLAN_BYTES, Assignment, Context, Record, align_up,
                                 group_records, group_roots, group_table, groups, make_record,
                                 position_bytes, records)
from graphmem.core.liveness import overlapping_pairs
from graphmem.core.regions import NO_SPAN, byte_regions

try:  # the compiled best-fit loop (graphmem/_fit.c), built at install where a C compiler is
    from graphmem import _fit
except ImportError:  # pragma: no cover - depends on the install
    _fit = None


@dataclass(frozen=True)
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


def _breadth(recs: Sequence[Record]) -> dict[int, int]:
    """For each record, the largest total live at any step of its life."""
    if not recs:
        return {}
    lo = min(r.first for r in recs)
    hi = max(r.last for r in recs)
    delta = np.zeros(hi - lo + 2, dtype=np.int64)
    firsts = np.fromiter((r.first - lo for r in recs), np.int64, len(recs))
    lasts = np.fromiter((r.last - lo for r in recs), np.int64, len(recs))
    np.add.at(delta, firsts, np.fromiter((r.bytes for r in recs), np.int64, len(recs)))
    np.add.at(delta, lasts + 1, -np.fromiter((r.bytes for r in recs), np.int64, len(recs)))
    live = np.cumsum(delta)  # live[-1] is 0: a sentinel so every slice end is in range
    # maximum over [first, last] for every record at once: reduceat over the
    # interleaved (first, last + 1) bounds, keeping every other result
    bounds = np.empty(2 * len(recs), dtype=np.int64)
    bounds[0::2], bounds[1::2] = firsts, lasts + 1
    peaks = np.maximum.reduceat(live, bounds)[0::2]
    return {r.id: int(p) for r, p in zip(recs, peaks)}


def _by_size(recs):
    return sorted(recs, key=lambda r: (-r.bytes, r.first, r.id))


def _by_duration(recs):
    return sorted(recs, key=lambda r: (-(r.last - r.first), -r.bytes, r.first, r.id))


def _by_area(recs):
    return sorted(recs, key=lambda r: (-r.bytes * (r.last - r.first + 1), r.first, r.id))


def _in_order(recs):
    return sorted(recs, key=lambda r: (r.first, -r.bytes, r.id))


def _by_breadth(recs):
    b = _breadth(recs)
    return sorted(recs, key=lambda r: (-b[r.id], -r.bytes, r.first, r.id))


# name -> how records are ordered before best-fit insertion
STRATEGIES: dict[str, Callable[[Sequence[Record]], list[Record]]] = {
    "greedy_by_size": _by_size,
    "greedy_by_breadth": _by_breadth,
    "greedy_by_area": _by_area,
    "greedy_by_duration": _by_duration,
    "greedy_in_order": _in_order,
}


def _lowest_free(bad: list[tuple[int, int]], alignment: int) -> int:
    """The lowest aligned base in none of the half-open intervals ``[lo, hi)``.

    One sweep over the intervals by start (from a forbidden base the next candidate
    is the aligned end of its interval: no free base is skipped).
    """
    bad.sort()
    base = 0
    for lo, hi in bad:
        if lo > base:
            break  # every later interval starts above base too: base is free
        if hi > base:
            base = align_up(hi, alignment)
    return base


class PartPairs(NamedTuple):
    """What every best-fit run over the same items shares, whatever their order.

    A part is a plain record or one part of a Tied set. Parts are numbered item by
    item (``start[k]``: the first part of item ``k``, in the items' own order);
    ``a``/``b`` hold every pair of parts of different items whose lives overlap.
    """

    ids: list[int]  # item id per item
    tied: list[bool]  # per item: a Tied set (placed whole at the lowest base that fits)
    start: list[int]  # len(items) + 1 bounds into the part lists
    rel: list[int]  # part offset inside its item
    nbytes: list[int]
    owner: np.ndarray  # item index per part
    first: np.ndarray  # per part: its live range
    last: np.ndarray
    a: np.ndarray
    b: np.ndarray
    # the parts stacked one on another: no offset or bound best fit computes is larger
    # but for the alignment padding (see _native_ok)
    reach: int
    # (tied, start, rel, nbytes) as arrays for the compiled loop, None where it was not
    # built or the values are too large for its 64-bit integers
    native: tuple[np.ndarray, ...] | None


def part_pairs(items: Sequence[Record | Tied]) -> PartPairs:
    """Index the items' parts and all their time-overlapping pairs (numpy, O(n log n + E))."""
    tied = [type(r) is Tied for r in items]
    if True not in tied:  # plain records only: one part each, columns at C speed
        n = len(items)
        ids, start, rel = list(map(_ID, items)), list(range(n + 1)), [0] * n
        nbytes = list(map(_BYTES, items))
        first, last = list(map(_FIRST, items)), list(map(_LAST, items))
        return _pairs(ids, tied, start, rel, nbytes, first, last)
    ids, start, rel, nbytes, first, last = [], [0], [], [], [], []
    for r, is_tied in zip(items, tied):
        ids.append(r.id)
        if is_tied:
            for off, p in r.parts:
                rel.append(off)
                nbytes.append(p.bytes)
                first.append(p.first)
                last.append(p.last)
        else:
            rel.append(0)
            nbytes.append(r.bytes)
            first.append(r.first)
            last.append(r.last)
        start.append(len(rel))
    return _pairs(ids, tied, start, rel, nbytes, first, last)


def _pairs(ids, tied, start, rel, nbytes, first, last) -> PartPairs:
    owner = np.repeat(np.arange(len(ids), dtype=np.int32), np.diff(start))
    first, last = np.asarray(first, dtype=np.int64), np.asarray(last, dtype=np.int64)
    a_parts, b_parts = [], []
    for a, b in overlapping_pairs(first, last):
        keep = owner[a] != owner[b]  # parts of one Tied set sit at fixed offsets: no conflict
        a_parts.append(a[keep].astype(np.int32))
        b_parts.append(b[keep].astype(np.int32))
    empty = np.zeros(0, dtype=np.int32)
    a = np.concatenate(a_parts) if a_parts else empty
    b = np.concatenate(b_parts) if b_parts else empty
    reach = sum(nbytes) + max(rel, default=0)
    native = None
    if _fit is not None and reach < NATIVE_LIMIT:
        native = (np.array(tied, dtype=np.uint8), np.array(start, dtype=np.int64),
                  np.array(rel, dtype=np.int64), np.array(nbytes, dtype=np.int64))
    return PartPairs(ids, tied, start, rel, nbytes, owner, first, last, a, b, reach, native)


def best_fit(ordered: Sequence[Record | Tied], alignment: int = 1,
             pairs: PartPairs | None = None) -> tuple[dict[int, int], int]:
    """Place records in the given order, each in the best-fitting free gap.

    The gap is searched among the already placed records whose lives overlap: the
    smallest gap large enough, the lowest offset on ties, else on top of them all.
    A :class:`Tied` set is placed whole at the lowest offset where all its parts fit.
    Returns ({record id: offset}, arena size). Record sizes are expected aligned and
    positive. ``pairs`` is :func:`part_pairs` of the same items in any order (computed
    if omitted; pass it to share the work between runs): each part then looks only at
    the parts placed before it that overlap it in time, so a run costs O(E log w),
    not O(n^2). The loop runs compiled (graphmem/_fit.c) where that extension was
    built; the Python loop below is its specification and its fallback.
    """
    if pairs is None:
        pairs = part_pairs(ordered)
    ids, tied, start, rels, nbytes = pairs.ids, pairs.tied, pairs.start, pairs.rel, pairs.nbytes
    index = dict(zip(ids, range(len(ids))))
    if _native_ok(pairs, alignment):
        seq_arr = np.fromiter(map(index.__getitem__, map(_ID, ordered)), np.int64, len(ordered))
        base = np.zeros(len(ids), dtype=np.int64)
        total = _fit.run(seq_arr, *pairs.native, pairs.owner, pairs.a, pairs.b, alignment, base)
        return dict(zip(ids, base.tolist())), total
    # the same loop in Python (the specification of graphmem/_fit.c)
    seq = [index[r.id] for r in ordered]
    rank = np.empty(len(ids), dtype=np.int32)
    rank[seq] = np.arange(len(seq), dtype=np.int32)
    # for each part, the parts placed before it that overlap it: (later, earlier) pairs
    # grouped by the later part
    owner_rank = rank[pairs.owner]
    a_later = owner_rank[pairs.a] > owner_rank[pairs.b]
    del owner_rank
    # (later, earlier) packed in one int64 and sorted in place: grouped by the later
    # part without an index array (the order inside a group does not matter)
    packed = np.where(a_later, pairs.a, pairs.b).astype(np.int64) << 32
    packed |= np.where(a_later, pairs.b, pairs.a)
    del a_later
    packed.sort()
    later = (packed >> 32).astype(np.int32)
    earlier = (packed & 0xFFFFFFFF).astype(np.int32)
    del packed
    bound = np.zeros(len(rels) + 1, dtype=np.int64)
    np.cumsum(np.bincount(later, minlength=len(rels)), out=bound[1:])
    bound = bound.tolist()

    # each placed part's (offset, end), as a list for short neighbour lists and as
    # arrays for long ones (VECTOR_MIN): the same rules either way
    spans: list = [None] * len(rels)
    span_off = np.zeros(len(rels), dtype=np.int64)
    span_end = np.zeros(len(rels), dtype=np.int64)
    rel_arr = np.asarray(rels, dtype=np.int64)
    reach_arr = rel_arr + np.asarray(nbytes, dtype=np.int64) - 1
    offsets: dict[int, int] = {}
    total = 0
    for k in seq:
        p0, p1 = start[k], start[k + 1]
        if tied[k]:  # a Tied set: the lowest base where every part fits
            lo, hi = bound[p0], bound[p1]  # its parts are consecutive, so are their lists
            if hi - lo >= VECTOR_MIN:
                q, who = earlier[lo:hi], later[lo:hi]
                base = _lowest_free_np(span_off[q] - reach_arr[who], span_end[q] - rel_arr[who],
                                       alignment)
            else:
                bad = []
                for p in range(p0, p1):
                    rel = rels[p]
                    reach = rel + nbytes[p] - 1
                    bad += [(spans[q][0] - reach, spans[q][1] - rel)
                            for q in earlier[bound[p]:bound[p + 1]].tolist()]
                base = _lowest_free(bad, alignment)
            for p in range(p0, p1):
                off = base + rels[p]
                end = off + nbytes[p]
                spans[p] = (off, end)
                span_off[p], span_end[p] = off, end
                if end > total:
                    total = end
            offsets[ids[k]] = base
            continue
        size = nbytes[p0]
        lo, hi = bound[p0], bound[p0 + 1]
        if hi - lo >= VECTOR_MIN:
            offset = _best_gap_np(span_off[earlier[lo:hi]], span_end[earlier[lo:hi]], size,
                                  alignment)
        else:
            busy = [spans[q] for q in earlier[lo:hi].tolist()]
            busy.sort()
            best_gap, best_off, top = None, None, 0
            for off, end in busy:
                if off - top >= size and (best_gap is None or off - top < best_gap):
                    best_gap, best_off = off - top, top
                if end > top:
                    top = end
            offset = best_off if best_off is not None else align_up(top, alignment)
        offsets[ids[k]] = offset
        spans[p0] = (offset, offset + size)
        span_off[p0], span_end[p0] = offset, offset + size
        if offset + size > total:
            total = offset + size
    return offsets, total


# best_fit runs the compiled loop when graphmem._fit was built (tests switch it off to
# check the Python loop against the same reference)
NATIVE = True
# the compiled loop computes in signed 64-bit integers: it runs only while every value
# stays below this (half the range, so no sum or difference on the way can overflow;
# plan_graph refuses larger graphs, this guards direct calls)
NATIVE_LIMIT = MAX_PLAN_BYTES


def _native_ok(pairs: PartPairs, alignment: int) -> bool:
    """Whether this run may use the compiled loop: built, switched on, and every offset
    and bound of best fit fits (none exceeds the parts stacked one on another, each
    padded to the alignment)."""
    return (NATIVE and pairs.native is not None
            and pairs.reach + (len(pairs.rel) + 2) * alignment < NATIVE_LIMIT)


# best_fit handles a neighbour list at least this long with numpy (per call overhead,
# but no per-element Python work), shorter ones with a plain loop
VECTOR_MIN = 48


def _best_gap_np(offs: np.ndarray, ends: np.ndarray, size: int, alignment: int) -> int:
    """best_fit's gap rule over busy (offset, end) spans, vectorised: the smallest gap
    of at least ``size`` (the lowest offset on ties), else the aligned top."""
    o = np.lexsort((ends, offs))
    offs, ends = offs[o], ends[o]
    top = np.maximum.accumulate(ends)
    below = np.empty_like(top)  # the top before each span, from 0
    below[0] = 0
    np.maximum(top[:-1], 0, out=below[1:])
    gaps = offs - below
    fits = np.flatnonzero(gaps >= size)
    if len(fits):
        return int(below[fits[np.argmin(gaps[fits])]])
    return align_up(max(int(top[-1]), 0), alignment)


def _lowest_free_np(lo: np.ndarray, hi: np.ndarray, alignment: int) -> int:
    """:func:`_lowest_free` vectorised: after the intervals up to k (by start) the base
    is the aligned running maximum of their ends, until an interval starts above it."""
    o = np.argsort(lo, kind="stable")
    lo, hi = lo[o], hi[o]
    reached = np.maximum(align_up(np.maximum.accumulate(hi), alignment), 0)
    before = np.empty_like(reached)
    before[0] = 0
    before[1:] = reached[:-1]
    free = np.flatnonzero(lo > before)
    return int(before[free[0]]) if len(free) else int(reached[-1])


def max_live(recs: Sequence[Record | Tied]) -> int:
    """The largest total of record bytes live at one step: no placement can be smaller."""
    plain = [r for r in recs if type(r) is not Tied]
    if len(plain) < len(recs):
        plain += [p for r in recs if type(r) is Tied for _, p in r.parts]
    n = len(plain)
    try:
        nbytes = np.fromiter(map(_BYTES, plain), np.int64, n)
    except OverflowError:  # a size past 64 bits: Python integers
        nbytes = np.array(list(map(_BYTES, plain)), dtype=object)
    return peak_live(nbytes, np.fromiter(map(_FIRST, plain), np.int64, n),
                     np.fromiter(map(_LAST, plain), np.int64, n))


def peak_live(nbytes: np.ndarray, first: np.ndarray, last: np.ndarray) -> int:
    """:func:`max_live` of records given as columns."""
    if not len(nbytes):
        return 0
    lo = int(first.min())
    delta = np.zeros(int(last.max()) - lo + 2, dtype=nbytes.dtype)
    np.add.at(delta, first - lo, nbytes)
    np.add.at(delta, last - lo + 1, -nbytes)
    return max(int(np.cumsum(delta).max()), 0)


# "best" runs every strategy on inputs of up to this much work (parts plus
# time-overlapping part pairs, what one best-fit run visits), fewer above it: after
# the first, a strategy runs only while the runs so far stay within the budget. On a
# 100,000-node random DAG one run is about 2.7 million visits: 0.25 s compiled, 0.9 s
# in Python (the budget is the same for both, so the plans are too).
STRATEGY_WORK = 3_000_000

# Hill climbing re-runs best fit up to this many times in all, fewer for large
# inputs (each run costs about n^2 steps), so planning time stays bounded.
CLIMB_WORK = 20_000_000
CLIMB_MAX_RUNS = 400


def hill_climb(ordered: Sequence[Record], alignment: int, floor: int, runs: int,
               seed: int = 0, pairs: PartPairs | None = None,
               ) -> tuple[dict[int, int], int, list[Record], int]:
    """Improve a best-fit order: move a record that reaches the arena's top earlier.

    Accepts moves that do not grow the arena, stops at ``floor`` or after ``runs``
    best-fit runs. Seeded, so the result is the same every time (as TVM's hill_climb).
    Returns (offsets, total, order, runs used).
    """
    rng = random.Random(seed)
    order = list(ordered)
    if pairs is None:
        pairs = part_pairs(order)
    offsets, total = best_fit(order, alignment, pairs)
    used = 0
    while used < runs and total > floor:
        top = [i for i, r in enumerate(order) if offsets[r.id] + r.bytes == total]
        i = rng.choice(top)
        j = rng.randrange(i) if i > 0 else 0
        candidate = order[:]
        candidate.insert(j, candidate.pop(i))
        new_offsets, new_total = best_fit(candidate, alignment, pairs)
        used += 1
        if new_total <= total:
            order, offsets, total = candidate, new_offsets, new_total
    return offsets, total, order, used


def place_records(recs: Sequence[Record], strategy: str = "best", alignment: int = 1,
                  pairs: PartPairs | None = None,
                  ) -> tuple[dict[int, int], int, str, dict[str, int]]:
    """Offsets for records by one strategy, or by the best of all (``"best"``).

    ``"best"`` runs the strategies in order until one reaches the max-live floor
    (no later one could beat it) or the next would exceed ``STRATEGY_WORK`` (large
    inputs: see there), then, while the arena is above the floor, hill-climbs from
    each strategy's order (best first) within a work budget.
    ``pairs``: :func:`part_pairs` of ``recs``, made here if not given.
    Returns (offsets, total, the strategy used, {strategy: total} for each tried).
    """
    names = list(STRATEGIES) if strategy == "best" else [strategy]
    if any(n not in STRATEGIES for n in names):
        raise ValueError(f"unknown placement strategy {strategy!r}; "
                         f"choose from best, {', '.join(STRATEGIES)}")
    tried: dict[str, int] = {}
    best = None
    starts = []
    if pairs is None:
        pairs = part_pairs(recs)
    floor = None
    if strategy == "best":  # max_live(recs), from the part columns where they are arrays
        floor = (max_live(recs) if pairs.native is None
                 else peak_live(pairs.native[3], pairs.first, pairs.last))
    work = len(pairs.rel) + len(pairs.a)
    for name in names:
        if floor is not None and best is not None and best[1] <= floor:
            break  # at the floor already: a later strategy could only tie, and ties keep the first
        if best is not None and (len(tried) + 1) * work > STRATEGY_WORK:
            break  # a large input: the first strategies only (see STRATEGY_WORK)
        ordered = STRATEGIES[name](recs)
        offsets, total = best_fit(ordered, alignment, pairs)
        tried[name] = total
        starts.append((total, len(starts), name, ordered))
        if best is None or total < best[1]:
            best = (offsets, total, name)
    if strategy == "best" and recs:
        budget = min(CLIMB_MAX_RUNS, CLIMB_WORK // (len(recs) ** 2))
        per_start = budget // len(starts)
        for _, _, name, ordered in sorted(starts, key=lambda s: (s[0], s[1])):
            if best[1] <= floor or per_start == 0:
                break
            offsets, total, _, _ = hill_climb(ordered, alignment, floor, per_start, pairs=pairs)
            if total < best[1]:
                best = (offsets, total, f"{name}+hill_climb")
                tried[best[2]] = total
    return best[0], best[1], best[2], tried


def group_items(ctx: Context, a: Assignment) -> list[Record | Tied]:
    """Placement items for the storage groups of ``a`` (:func:`groups`): a Record
    each, a Tied set for a group with slices.

    A group's bytes are cut at every member's start and end, rounded up to the
    alignment (so every part, and every gap another record may take, is aligned; a
    part then also covers the bytes up to the next cut: its life only grows); each
    region lives from the first to the last use of any member on its bytes (the
    group's life where none is). Adjacent regions with the same life are merged.
    Item ids are indices into ``groups(ctx, a)``; zero-sized groups are left out.
    """
    return _items(ctx, a)[0]


def _items(ctx: Context, a: Assignment) -> tuple[list[Record | Tied], PartPairs | None]:
    """:func:`group_items`, and their :func:`part_pairs` made from the same arrays
    (None where a size does not fit 64-bit integers)."""
    recs, rec_cols = group_records(ctx, a)
    if rec_cols is None:
        return _items_python(ctx, a, recs), None
    n = len(recs)

    def plain() -> PartPairs:
        return _pairs(rec_cols.id.tolist(), [False] * n, list(range(n + 1)), [0] * n,
                      rec_cols.bytes.tolist(), rec_cols.first, rec_cols.last)

    if not a.slice_of:  # no Concat slices: every member sits at its group's offset 0
        return recs, plain()
    tab, al = group_table(ctx, a), ctx.alignment
    nb = position_bytes(ctx)
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
    cut_group = np.r_[sg, sg, split, split]
    cuts = np.r_[np.minimum(align_up(lo, al), group_size),
                 np.minimum(align_up(hi, al), group_size),
                 np.zeros(len(split), dtype=np.int64), size]
    rg, start, end, rf, rl = byte_regions(cut_group, cuts, sg, lo, hi, tab.first[pos],
                                          tab.last[pos])
    bare = rf == NO_SPAN  # no member on these bytes: the group's life
    rf[bare] = tab.group_first[rg[bare]]
    rl[bare] = tab.group_last[rg[bare]]
    # merge each run of adjacent regions with the same life (within a group)
    new = np.r_[True, (rg[1:] != rg[:-1]) | (rf[1:] != rf[:-1]) | (rl[1:] != rl[:-1])]
    stop = np.r_[new[1:], True]
    rg, start, rf, rl, end = rg[new], start[new], rf[new], rl[new], end[stop]
    # a group left with one region is a plain record; the others become Tied sets
    tied_group, n_parts = np.unique(rg, return_counts=True)
    several = n_parts > 1
    tied_group, n_parts = tied_group[several], n_parts[several]
    keep = np.isin(rg, tied_group)
    rg, start, rf, rl, end = rg[keep], start[keep], rf[keep], rl[keep], end[keep]
    bounds = np.r_[0, np.cumsum(n_parts)]
    local = np.arange(len(rg)) - np.repeat(bounds[:-1], n_parts)  # part index in its set
    parts = list(zip(start.tolist(), map(make_record, zip(
        local.tolist(), (end - start).tolist(), rf.tolist(), rl.tolist()))))
    item_at = np.searchsorted(rec_cols.id, tied_group).tolist()
    items = list(recs)
    for k, i, lo_, hi_ in zip(item_at, tied_group.tolist(), bounds[:-1].tolist(),
                              bounds[1:].tolist()):
        r = recs[k]
        items[k] = Tied(i, r.bytes, r.first, r.last, tuple(parts[lo_:hi_]))
    # the part columns of part_pairs, item by item: one part per record, the regions
    # of each Tied set in order
    per_item = np.ones(len(recs), dtype=np.int64)
    per_item[item_at] = n_parts
    is_tied = np.zeros(len(recs), dtype=bool)
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
    part_start = np.r_[0, np.cumsum(per_item)].tolist()
    return items, _pairs(rec_cols.id.tolist(), is_tied.tolist(), part_start, rel.tolist(),
                         nbytes.tolist(), first, last)


def _items_python(ctx: Context, a: Assignment, recs: list[Record]) -> list[Record | Tied]:
    """group_items where sizes do not fit 64-bit integers: plain records, as no arena
    that large can be planned with Concat slices (their byte regions are int64)."""
    if a.slice_of:
        raise OverflowError("a storage group with Concat slices is past 64-bit sizes")
    return recs


_ID, _BYTES, _FIRST, _LAST = (attrgetter("id"), attrgetter("bytes"), attrgetter("first"),
                               attrgetter("last"))


def run(ctx: Context, a: Assignment, strategy: str = "best",
        time_limit: float = 10.0) -> tuple[Assignment, dict]:
    recs, pairs = _items(ctx, a)
    if strategy == "optimal":  # the MIP of place_exact, warm-started by "best"
        from graphmem.passes.place_exact import place_optimal
        # the MIP knows plain records only: a group with Concat slices is placed as
        # one whole-life record there, and the best heuristic with slices competes
        exact = place_optimal(records(ctx, groups(ctx, a)), ctx.alignment, time_limit)
        offsets, total, used = exact.offsets, exact.total, "optimal"
        tried = {exact.heuristic: exact.heuristic_total, "optimal": exact.total}
        extra = {"proven_optimal": exact.optimal, "lower_bound": exact.lower_bound,
                 "gap": round(exact.gap, 6)}
        if any(isinstance(r, Tied) for r in recs):
            h_offsets, h_total, h_used, _ = place_records(recs, "best", ctx.alignment, pairs)
            tried[h_used + " (with slices)"] = h_total
            if h_total < total:
                offsets, total, used = h_offsets, h_total, h_used
                extra["proven_optimal"] = False
    else:
        offsets, total, used, tried = place_records(recs, strategy, ctx.alignment, pairs)
        extra = {}
    roots = group_roots(ctx, a)
    root_offsets = dict.fromkeys(roots, 0)  # zero-sized groups sit at 0
    placed = list(map(_ID, recs))
    root_offsets.update(zip(map(roots.__getitem__, placed), map(offsets.__getitem__, placed)))
    detail = {"strategy": used, "tried": tried, **extra}
    if a.storage_bytes is not None:
        detail["share_bytes"] = sum(align_up(b, ctx.alignment) for b in a.storage_bytes)
    return a.with_(offsets=root_offsets, arena_bytes=total, strategy=used), detail
