"""Placement: an offset in one arena for every storage group.

Every strategy takes only ``Record(id, bytes, first, last)`` lists (TFLite GPU's
``TensorUsageRecord``), so they are interchangeable and compared on the same input.
Each sorts the records its own way, then puts each record in the best-fitting gap
among the already placed records whose lives overlap it (the smallest gap that is
large enough, lowest offset on ties), or on top. The pass runs them all and keeps
the smallest arena (the first in ``STRATEGIES`` order on ties), so it is deterministic.
"""
from __future__ import annotations

import heapq
import random
from typing import Callable, Sequence

from dataclasses import dataclass

import numpy as np

from graphmem.assignment import (Assignment, Context, Record, align_up, groups, records,
                                 root_map)


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


def _fit_tied(placed, t: Tied, alignment: int) -> int:
    """The lowest aligned base offset at which no part of ``t`` meets a placed record.

    Each (part, placed record live with it) pair forbids the bases in
    ``[offset - rel - bytes + 1, end - rel)``; one sweep over those intervals by
    start finds the lowest aligned base in none of them (from a forbidden base the
    next candidate is the aligned end of its interval: no free base is skipped).
    """
    bad = []
    for rel, p in t.parts:
        pf, pl, reach = p.first, p.last, rel + p.bytes - 1
        bad += [(off - reach, end - rel) for first, last, off, end in placed
                if first <= pl and pf <= last]
    bad.sort()
    base = 0
    for lo, hi in bad:
        if lo > base:
            break  # every later interval starts above base too: base is free
        if hi > base:
            base = align_up(hi, alignment)
    return base


def overlaps(recs: Sequence[Record]) -> dict[int, list[int]]:
    """For each record id, the ids of the other records whose lives overlap its own.

    One sweep over the records by first use, keeping the live ones in a heap by
    last use: O(n log n + E) for E overlapping pairs (E is n times the live width).
    """
    by_first = sorted(recs, key=lambda r: (r.first, r.id))
    adj: dict[int, list[int]] = {r.id: [] for r in by_first}
    live: list[tuple[int, int]] = []  # heap of (last, id)
    for r in by_first:
        while live and live[0][0] < r.first:
            heapq.heappop(live)
        mine = adj[r.id]
        for _, other in live:
            mine.append(other)
            adj[other].append(r.id)
        heapq.heappush(live, (r.last, r.id))
    return adj


def best_fit(ordered: Sequence[Record | Tied], alignment: int = 1,
             adj: dict[int, list[int]] | None = None) -> tuple[dict[int, int], int]:
    """Place records in the given order, each in the best-fitting free gap.

    The gap is searched among the already placed records whose lives overlap: the
    smallest gap large enough, the lowest offset on ties, else on top of them all.
    A :class:`Tied` set is placed whole at the lowest offset where all its parts fit.
    Returns ({record id: offset}, arena size). Record sizes are expected aligned and
    positive. ``adj`` is :func:`overlaps` of the same records (computed if omitted;
    pass it to share the work between runs): each record then looks only at its
    own overlaps, so a run costs O(E log w), not O(n^2).
    """
    if adj is None:
        adj = overlaps(ordered)
    offsets: dict[int, int] = {}
    span: dict[int, tuple[int, int]] = {}  # placed plain records: id -> (offset, end)
    lives: dict[int, tuple[int, int]] = {}  # placed plain records: id -> (first, last)
    tied: dict[int, list[tuple[int, int, int, int]]] = {}  # placed Tied: (first, last, off, end) per part
    total = 0
    for r in ordered:
        if isinstance(r, Tied):
            near = []
            for j in adj[r.id]:
                if j in span:
                    near.append((*lives[j], *span[j]))
                elif j in tied:
                    near.extend(tied[j])
            base = _fit_tied(near, r, alignment)
            offsets[r.id] = base
            tied[r.id] = [(p.first, p.last, base + rel, base + rel + p.bytes)
                          for rel, p in r.parts]
            total = max(total, max(end for _, _, _, end in tied[r.id]))
            continue
        # records placed so far whose life overlaps r's, by offset
        nbrs = adj[r.id]
        busy = [span[j] for j in nbrs if j in span]
        if tied:
            f, l = r.first, r.last
            for j in nbrs:
                if j in tied:
                    busy += [(off, end) for first, last, off, end in tied[j]
                             if first <= l and f <= last]
        busy.sort()
        best_gap, best_off, top = None, None, 0
        size = r.bytes
        for off, end in busy:
            if off - top >= size and (best_gap is None or off - top < best_gap):
                best_gap, best_off = off - top, top
            if end > top:
                top = end
        offset = best_off if best_off is not None else align_up(top, alignment)
        offsets[r.id] = offset
        span[r.id] = (offset, offset + size)
        lives[r.id] = (r.first, r.last)
        if offset + size > total:
            total = offset + size
    return offsets, total


