"""The indexed best fit equals the O(n^2) reference on random and zoo records."""
from __future__ import annotations

import importlib
import random

import numpy as np
import pytest

import graphmem
from graphmem.planning.assignment import Context, Record, groups, records
from graphmem.core.liveness import liveness
from graphmem.frontend.zoo import ZOO, zoo_path

import reference_place as ref

# graphmem.passes.place is the pass function; the module is under the same name
place = importlib.import_module("graphmem.passes.place")


def random_records(rng: random.Random, n: int, steps: int, max_len: int) -> list:
    recs = []
    for i in range(n):
        first = rng.randrange(-1, steps)
        last = min(steps, first + rng.randrange(max_len))
        size = rng.choice([64, 128, 192, 256, 1024, 4096]) * rng.randrange(1, 4)
        recs.append(Record(i * 3 + 7, size, first, last))  # ids need not be dense
    return recs


@pytest.fixture(params=["compiled", "numpy", "python"])
def fit_loop(request, monkeypatch):
    """Run a test on each of best fit's loops: the compiled one (graphmem/_fit.c), then
    the Python one with every neighbour list on the numpy path, then as it comes."""
    if request.param == "compiled":
        if place._fit is None:
            pytest.skip("graphmem._fit was not built (no C compiler at install)")
        return
    monkeypatch.setattr(place, "NATIVE", False)
    if request.param == "numpy":
        monkeypatch.setattr(place, "VECTOR_MIN", 1)


@pytest.mark.parametrize("seed", range(40))
def test_best_fit_equals_reference_for_every_order(seed, fit_loop):
    rng = random.Random(seed)
    recs = random_records(rng, rng.randrange(1, 120), rng.randrange(1, 60), rng.randrange(1, 30))
    alignment = rng.choice([1, 64, 96])
    for name, order_fn in place.STRATEGIES.items():
        ordered = order_fn(recs)
        assert place.best_fit(ordered, alignment) == ref.best_fit(ordered, alignment), name
    shuffled = recs[:]
    rng.shuffle(shuffled)
    assert place.best_fit(shuffled, alignment) == ref.best_fit(shuffled, alignment)


@pytest.mark.parametrize("seed", range(15))
def test_place_records_equals_reference(seed):
    rng = random.Random(1000 + seed)
    recs = random_records(rng, rng.randrange(1, 60), rng.randrange(1, 40), rng.randrange(1, 20))
    for strategy in ["best", *place.STRATEGIES]:
        got = place.place_records(recs, strategy, 64)
        want = ref.place_records(recs, strategy, 64)
        assert got[:3] == want[:3], strategy
        # "best" stops trying strategies once one reaches the floor: a subset
        assert got[3].items() <= want[3].items()


def test_breadth_and_floor_equal_reference():
    rng = random.Random(5)
    for _ in range(20):
        recs = random_records(rng, rng.randrange(1, 80), rng.randrange(1, 50), 40)
        assert place._breadth(recs) == ref._breadth(recs)
        assert place.max_live(recs) == ref.max_live(recs)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_placement_equals_reference(name):
    graph = graphmem.load(zoo_path(name))
    result = graphmem.plan_graph(graph, ["inplace"])
    ctx = Context(graph, tuple(result.plan.order),
                  liveness(graph, result.plan.order), 64)
    recs = records(ctx, groups(ctx, result.assignment.with_(offsets=None, arena_bytes=None)))
    got = place.place_records(recs, "best", 64)
    want = ref.place_records(recs, "best", 64)
    assert got[:3] == want[:3]


