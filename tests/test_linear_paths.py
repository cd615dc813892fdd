"""Long chains stay linear (issue 10) and keep every rule: in-place groups, roots,
validation messages, the storage pool's early stop."""
from __future__ import annotations

import dataclasses

import pytest
from onnx import helper

import graphmem
from graphmem.planning.assignment import Assignment
from graphmem.errors import PlanInvalid

from conftest import F, graph_of, make_model


def relu_chain(n: int):
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"])
             for i in range(n)]
    return make_model(nodes, [("x", F, [1, 64])], [(f"t{n - 1}", F, [1, 64])])


def test_long_inplace_chain_is_one_group():
    result = graphmem.plan_graph(graph_of(relu_chain(3000)))  # validated inside
    plan = result.plan
    # the input is never overwritten; every Relu after the first writes over its input
    assert plan.arena_bytes == 2 * 256
    assert len({t.offset for name, t in plan.tensors.items() if name != "x"}) == 1


def test_root_of_follows_chains_and_slices():
    alias = {f"t{i}": (f"t{i - 1}", "inplace") for i in range(1, 50)}
    a = Assignment(alias=alias, slice_of={"t0": "cat", "u": "t10"},
                   slice_offset={"t0": 128, "u": 0})
    assert a.root_of("t49") == ("cat", 128)  # the chain lives in t0's slice of cat
    assert a.root_of("u") == ("cat", 128)  # a slice of t10, which is in that slice
    assert a.root_of("cat") == ("cat", 0) and a.root_of("other") == ("other", 0)
    assert set(a.linked()) == {*alias, "t0", "u"}


def test_validator_still_names_an_overwrite_of_a_storage_read_later():
    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["c"])]
    graph = graph_of(make_model(nodes, [("x", F, [1, 16])], [("c", F, [1, 16])]))
    plan = graphmem.plan_graph(graph, ["place"]).plan
    graphmem.validate(plan, graph)
    a = plan.tensors["a"]
    bad = dict(plan.tensors)
    bad["b"] = dataclasses.replace(plan.tensors["b"], offset=a.offset, alias_of="a",
                                   alias="inplace")
    with pytest.raises(PlanInvalid) as err:
        graphmem.validate(dataclasses.replace(plan, tensors=bad, stats={}), graph)
    assert "'a', which shares that storage, is read later" in str(err.value)


def test_share_stops_at_the_floor_with_the_exhaustive_answer():
    import random

    from graphmem.passes import share
    from graphmem.passes.placement.search import max_live
    from graphmem.planning.groups import Record
    rng = random.Random(4)
    for _ in range(60):
        recs = []
        for i in range(rng.randrange(1, 40)):
            first = rng.randrange(30)
            recs.append(Record(i, 64 * rng.randrange(1, 9), first, first + rng.randrange(6)))
        exhaustive = min((sum(share.share_blocks(recs, m)[1]), k)
                         for k, m in enumerate(share.MATCH_RANGES))
        floor = max_live(recs)
        assert floor <= exhaustive[0]
        # the pass's loop, as run() does it: stop at the first range reaching the floor
        best = None
        for k, m in enumerate(share.MATCH_RANGES):
            total = sum(share.share_blocks(recs, m)[1])
            best = (total, k) if best is None or total < best[0] else best
            if best[0] <= floor:
                break
        assert best == exhaustive


def test_a_fan_out_of_graph_outputs_places_without_its_pairs(monkeypatch):
    """Every output of a fan-out is live to the end: the pairs of buffers live together
    grow as n^2. Past PAIR_LIMIT the place pass stacks the storage blocks (no pairs, linear
    memory), and validation walks the pairs that share bytes (none) instead of time."""
    from graphmem.passes.placement import items
    nodes = [helper.make_node("Relu", ["x"], [f"y{i}"]) for i in range(300)]
    graph = graph_of(make_model(nodes, [("x", F, [1, 16])],
                                [(f"y{i}", F, [1, 16]) for i in range(300)]))
    monkeypatch.setattr(items, "PAIR_LIMIT", 1000)  # 300 outputs: 44,850 pairs
    result = graphmem.plan_graph(graph, ["inplace", "share", "place"])  # validated inside
    assert result.assignment.strategy == "storage_blocks"
    assert "overlap in time in more than 1,000 pairs" in result.reports[-1].detail["reason"]
    # all live at once: one block each, stacked, is the smallest arena
    assert result.plan.arena_bytes == result.plan.stats["unaliased_peak_bytes"] == 301 * 64
