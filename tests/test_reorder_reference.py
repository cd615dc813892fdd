"""The compiled order searches (graphmem/orderloops.c: exact, beam, local) equal their
specification, the Python of tests/reference_reorder.py: the same orders, peaks and
search states, on random schedules (with writes in place, budgets that run out, resumed
and tightened searches) and on the corpus's real graphs; and the compiled module refuses
what it cannot search."""
from __future__ import annotations

import random
import re

import pytest

import graphmem
import reference_reorder as ref
from graphmem import orderloops
from graphmem.passes import reorder
from graphmem.passes.reorder import build_schedule, peak_of
from test_corpus import CASES, CORPUS
from test_reorder import _overwrites, _random_graph

SIZES = ((16, 64, 256, 1024, 4096), (1024, 256, 256, 64), (64,))
BUDGET = 3_000  # sets: the Python search's seconds; wider graphs give up, as compared


def _schedules(count: int, least: int = 1, most: int = 50):
    for seed in range(count):
        rng = random.Random(seed)
        graph = _random_graph(rng, rng.randint(least, most), sizes=rng.choice(SIZES))
        yield rng, build_schedule(graph, None, _overwrites(graph, rng) if seed % 2 else ())


def _same_search(m, upper, budgets, tighten=None, seen=None) -> None:
    """Both searches run with the same budgets in turn (tightened between runs), and
    agree after each run: its result, the sets made, the layer, exhausted. ``seen``
    counts how each run ended: "found", "exhausted", "paced" (stopped by its pace
    under its budget) or "budget"."""
    spec, compiled = ref.ExactSearch(m, upper), reorder.ExactSearch(m, upper)
    for budget, paced in budgets:
        got = compiled.run(budget, paced)
        assert got == spec.run(budget, paced)
        assert ((compiled.states, compiled.k, compiled.exhausted)
                == (spec.states, spec.k, spec.exhausted))
        if seen is not None:
            how = ("found" if got else "exhausted" if compiled.exhausted else
                   "paced" if paced and compiled.states <= budget else "budget")
            seen[how] = seen.get(how, 0) + 1
        if tighten is not None:
            spec.tighten(tighten)
            compiled.tighten(tighten)
            assert compiled.exhausted == spec.exhausted


def test_the_exact_search_is_its_specification():
    seen: dict[str, int] = {}
    for rng, m in _schedules(120):
        file_peak = peak_of(m, list(range(len(m.nodes))))
        for upper in (None, file_peak, file_peak - 1):
            _same_search(m, upper, [(BUDGET, False)], seen=seen)
            _same_search(m, upper, [(40, True), (200, False), (BUDGET, True)],
                         tighten=file_peak - rng.randint(0, 64), seen=seen)
    # every way a run ends was compared
    assert set(seen) == {"found", "exhausted", "paced", "budget"}, seen


def test_the_beam_search_is_its_specification():
    for rng, m in _schedules(120):
        for width in (None, 1, 3):
            for enough in (0, 10 ** 9):
                assert reorder.beam_order(m, width, enough) == ref.beam_order(m, width, enough)


def test_the_local_search_is_its_specification():
    for rng, m in _schedules(120):
        n = len(m.nodes)
        starts = [list(range(n)), reorder.beam_order(m)[0]]
        found = ref.ExactSearch(m).run(BUDGET)
        if found:
            starts.append(found[0])
        for order in starts:
            for evals in (None, 1, 7, 60):
                assert reorder.local_search(m, order, evals) == ref.local_search(m, order, evals)


def test_all_three_over_many_words():
    """Schedules of 60-200 nodes: executed sets of up to four 64-bit words (the exact
    search on small budgets, which these graphs outgrow)."""
    for rng, m in _schedules(24, 60, 200):
        file_peak = peak_of(m, list(range(len(m.nodes))))
        _same_search(m, file_peak, [(30, True), (300, False)], tighten=file_peak - 64)
        assert reorder.beam_order(m) == ref.beam_order(m)
        for order in (list(range(len(m.nodes))), reorder.beam_order(m, 2)[0]):
            assert reorder.local_search(m, order, 400) == ref.local_search(m, order, 400)


@pytest.mark.parametrize("name", ["bert-ts", "gpt2-past-dynamo"])
def test_the_searches_on_real_graphs(name, monkeypatch):
    """The corpus's BERT encoder and GPT-2 decode step, their schedules as the pass
    builds them (the CPU provider's writes in place included)."""
    seen = []
    real = reorder.build_schedule
    monkeypatch.setattr(reorder, "build_schedule", lambda *a: seen.append(real(*a)) or seen[-1])
    graphmem.plan_graph(graphmem.load(CORPUS / f"{name}.onnx", dims=CASES[name]))
    m, = seen
    assert any(m.writes)
    file_peak = peak_of(m, list(range(len(m.nodes))))
    _same_search(m, file_peak, [(400, True), (10_000, False)])
    assert reorder.beam_order(m) == ref.beam_order(m)
    for order in (list(range(len(m.nodes))), reorder.beam_order(m)[0]):
        assert reorder.local_search(m, order) == ref.local_search(m, order)