@pytest.mark.parametrize("seed", range(60))
def test_lowest_free_base_equals_the_fixpoint(seed):
    rng = random.Random(seed)
    alignment = rng.choice([1, 16, 64])
    rel, parts = 0, []
    for k in range(rng.randrange(1, 5)):
        n = rng.choice([16, 48, 64, 100])
        parts.append((rel, Record(k, n, rng.randrange(0, 8), 9)))
        rel += n
    t = place.Tied(99, rel, 0, 9, tuple(parts))
    placed = []
    for _ in range(rng.randrange(0, 30)):
        first = rng.randrange(0, 10)
        off = rng.randrange(0, 40) * 16
        placed.append((first, first + rng.randrange(0, 4), off, off + rng.choice([16, 64, 80])))
    # each (part, placed record live with it) forbids the bases [off - rel - bytes + 1, end - rel)
    bad = [(off - rel - p.bytes + 1, end - rel) for rel, p in t.parts
           for first, last, off, end in placed if first <= p.last and p.first <= last]
    want = ref.fit_tied(placed, t, alignment)
    assert place._lowest_free(bad, alignment) == want
    if bad:
        lo, hi = (np.array(x, dtype=np.int64) for x in zip(*bad))
        assert place._lowest_free_np(lo, hi, alignment) == want


def random_items(rng: random.Random, n: int, steps: int) -> list:
    """Records and Tied sets (Concat outputs cut into parts), with distinct ids."""
    items = []
    for i in range(n):
        first = rng.randrange(-1, steps)
        last = min(steps, first + rng.randrange(12))
        if rng.random() < 0.3:
            rel, parts = 0, []
            for k in range(rng.randrange(2, 5)):
                n_bytes = rng.choice([64, 128, 192, 1024])
                parts.append((rel, Record(k, n_bytes, rng.randrange(first, last + 1), last)))
                rel += n_bytes
            items.append(place.Tied(i, rel, min(p.first for _, p in parts), last, tuple(parts)))
        else:
            items.append(Record(i, rng.choice([64, 128, 256, 4096]) * rng.randrange(1, 4),
                                first, last))
    return items


@pytest.mark.parametrize("seed", range(40))
def test_best_fit_with_tied_sets_equals_reference(seed, fit_loop):
    rng = random.Random(500 + seed)
    items = random_items(rng, rng.randrange(1, 90), rng.randrange(1, 40))
    alignment = rng.choice([1, 64])
    for name, order_fn in place.STRATEGIES.items():
        ordered = order_fn(items)
        assert place.best_fit(ordered, alignment) == ref.best_fit(ordered, alignment), name
    rng.shuffle(items)
    assert place.best_fit(items, alignment) == ref.best_fit(items, alignment)


@pytest.mark.parametrize("chunk", [1, 5, 1 << 22])
def test_overlapping_pairs_are_every_sharing_pair_once_in_any_chunking(chunk):
    from graphmem.core.liveness import overlapping_pairs
    rng = random.Random(chunk)
    first = [rng.randrange(-1, 30) for _ in range(80)]
    last = [f + rng.randrange(0, 8) for f in first]
    got = []
    for a, b in overlapping_pairs(np.array(first), np.array(last), chunk):
        got += [tuple(sorted(p)) for p in zip(a.tolist(), b.tolist())]
    want = [(i, j) for i in range(80) for j in range(i + 1, 80)
            if first[i] <= last[j] and first[j] <= last[i]]
    assert sorted(got) == want


def test_sizes_near_the_64_bit_limit_take_the_python_loop_and_agree(monkeypatch):
    """The compiled loop keeps a factor of two below the 64-bit range; a run that could
    come closer is placed by the Python loop, with the same rules. (Graphs past
    ``NATIVE_LIMIT`` are refused before planning: tests/test_bad_input.py.)"""
    calls = []
    if place._fit is not None:
        monkeypatch.setattr(place, "_fit", _Spy(place._fit, calls))
    recs = [Record(0, 2 ** 61, 0, 3), Record(1, 2 ** 61, 1, 2), Record(2, 64, 2, 5),
            Record(3, 2 ** 60, 4, 6)]
    for name, order_fn in place.STRATEGIES.items():
        ordered = order_fn(recs)
        assert place.best_fit(ordered, 64) == ref.best_fit(ordered, 64), name
    assert calls == []