def max_live(recs: Sequence[Record | Tied]) -> int:
    """The largest total of record bytes live at one step: no placement can be smaller."""
    recs = list(_parts(recs))
    if not recs:
        return 0
    lo = min(r.first for r in recs)
    delta = [0] * (max(r.last for r in recs) - lo + 2)
    for r in recs:
        delta[r.first - lo] += r.bytes
        delta[r.last - lo + 1] -= r.bytes
    best = running = 0
    for d in delta:
        running += d
        best = max(best, running)
    return best


def _parts(recs):
    """Plain records, with each Tied set expanded into its parts (fresh ids)."""
    n = 0
    for r in recs:
        for p in (x for _, x in r.parts) if isinstance(r, Tied) else (r,):
            yield Record(n, p.bytes, p.first, p.last)
            n += 1


# "best" runs every strategy on inputs of up to this much work (records plus
# overlapping pairs, about what one best-fit run visits), fewer above it: after the
# first, a strategy runs only while the runs so far stay within the budget. On a
# 100,000-node random DAG one run is about 2.5 million visits and 1.4 s.
STRATEGY_WORK = 3_000_000

# Hill climbing re-runs best fit up to this many times in all, fewer for large
# inputs (each run costs about n^2 steps), so planning time stays bounded.
CLIMB_WORK = 20_000_000
CLIMB_MAX_RUNS = 400


def hill_climb(ordered: Sequence[Record], alignment: int, floor: int, runs: int,
               seed: int = 0, adj: dict[int, list[int]] | None = None,
               ) -> tuple[dict[int, int], int, list[Record], int]:
    """Improve a best-fit order: move a record that reaches the arena's top earlier.

    Accepts moves that do not grow the arena, stops at ``floor`` or after ``runs``
    best-fit runs. Seeded, so the result is the same every time (as TVM's hill_climb).
    Returns (offsets, total, order, runs used).
    """
    rng = random.Random(seed)
    order = list(ordered)
    if adj is None:
        adj = overlaps(order)
    offsets, total = best_fit(order, alignment, adj)
    used = 0
    while used < runs and total > floor:
        top = [i for i, r in enumerate(order) if offsets[r.id] + r.bytes == total]
        i = rng.choice(top)
        j = rng.randrange(i) if i > 0 else 0
        candidate = order[:]
        candidate.insert(j, candidate.pop(i))
        new_offsets, new_total = best_fit(candidate, alignment, adj)
        used += 1
        if new_total <= total:
            order, offsets, total = candidate, new_offsets, new_total
    return offsets, total, order, used


def place_records(recs: Sequence[Record], strategy: str = "best",
                  alignment: int = 1) -> tuple[dict[int, int], int, str, dict[str, int]]:
    """Offsets for records by one strategy, or by the best of all (``"best"``).

    ``"best"`` runs the strategies in order until one reaches the max-live floor
    (no later one could beat it) or the next would exceed ``STRATEGY_WORK`` (large
    inputs: see there), then, while the arena is above the floor, hill-climbs from
    each strategy's order (best first) within a work budget.
    Returns (offsets, total, the strategy used, {strategy: total} for each tried).
    """
    names = list(STRATEGIES) if strategy == "best" else [strategy]
    if any(n not in STRATEGIES for n in names):
        raise ValueError(f"unknown placement strategy {strategy!r}; "
                         f"choose from best, {', '.join(STRATEGIES)}")
    tried: dict[str, int] = {}
    best = None
    starts = []
    adj = overlaps(recs)
    floor = max_live(recs) if strategy == "best" else None
    work = len(recs) + sum(len(v) for v in adj.values())
    for name in names:
        if floor is not None and best is not None and best[1] <= floor:
            break  # at the floor already: a later strategy could only tie, and ties keep the first
        if best is not None and (len(tried) + 1) * work > STRATEGY_WORK:
            break  # a large input: the first strategies only (see STRATEGY_WORK)
        ordered = STRATEGIES[name](recs)
        offsets, total = best_fit(ordered, alignment, adj)
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
            offsets, total, _, _ = hill_climb(ordered, alignment, floor, per_start, adj=adj)
            if total < best[1]:
                best = (offsets, total, f"{name}+hill_climb")
                tried[best[2]] = total
    return best[0], best[1], best[2], tried