def test_local_search_costs_each_move_as_the_whole_order_would():
    """The specification's local search costs a moved node over the span it moved
    through (the rest of the order, and so of its live bytes, is unchanged): every such
    cost must equal ``_cost`` of the whole candidate order, before and after profiles
    are moved on."""
    rng = random.Random(7)
    for _ in range(40):
        m = build_schedule(_random_graph(rng, rng.randint(2, 30)))
        n = len(m.nodes)
        order = list(range(n))
        prof = ref._Profile(m, order)
        assert prof.cost == reorder._cost(m, order)
        for _ in range(30):
            pos = rng.randrange(n)
            rest = order[:pos] + order[pos + 1:]
            where = {u: i for i, u in enumerate(rest)}
            v = order[pos]
            lo = max((where[p] + 1 for p in reorder._bits(m.preds[v])), default=0)
            hi = min((where[s] for s in m.succs[v]), default=len(rest))
            target = rng.randint(lo, hi)  # anywhere its dependencies allow
            cand = rest[:target] + [v] + rest[target:]
            a, b = min(pos, target), max(pos, target)
            assert prof.span_cost(cand[a:b + 1], a) == reorder._cost(m, cand)
            if rng.random() < 0.5:
                order = cand
                prof.move_to(order, a, b)
                assert prof.cost == reorder._cost(m, order)


def test_a_searched_schedule_is_copied_and_pickled_without_its_compiled_form():
    import copy
    import pickle
    _, m = next(_schedules(1, 12, 12))
    found = reorder.exact_order(m, max_states=10 ** 6)
    assert found and "_orderloops" in m.__dict__  # compiled, and kept on the schedule
    for twin in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert twin == m and "_orderloops" not in twin.__dict__
        assert reorder.exact_order(twin, max_states=10 ** 6) == found


def _compile(preds=(0, 1), succs=((1,), ()), new=(4, 4), frees=(((2, 4),), ()),
             writes=((), ()), base=0):
    return orderloops.schedule(preds, succs, new, frees, writes, base)


@pytest.mark.parametrize("change, words", [
    (dict(preds=(0, 4)), "past the last"),                 # node 2 of two
    (dict(preds=(0, -1)), "negative"),
    (dict(preds=(0, 1.0)), "not an int"),
    (dict(succs=((2,), ())), "not a node id"),
    (dict(succs=((1,),)), "wrong length"),
    (dict(new=(4, -4)), "byte count"),
    (dict(new=(2 ** 62, 2 ** 62)), "byte count"),           # their sum is past 2^63
    (dict(new=(2 ** 62, 0)), "times its steps"),             # 2^62 bytes x 3 steps
    (dict(frees=(((2, 4, 0),), ())), "wrong length"),
    (dict(writes=((4,), ())), "() or (bytes, readers)"),
    (dict(succs=((), ())), "turned round"),                 # node 1 waits for node 0
    (dict(succs=((1,), (0,))), "turned round"),              # node 0 waits for none
    (dict(preds=(0, 0), succs=((1,), ())), "turned round"),
    (dict(preds=(0, 1), succs=((1, 1), ())), "turned round"),  # listed twice
])
def test_a_schedule_it_cannot_search_is_refused(change, words):
    _compile()  # the unchanged schedule is taken
    with pytest.raises(ValueError, match=re.escape(words)):
        _compile(**change)


def test_masks_of_whole_words():
    """A mask with the top bit of a word set is a node, not a sign; one past the last
    node is refused (64 nodes: one word)."""
    n = 64
    preds = tuple([0] * 63 + [1 << 62])  # node 63 waits for node 62
    succs = tuple([()] * 62 + [(63,), ()])
    frees = tuple([((1 << 63, 8),)] + [()] * 63)  # node 0's unit is read by node 63
    m = orderloops.schedule(preds, succs, (8,) * n, frees, ((),) * n, 0)
    order, peak = orderloops.local_search(m, list(range(n)), 1_000)
    assert sorted(order) == list(range(n)) and order.index(62) < order.index(63)
    with pytest.raises(ValueError, match="past the last"):
        orderloops.schedule(preds, succs, (8,) * n, ((((1 << 64), 8),),) + frees[1:],
                            ((),) * n, 0)


def test_an_order_it_cannot_move_is_refused():
    m = _compile()
    assert orderloops.local_search(m, [0, 1], 10) == ([0, 1], 8)
    for order, words in (([1, 0], "before one it depends on"), ([0, 0], "twice"),
                         ([0], "every node"), ([0, 2], "node id")):
        with pytest.raises(ValueError, match=words):
            orderloops.local_search(m, order, 10)
    with pytest.raises(ValueError, match="PyCapsule"):
        orderloops.exact_run(m, 10, -1)  # a schedule is not a search
