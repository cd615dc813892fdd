"""The inplace pass on hand-built graphs: views, overwrites, and every guard."""
from __future__ import annotations

from onnx import TensorProto, helper, numpy_helper
import numpy as np
import pytest

from conftest import F, make_model, plan_of

S = [1, 4, 8, 8]  # 256 float32 elements = 1024 bytes


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def aliases(result):
    return {n: (t.alias_of, t.alias) for n, t in result.plan.tensors.items() if t.alias_of}


def test_chain_of_elementwise_ops_runs_in_one_buffer():
    m = make_model([node("Relu", ["x"], ["a"]), node("Sigmoid", ["a"], ["b"]),
                    node("Tanh", ["b"], ["y"])], [("x", F, S)], [("y", F, S)])
    r = plan_of(m, ["inplace"])
    # a cannot overwrite x (a graph input); b over a, y over b
    assert aliases(r) == {"b": ("a", "inplace"), "y": ("b", "inplace")}
    assert r.plan.tensors["y"].offset == r.plan.tensors["a"].offset
    assert r.plan.arena_bytes == 2 * 1024


def test_inplace_forbidden_when_input_is_read_later():
    # a is read by Relu (b) and later by Add: b must not overwrite a
    m = make_model([node("Sigmoid", ["x"], ["a"]), node("Relu", ["a"], ["b"]),
                    node("Add", ["a", "b"], ["y"])], [("x", F, S)], [("y", F, S)])
    r = plan_of(m, ["inplace"])
    assert "b" not in aliases(r)
    # Add is the last reader of both a and b: it overwrites the first one that qualifies
    assert aliases(r) == {"y": ("a", "inplace")}


def test_graph_inputs_and_outputs_are_never_overwritten():
    # x is a graph input; o1 is a graph output read by a later node
    m = make_model([node("Relu", ["x"], ["o1"]), node("Exp", ["o1"], ["o2"])],
                   [("x", F, S)], [("o1", F, S), ("o2", F, S)])
    r = plan_of(m, ["inplace", "place"])
    assert aliases(r) == {}
    t = r.plan.tensors
    assert t["o1"].live == (0, 2) and t["o2"].live == (1, 2)
    assert t["x"].live == (-1, 0)
    # o1 stays readable to the end; x's bytes may be reused once it is dead (step 1)
    assert t["o1"].offset not in (t["x"].offset, t["o2"].offset)


def test_view_chain_shares_storage_with_its_base():
    m = make_model([node("Relu", ["x"], ["a"]),
                    node("Reshape", ["a", "shape"], ["v1"]),
                    node("Flatten", ["v1"], ["v2"], axis=1),
                    node("Identity", ["v2"], ["v3"]),
                    node("Sigmoid", ["v3"], ["y"])],
                   [("x", F, S)], [("y", F, [1, 256])],
                   [numpy_helper.from_array(np.array([1, 4, 64], np.int64), "shape")])
    r = plan_of(m, ["inplace"])
    assert aliases(r) == {"v1": ("a", "view"), "v2": ("v1", "view"), "v3": ("v2", "view"),
                          "y": ("v3", "inplace")}
    assert len({t.offset for n, t in r.plan.tensors.items() if n != "x"}) == 1


def test_view_whose_base_is_read_later_blocks_overwrite():
    # v = Reshape(a); Sigmoid(v) would like to overwrite v, but a (same storage) is read
    # later
    m = make_model([node("Relu", ["x"], ["a"]),
                    node("Reshape", ["a", "shape"], ["v"]),
                    node("Sigmoid", ["v"], ["e"]),
                    node("Reshape", ["e", "back"], ["e4"]),
                    node("Add", ["a", "e4"], ["y"])],
                   [("x", F, S)], [("y", F, S)],
                   [numpy_helper.from_array(np.array([1, 256], np.int64), "shape"),
                    numpy_helper.from_array(np.array(S, np.int64), "back")])
    r = plan_of(m, ["inplace", "place"])
    al = aliases(r)
    assert al["v"] == ("a", "view")
    assert "e" not in al  # the regression: a view's base still live
    t = r.plan.tensors
    assert t["e"].offset != t["a"].offset


def test_dtype_and_size_mismatch_block_inplace():
    # Cast changes the dtype: never in place; Add broadcasting a [1,4,1,1] input
    # cannot overwrite the small input
    m = make_model([node("Relu", ["x"], ["a"]), node("Cast", ["a"], ["h"], to=TensorProto.FLOAT16),
                    node("Relu", ["s"], ["s2"]), node("Add", ["s2", "h"], ["y"])],
                   [("x", F, S), ("s", TensorProto.FLOAT16, [1, 4, 1, 1])],
                   [("y", TensorProto.FLOAT16, S)])
    r = plan_of(m, ["inplace"])
    assert aliases(r) == {"y": ("h", "inplace")}


def test_dead_output_keeps_its_own_storage_at_its_step():
    # Dropout's mask is read by nobody: it lives at its producer's step only and is
    # placed, not freed before it is written (onnxruntime PR #21019)
    m = make_model([node("Relu", ["x"], ["a"]), node("Dropout", ["a"], ["d", "mask"]),
                    node("Exp", ["d"], ["y"])],
                   [("x", F, S)], [("y", F, S)], opset=12)
    r = plan_of(m)
    t = r.plan.tensors
    assert t["mask"].live == (1, 1)
    assert t["mask"].bytes == 256  # bool
    assert not (t["mask"].offset < t["d"].offset + 1024 and t["d"].offset < t["mask"].offset + 256)


