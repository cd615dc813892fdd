"""The graph index (core.index), and the order check and liveness computed on it.

``liveness`` and ``check_order`` run as numpy over ``index_graph(graph)`` arrays; the
references below are the plain dict walks they replaced (their specification),
compared on hand-built graphs and on random DAGs under any order: valid, invalid,
partial, with repeats.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from graphmem.core.ir import Graph, Node, Tensor
from graphmem.core.liveness import Interval, liveness
from graphmem.frontend.reader import from_model
from graphmem.core.order import check_order
from graphmem.core.index import index_graph
from test_property import dag_models


def reference_liveness(graph: Graph, order: list[int]) -> dict[str, Interval]:
    """Walk the order once: a write starts a life, a later read or being an output ends it."""
    by_index = {n.index: n for n in graph.nodes}
    arena = graph.arena_tensors()
    first = {t: -1 for t in graph.inputs if t in arena}
    last = dict(first)
    for pos, idx in enumerate(order):
        node = by_index[idx]
        for t in node.reads:
            if t in last:
                last[t] = pos
        for t in node.outputs:
            if t and t not in first and t in arena:
                first[t] = last[t] = pos
    for t in graph.outputs:
        if t in last:
            last[t] = len(order)
    return {t: Interval(first[t], last[t]) for t in arena if t in first}


def reference_first_dependency_problem(graph: Graph, order: list[int]) -> str | None:
    by_index = {n.index: n for n in graph.nodes}
    made_at = {t: pos for pos, idx in enumerate(order) for t in by_index[idx].outputs if t}
    for pos, idx in enumerate(order):
        for t in by_index[idx].reads:
            p = made_at.get(t)
            if p is not None and p >= pos:
                return (f"order: node {idx} ({by_index[idx].op_type}) runs at position "
                        f"{pos} before node {order[p]}, the producer of its input {t!r}")
    return None


def tiny() -> Graph:
    """x -> Relu -> a -> Add(a, w) -> b (output); an If-like node reads a implicitly;
    a TopK-like node has a blank output."""
    f = lambda name, *shape: Tensor(name, "float32", shape, 32)  # noqa: E731
    tensors = {t.name: t for t in (f("x", 4), f("w", 4), f("a", 4), f("b", 4), f("c", 4),
                                   f("v", 4))}
    nodes = (Node(0, "r", "Relu", "", ("x",), ("a",)),
             Node(2, "add", "Add", "", ("a", "w"), ("b",)),
             Node(5, "sub", "If", "", ("", "b"), ("c", ""), implicit_inputs=("a",)),
             Node(7, "id", "Identity", "", ("c",), ("v",)))
    return Graph("tiny", nodes, tensors, ("x",), ("v",), frozenset({"w"}), ())


def test_ids_rows_and_edges_of_a_tiny_graph():
    g = tiny()
    topo = index_graph(g)
    assert topo.names == ["x", "a", "b", "c", "v"] and topo.arena == 5
    assert topo.node_index.tolist() == [0, 2, 5, 7]
    assert topo.rows([7, 0]).tolist() == [3, 0]
    assert topo.read_start.tolist() == [0, 1, 3, 5, 6]
    assert topo.reads.tolist() == [0, 1, -1, 2, 1, 3]  # the weight w is -1; "" is dropped
    assert topo.write_start.tolist() == [0, 1, 2, 3, 4]  # the blank output is dropped
    assert topo.writes.tolist() == [1, 2, 3, 4]
    assert topo.inputs.tolist() == [0] and topo.outputs.tolist() == [4]


def test_liveness_of_a_tiny_graph_counts_implicit_reads():
    g = tiny()
    assert liveness(g, [0, 2, 5, 7]) == {"x": (-1, 0), "a": (0, 2), "b": (1, 2), "c": (2, 3),
                                         "v": (3, 4)}


def test_an_output_named_like_a_weight_gets_its_own_id():
    f = lambda name: Tensor(name, "float32", (2,), 32)  # noqa: E731
    nodes = (Node(0, "", "Relu", "", ("x",), ("w",)), Node(1, "", "Relu", "", ("w",), ("y",)))
    g = Graph("odd", nodes, {t: f(t) for t in "xwy"}, ("x",), ("y",), frozenset({"w"}), ())
    topo = index_graph(g)
    assert topo.names == ["x", "y", "w"] and topo.arena == 2  # w is not an arena tensor
    assert liveness(g, [0, 1]) == reference_liveness(g, [0, 1])
    assert check_order(g, [1, 0]) == [reference_first_dependency_problem(g, [1, 0])]


def test_the_first_bad_read_is_named():
    g = tiny()
    assert check_order(g, [5, 7, 2, 0]) == [
        "order: node 5 (If) runs at position 0 before node 2, the producer of its input 'b'"]


def orders(graph: Graph, draw) -> list[int]:
    """Any order: a permutation, a prefix, or one with a node run twice."""
    order = draw(st.permutations([n.index for n in graph.nodes]))
    how = draw(st.sampled_from(["perm", "file", "prefix", "repeat"]))
    if how == "file":
        return [n.index for n in graph.nodes]
    if how == "prefix":
        return order[:draw(st.integers(0, len(order)))]
    if how == "repeat":
        return order + [order[draw(st.integers(0, len(order) - 1))]]
    return order


@settings(deadline=None)
@given(model=dag_models(), data=st.data())
def test_liveness_and_order_check_equal_the_dict_walks(model, data):
    graph = from_model(model)
    order = orders(graph, data.draw)
    got = liveness(graph, order)
    want = reference_liveness(graph, order)
    assert got == want and list(got) == list(want)  # same lives, in the arena's order
    problems = check_order(graph, order)
    if sorted(order) == sorted(n.index for n in graph.nodes):  # a permutation
        want_problem = reference_first_dependency_problem(graph, order)
        assert problems == ([want_problem] if want_problem else [])
    else:
        assert problems  # a prefix or a repeat is never a valid order


def test_a_model_with_no_nodes():
    model = helper.make_model(helper.make_graph(
        [], "empty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    g = from_model(model)
    assert check_order(g, []) == []
    assert liveness(g, []) == {"x": (-1, 0)}
