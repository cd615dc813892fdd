"""The complete placement search at a fixed capacity (passes/placement/capacity.py over
graphmem/capsearch.c) against its specification (tests/reference_capacity.py), and
its answers checked on their own: every placement it returns is valid, every "does
not fit" agrees with an exhaustive search on tiny problems."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import reference_capacity as ref
from graphmem import capsearch
from graphmem.passes.placement import capacity


def random_problem(rng: random.Random, n: int, steps: int, unit: int = 1):
    lower = [rng.randrange(steps) for _ in range(n)]
    upper = [lo + rng.randrange(1, max(2, steps // 2)) for lo in lower]
    size = [unit * rng.randrange(1, 9) for _ in range(n)]
    return size, lower, upper


def clash(size, lower, upper, offsets, cap):
    """The first pair of buffers live at one time that share a byte, or one above cap."""
    for i in range(len(size)):
        if offsets[i] < 0 or offsets[i] + size[i] > cap:
            return (i,)
        for j in range(i):
            if lower[i] < upper[j] and lower[j] < upper[i] and size[i] and size[j] \
                    and offsets[i] < offsets[j] + size[j] and offsets[j] < offsets[i] + size[i]:
                return (j, i)
    return None


def spec_args(p: capacity.Problem, heuristic):
    n = len(p.size)
    adj = [p.adj[p.adj_start[b]:p.adj_start[b + 1]].tolist() for b in range(n)]
    sec = [p.sec[p.sec_start[s]:p.sec_start[s + 1]].tolist() for s in range(p.nsec)]
    return (p.size.tolist(), p.slo.tolist(), p.shi.tolist(), p.nsec, adj, sec, p.width.tolist(),
            heuristic)


@pytest.mark.parametrize("seed", range(40))
def test_compiled_search_equals_reference(seed):
    rng = random.Random(seed)
    align = rng.choice([1, 1, 2, 4])
    size, lower, upper = random_problem(rng, rng.randrange(1, 14), rng.randrange(2, 12), align)
    p = capacity.prepare(size, lower, upper)
    for heuristic in (*capacity.PREORDERS, "A", "T", ""):
        for cap in {p.floor, p.floor + align, p.floor + 3 * align, p.floor - 1}:
            for limit in (1, 5, 40, 10 ** 6):
                want = ref.solve(*spec_args(p, heuristic), cap, align, limit)
                out = np.zeros(len(p.size), dtype=np.int64)
                status, nodes = capsearch.solve(p.size, p.slo, p.shi, p.nsec, p.adj_start, p.adj,
                                                p.sec_start, p.sec, p.width, heuristic, cap,
                                                align, limit, out)
                assert (status, nodes) == want[:2], (cap, limit)
                if status == 1:
                    assert out.tolist() == want[2]


def exhaustive_fits(size, lower, upper, cap, align) -> bool:
    """Any placement at all in cap (every offset tried): the independent check of a proof."""
    n = len(size)
    choices = [range(0, cap - s + 1, align) for s in size]

    def place(i, offs):
        if i == n:
            return True
        for o in choices[i]:
            if all(not (lower[i] < upper[j] and lower[j] < upper[i]
                        and o < offs[j] + size[j] and offs[j] < o + size[i]) for j in range(i)):
                if place(i + 1, offs + [o]):
                    return True
        return False
    return place(0, [])


@pytest.mark.parametrize("seed", range(60))
def test_answers_are_right(seed):
    rng = random.Random(100 + seed)
    size, lower, upper = random_problem(rng, rng.randrange(1, 7), rng.randrange(2, 8))
    p = capacity.prepare(size, lower, upper)
    for cap in range(p.floor, p.floor + 6):
        got = capacity.fit(p, cap)
        assert got.status != capacity.UNDECIDED
        if got.status == capacity.FITS:
            assert clash(size, lower, upper, got.offsets.tolist(), cap) is None
        else:  # proven not to fit: no placement exists at all
            assert not exhaustive_fits(size, lower, upper, cap, 1), cap


def test_minimize_proves_the_optimum():
    rng = random.Random(7)
    for _ in range(30):
        size, lower, upper = random_problem(rng, rng.randrange(1, 7), rng.randrange(2, 8))
        p = capacity.prepare(size, lower, upper)
        got = capacity.minimize(p, sum(size) + 1)  # above every buffer stacked
        assert got.proven and got.lower_bound == got.total
        assert clash(size, lower, upper, got.offsets.tolist(), got.total) is None
        assert not exhaustive_fits(size, lower, upper, got.total - 1, 1)


def test_budget_leaves_it_undecided_and_floor_refuses_at_once():
    rng = random.Random(3)
    size, lower, upper = random_problem(rng, 40, 20)
    p = capacity.prepare(size, lower, upper)
    assert capacity.fit(p, p.floor - 1) == (capacity.NO_FIT, None, 0)
    got = capacity.fit(p, p.floor, nodes=3)
    assert got.status in (capacity.UNDECIDED, capacity.FITS) and got.nodes <= 3


def test_zero_sized_buffers_and_alignment():
    size, lower, upper = [0, 8, 3, 5], [0, 0, 1, 2], [4, 3, 4, 5]
    p = capacity.prepare(size, lower, upper)
    got = capacity.fit(p, 32, alignment=8)
    assert got.status == capacity.FITS
    assert got.offsets[0] == 0 and all(o % 8 == 0 for o in got.offsets)
    assert clash(size, lower, upper, got.offsets.tolist(), 32) is None
    with pytest.raises(ValueError):
        capacity.prepare([1], [3], [3])


def test_compiled_search_refuses_bad_columns():
    p = capacity.prepare([4, 4], [0, 1], [2, 3])
    out = np.zeros(2, dtype=np.int64)
    args = [p.size, p.slo, p.shi, p.nsec, p.adj_start, p.adj, p.sec_start, p.sec, p.width,
            "WAT", 8, 1, 100, out]
    assert capsearch.solve(*args)[0] == 1
    bad = list(args)
    bad[9] = "WAX"  # not a heuristic
    with pytest.raises(ValueError):
        capsearch.solve(*bad)
    bad = list(args)
    bad[5] = np.array([5, 0], dtype=np.int64)  # an overlap out of range
    with pytest.raises(ValueError):
        capsearch.solve(*bad)
    bad = list(args)
    bad[0] = np.array([2 ** 62, 2 ** 62], dtype=np.int64)
    with pytest.raises(ValueError):
        capsearch.solve(*bad)


def test_plan_algorithms_search_below_the_heuristics():
    """HARD (tests/test_place_exact.py): the heuristics end at 21, the optimum is 20
    (the max-live floor). The default algorithm's search finds 20; the optimal
    one proves it without CP-SAT."""
    from graphmem.passes.placement.algorithm import for_option
    from graphmem.passes.placement.items import part_pairs
    from graphmem.passes.placement.search import max_live
    from test_place_exact import HARD, no_clash

    pairs = part_pairs(HARD)
    assert max_live(HARD) == 20
    best = for_option("best", 10.0, HARD)(HARD, pairs, 1)
    assert (best.total, best.strategy, best.tried["search"]) == (20, "search", 20)
    assert no_clash(HARD, best.offsets)
    optimal = for_option("optimal", 10.0, HARD)(HARD, pairs, 1)
    assert optimal.total == 20 and optimal.proof == {"proven_optimal": True, "lower_bound": 20,
                                                      "gap": 0.0}
    assert "optimal" not in optimal.tried  # CP-SAT did not run
    one = for_option("greedy_by_size", 10.0, HARD)(HARD, pairs, 1)
    assert one.total >= 21 and "search" not in one.tried


@pytest.mark.parametrize("cols, message", [
    (([1, 2], [0, 0], [1]), "2, 2 and 1 values"),
    (([1.5], [0], [1]), "buffer 0: size 1.5 is not an integer"),
    ((["a"], [0], [1]), "is not an integer"),
    (([True], [0], [1]), "is not an integer"),
    (([float("nan")], [0], [1]), "is not an integer"),
    (([1, 1], [0, 3], [1, 3]), "buffer 1: upper 3 is not after lower 3"),
    (([1, -1], [0, 0], [1, 1]), "buffer 1: size -1 is negative"),
    (([[1]], [0], [1]), "one value per buffer"),
    (([2 ** 53], [0], [1]), "past 2**52"),
])
def test_bad_records_are_refused_by_name(cols, message):
    with pytest.raises(ValueError, match=message.replace("*", r"\*").replace("(", r"\(")):
        capacity.prepare(*cols)


def test_fit_has_a_budget_and_refuses_bad_limits():
    p = capacity.prepare([1.0, 2], [0, 0], [1, 2])  # integral floats are integers
    assert capacity.fit(p, 3).status == capacity.FITS
    for args, message in (((-1,), "capacity must be at least 0"),
                          ((3, 0), "alignment must be at least 1"),
                          ((3, 1, -5), "nodes must be at least 0"),
                          ((3.5,), "capacity must be an integer")):
        with pytest.raises(ValueError, match=message):
            capacity.fit(p, *args)
    # the default budget is finite: a search that cannot end in it stops, undecided
    import inspect
    assert inspect.signature(capacity.fit).parameters["nodes"].default == \
        capacity.DEFAULT_NODES
    n = capacity.MAX_ITEMS + 1  # too many to recurse over: not searched at all
    big = capacity.prepare([1] * n, list(range(n)), [k + 2 for k in range(n)])
    assert capacity.fit(big, 2) == capacity.Fit(capacity.UNDECIDED, None, 0)
    assert capacity.fit(big, 1).status == capacity.NO_FIT  # the floor still decides


@pytest.mark.parametrize("seed", range(12))
def test_search_in_installments_finds_what_fit_finds(seed):
    """capacity.Search run in doubling installments (as place_buffers' rounds run it)
    ends with fit's answer and offsets, no run repeated but one cut short."""
    rng = random.Random(100 + seed)
    size, lower, upper = random_problem(rng, 30, 14)
    p = capacity.prepare(size, lower, upper)
    for cap in (p.floor, p.floor + 2, p.floor + 8):
        whole = capacity.fit(p, cap, nodes=None)
        s, got, spent, give = capacity.Search(p, cap), None, 0, 1
        while got is None or got.status == capacity.UNDECIDED:
            got = s.run(give)
            assert got.nodes <= give
            spent += got.nodes
            give *= 2
        assert got.status == whole.status
        assert (got.offsets is None) == (whole.offsets is None)
        if got.offsets is not None:
            assert got.offsets.tolist() == whole.offsets.tolist()
        assert spent <= 2 * whole.nodes + 64
        assert s.run(5) == got._replace(nodes=0)  # decided: it stays


def test_minimize_from_above_a_capacity_ruled_out():
    """``above`` (proven not to fit) starts the search above it and counts in the
    bound; ``tried`` (undecided) starts it there too, unproven."""
    size, lower, upper = [3, 3], [0, 0], [2, 2]
    p = capacity.prepare(size, lower, upper)
    got = capacity.minimize(p, 12, alignment=4, above=6)
    assert (got.total, got.proven, got.lower_bound) == (7, True, 7)
    got = capacity.minimize(p, 12, alignment=4, tried=6)
    assert got.total == 7 and got.lower_bound == 6 and not got.proven
