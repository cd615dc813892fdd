"""Placement for any compiler's buffers: columns in, offsets out, no ONNX graph needed.

:func:`place_buffers` places buffers of ``size`` bytes live over the half-open step
intervals ``[lower, upper)`` (MiniMalloc's convention) in one arena. More than
``PARTITION_ITEMS`` buffers fall into time partitions (:func:`time_partitions`:
no buffer lives across the point between two), each placed apart from offset 0. In
each (or all at once) it runs the heuristics first (the
split sweep of :mod:`.sweep`; where that is above the max-live floor also
``search.place_records``: the best best-fit ordering, then hill climbing; the smaller
kept), then the complete search of :mod:`.capacity` within a node budget (each
partition its own, taken in rounds: :func:`_place_parts`; there a partition need only
fit under the highest floor of them all, or the capacity):

- with ``capacity``: whether the buffers fit in it, proven either way where the
  budget allows (a heuristic placement within it, the search's, the max-live floor
  above it, or the search's proof);
- without: the smallest arena the search reaches below the heuristic's, down to the
  max-live floor, and whether it is proven optimal.

Past ``items.PAIR_LIMIT`` overlapping pairs the heuristic is the sweep alone, and past
``algorithm.SEARCH_ITEMS`` buffers in a partition there is no search.

:func:`check_placement` says what is wrong with a placement, if anything.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from graphmem.core.liveness import overlapping_pairs
from graphmem.planning.groups import Record
from graphmem.passes.placement import capacity as search
from graphmem.passes.placement.algorithm import SEARCH_ITEMS
from graphmem.passes.placement.items import TooManyPairs
from graphmem.passes.placement.search import peak_live, place_records
from graphmem.passes.placement.sweep import sweep_fit

# search nodes place_buffers allows by default (each a few microseconds: see
# tools/bench/minimalloc.py's section of docs/benchmarks.md)
DEFAULT_NODES = 600_000
# more buffers than this are placed time partition by time partition, each with a search
# budget of its own (MiniMalloc's instances, 154 to 454 buffers, are searched whole: the
# search splits them itself; 3,112 of them one after another are not, in one budget)
PARTITION_ITEMS = 1_000
# over time partitions, the search's nodes in all at most this many times one
# partition's budget: a file of many hard partitions is placed in bounded time (those
# left undecided keep the heuristics' placement)
PARTITION_BUDGETS = 4


class BufferPlacement(NamedTuple):
    """What :func:`place_buffers` found."""

    status: str  # capacity.FITS, NO_FIT or UNDECIDED (without a capacity: FITS)
    offsets: np.ndarray | None  # per buffer; None unless it fits
    total: int  # bytes: the top of the highest buffer (0 when it does not fit)
    proven: bool  # the status is proven; without a capacity: the arena is the smallest
    lower_bound: int  # bytes: no smaller arena exists (at least the max-live floor)
    floor: int  # the max-live floor
    method: str  # what placed them: a heuristic's name, or "search"
    nodes: int  # search nodes visited


def place_buffers(size: Sequence[int], lower: Sequence[int], upper: Sequence[int],
                  capacity: int | None = None, alignment: int = 1,
                  nodes: int | None = DEFAULT_NODES) -> BufferPlacement:
    """Offsets for the buffers (see the module docstring). ``alignment``: every offset
    is a multiple of it. ``nodes``: the search's budget (None: until proven).
    Raises ValueError for bad columns (``capacity.columns``: a buffer with ``upper <=
    lower``, a negative size, a value that is not an integer ...)."""
    size, lower, upper = search.columns(size, lower, upper)
    keep = np.flatnonzero(size > 0)
    floor = peak_live(size[keep], lower[keep], upper[keep] - 1)
    if capacity is not None and capacity < floor:
        return BufferPlacement(search.NO_FIT, None, 0, True, floor, floor, "max-live floor", 0)
    # up to PARTITION_ITEMS buffers the search takes them all at once (it solves time
    # partitions apart itself, in one budget)
    parts = time_partitions(lower[keep], upper[keep]) if len(keep) > PARTITION_ITEMS else []
    if len(parts) <= 1:
        return _place_part(size, lower, upper, capacity, alignment, nodes)
    return _place_parts(size, lower, upper, [keep[p] for p in parts], floor, capacity,
                        alignment, nodes)


def time_partitions(lower: np.ndarray, upper: np.ndarray) -> list[np.ndarray]:
    """The buffers (indices) in groups no buffer's life crosses: between two groups
    there is a point in time where nothing is live. In time order."""
    if not len(lower):
        return []
    order = np.argsort(lower, kind="stable")
    reach = np.maximum.accumulate(upper[order])  # the latest end so far, in birth order
    cut = np.flatnonzero(lower[order][1:] >= reach[:-1]) + 1
    return np.split(order, cut)


def _place_parts(size, lower, upper, parts: list[np.ndarray], floor: int,
                 capacity: int | None, alignment: int, nodes: int | None
                 ) -> BufferPlacement:
    """:func:`place_buffers` over time partitions (index arrays), each placed from 0 up,
    the arena the highest. Partitions alike (the same buffers, lives shifted in time)
    are placed once. The arena is at least the highest max-live floor of them all, so
    a partition needs only fit under the target: the capacity, or without one that
    floor, raised where a partition does not reach it. The sweep places each
    partition first; those above the target are searched at it (``capacity.Search``,
    resumed round after round, each round's installment doubling from 4,096 nodes, so
    that easy ones end early; each partition's nodes in all at most ``nodes``, all
partitions' at most ``PARTITION_BUDGETS`` times that). With a
    capacity, a partition proven not to fit decides, and one undecided in its budget
    leaves the whole undecided. Without, a partition proven not to fit the target, or
    undecided in half its budget, is placed as low as the heuristics and
    ``minimize`` get it in the rest (from just above the target): the new target for
    the others."""
    alike: dict[tuple, list[np.ndarray]] = {}
    for idx in parts:
        at = lower[idx].min()
        key = (len(idx), size[idx].tobytes(), (lower[idx] - at).tobytes(),
               (upper[idx] - at).tobytes())
        alike.setdefault(key, []).append(idx)
    groups = list(alike.values())
    used = 0

    def run(idx, cap, budget, heuristics: bool = False, **kw) -> BufferPlacement:
        nonlocal used
        got = _place_part(size[idx], lower[idx], upper[idx], cap, alignment, budget,
                          heuristics, **kw)
        used += got.nodes
        return got

    placed = [run(g[0], capacity, 0) for g in groups]  # the sweep alone
    bound = max(g.lower_bound for g in placed)  # proven: no arena below it
    target = bound if capacity is None else capacity
    spent = [0] * len(groups)
    searches: dict[int, search.Search] = {}
    problems: dict[int, search.Problem] = {}

    def above(k: int) -> bool:
        return placed[k].status != search.FITS or placed[k].total > target

    pending = [k for k in range(len(groups)) if above(k)]
    left_over: list[int] = []  # searched to their budget, still above the target
    for k in list(pending):
        if np.count_nonzero(size[groups[k][0]]) > SEARCH_ITEMS or nodes == 0:
            pending.remove(k)
            left_over.append(k)
    # without a capacity, half a partition's budget at the target, the rest below its own
    # arena (as place_buffers of it alone would, from its floor)
    share = nodes if nodes is None or capacity is not None else max(nodes // 2, 1)
    all_nodes = None if nodes is None else nodes * PARTITION_BUDGETS  # all partitions'

    def lower_to(k: int, idx: np.ndarray, **kw) -> None:
        """Partition ``k`` placed as low as the heuristics and ``minimize`` get it, in
        the rest of its budget: the new target for the others."""
        nonlocal bound, target
        left = None if nodes is None else max(min(nodes - spent[k], all_nodes - used), 1)
        smaller = run(idx, None, left, True, **kw)
        spent[k] += smaller.nodes
        if smaller.total < placed[k].total:
            placed[k] = smaller
        bound = max(bound, smaller.lower_bound)
        target = max(target, placed[k].total)
        searches.clear()  # the others: searched again at the new target
        for j in list(pending):
            if not above(j):
                pending.remove(j)

    installment = 4096
    while pending:
        for k in list(pending):
            if k not in pending:  # placed when the target rose
                continue
            idx = groups[k][0]
            if all_nodes is not None and used >= all_nodes:  # the whole budget spent
                pending.remove(k)
                left_over.append(k)
                continue
            give = installment if nodes is None else min(installment, share - spent[k],
                                                         all_nodes - used)
            if give <= 0:  # undecided at the target in its share
                pending.remove(k)
                if capacity is not None:
                    left_over.append(k)
                    continue
                lower_to(k, idx, tried=target)
                continue
            if k not in searches:
                if k not in problems:
                    problems[k] = search.prepare(size[idx], lower[idx], upper[idx])
                searches[k] = search.Search(problems[k], target, alignment)
            got = searches[k].run(give)
            spent[k] += got.nodes
            used += got.nodes
            if got.status == search.UNDECIDED:
                continue
            pending.remove(k)
            if got.status == search.FITS:
                total = int((got.offsets + size[idx]).max(initial=0))
                placed[k] = BufferPlacement(search.FITS, got.offsets, total, True,
                                            placed[k].floor, placed[k].floor, "search",
                                            got.nodes)
                continue
            if capacity is not None:  # proven not to fit: nor does the whole
                return BufferPlacement(search.NO_FIT, None, 0, True, target + 1, floor,
                                       "search", used)
            bound = max(bound, target + 1)
            lower_to(k, idx, above=target)
        installment *= 2
    if capacity is not None and left_over:
        return BufferPlacement(search.UNDECIDED, None, 0, False, floor, floor,
                               _methods(placed, groups), used)
    for k in left_over:  # left above the target: the heuristics as well
        better = run(groups[k][0], None, 0, True)
        if better.total < placed[k].total:
            placed[k] = better
    offsets = np.zeros(len(size), dtype=np.int64)
    for k, g in enumerate(groups):
        for idx in g:
            offsets[idx] = placed[k].offsets
    top = int((offsets + size).max(initial=0))
    if capacity is not None:
        return BufferPlacement(search.FITS, offsets, top, True, floor, floor,
                               _methods(placed, groups), used)
    return BufferPlacement(search.FITS, offsets, top, top <= bound, min(bound, top), floor,
                           _methods(placed, groups), used)


def _methods(placed: list, groups: list) -> str:
    """What placed the partitions: each method once, and how many partitions."""
    names = sorted({g.method for g in placed})
    return f"{', '.join(names)} ({sum(map(len, groups))} time partitions)"


def _place_part(size: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                capacity: int | None, alignment: int, nodes: int | None,
                heuristics: bool = True, above: int | None = None,
                tried: int | None = None) -> BufferPlacement:
    """:func:`place_buffers` of one time partition (columns checked): the sweep, and
    unless it reaches the max-live floor the best-fit heuristics too where
    ``heuristics`` (the smaller kept), then the search (without a capacity, above
    ``above``, a capacity proven not to fit, and ``tried``, one left undecided: see
    ``capacity.minimize``)."""
    keep = np.flatnonzero(size > 0)
    floor = peak_live(size[keep], lower[keep], upper[keep] - 1)
    if capacity is not None and capacity < floor:
        return BufferPlacement(search.NO_FIT, None, 0, True, floor, floor, "max-live floor", 0)
    recs = [Record(i, int(size[i]), int(lower[i]), int(upper[i]) - 1) for i in keep.tolist()]
    if alignment > 1:  # the heuristics expect aligned sizes: pad them
        recs = [r._replace(bytes=-(-r.bytes // alignment) * alignment) for r in recs]
    offsets = np.zeros(len(size), dtype=np.int64)
    found, swept = sweep_fit(recs)
    method, searchable = "sweep_best_fit", len(recs) <= SEARCH_ITEMS
    if swept > floor and heuristics:
        try:
            placed = place_records(recs, "best", alignment)
            if placed.total < swept:
                method, found = placed.strategy, placed.offsets
        except TooManyPairs:  # too many pairs to index: no best fit, no search
            searchable = False
    offsets[keep] = [found[i] for i in keep.tolist()]
    top = int((offsets + size).max(initial=0))
    if capacity is not None and top <= capacity:
        return BufferPlacement(search.FITS, offsets, top, True, floor, floor, method, 0)
    if not searchable or nodes == 0:
        if capacity is None:
            return BufferPlacement(search.FITS, offsets, top, top <= floor, floor, floor,
                                   method, 0)
        return BufferPlacement(search.UNDECIDED, None, 0, False, floor, floor, method, 0)
    problem = search.prepare(size, lower, upper)
    if capacity is None:
        best = search.minimize(problem, top, alignment, nodes, above, tried)
        if best.offsets is None:  # none below the heuristic's arena found
            return BufferPlacement(search.FITS, offsets, top, best.proven, best.lower_bound,
                                   floor, method, best.nodes)
        return BufferPlacement(search.FITS, best.offsets, best.total, best.proven,
                               best.lower_bound, floor, "search", best.nodes)
    got = search.fit(problem, capacity, alignment, nodes)
    if got.status == search.FITS:
        total = int((got.offsets + size).max(initial=0))
        return BufferPlacement(search.FITS, got.offsets, total, True, floor, floor, "search",
                               got.nodes)
    proven = got.status == search.NO_FIT
    return BufferPlacement(got.status, None, 0, proven,
                           capacity + 1 if proven else floor, floor, "search", got.nodes)


def check_placement(size: Sequence[int], lower: Sequence[int], upper: Sequence[int],
                    offsets: Sequence[int], capacity: int | None = None,
                    alignment: int = 1, limit: int = 5) -> list[str]:
    """What is wrong with a placement, at most ``limit`` lines: an offset below 0 or
    not a multiple of ``alignment``, a buffer past ``capacity``, two buffers live at
    one step that share a byte (buffers are given by index). Empty when it is valid."""
    size, lower, upper, offsets = (np.asarray(c, dtype=np.int64)
                                   for c in (size, lower, upper, offsets))
    wrong: list[str] = []
    for i in np.flatnonzero((offsets < 0) | (offsets % alignment != 0))[:limit].tolist():
        wrong.append(f"buffer {i}: offset {offsets[i]} is not a multiple of {alignment} "
                     "at or above 0")
    if capacity is not None:
        for i in np.flatnonzero(offsets + size > capacity)[:limit].tolist():
            wrong.append(f"buffer {i}: ends at {offsets[i] + size[i]}, past the capacity "
                         f"{capacity}")
    live = np.flatnonzero(size > 0)
    for a, b in overlapping_pairs(lower[live], upper[live] - 1):
        a, b = live[a], live[b]
        clash = (offsets[a] < offsets[b] + size[b]) & (offsets[b] < offsets[a] + size[a])
        for i, j in zip(a[clash][:limit].tolist(), b[clash][:limit].tolist()):
            i, j = min(i, j), max(i, j)
            wrong.append(f"buffers {i} and {j} are live at one step and share bytes "
                         f"[{max(offsets[i], offsets[j])}, "
                         f"{min(offsets[i] + size[i], offsets[j] + size[j])})")
        if len(wrong) >= limit:
            break
    return wrong[:limit]