def test_the_compiled_loop_is_used_where_it_was_built(monkeypatch):
    if place._fit is None:
        pytest.skip("graphmem._fit was not built (no C compiler at install)")
    calls = []
    monkeypatch.setattr(place, "_fit", _Spy(place._fit, calls))
    recs = random_records(random.Random(3), 50, 20, 8)
    place.best_fit(place.STRATEGIES["greedy_by_size"](recs), 64)
    assert len(calls) == 1


def test_the_compiled_loop_refuses_inconsistent_arrays():
    if place._fit is None:
        pytest.skip("graphmem._fit was not built (no C compiler at install)")
    recs = random_records(random.Random(4), 10, 10, 4)
    pairs = place.part_pairs(recs)
    base = np.zeros(len(recs), dtype=np.int64)
    seq = np.arange(len(recs), dtype=np.int64)
    seq[1] = seq[0]  # not a permutation
    with pytest.raises(ValueError, match="permutation"):
        place._fit.run(seq, *pairs.native, pairs.owner, pairs.a, pairs.b, 64, base)
    bad_a = pairs.a.copy()
    bad_a[:1] = len(pairs.rel)  # a pair naming a part that does not exist
    with pytest.raises(ValueError, match="pair"):
        place._fit.run(np.arange(len(recs), dtype=np.int64), *pairs.native, pairs.owner,
                       bad_a, pairs.b, 64, base)
    with pytest.raises(ValueError, match="length"):
        place._fit.run(np.arange(len(recs) - 1, dtype=np.int64), *pairs.native, pairs.owner,
                       pairs.a, pairs.b, 64, base)


class _Spy:
    """Counts calls of the compiled loop's run()."""

    def __init__(self, module, calls):
        self._module, self._calls = module, calls

    def run(self, *args):
        self._calls.append(args)
        return self._module.run(*args)


def _after_aliasing(graph, alignment):
    from graphmem.planning.assignment import Assignment
    from graphmem.passes import PASSES
    from graphmem.core.order import file_order
    order = file_order(graph)
    ctx = Context(graph, tuple(order), liveness(graph, order), alignment)
    a = PASSES["concat"](ctx, Assignment())[0]
    return ctx, PASSES["inplace"](ctx, a)[0]


@pytest.mark.parametrize("name", ["densenet121", "inception_v1", "squeezenet", "resnet50"])
@pytest.mark.parametrize("alignment", [1, 48, 64])
def test_items_made_from_columns_equal_the_records_and_their_pairs(name, alignment):
    """The place pass builds its items and their part pairs from the group table in
    numpy; both must be what records() and part_pairs() make from the groups."""
    from graphmem.planning.assignment import group_records, group_table
    ctx, a = _after_aliasing(graphmem.load(zoo_path(name)), alignment)
    gs = groups(ctx, a)
    recs, cols = group_records(ctx, a)
    assert recs == records(ctx, gs)
    assert [tuple(map(int, row)) for row in zip(*cols)] == [tuple(r) for r in recs]
    names, tab = list(ctx.intervals), group_table(ctx, a)
    assert [tuple(names[p] for p in tab.member[lo:hi])
            for lo, hi in zip(tab.start, tab.stop)] == [g.members for g in gs]
    assert [[int(tab.group[p]) for p in tab.member[lo:hi]] for lo, hi in zip(tab.start, tab.stop)
            ] == [[k] * len(g.members) for k, g in enumerate(gs)]
    items, pairs = place._items(ctx, a)
    assert [i.id for i in items] == [r.id for r in recs]
    want = place.part_pairs(items)
    for field in want._fields:
        got, exp = getattr(pairs, field), getattr(want, field)
        if field == "native":
            assert all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(got, exp))
        elif isinstance(exp, np.ndarray):
            assert np.array_equal(got, exp) and got.dtype == exp.dtype, field
        else:
            assert got == exp, field
    if name in ("densenet121", "inception_v1"):
        assert any(type(i) is place.Tied for i in items)  # the slices were exercised
