"""Placement: an offset in one arena for every storage group.

Every strategy takes only ``Record(id, bytes, first, last)`` lists (TFLite GPU's
``TensorUsageRecord``), so they are interchangeable and compared on the same input.
Each sorts the records its own way, then puts each record in the best-fitting gap
among the already placed records whose lives overlap it (the smallest gap that is
large enough, lowest offset on ties), or on top. The pass runs them all and keeps
the smallest arena (the first in ``STRATEGIES`` order on ties), so it is deterministic.
"""
from __future__ import annotations

import bisect
import random
from typing import Callable, Sequence

from dataclasses import dataclass

from graphmem.assignment import Assignment, Context, Record, align_up, groups, records


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
    delta = [0] * (hi - lo + 2)
    for r in recs:
        delta[r.first - lo] += r.bytes
        delta[r.last - lo + 1] -= r.bytes
    live, running = [], 0
    for d in delta[:-1]:
        running += d
        live.append(running)
    return {r.id: max(live[r.first - lo:r.last - lo + 1]) for r in recs}


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
    """The lowest base offset at which no part of ``t`` meets a placed record."""
    busy = []  # per part: (rel, bytes, [(offset, end) of placed records live with it])
    for rel, p in t.parts:
        busy.append((rel, p.bytes, [(off, end) for first, last, off, end in placed
                                    if first <= p.last and p.first <= last]))
    base = 0
    moved = True
    while moved:
        moved = False
        for rel, nbytes, spans in busy:
            lo, hi = base + rel, base + rel + nbytes
            for off, end in spans:
                if off < hi and lo < end:
                    base = align_up(end - rel, alignment)
                    moved = True
                    break
            if moved:
                break
    return base


def best_fit(ordered: Sequence[Record | Tied], alignment: int = 1) -> tuple[dict[int, int], int]:
    """Place records in the given order, each in the best-fitting free gap.

    A :class:`Tied` set is placed whole at the lowest offset where all its parts fit.
    Returns ({record id: offset}, arena size). Record sizes are expected aligned.
    """
    placed: list[tuple[int, int, int, int]] = []  # (first, last, offset, end) sorted by first
    offsets: dict[int, int] = {}
    total = 0
    for r in ordered:
        if isinstance(r, Tied):
            base = _fit_tied(placed, r, alignment)
            offsets[r.id] = base
            for rel, p in r.parts:
                total = max(total, base + rel + p.bytes)
                bisect.insort(placed, (p.first, p.last, base + rel, base + rel + p.bytes))
            continue
        # records placed so far whose life overlaps r's
        busy = sorted((off, end) for first, last, off, end in placed
                      if first <= r.last and r.first <= last)
        best_gap, best_off, top = None, None, 0
        for off, end in busy:
            gap = off - top
            if gap >= r.bytes and (best_gap is None or gap < best_gap):
                best_gap, best_off = gap, top
            top = max(top, end)
        offset = best_off if best_off is not None else align_up(top, alignment)
        offsets[r.id] = offset
        total = max(total, offset + r.bytes)
        bisect.insort(placed, (r.first, r.last, offset, offset + r.bytes))
    return offsets, total


def max_live(recs: Sequence[Record | Tied]) -> int:
    """The largest total of record bytes live at one step: no placement can be smaller."""
    b = _breadth(list(_parts(recs)))
    return max(b.values(), default=0)


def _parts(recs):
    """Plain records, with each Tied set expanded into its parts (fresh ids)."""
    n = 0
    for r in recs:
        for p in (x for _, x in r.parts) if isinstance(r, Tied) else (r,):
            yield Record(n, p.bytes, p.first, p.last)
            n += 1


# Hill climbing re-runs best fit up to this many times in all, fewer for large
# inputs (each run costs about n^2 steps), so planning time stays bounded.
CLIMB_WORK = 20_000_000
CLIMB_MAX_RUNS = 400


