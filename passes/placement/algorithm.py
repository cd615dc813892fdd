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

from graphmem.planning.groups import Record
from graphmem.passes.placement.items import PartPairs, Tied
from graphmem.passes.placement.placed import Placed
from graphmem.passes.placement.search import place_records


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


def for_option(placement: str, time_limit: float, items: Sequence) -> Algorithm:
    """The algorithm ``--placement`` names: ``"optimal"`` (the exact placement; with
    Concat slices, the best heuristic with them as its fallback), else
    :func:`heuristics`."""
    if placement != "optimal":
        return heuristics(placement)
    if any(type(r) is Tied for r in items):
        return with_fallback(exact(time_limit), heuristics("best"), " (with slices)")
    return exact(time_limit)
