"""Exact placement (MIP) on literals whose optimum is known, and through the CLI."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.passes.placement import search as place
from graphmem.passes.placement.optimal import place_optimal
from graphmem.planning.groups import Record

# Found by search: every heuristic, hill climbing included, needs 12; 11 is optimal
# (0 and 4 stacked at 0..5 / 5..7 while 1 sits above 0; 2, 3 and 5 fill 4..11).
HARD = [Record(0, 5, 0, 3), Record(1, 4, 0, 1), Record(2, 4, 4, 5), Record(3, 3, 4, 4),
        Record(4, 2, 1, 2), Record(5, 4, 3, 4)]


def first_fit_optimum(recs) -> int:
    """The true optimum: the lowest-fit placement in the best of all orders."""
    best = None
    for order in itertools.permutations(recs):
        placed, total = [], 0
        for r in order:
            busy = sorted((o, o + b) for f, l, o, b in placed if f <= r.last and r.first <= l)
            top, off = 0, None
            for lo, hi in busy:
                if lo - top >= r.bytes:
                    off = top
                    break
                top = max(top, hi)
            off = top if off is None else off
            placed.append((r.first, r.last, off, r.bytes))
            total = max(total, off + r.bytes)
        best = total if best is None else min(best, total)
    return best


def no_clash(recs, offsets) -> bool:
    return all(not (a.first <= b.last and b.first <= a.last)
               or offsets[a.id] + a.bytes <= offsets[b.id]
               or offsets[b.id] + b.bytes <= offsets[a.id]
               for a, b in itertools.combinations(recs, 2))


def test_optimal_beats_every_heuristic_on_a_known_case():
    assert first_fit_optimum(HARD) == 11
    for name in ["best", *place.STRATEGIES]:
        assert place.place_records(HARD, name, 1)[1] == 12, name
    exact = place_optimal(HARD, 1, time_limit=10)
    assert (exact.total, exact.optimal, exact.lower_bound, exact.gap) == (11, True, 11, 0.0)
    assert exact.heuristic_total == 12 and no_clash(HARD, exact.offsets)


def test_optimal_respects_alignment():
    recs = [Record(r.id, r.bytes * 64, r.first, r.last) for r in HARD]
    exact = place_optimal(recs, 64, time_limit=10)
    assert exact.total == 11 * 64 and exact.optimal
    assert all(o % 64 == 0 for o in exact.offsets.values()) and no_clash(recs, exact.offsets)


@pytest.mark.parametrize("seed", range(12))
def test_optimal_equals_brute_force(seed):
    rng = random.Random(seed)
    recs = []
    for i in range(rng.randrange(2, 7)):
        first = rng.randrange(6)
        recs.append(Record(i, rng.randrange(1, 6), first, first + rng.randrange(4)))
    exact = place_optimal(recs, 1, time_limit=10)
    assert exact.optimal and exact.total == first_fit_optimum(recs)
    assert no_clash(recs, exact.offsets)


def test_heuristic_at_the_floor_needs_no_solver():
    recs = [Record(0, 64, 0, 1), Record(1, 64, 1, 2), Record(2, 64, 2, 3)]
    exact = place_optimal(recs, 64)
    assert exact.optimal and exact.total == 128 and exact.status.startswith("heuristic")


def test_time_limit_gives_best_found_and_gap():
    rng = random.Random(3)
    recs = []
    for i in range(60):
        first = rng.randrange(40)
        recs.append(Record(i, 64 * rng.randrange(1, 40), first, first + rng.randrange(8)))
    exact = place_optimal(recs, 64, time_limit=0.5)
    assert exact.total <= exact.heuristic_total
    assert place.max_live(recs) <= exact.lower_bound <= exact.total
    assert 0.0 <= exact.gap < 1.0 and exact.optimal == (exact.gap == 0.0)
    assert no_clash(recs, exact.offsets)
    with pytest.raises(GraphmemError):
        place_optimal(recs, 64, time_limit=0)


def test_cli_placement_optimal(tmp_cwd):
    assert main(["plan", "squeezenet", "--placement", "optimal", "--time-limit", "5",
                 "-o", "opt.json", "-q"]) == 0
    assert main(["plan", "squeezenet", "-o", "best.json", "-q"]) == 0
    opt = json.loads((tmp_cwd / "opt.json").read_text())
    best = json.loads((tmp_cwd / "best.json").read_text())
    assert opt["arena_bytes"] <= best["arena_bytes"]
