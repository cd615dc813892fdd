"""One interface for every placement: an :data:`Algorithm` takes the items, their
:class:`~graphmem.passes.placement.items.PartPairs` and the alignment, and returns a
:class:`Placed`. The heuristics (``search``), the exact solver (``optimal``) and the
complete search at a fixed capacity (``frontier``) are algorithms of it, and
composition makes new ones: :func:`with_fallback` keeps the smaller of two, as XLA
composes ``ChooseBestHeapAlgorithm`` and ``WithFallback``. The ``place`` pass asks
:func:`for_option` for the algorithm a ``--placement`` value names.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from graphmem.errors import GraphmemError
from graphmem.planning.groups import Record
from graphmem.passes.placement import capacity
from graphmem.passes.placement.items import PartPairs, Tied
from graphmem.passes.placement.placed import Placed
from graphmem.passes.placement.search import peak_live, place_records

# The complete search after the heuristics (``searched``): the default plan gives it
# SEARCH_NODES nodes (each a few microseconds), and only where the heuristics end above
# the max-live floor; ``--placement optimal`` gives it NODES_PER_SECOND times its time
# limit. Inputs of more than SEARCH_ITEMS items are left to the heuristics (the search
# recurses once per item placed).
SEARCH_NODES = 20_000
NODES_PER_SECOND = 100_000
SEARCH_ITEMS = capacity.MAX_ITEMS
# ``within``'s search budget at a capacity the heuristics miss (the default placement;
# ``--placement optimal`` gives it NODES_PER_SECOND times its time limit)
CAPACITY_NODES = 600_000


# (items, pairs, alignment) -> Placed
Algorithm = Callable[[Sequence, PartPairs, int], Placed]


def whole(items: Sequence) -> list[Record]:
    """The items as plain records, a Tied set as one record over its envelope (what
    the exact placements place)."""
    return [Record(r.id, r.bytes, r.first, r.last) if type(r) is Tied else r
            for r in items]


def heuristics(strategy: str = "best") -> Algorithm:
    """Best fit in one ordering, or ``"best"``: the best of all, then hill climbing."""

    def run(items, pairs, alignment: int) -> Placed:
        return place_records(items, strategy, alignment, pairs)
    return run


def with_fallback(first: Algorithm, fallback: Algorithm, label: str) -> Algorithm:
    """``first``, unless ``fallback`` places the items in a smaller arena (strictly):
    then the fallback's result, its name in ``tried`` as ``strategy + label``, and a
    proof of ``first`` withdrawn (it was about other items)."""
    def run(items, pairs, alignment: int) -> Placed:
        a = first(items, pairs, alignment)
        b = fallback(items, pairs, alignment)
        tried = {**a.tried, b.strategy + label: b.total}
        proof = dict(a.proof or {})
        if b.total < a.total:
            if proof:
                proof["proven_optimal"] = False
            return Placed(b.offsets, b.total, b.strategy, tried, proof or None)
        return a._replace(tried=tried)
    return run


def searched(first: Algorithm, nodes: int, prove: bool = False) -> Algorithm:
    """``first``, then, where its arena is above the max-live floor, the complete search
    of :mod:`.capacity` (``minimize``) below that arena within ``nodes`` nodes, over the
    items as whole records; its placement is kept where it is smaller (named
    ``"search"``). ``prove``: the result carries the search's proof (``proven_optimal``,
    ``lower_bound``)."""
    def run(items, pairs, alignment: int) -> Placed:
        a = first(items, pairs, alignment)
        if not items or len(items) > SEARCH_ITEMS:
            return a
        floor = peak_live(pairs.nbytes, pairs.first, pairs.last)
        if a.total <= floor:
            return a._replace(proof={"proven_optimal": True, "lower_bound": a.total,
                                     "gap": 0.0}) if prove else a
        recs = whole(items)
        n = len(recs)
        problem = capacity.prepare(np.fromiter((r.bytes for r in recs), np.int64, n),
                                   np.fromiter((r.first for r in recs), np.int64, n),
                                   np.fromiter((r.last + 1 for r in recs), np.int64, n))
        m = capacity.minimize(problem, a.total, alignment, nodes)
        sliced = any(type(r) is Tied for r in items)
        # a proof is of the whole records: with Concat slices a smaller arena may exist
        lower = m.lower_bound if not sliced else floor
        total = min(m.total, a.total)
        proof = {"proven_optimal": m.proven and not sliced, "lower_bound": lower,
                 "gap": round((total - lower) / total, 6)} if prove else None
        if m.offsets is None or m.total >= a.total:
            return a._replace(proof=proof) if prove else a
        offsets = dict(zip((r.id for r in recs), m.offsets.tolist()))
        return Placed(offsets, m.total, "search", {**a.tried, "search": m.total}, proof)
    return run


def exact(time_limit: float) -> Algorithm:
    """The exact placement (CP-SAT, ``optimal``) of the items as whole records,
    warm-started by the best heuristic."""
    def run(items, pairs, alignment: int) -> Placed:
        # imported here: a default plan does not load it (1-1.5 ms of a small plan)
        from graphmem.passes.placement.optimal import place_optimal
        e = place_optimal(whole(items), alignment, time_limit)
        return Placed(e.offsets, e.total, "optimal",
                      {e.heuristic: e.heuristic_total, "optimal": e.total},
                      {"proven_optimal": e.optimal, "lower_bound": e.lower_bound,
                       "gap": round(e.gap, 6)})
    return run


def proven_or(first: Algorithm, fallback: Algorithm) -> Algorithm:
    """``first``; where it does not prove its arena optimal, also ``fallback``, and the
    smaller arena (``first``'s on ties), proven where either proved it."""
    def run(items, pairs, alignment: int) -> Placed:
        a = first(items, pairs, alignment)
        if a.proof and a.proof.get("proven_optimal"):
            return a
        b = fallback(items, pairs, alignment)
        tried = {**a.tried, **b.tried}
        lower = max((a.proof or {}).get("lower_bound", 0), (b.proof or {}).get("lower_bound", 0))
        keep = b if b.total < a.total else a
        lower = min(lower, keep.total)
        proof = {**(keep.proof or {}), "proven_optimal": keep.total <= lower,
                 "lower_bound": lower,
                 "gap": round((keep.total - lower) / keep.total, 6) if keep.total else 0.0}
        return Placed(keep.offsets, keep.total, keep.strategy, tried, proof)
    return run


def within(first: Algorithm, cap: int, nodes: int) -> Algorithm:
    """``first``, and whether its arena fits ``cap`` bytes: where it is larger and the
    max-live floor does not rule ``cap`` out, the complete search of :mod:`.capacity`
    at ``cap`` within ``nodes`` nodes (over the items as whole records), whose
    placement is kept where it finds one (named ``"search"``). The result's ``proof``
    gains ``capacity``: ``{"bytes", "status"`` (capacity.FITS, NO_FIT or UNDECIDED),
    ``"proven"``, ``"by"`` (``"placement"``, ``"floor"`` or ``"search"``),
    ``"floor"`` (the max-live floor of the items' parts), ``"nodes"}``. A search that
    proves whole records cannot fit does not prove it for Concat slices: undecided."""
    def run(items, pairs, alignment: int) -> Placed:
        a = first(items, pairs, alignment)
        floor = peak_live(pairs.nbytes, pairs.first, pairs.last)
        verdict = {"bytes": cap, "status": capacity.FITS, "proven": True,
                   "by": "placement", "floor": floor, "nodes": 0}
        kept = a
        if a.total > cap:
            verdict.update(status=capacity.NO_FIT, by="floor")
            if floor <= cap:
                verdict.update(status=capacity.UNDECIDED, proven=False, by="search")
                if len(items) <= SEARCH_ITEMS:
                    kept, verdict = _fit_whole(a, items, cap, alignment, nodes, verdict)
        return kept._replace(proof={**(kept.proof or {}), "capacity": verdict})
    return run


def _fit_whole(a: Placed, items, cap: int, alignment: int, nodes: int, verdict: dict
               ) -> tuple[Placed, dict]:
    """``within``'s search at ``cap`` over the items as whole records."""
    recs = whole(items)
    n = len(recs)
    size = np.fromiter((r.bytes for r in recs), np.int64, n)
    problem = capacity.prepare(size, np.fromiter((r.first for r in recs), np.int64, n),
                               np.fromiter((r.last + 1 for r in recs), np.int64, n))
    got = capacity.fit(problem, cap, alignment, nodes)
    verdict = {**verdict, "nodes": got.nodes}
    if got.status == capacity.FITS:
        total = int((got.offsets + size).max(initial=0))
        offsets = dict(zip((r.id for r in recs), got.offsets.tolist()))
        proof = dict(a.proof or {})
        if proof:  # the proof was of the arena above the capacity
            proof["proven_optimal"] = False
        return (Placed(offsets, total, "search", {**a.tried, "search": total}, proof or None),
                {**verdict, "status": capacity.FITS, "proven": True})
    if got.status == capacity.NO_FIT and not any(type(r) is Tied for r in items):
        return a, {**verdict, "status": capacity.NO_FIT, "proven": True}
    return a, verdict


def for_option(placement: str, time_limit: float, items: Sequence,
               cap: int | None = None) -> Algorithm:
    """The algorithm ``--placement`` names: ``"best"`` (the heuristics, then the search
    within SEARCH_NODES), ``"optimal"`` (the heuristics and the search to proof within
    the time limit; where it proves nothing, also the exact CP-SAT placement, with the
    best heuristic over Concat slices as its fallback where there are slices), else one
    heuristic alone; with ``cap`` (bytes), that algorithm :func:`within` it (the search
    at the capacity within CAPACITY_NODES, or the optimal's node budget)."""
    if placement == "optimal" and not time_limit > 0:  # refused before any placement runs
        raise GraphmemError(f"--time-limit must be positive, not {time_limit}")
    if cap is not None and cap < 0:
        raise GraphmemError(f"the capacity cannot be negative ({cap:,} bytes)")
    nodes = int(NODES_PER_SECOND * time_limit) if placement == "optimal" else CAPACITY_NODES
    algorithm = _for_option(placement, time_limit, items)
    return algorithm if cap is None else within(algorithm, cap, nodes)


def _for_option(placement: str, time_limit: float, items: Sequence) -> Algorithm:
    if placement == "best":
        return searched(heuristics("best"), SEARCH_NODES)
    if placement != "optimal":
        return heuristics(placement)
    search = searched(heuristics("best"), int(NODES_PER_SECOND * time_limit), prove=True)
    solver = exact(time_limit)
    if any(type(r) is Tied for r in items):
        solver = with_fallback(solver, heuristics("best"), " (with slices)")
    return proven_or(search, solver)