def hill_climb(ordered: Sequence[Record], alignment: int, floor: int, runs: int,
               seed: int = 0) -> tuple[dict[int, int], int, list[Record], int]:
    """Improve a best-fit order: move a record that reaches the arena's top earlier.

    Accepts moves that do not grow the arena, stops at ``floor`` or after ``runs``
    best-fit runs. Seeded, so the result is the same every time (as TVM's hill_climb).
    Returns (offsets, total, order, runs used).
    """
    rng = random.Random(seed)
    order = list(ordered)
    offsets, total = best_fit(order, alignment)
    used = 0
    while used < runs and total > floor:
        top = [i for i, r in enumerate(order) if offsets[r.id] + r.bytes == total]
        i = rng.choice(top)
        j = rng.randrange(i) if i > 0 else 0
        candidate = order[:]
        candidate.insert(j, candidate.pop(i))
        new_offsets, new_total = best_fit(candidate, alignment)
        used += 1
        if new_total <= total:
            order, offsets, total = candidate, new_offsets, new_total
    return offsets, total, order, used


def place_records(recs: Sequence[Record], strategy: str = "best",
                  alignment: int = 1) -> tuple[dict[int, int], int, str, dict[str, int]]:
    """Offsets for records by one strategy, or by the best of all (``"best"``).

    ``"best"`` runs every strategy, then, while the arena is above the max-live
    floor, hill-climbs from each strategy's order (best first) within a work budget.
    Returns (offsets, total, the strategy used, {strategy: total} for each tried).
    """
    names = list(STRATEGIES) if strategy == "best" else [strategy]
    if any(n not in STRATEGIES for n in names):
        raise ValueError(f"unknown placement strategy {strategy!r}; "
                         f"choose from best, {', '.join(STRATEGIES)}")
    tried: dict[str, int] = {}
    best = None
    starts = []
    for name in names:
        ordered = STRATEGIES[name](recs)
        offsets, total = best_fit(ordered, alignment)
        tried[name] = total
        starts.append((total, len(starts), name, ordered))
        if best is None or total < best[1]:
            best = (offsets, total, name)
    if strategy == "best" and recs:
        floor = max_live(recs)
        budget = min(CLIMB_MAX_RUNS, CLIMB_WORK // (len(recs) ** 2))
        per_start = budget // len(starts)
        for _, _, name, ordered in sorted(starts, key=lambda s: (s[0], s[1])):
            if best[1] <= floor or per_start == 0:
                break
            offsets, total, _, _ = hill_climb(ordered, alignment, floor, per_start)
            if total < best[1]:
                best = (offsets, total, f"{name}+hill_climb")
                tried[best[2]] = total
    return best[0], best[1], best[2], tried


def group_items(ctx: Context, a: Assignment, gs) -> list[Record | Tied]:
    """Placement items for storage groups: a Record each, a Tied set for a group with slices.

    A group's bytes are split at every member's boundary; each region lives from the
    first to the last use of any member covering it. Adjacent regions with the same
    life are merged. Item ids are indices into ``gs``; zero-sized groups are left out.
    """
    plain = {r.id: r for r in records(ctx, gs)}
    items: list[Record | Tied] = []
    for i, g in enumerate(gs):
        if i not in plain:
            continue
        spans = [(a.root_of(t)[1], ctx.graph.tensors[t].bytes, ctx.intervals[t])
                 for t in g.members if ctx.graph.tensors[t].bytes > 0]
        if all(rel == 0 for rel, _, _ in spans):
            items.append(plain[i])
            continue
        size = plain[i].bytes
        cuts = sorted({0, size} | {rel for rel, _, _ in spans}
                      | {min(rel + n, size) for rel, n, _ in spans})
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


def run(ctx: Context, a: Assignment, strategy: str = "best") -> tuple[Assignment, dict]:
    gs = groups(ctx, a)
    recs = group_items(ctx, a, gs)
    offsets, total, used, tried = place_records(recs, strategy, ctx.alignment)
    root_offsets = {g.root: 0 for g in gs}  # zero-sized groups sit at offset 0
    for r in recs:
        root_offsets[gs[r.id].root] = offsets[r.id]
    detail = {"strategy": used, "tried": tried}
    if a.storage_bytes is not None:
        detail["share_bytes"] = sum(align_up(b, ctx.alignment) for b in a.storage_bytes)
    return a.with_(offsets=root_offsets, arena_bytes=total, strategy=used), detail