def test_batchnorm_overwrites_its_input_in_inference():
    C = 4
    inits = [numpy_helper.from_array(np.ones(C, np.float32), n) for n in ("sc", "b", "m", "v")]
    m = make_model([node("Relu", ["x"], ["a"]), node("BatchNormalization", ["a", "sc", "b", "m", "v"], ["y"])],
                   [("x", F, S)], [("y", F, S)], inits)
    assert aliases(plan_of(m, ["inplace"])) == {"y": ("a", "inplace")}


def test_unknown_domain_op_never_aliases():
    from graphmem.core.ops import overwrite_pairs, view_pairs
    from graphmem.core.ir import Node
    n = Node(0, "", "Relu", "com.example", ("a",), ("b",))
    assert view_pairs(n) == [] and overwrite_pairs(n) == []


def _edge_graph():
    """graphmem IR with every kind of node the edge table treats apart: a custom
    domain, Dropout in inference and training, BatchNormalization with one output and
    with its training outputs, a blank optional input and output, variadic Sum, a
    binary op reading one tensor twice, and a weight input."""
    from graphmem.core.ir import Graph, Node, Tensor
    names = ["x", "a", "b", "c", "d", "m", "e", "f", "g", "h", "i", "j", "k", "rm", "rv"]
    tensors = {t: Tensor(t, "float32", (4,), 32) for t in names + ["w", "lo", "mode"]}
    nodes = (Node(0, "", "Relu", "", ("x",), ("a",)),
             Node(1, "", "Relu", "com.example", ("a",), ("b",)),
             Node(2, "", "Dropout", "", ("b",), ("c", "")),
             Node(3, "", "Dropout", "", ("c", "", "mode"), ("d", "m")),
             Node(4, "", "BatchNormalization", "", ("d", "w", "w", "w", "w"), ("e",)),
             Node(5, "", "BatchNormalization", "", ("e", "w", "w", "w", "w"), ("f", "rm", "rv")),
             Node(6, "", "Clip", "", ("f", "", "lo"), ("g",)),
             Node(7, "", "Sum", "", ("g", "a", "w"), ("h",)),
             Node(8, "", "Add", "", ("h", "h"), ("i",)),
             Node(9, "", "Reshape", "", ("i", "w"), ("j",)),
             Node(10, "", "Mul", "", ("w", "j"), ("k",)))
    return Graph("edges", nodes, tensors, ("x", "mode", "lo"), ("k",), frozenset({"w"}), ())


def test_alias_edges_are_the_pairs_of_view_pairs_and_overwrite_pairs():
    from graphmem.core.ops import alias_edges, overwrite_pairs, view_pairs
    from graphmem.core.index import index_graph
    graph = _edge_graph()
    ids = index_graph(graph).ids
    order = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    want = [(pos, overwrite, ids.get(n.inputs[i], -1), ids.get(n.outputs[o], -1))
            for pos, n in enumerate(graph.nodes)
            for overwrite, pairs in ((False, view_pairs(n)), (True, overwrite_pairs(n)))
            for i, o in pairs]
    e = alias_edges(graph, order, index_graph(graph))
    got = list(zip(e.pos.tolist(), e.overwrite.tolist(), e.src.tolist(), e.out.tolist()))
    assert got == want
    # the table's special cases are there: no pairs for the custom domain, the
    # training Dropout and the training BatchNormalization; one pair per Add input
    assert {p for p, *_ in got} == {0, 2, 4, 6, 7, 8, 9, 10}
    assert [s for p, _, s, _ in got if p == 8] == [ids["h"], ids["h"]]


def _with_and_without_ranges(graph):
    """The inplace pass on one graph in its file order, its storage groups kept with
    byte ranges and writes, and without (as the pass keeps them where no group exists
    before it and every write is by an output at its first position)."""
    from graphmem.passes import inplace
    from graphmem.planning.assignment import Assignment
    from graphmem.core.order import file_order
    from graphmem.planning.context import Context
    ctx = Context.for_order(graph, file_order(graph), 64)
    c = inplace._candidates(ctx)
    assert not (c.overwrite & (ctx.first[c.out] != c.pos)).any()  # where the pass goes lean
    return (inplace._join_pairs(ctx, Assignment(), ranges=False),
            inplace._join_pairs(ctx, Assignment(), ranges=True))


@pytest.mark.parametrize("seed", range(6))
def test_groups_without_ranges_join_as_with_them_on_random_dags(seed):
    from tools.bench import scale
    for graph in (scale.random_dag(300, 8, seed), scale.chain(200), scale.residual(40)):
        (a1, d1), (a2, d2) = _with_and_without_ranges(graph)
        assert a1.alias == a2.alias and list(a1.alias) == list(a2.alias) and d1 == d2
        assert d1["inplace"] + d1["views"] > 0


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "inception_v1"])
def test_groups_without_ranges_join_as_with_them_on_the_zoo(name):
    import graphmem
    from graphmem.frontend.zoo import zoo_path
    (a1, d1), (a2, d2) = _with_and_without_ranges(graphmem.load(zoo_path(name)))
    assert a1.alias == a2.alias and d1 == d2 and d1["inplace"] > 0
