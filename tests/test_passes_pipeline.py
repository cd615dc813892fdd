"""Pipeline-level behaviour: diamonds, residual blocks, switches, odd tensors, orders."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.plan.validate import problems
from conftest import F, graph_of, make_model, plan_of

S = [1, 4, 8, 8]  # 1024 bytes in float32


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def diamond():
    return make_model([node("Relu", ["x"], ["a"]), node("Sigmoid", ["a"], ["b"]),
                       node("Tanh", ["a"], ["c"]), node("Add", ["b", "c"], ["y"])],
                      [("x", F, S)], [("y", F, S)])


def residual_block():
    w = numpy_helper.from_array(np.ones([4, 4, 3, 3], np.float32) * 0.01, "w")
    return make_model([node("Relu", ["x"], ["a"]),
                       node("Conv", ["a", "w"], ["c1"], pads=[1, 1, 1, 1]),
                       node("Relu", ["c1"], ["r1"]),
                       node("Conv", ["r1", "w"], ["c2"], pads=[1, 1, 1, 1]),
                       node("Add", ["c2", "a"], ["s"]),
                       node("Relu", ["s"], ["y"])],
                      [("x", F, S)], [("y", F, S)], [w])


def test_diamond_liveness_and_arena():
    r = plan_of(diamond())
    t = r.plan.tensors
    assert t["a"].live == (0, 2)  # read by Sigmoid (1) and Tanh (2)
    assert t["b"].alias_of is None  # a is still read by Tanh
    assert t["c"].alias == "inplace" and t["c"].alias_of == "a"
    assert t["y"].live == (3, 4)
    # x (dies at 0), then a+b, then b+c: two buffers of 1024 suffice
    assert r.plan.arena_bytes == 2048
    assert r.plan.stats["unaliased_peak_bytes"] == 3 * 1024


def test_residual_block_keeps_the_skip_alive():
    r = plan_of(residual_block())
    t = r.plan.tensors
    assert t["a"].live == (0, 4)
    assert t["r1"].alias_of == "c1"
    assert t["s"].alias == "inplace"  # Add overwrites c2 (or a, both die there)
    assert t["y"].alias_of == "s"
    assert r.plan.arena_bytes == 3 * 1024


@pytest.mark.parametrize("off", ["inplace", "share", "place"])
def test_each_pass_switch_changes_the_result(off):
    """Fails if a switch is a silent no-op (apache/mxnet#6272)."""
    graph = graphmem.load(graphmem.zoo.zoo_path("squeezenet")) if hasattr(graphmem, "zoo") else None
    from graphmem.frontend.zoo import zoo_path
    graph = graphmem.load(zoo_path("squeezenet"))
    full = graphmem.plan_graph(graph)
    without = graphmem.plan_graph(graph, [p for p in graphmem.DEFAULT_PASSES if p != off])
    assert [p["name"] for p in without.plan.passes] == [p for p in graphmem.DEFAULT_PASSES if p != off]
    if off == "share":
        # place decides the offsets either way; share's own result is its block total
        alone = graphmem.plan_graph(graph, ["inplace", "share"])
        assert alone.plan.arena_bytes > full.plan.arena_bytes
        none = graphmem.plan_graph(graph, ["inplace"])
        assert alone.plan.arena_bytes < none.plan.arena_bytes
    else:
        assert without.plan.arena_bytes > full.plan.arena_bytes


def test_no_passes_is_naive():
    r = plan_of(diamond(), [])
    assert r.plan.arena_bytes == r.plan.stats["naive_bytes"] == 5 * 1024
    assert all(t.alias_of is None for t in r.plan.tensors.values())


def test_zero_sized_and_scalar_tensors():
    m = make_model([node("Relu", ["x"], ["a"]), node("ReduceSum", ["a"], ["s"], keepdims=0),
                    node("Relu", ["z"], ["z2"]), node("Neg", ["s"], ["y"])],
                   [("x", F, S), ("z", F, [0, 3])], [("y", F, []), ("z2", F, [0, 3])])
    r = plan_of(m)
    t = r.plan.tensors
    assert t["s"].bytes == 4 and t["y"].bytes == 4  # a scalar is one element
    assert t["z"].bytes == 0 and t["z2"].bytes == 0
    assert t["z"].offset == 0 and t["z2"].offset == 0


def test_mixed_dtypes_count_bytes_not_elements():
    m = make_model([node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
                    node("Cast", ["h"], ["d"], to=TensorProto.DOUBLE),
                    node("Cast", ["d"], ["i8"], to=TensorProto.INT8),
                    node("Cast", ["i8"], ["b"], to=TensorProto.BOOL),
                    node("Cast", ["b"], ["y"], to=TensorProto.INT64)],
                   [("x", F, [10])], [("y", TensorProto.INT64, [10])])
    t = plan_of(m).plan.tensors
    assert [t[n].bytes for n in ("x", "h", "d", "i8", "b", "y")] == [40, 20, 80, 10, 10, 80]


def test_plan_is_for_one_order_only():
    """In-place is valid for the order it was planned for (onnxruntime PR #7645)."""
    graph = graph_of(diamond())
    plan = graphmem.plan_graph(graph).plan
    # swap Sigmoid and Tanh: now Tanh is no longer a's last reader
    swapped = list(plan.order)
    swapped[1], swapped[2] = swapped[2], swapped[1]
    from dataclasses import replace
    moved = replace(plan, order=swapped)
    found = problems(moved, graph)
    assert found and "live" in found[0]


def test_plans_are_immutable_values():
    """A later plan never changes an earlier one (mxnet PR #16553)."""
    graph = graph_of(diamond())
    first = graphmem.plan_graph(graph)
    text = first.plan.to_json()
    graphmem.plan_graph(graph, [])
    graphmem.plan_graph(graph, ["inplace", "share"])
    assert first.plan.to_json() == text


def test_captured_tensor_lives_until_the_node_that_holds_the_subgraph():
    then_g = helper.make_graph([node("Relu", ["a"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, S)])
    else_g = helper.make_graph([node("Neg", ["a"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, S)])
    m = make_model([node("Relu", ["x"], ["a"]), node("Sigmoid", ["x"], ["b"]),
                    node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
                    node("Add", ["y", "b"], ["z"])],
                   [("x", F, S), ("cond", TensorProto.BOOL, [])], [("z", F, S)])
    r = plan_of(m)
    assert r.plan.tensors["a"].live == (0, 2)  # read inside the If at position 2
    assert r.plan.tensors["b"].alias_of is None  # Sigmoid must not overwrite... x is an input


def test_validate_catches_overlap_and_bad_alias():
    graph = graph_of(diamond())
    plan = graphmem.plan_graph(graph).plan
    from dataclasses import replace
    t = dict(plan.tensors)
    # move b (live 1..3) and y (in place over b) onto a/c's storage while a is live
    t["b"] = replace(t["b"], offset=t["c"].offset)
    t["y"] = replace(t["y"], offset=t["c"].offset)
    assert any("overlap" in p for p in problems(replace(plan, tensors=t), graph))
    t = dict(plan.tensors)
    t["b"] = replace(t["b"], alias_of="a", alias="inplace", offset=t["a"].offset)
    assert any("read later" in p for p in problems(replace(plan, tensors=t), graph))


def test_progress_names_every_stage_in_order():
    seen = []
    graphmem.plan_graph(graph_of(residual_block()), progress=seen.append)
    assert seen == ["order check", "liveness", "pass reorder", "pass concat", "pass inplace",
                    "pass share", "pass place", "writing the plan", "validation"]
    seen.clear()
    graphmem.plan_graph(graph_of(diamond()), ["place"], check=False, progress=seen.append)
    assert seen == ["order check", "liveness", "pass place", "writing the plan"]
