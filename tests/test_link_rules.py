"""The alias and slice rules of a plan (graphmem.plan.links), one hand-built case each.

The rules are decided on whole columns and worded for the links that break them; the
planner's own plans must break none. tests/test_property.py breaks links at random;
these are the rules that random graphs reach rarely.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

import graphmem
from conftest import F, graph_of, make_model
from graphmem.core.ir import Graph, Node, Tensor
from graphmem.plan.links import link_problems
from graphmem.plan.columns import columns
from graphmem.core.index import index_graph
from graphmem.core.ops import alias_edges


def _check(plan, graph):
    """The link problems of a plan in the graph's order."""
    topo = index_graph(graph)
    cols = columns(plan, topo.ids)
    return link_problems(plan, graph, topo, cols, np.arange(len(cols.names)), topo.ids,
                         lambda: alias_edges(graph, plan.order, topo))


def _with(plan, **changes):
    tensors = dict(plan.tensors)
    for name, fields in changes.items():
        tensors[name] = dataclasses.replace(tensors[name], **fields)
    return dataclasses.replace(plan, tensors=tensors)


def _broken(plan, graph, message, **changes):
    """The plan with ``changes`` breaks a link rule, worded ``message``."""
    found = _check(_with(plan, **changes), graph)
    assert found and message in found[0], found


def _in_place_over(plan, src):
    """The fields that make a tensor an in-place alias of ``src``."""
    return {"alias_of": src, "alias": "inplace", "offset": plan.tensors[src].offset}


def _concat_graph(parts, shape, axis):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Concat", parts, ["c"], axis=axis),
             helper.make_node("Sigmoid", ["c"], ["y"])]
    out = [d * len(parts) if i == axis else d for i, d in enumerate(shape)]
    return graph_of(make_model(nodes, [("x", F, shape)], [("y", F, out)]))


def test_the_planners_plans_break_no_rule():
    graph = _concat_graph(["a", "b"], [1, 4, 8, 8], 1)
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["a"].slice_of == "c" and plan.tensors["y"].alias == "inplace"
    assert _check(plan, graph) == []


def test_a_slice_of_a_non_contiguous_concat_is_broken():
    graph = _concat_graph(["a", "b"], [2, 3], 1)
    plan = graphmem.plan_graph(graph).plan
    c = plan.tensors["c"].offset
    _broken(plan, graph, "not contiguous", a={"slice_of": "c", "offset": c},
            b={"slice_of": "c", "offset": c + 24})


def test_a_slice_read_twice_by_its_concat_is_broken():
    graph = _concat_graph(["a", "a", "b"], [1, 4, 8, 8], 1)
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["a"].slice_of is None  # the concat pass leaves a repeated input
    _broken(plan, graph, "not a Concat reading it once",
            a={"slice_of": "c", "offset": plan.tensors["c"].offset})


def test_an_in_place_output_larger_than_its_source_is_broken():
    # Add broadcasts s (16 bytes) to y (1 KiB): y may not be written over s (the in-place
    # rule asks for the same shape; tests/test_inplace_rule.py has the other cases)
    nodes = [helper.make_node("Neg", ["x"], ["b"]), helper.make_node("Neg", ["s0"], ["s"]),
             helper.make_node("Add", ["s", "b"], ["y"])]
    graph = graph_of(make_model(nodes, [("x", F, [1, 4, 8, 8]), ("s0", F, [1, 4, 1, 1])],
                                [("y", F, [1, 4, 8, 8])]))
    plan = graphmem.plan_graph(graph, ["inplace"]).plan
    _broken(plan, graph, "over 's' of shape [1, 4, 1, 1], but its shape is [1, 4, 8, 8]",
            y=_in_place_over(plan, "s"))


def test_a_view_of_other_bytes_is_broken():
    # graphmem's IR built by hand (as a library user may): a Reshape whose output
    # claims other bytes than its input
    tensors = {"x": Tensor("x", "float32", (4, 4), 32), "a": Tensor("a", "float32", (4, 4), 32),
               "v": Tensor("v", "float32", (8, 4), 32), "y": Tensor("y", "float32", (8, 4), 32)}
    nodes = (Node(0, "n0", "Relu", "", ("x",), ("a",)),
             Node(1, "n1", "Reshape", "", ("a",), ("v",)),
             Node(2, "n2", "Sigmoid", "", ("v",), ("y",)))
    graph = Graph("g", nodes, tensors, ("x",), ("y",), frozenset(), ())
    plan = graphmem.plan_graph(graph, []).plan
    _broken(plan, graph, "a view must have the bytes",
            v={"alias_of": "a", "alias": "view", "offset": plan.tensors["a"].offset})