def group_items(ctx: Context, a: Assignment, gs) -> list[Record | Tied]:
    """Placement items for storage groups: a Record each, a Tied set for a group with slices.

    A group's bytes are split at every member's boundary, rounded up to the alignment;
    each region lives from the first to the last use of any member covering it. Adjacent regions with the same
    life are merged. Item ids are indices into ``gs``; zero-sized groups are left out.
    """
    plain = {r.id: r for r in records(ctx, gs)}
    if not a.slice_of:  # no Concat slices: every member sits at its group's offset 0
        return list(plain.values())
    items: list[Record | Tied] = []
    root_of, sizes = root_map(ctx, a), ctx.sizes
    for i, g in enumerate(gs):
        if i not in plain:
            continue
        if len(g.members) == 1:
            items.append(plain[i])
            continue
        spans = [(root_of[t][1], sizes[t], ctx.intervals[t]) for t in g.members if sizes[t] > 0]
        if all(rel == 0 and n == g.bytes for rel, n, _ in spans):
            items.append(plain[i])  # every member covers the whole group
            continue
        size = plain[i].bytes
        # cut at every member's start and end, rounded up to the alignment so that
        # every part, and so every gap another record may take, is aligned (a part
        # then also covers the bytes up to the next boundary: its life only grows)
        al = ctx.alignment
        cuts = sorted({0, size} | {min(align_up(rel, al), size) for rel, _, _ in spans}
                      | {min(align_up(rel + n, al), size) for rel, n, _ in spans})
        regions: list[list[int]] = []  # [lo, hi, first, last]
        for lo, hi in zip(cuts, cuts[1:]):
            lives = [iv for rel, n, iv in spans if rel < hi and lo < rel + n]
            first = min((iv.first for iv in lives), default=g.first)
            last = max((iv.last for iv in lives), default=g.last)
            if regions and regions[-1][2:] == [first, last]:
                regions[-1][1] = hi
            else:
                regions.append([lo, hi, first, last])
        parts = tuple((lo, Record(k, hi - lo, first, last))
                      for k, (lo, hi, first, last) in enumerate(regions))
        items.append(Tied(i, size, g.first, g.last, parts) if len(parts) > 1 else plain[i])
    return items


def run(ctx: Context, a: Assignment, strategy: str = "best",
        time_limit: float = 10.0) -> tuple[Assignment, dict]:
    gs = groups(ctx, a)
    recs = group_items(ctx, a, gs)
    if strategy == "optimal":  # the MIP of place_exact, warm-started by "best"
        from .place_exact import place_optimal
        # the MIP knows plain records only: a group with Concat slices is placed as
        # one whole-life record there, and the best heuristic with slices competes
        exact = place_optimal(records(ctx, gs), ctx.alignment, time_limit)
        offsets, total, used = exact.offsets, exact.total, "optimal"
        tried = {exact.heuristic: exact.heuristic_total, "optimal": exact.total}
        extra = {"proven_optimal": exact.optimal, "lower_bound": exact.lower_bound,
                 "gap": round(exact.gap, 6)}
        if any(isinstance(r, Tied) for r in recs):
            h_offsets, h_total, h_used, _ = place_records(recs, "best", ctx.alignment)
            tried[h_used + " (with slices)"] = h_total
            if h_total < total:
                offsets, total, used = h_offsets, h_total, h_used
                extra["proven_optimal"] = False
    else:
        offsets, total, used, tried = place_records(recs, strategy, ctx.alignment)
        extra = {}
    root_offsets = {g.root: 0 for g in gs}  # zero-sized groups sit at offset 0
    for r in recs:
        root_offsets[gs[r.id].root] = offsets[r.id]
    detail = {"strategy": used, "tried": tried, **extra}
    if a.storage_bytes is not None:
        detail["share_bytes"] = sum(align_up(b, ctx.alignment) for b in a.storage_bytes)
    return a.with_(offsets=root_offsets, arena_bytes=total, strategy=used), detail
