"""The pass contract, enforced (graphmem/planning/contract.py) and the pass loop
(graphmem/planning/loop.py), on tiny hand-built graphs and passes: a pipeline whose
passes read what nothing before them provides is refused before anything runs, naming
the pass that would; a satisfiable one runs; a pass may change only what it provides;
the smaller of two plans is kept where an order or trial pass chose."""
from __future__ import annotations

from itertools import combinations

import pytest

import graphmem
import graphmem.pipeline
from graphmem.core.ir import Graph, Node, Tensor
from graphmem.errors import GraphmemError
from graphmem.passes.registry import PASSES
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, check_pipeline
from graphmem.planning.loop import Planned, keep_smaller, run_passes


def _diamond() -> Graph:
    """x -> a -> (b, c) -> y, every tensor 128 bytes; b and c may run in either order."""
    t = {n: Tensor(n, "float32", (4, 8), 32) for n in "xabcy"}
    nodes = (Node(0, "n0", "Neg", "", ("x",), ("a",)), Node(1, "n1", "Neg", "", ("a",), ("b",)),
             Node(2, "n2", "Neg", "", ("a",), ("c",)), Node(3, "n3", "Add", "", ("b", "c"), ("y",)))
    return Graph("diamond", nodes, t, ("x",), ("y",), frozenset(), ())


def _recording(name, stage, reads=(), provides=(), uses=(), trial=False, change=None,
               ran=None):
    """A pass that records that it ran (in ``ran``) and applies ``change(ctx, a)``."""
    def run(ctx, a, options):
        if ran is not None:
            ran.append(name)
        return (change(ctx, a) if change else a), {"ran": True}
    return Pass(name, stage, reads=reads, provides=provides, uses=uses, run=run,
                summary=name, trial=trial)


def _with_registry(monkeypatch, *passes):
    monkeypatch.setattr(graphmem.pipeline, "PASSES", {p.name: p for p in passes})


def test_an_unsatisfiable_pipeline_is_refused_before_anything_runs(monkeypatch):
    ran, seen = [], []
    maker = _recording("maker", "alias", provides=("storage",), ran=ran)
    needer = _recording("needer", "layout", reads=("storage",), ran=ran)
    _with_registry(monkeypatch, maker, needer)
    with pytest.raises(GraphmemError) as err:
        graphmem.plan_graph(_diamond(), ["needer"], progress=seen.append)
    assert str(err.value) == ("pass 'needer' reads the storage, which no earlier pass "
                              "provides: run 'maker' before it")
    assert ran == [] and seen == []  # no stage started, no pass ran


def test_a_satisfiable_pipeline_runs(monkeypatch):
    ran = []
    maker = _recording("maker", "alias", provides=("storage",), ran=ran)
    needer = _recording("needer", "layout", reads=("storage",), ran=ran)
    _with_registry(monkeypatch, maker, needer)
    result = graphmem.plan_graph(_diamond(), ["needer", "maker"])  # stage order is kept
    assert ran == ["maker", "needer"]
    assert [r.name for r in result.reports] == ["maker", "needer"]


def test_a_product_nothing_provides_is_said_so():
    lone = _recording("lone", "layout", reads=("offsets",))
    with pytest.raises(GraphmemError, match=r"reads the offsets, .* \(and no pass does\)"):
        check_pipeline([lone], [lone])


def test_a_pass_may_not_provide_what_an_earlier_pass_used():
    user = _recording("user", "alias", uses=("slices",), provides=("aliases",))
    late = _recording("late", "alias", provides=("slices",))
    with pytest.raises(GraphmemError, match="pass 'late' provides the slices, which pass "
                                            "'user' before it has already read"):
        check_pipeline([user, late])
    check_pipeline([late, user])


def test_stages_run_in_order():
    layout = _recording("layout", "layout")
    order = _recording("order", "order", provides=("order",))
    with pytest.raises(GraphmemError, match=r"'order' \(order stage\) runs after pass "
                                            r"'layout' \(layout stage\)"):
        check_pipeline([layout, order])


def test_a_pass_may_change_only_what_it_provides():
    ctx = Context.for_order(_diamond(), [0, 1, 2, 3])
    sneaky = _recording("sneaky", "alias", provides=("aliases",),
                        change=lambda ctx, a: a.with_(slice_of={"b": "y"},
                                                      slice_offset={"b": 0}))
    with pytest.raises(GraphmemError, match="pass 'sneaky' changed the slices, which it "
                                            "does not provide"):
        sneaky(ctx, Assignment())


def test_every_subset_of_the_registry_fits_its_contracts():
    """Every --passes choice the CLI accepts (a subset, run in registry order) passes the
    check, and the registry's contracts say what the passes do: each reads or uses only
    what the context or an earlier pass provides."""
    passes = list(PASSES.values())
    for k in range(len(passes) + 1):
        for chosen in combinations(passes, k):
            check_pipeline(chosen, passes)
    assert PASSES["inplace"].uses == ("slices",) and PASSES["place"].uses == ("storage",)


def _planned(arena: int, name: str = "") -> Planned:
    return Planned(None, Assignment(arena_bytes=arena, strategy=name), ())


def test_keep_smaller_picks_the_smaller_arena_and_a_tie_keeps_the_incumbent():
    given, found = _planned(4096, "given"), _planned(2048, "found")
    assert keep_smaller(given, found) == (found, True)
    assert keep_smaller(found, given) == (found, False)
    tie = _planned(4096, "tie")
    assert keep_smaller(given, tie) == (given, False)


def _arena_by(rule):
    """A layout pass whose arena is ``rule(ctx, a)``, one offset of 0 for everything."""
    return _recording("fake_place", "layout", provides=("offsets",),
                      change=lambda ctx, a: a.with_(offsets={}, arena_bytes=rule(ctx, a)))


def test_a_trial_pass_that_costs_is_dropped():
    ctx = Context.for_order(_diamond(), [0, 1, 2, 3])
    trial = _recording("slicer", "alias", provides=("slices",), trial=True,
                       change=lambda ctx, a: a.with_(slice_of={"b": "y"},
                                                     slice_offset={"b": 0}))
    place = _arena_by(lambda ctx, a: 1024 if a.slice_of else 512)
    planned = run_passes(ctx, [trial, place])
    assert planned.arena_bytes == 512 and not planned.assignment.slice_of
    report = planned.reports[0]
    assert report.name == "slicer" and report.bytes_saved == 0
    assert report.detail == {"ran": True, "arena_with_slicer": 1024,
                             "arena_without_slicer": 512, "kept": False}
    cheap = _arena_by(lambda ctx, a: 256 if a.slice_of else 512)
    planned = run_passes(ctx, [trial, cheap])
    assert planned.arena_bytes == 256 and planned.reports[0].detail["kept"] is True


def test_an_order_pass_is_kept_only_when_its_order_plans_smaller():
    ctx = Context.for_order(_diamond(), [0, 1, 2, 3])
    swap = _recording("swap", "order", provides=("order",),
                      change=lambda ctx, a: a.with_(order=(0, 2, 1, 3)))
    for given, found, moved in ((512, 256, True), (512, 512, False), (256, 512, False)):
        place = _arena_by(lambda ctx, a: found if ctx.order == (0, 2, 1, 3) else given)
        planned = run_passes(ctx, [swap, place])
        assert planned.ctx.order == ((0, 2, 1, 3) if moved else (0, 1, 2, 3))
        report = planned.reports[0]
        assert report.detail["reordered"] is moved and report.detail["arena_file_order"] == given
        assert report.bytes_saved == given - planned.arena_bytes
        assert [r.name for r in planned.reports] == ["swap", "fake_place"]