def _view_graph():
    S = [1, 4, 8, 8]
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["v"]),
             helper.make_node("Sigmoid", ["v"], ["y"])]
    return graph_of(make_model(nodes, [("x", F, S)], [("y", F, S)]))


@pytest.mark.parametrize("alias, message", [
    ("copy", "neither 'view' nor 'inplace'"), (None, "must be given together"),
    ("inplace", "Identity may not overwrite its input")])
def test_an_alias_of_the_wrong_kind_is_broken(alias, message):
    graph = _view_graph()
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["v"].alias == "view"
    _broken(plan, graph, message, v={"alias": alias})


def test_a_view_alias_on_an_element_wise_op_is_broken():
    graph = _view_graph()
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["y"].alias == "inplace"
    _broken(plan, graph, "Sigmoid is not a view op", y={"alias": "view"})


def test_a_slice_of_an_op_other_than_concat_is_broken():
    graph = _concat_graph(["a", "b"], [1, 4, 8, 8], 1)
    plan = graphmem.plan_graph(graph).plan
    y = plan.tensors["y"]  # Abs(c), in place over c: the same offset
    _broken(plan, graph, "slice_of 'y', which is not a Concat",
            c={"slice_of": "y", "offset": y.offset})


def test_a_slice_off_its_place_is_broken():
    graph = _concat_graph(["a", "b"], [1, 4, 8, 8], 1)
    plan = graphmem.plan_graph(graph).plan
    b = plan.tensors["b"]
    assert b.slice_of == "c"
    _broken(plan, graph, "slice of 'c' at offset", b={"offset": b.offset + 64})


def test_an_in_place_write_over_a_tensor_read_later_is_broken():
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    S = [1, 4, 8, 8]
    graph = graph_of(make_model(nodes, [("x", F, S)], [("y", F, S)]))
    plan = graphmem.plan_graph(graph, ["inplace"]).plan
    assert plan.tensors["b"].alias_of is None
    _broken(plan, graph, "is read later", b=_in_place_over(plan, "a"))


def test_an_in_place_write_over_a_graph_input_is_broken():
    S = [1, 4, 8, 8]
    graph = graph_of(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, S)],
                                [("y", F, S)]))
    plan = graphmem.plan_graph(graph, ["inplace"]).plan
    _broken(plan, graph, "graph input 'x'", y=_in_place_over(plan, "x"))


def test_a_graph_output_as_a_slice_is_broken():
    S = [1, 4, 8, 8]
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1)]
    graph = graph_of(make_model(nodes, [("x", F, S)], [("a", F, S), ("c", F, [1, 8, 8, 8])]))
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["a"].slice_of is None
    _broken(plan, graph, "graph input or output cannot be a Concat slice",
            a={"slice_of": "c", "offset": plan.tensors["c"].offset})


def test_the_in_place_rule_is_per_byte_range():
    """A write over a Concat branch's bytes is refused only by a member whose bytes
    overlap them and that is live across the write: another slice still to be read is
    no reason (issue 21), a view of the overwritten input still to be read is."""
    import numpy as np
    from graphmem.plan.columns import PlanColumns
    from graphmem.plan.links import _group_breaks
    # cat [0, 400) made at 8; its slices s1 [0, 200) live 4..8 and s2 [200, 400) live
    # 5..8; s2 written in place over c2 [200, 400), live 1..5, at position 5
    names = ["cat", "s1", "s2", "c2", "v2"]
    offset = np.array([0, 0, 200, 200, 200])
    size = np.array([400, 200, 200, 200, 200])
    first, last = np.array([8, 4, 5, 1, 2]), np.array([9, 8, 8, 5, 7])

    def broken(members: list[int]) -> bool:
        keep = np.array(members)
        cols = PlanColumns([names[i] for i in members], [None] * len(members), first[keep],
                           last[keep], offset[keep], size[keep],
                           np.zeros(len(members), dtype=np.int64), [])
        out, src = members.index(2), members.index(3)
        return bool(_group_breaks(cols, np.array([], dtype=np.int64), np.array([out]),
                                  np.array([5]), np.array([src]))[0])
    assert not broken([0, 1, 2, 3])  # s1 is live across 5, but not over s2's bytes
    assert broken([0, 1, 2, 3, 4])  # v2, a view of c2 read at 7, would see s2's values
