"""The planner's own validation (``validate_built``) can fail: it recomputes the order
check, the live ranges and the statistics from the graph and the plan, so a wrong live
range, a wrong statistic or an invalid order planted in a built plan is refused."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import graphmem
import graphmem.planning.context
import graphmem.planning.writer
from graphmem.core.index import index_graph
from graphmem.core.liveness import Intervals, liveness
from graphmem.errors import PlanInvalid
from graphmem.frontend.zoo import zoo_path
from graphmem.plan.columns import columns
from graphmem.plan.live import live_ranges
from graphmem.plan.validate import validate_built
from tools.bench import scale
from test_pass_contract import _diamond


def test_a_wrong_live_range_from_the_planner_is_refused(monkeypatch):
    """The planner's liveness made wrong (as a bug would): its plan says ``b`` lives one
    step longer than the graph says, and the pipeline's validation refuses it; it used
    to compare the plan with that same liveness."""
    def wrong(graph, order, index=None):
        right = liveness(graph, order, index)
        out = Intervals((t, iv._replace(last=iv.last + 1) if t == "b" else iv)
                        for t, iv in right.items())
        first, last = right.columns
        last = last.copy()
        last[list(right).index("b")] += 1
        out.columns = (first, last)
        return out
    monkeypatch.setattr(graphmem.planning.context, "liveness", wrong)
    with pytest.raises(PlanInvalid, match=r"tensor 'b': live \[1, 4\], expected \[1, 3\]"):
        graphmem.plan_graph(_diamond())


def test_a_wrong_statistic_from_the_writer_is_refused(monkeypatch):
    real = graphmem.planning.writer.built_stats

    def wrong(plan, index):
        stats, cols = real(plan, index)
        return {**stats, "unaliased_peak_bytes": stats["unaliased_peak_bytes"] - 1}, cols
    monkeypatch.setattr(graphmem.planning.writer, "built_stats", wrong)
    with pytest.raises(PlanInvalid, match="stats.unaliased_peak_bytes is 383, the plan's own "
                                          "tensors give 384"):
        graphmem.plan_graph(_diamond())


def test_an_invalid_order_in_a_built_plan_is_refused():
    graph = _diamond()
    result = graphmem.plan_graph(graph, check=False)
    index = index_graph(graph)
    validate_built(result.plan, graph, index)  # as built: valid
    swapped = dataclasses.replace(result.plan, order=[1, 0, 2, 3])
    with pytest.raises(PlanInvalid, match=r"order: node 1 \(Neg\) runs at position 0 "
                                          r"before node 0"):
        validate_built(swapped, graph, index, columns(swapped, index.ids))


def test_a_planted_live_range_in_a_built_plan_is_refused():
    graph = _diamond()
    plan = graphmem.plan_graph(graph, check=False).plan
    tensors = dict(plan.tensors)
    tensors["a"] = dataclasses.replace(tensors["a"], live=(0, 1))  # b and c both read a
    planted = dataclasses.replace(plan, tensors=tensors)
    index = index_graph(graph)
    with pytest.raises(PlanInvalid, match=r"tensor 'a': live \[0, 1\], expected \[0, 2\]"):
        validate_built(planted, graph, index, columns(planted, index.ids))


def test_known_edges_are_used_only_for_the_plans_order_and_table():
    graph = _diamond()
    plan = graphmem.plan_graph(graph, ["inplace"], check=False).plan
    assert any(t.alias for t in plan.tensors.values())  # the edges are asked for
    index = index_graph(graph)

    def never():
        raise AssertionError("edges of another order were used")
    validate_built(plan, graph, index, edges=((0, 2, 1, 3), "cpu", never))
    validate_built(plan, graph, index, edges=(tuple(plan.order), "cuda", never))
    asked = []
    from graphmem.core.ops import alias_edges

    def known():
        asked.append(True)
        return alias_edges(graph, plan.order, index)
    validate_built(plan, graph, index, edges=(tuple(plan.order), "cpu", known))
    assert asked == [True]


@pytest.mark.parametrize("make", [
    lambda: graphmem.load(zoo_path("squeezenet")),
    lambda: scale.BUILD["random"](3000),
    lambda: scale.BUILD["transformer"](300),
    _diamond,
])
def test_the_validators_live_ranges_are_the_planners(make):
    """The validator reads the live ranges of the format apart from the planner; on
    the same graphs and orders they agree."""
    graph = make()
    index = index_graph(graph)
    order = [n.index for n in graph.nodes]
    first, last, present = live_ranges(index, order)
    planner = liveness(graph, order, index)
    assert present.all() and len(planner) == index.arena
    np.testing.assert_array_equal(first, planner.columns[0])
    np.testing.assert_array_equal(last, planner.columns[1])


@pytest.mark.parametrize("order, says", [
    ([0, 1, 2], "node 3 (Add) is missing"), ([0, 1, 2, 3, 3], "node 3 appears twice"),
    ([0, 1, 2, 7], "7 is not a node that runs"), ([0, 1, 2, -1], "-1 is not a node"),
    ([0, 1, 2, 2 ** 70], "is not a node that runs"), ([0, 1, 2, 3.5], "3.5 is not a node"),
    ([0, 2, 3, 1], "node 3 (Add) runs at position 2 before node 1")])
def test_an_order_that_is_not_a_permutation_is_refused_as_check_order_says(order, says):
    graph = _diamond()
    plan = graphmem.plan_graph(graph, check=False).plan
    bad = dataclasses.replace(plan, order=order)
    with pytest.raises(PlanInvalid, match=re.escape(says)):
        validate_built(bad, graph, index_graph(graph))
