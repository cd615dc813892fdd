"""Property tests: random graphs never break a plan, and broken plans never pass.

Random DAGs (chains, diamonds, wide fan-out, long skips, mixed sizes and dtypes,
graph outputs in the middle) are built as real ONNX models of element-wise and
shape ops and go through the whole loader (onnx.checker, shape inference). Every
pass combination and placement strategy must give a plan that ``validate`` accepts,
with naive (aligned) >= arena >= aliased peak. The run size follows the hypothesis
profile: ``pytest tests/test_property.py --hypothesis-profile long`` runs thousands.
"""
from __future__ import annotations

from conftest import runtime_model
import dataclasses
from itertools import combinations
from math import prod

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.planning.context import align_up
from graphmem.planning.groups import Record
from graphmem.errors import PlanInvalid
from graphmem.frontend.reader import from_model
from graphmem.passes.placement.search import STRATEGIES, max_live, place_records
from graphmem.plan.stats import live_timelines
from graphmem.core.order import check_order

T = TensorProto
SHAPES = [(2, 3), (3, 2), (6,), (4, 8), (32,), (1, 64), (8, 2, 4), (16, 16), (1, 1), (5,)]
# dtype -> (unary ops, binary ops) valid for it at opset 17
OPS = {
    T.FLOAT: (["Relu", "Sigmoid", "Neg", "Tanh", "Exp", "Abs"], ["Add", "Mul", "Sub", "Max"]),
    T.FLOAT16: (["Relu", "Sigmoid", "Neg", "Abs"], ["Add", "Mul", "Sub", "Max"]),
    T.DOUBLE: (["Relu", "Sigmoid", "Exp", "Neg"], ["Add", "Mul", "Max"]),
    T.INT8: (["Neg", "Abs"], ["Add", "Mul", "Sub", "Max"]),
    T.INT64: (["Neg", "Abs"], ["Add", "Mul", "Max"]),
    T.BOOL: (["Not"], ["And", "Or", "Xor"]),
}
DTYPES = list(OPS)
KINDS = ["unary", "binary", "cast", "reshape", "identity", "flatten", "concat", "unary",
         "binary"]
PASS_SETS = [[], ["inplace"], ["share"], ["place"], ["inplace", "share"], ["inplace", "place"],
             ["share", "place"], ["inplace", "share", "place"]]


@st.composite
def dag_models(draw, max_nodes: int = 18):
    """A random ONNX model: each node reads earlier tensors chosen anywhere in the pool."""
    pool: list[tuple[str, tuple[int, ...], int]] = []  # (name, shape, dtype)
    inputs = []
    for i in range(draw(st.integers(1, 3))):
        t = (f"in{i}", draw(st.sampled_from(SHAPES)), draw(st.sampled_from(DTYPES)))
        pool.append(t)
        inputs.append(t)
    nodes, inits = [], []
    pick = st.integers(0, 10 ** 6)  # index into the pool, any depth: long skips
    for k in range(draw(st.integers(1, max_nodes))):
        src = pool[draw(pick) % len(pool)]
        name, shape, dtype = src
        out = f"t{k}"
        kind = draw(st.sampled_from(KINDS))
        unary, binary = OPS[dtype]
        if kind == "unary":
            nodes.append(helper.make_node(draw(st.sampled_from(unary)), [name], [out]))
        elif kind == "binary":
            mates = [p for p in pool if p[1] == shape and p[2] == dtype]
            other = mates[draw(pick) % len(mates)]  # may be src itself: Add(a, a)
            nodes.append(helper.make_node(draw(st.sampled_from(binary)), [name, other[0]], [out]))
        elif kind == "cast":
            dtype = draw(st.sampled_from(DTYPES))
            nodes.append(helper.make_node("Cast", [name], [out], to=dtype))
        elif kind == "reshape":
            targets = [s for s in SHAPES if prod(s) == prod(shape)] + [(prod(shape),)]
            shape = draw(st.sampled_from(targets))
            inits.append(numpy_helper.from_array(np.array(shape, dtype=np.int64), f"s{k}"))
            nodes.append(helper.make_node("Reshape", [name, f"s{k}"], [out]))
        elif kind == "identity":
            nodes.append(helper.make_node("Identity", [name], [out]))
        elif kind == "flatten":
            shape = (shape[0], prod(shape[1:]))
            nodes.append(helper.make_node("Flatten", [name], [out], axis=1))
        else:  # concat of 1..3 tensors of this shape and dtype along one axis
            mates = [p for p in pool if p[1] == shape and p[2] == dtype]
            parts = [mates[draw(pick) % len(mates)][0] for _ in range(draw(st.integers(1, 3)))]
            axis = draw(st.integers(0, len(shape) - 1))
            shape = tuple(d * len(parts) if i == axis else d for i, d in enumerate(shape))
            nodes.append(helper.make_node("Concat", parts, [out], axis=axis))
        pool.append((out, shape, dtype))
    computed = pool[len(inputs):]
    # the last tensor, and any others: outputs in the middle are read later too
    outputs = [p for p in computed[:-1] if draw(st.booleans()) and draw(st.booleans())]
    outputs.append(computed[-1])
    graph = helper.make_graph(
        nodes, "random",
        [helper.make_tensor_value_info(n, d, list(s)) for n, s, d in inputs],
        [helper.make_tensor_value_info(n, d, list(s)) for n, s, d in outputs], inits)
    return runtime_model(graph, 17)


def naive_aligned(plan) -> int:
    return sum(align_up(t.bytes, plan.alignment) for t in plan.tensors.values())


def check_bounds(plan) -> None:
    assert plan.stats["aliased_peak_bytes"] <= plan.arena_bytes <= naive_aligned(plan)
    assert plan.stats["aliased_peak_bytes"] <= plan.stats["unaliased_peak_bytes"]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=dag_models(), alignment=st.sampled_from([1, 8, 64]))
def test_random_dags_plan_and_validate_under_every_pass_combination(model, alignment):
    graph = from_model(model)  # onnx.checker and shape inference see a real model
    for passes in PASS_SETS:
        placements = ["best", *STRATEGIES] if "place" in passes else ["best"]
        for placement in placements:
            result = graphmem.plan_graph(graph, passes, alignment=alignment,
                                         placement=placement, check=False)
            graphmem.validate(result.plan, graph)
            check_bounds(result.plan)
            if "inplace" not in passes:
                assert not any(t.alias_of for t in result.plan.tensors.values())


def reference_timelines(plan) -> tuple[list[int], list[int]]:
    """Live bytes per position -1..len(order), step by step: (aliased, unaliased).

    Aliased: per storage group (by alias_of / slice_of links) and per byte between
    its members' boundaries, counted at every step from the first to the last use of
    any member covering that byte."""
    steps = range(-1, len(plan.order) + 1)
    unaliased = [sum(t.bytes for t in plan.tensors.values() if t.live[0] <= p <= t.live[1])
                 for p in steps]
    group = {name: {name} for name in plan.tensors}  # merged sets, shared by members
    for name, t in plan.tensors.items():
        for other in (t.alias_of, t.slice_of):
            if other and group[other] is not group[name]:
                merged = group[name] | group[other]
                for m in merged:
                    group[m] = merged
    groups: dict[int, list] = {}
    for name, t in plan.tensors.items():
        if t.bytes:
            groups.setdefault(id(group[name]), []).append(t)
    aliased = [0] * len(steps)
    for ts in groups.values():
        cuts = sorted({t.offset for t in ts} | {t.offset + t.bytes for t in ts})
        for lo, hi in zip(cuts, cuts[1:]):
            on = [t for t in ts if t.offset < hi and lo < t.offset + t.bytes]
            if on:
                first, last = min(t.live[0] for t in on), max(t.live[1] for t in on)
                for k, p in enumerate(steps):
                    aliased[k] += (hi - lo) if first <= p <= last else 0
    return aliased, unaliased


@settings(deadline=None)
@given(model=dag_models(), passes=st.sampled_from(PASS_SETS + [list(graphmem.DEFAULT_PASSES)]))
def test_live_timelines_equal_a_step_by_step_count(model, passes):
    graph = from_model(model)
    plan = graphmem.plan_graph(graph, passes).plan
    assert live_timelines(plan) == reference_timelines(plan)


def random_topological_order(graph, draw) -> list[int]:
    """Any order that runs each node after its producers, ties broken by hypothesis."""
    producer = {t: n.index for n in graph.nodes for t in n.outputs if t}
    deps = {n.index: {producer[t] for t in n.reads if t in producer} for n in graph.nodes}
    order: list[int] = []
    while len(order) < len(deps):
        ready = sorted(i for i, d in deps.items() if i not in order and d <= set(order))
        order.append(draw(st.sampled_from(ready)))
    return order


@settings(deadline=None)
@given(model=dag_models(), data=st.data())
def test_random_dags_under_any_execution_order(model, data):
    graph = from_model(model)
    order = random_topological_order(graph, data.draw)
    for passes in PASS_SETS:
        result = graphmem.plan_graph(graph, passes, order=order, check=False)
        assert result.plan.order == order
        graphmem.validate(result.plan, graph)
        check_bounds(result.plan)


@settings(deadline=None)
@given(model=dag_models(max_nodes=10))
def test_random_dags_through_the_json_file(model, tmp_path_factory):
    graph = from_model(model)
    plan = graphmem.plan_graph(graph).plan
    path = tmp_path_factory.mktemp("plans") / "p.json"
    plan.save(path)
    again = graphmem.Plan.load(path)
    assert again == plan
    graphmem.validate(again, graph)


@settings(max_examples=max(10, settings.default.max_examples // 10), deadline=None)
@given(model=dag_models(max_nodes=10), passes=st.sampled_from(PASS_SETS))
def test_a_sample_of_random_plans_verifies_on_onnxruntime(model, passes, tmp_path_factory):
    from graphmem.verify.verifier import verify
    path = tmp_path_factory.mktemp("dag") / "random.onnx"
    onnx.save(model, str(path))
    graph = graphmem.load(path)
    report = verify(graphmem.plan_graph(graph, passes).plan, graph)
    assert report.passed, report.mismatch.describe() if report.mismatch else report


# -------------------------------------------------------- validate must reject mutants

def _groups(plan):
    from graphmem.plan.columns import group_roots
    return group_roots(plan)


def _with(plan, name, **changes):
    tensors = dict(plan.tensors)
    tensors[name] = dataclasses.replace(tensors[name], **changes)
    return dataclasses.replace(plan, tensors=tensors)


@settings(deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(model=dag_models(max_nodes=12), passes=st.sampled_from(PASS_SETS), data=st.data())
def test_validate_rejects_overlapping_live_tensors(model, passes, data):
    graph = from_model(model)
    plan = graphmem.plan_graph(graph, passes).plan
    roots = _groups(plan)
    pairs = [(a, b) for a, b in combinations(sorted(plan.tensors), 2)
             if roots[a] != roots[b] and plan.tensors[a].bytes and plan.tensors[b].bytes
             and plan.tensors[a].live[0] <= plan.tensors[b].live[1]
             and plan.tensors[b].live[0] <= plan.tensors[a].live[1]
             and plan.tensors[a].offset != plan.tensors[b].offset]
    assume(pairs)
    a, b = data.draw(st.sampled_from(pairs))
    mutant = _with(plan, b, offset=plan.tensors[a].offset)
    mutant = dataclasses.replace(mutant, arena_bytes=max(
        plan.arena_bytes, plan.tensors[a].offset + plan.tensors[b].bytes))
    found = graphmem.problems(mutant, graph)
    assert found
    with pytest.raises(PlanInvalid):
        graphmem.validate(mutant, graph)


@settings(deadline=None)
@given(model=dag_models(max_nodes=12), kind=st.sampled_from(
    ["misalign", "bytes", "live", "arena", "drop", "order", "kind"]), data=st.data())
def test_validate_rejects_other_mutants(model, kind, data):
    graph = from_model(model)
    plan = graphmem.plan_graph(graph, alignment=64).plan
    name = data.draw(st.sampled_from(sorted(plan.tensors)))
    t = plan.tensors[name]
    if kind == "misalign":
        mutant = _with(plan, name, offset=t.offset + 8)
    elif kind == "bytes":
        mutant = _with(plan, name, bytes=t.bytes + 1)
    elif kind == "live":
        mutant = _with(plan, name, live=(t.live[0], t.live[1] + 1))
    elif kind == "arena":
        top = max(x.offset + x.bytes for x in plan.tensors.values())
        assume(top > 0)
        mutant = dataclasses.replace(plan, arena_bytes=top - 1)
    elif kind == "drop":
        mutant = dataclasses.replace(plan, tensors={k: v for k, v in plan.tensors.items()
                                                    if k != name})
    elif kind == "order":
        assume(len(plan.order) > 1)
        mutant = dataclasses.replace(plan, order=plan.order[::-1])
        assume(check_order(graph, mutant.order))  # a reversal may be valid
    else:
        mutant = _with(plan, name, kind="activation" if t.kind != "activation" else "output")
    assert graphmem.problems(mutant, graph)


# -------------------------------------------------------- placement on Record lists

@st.composite
def record_lists(draw):
    alignment = draw(st.sampled_from([1, 4, 64]))
    n = draw(st.integers(0, 40))
    recs = []
    for i in range(n):
        first = draw(st.integers(-1, 30))
        last = draw(st.integers(first, min(first + draw(st.integers(0, 31)), 31)))
        size = draw(st.one_of(st.integers(1, 200), st.integers(1, 1 << 20)))
        recs.append(Record(i, align_up(size, alignment), first, last))
    return recs, alignment


@settings(deadline=None)
@given(case=record_lists(), strategy=st.sampled_from(["best", *STRATEGIES]))
def test_every_strategy_places_without_overlap(case, strategy):
    recs, alignment = case
    offsets, total, used, tried, _ = place_records(recs, strategy, alignment)
    assert set(offsets) == {r.id for r in recs}
    for r in recs:
        assert offsets[r.id] >= 0 and offsets[r.id] % alignment == 0
        assert offsets[r.id] + r.bytes <= total
    for a, b in combinations(recs, 2):
        if a.first <= b.last and b.first <= a.last:  # live at the same time
            assert (offsets[a.id] + a.bytes <= offsets[b.id]
                    or offsets[b.id] + b.bytes <= offsets[a.id]), (a, b)
    assert max_live(recs) <= total <= sum(r.bytes for r in recs)
    assert total == max((offsets[r.id] + r.bytes for r in recs), default=0)
    if strategy == "best":
        assert total == min(tried.values())


# -------------------------------------------------------- links broken at random

LINK_MUTATIONS = ["alias_of", "alias", "drop_alias", "new_alias", "slice_of", "new_slice",
                  "offset", "group_offset"]


@settings(deadline=None, max_examples=max(10, settings.default.max_examples // 2))
@given(model=dag_models(max_nodes=14), passes=st.sampled_from(PASS_SETS[1:]),
       kind=st.sampled_from(LINK_MUTATIONS), data=st.data())
def test_a_plan_with_a_link_broken_at_random_is_refused_or_still_runs(
        model, passes, kind, data, tmp_path_factory):
    """The planner's plans break no alias or slice rule; a plan with one link broken at
    random is either refused by validation or, where the rules still hold, runs in its
    arena on ONNX Runtime with the plain run's results (the rules are not too weak)."""
    from graphmem.verify.verifier import verify
    path = tmp_path_factory.mktemp("dag") / "random.onnx"
    onnx.save(model, str(path))
    graph = graphmem.load(path)
    plan = graphmem.plan_graph(graph, passes).plan
    names = sorted(plan.tensors)
    name = data.draw(st.sampled_from(names))
    t = plan.tensors[name]
    other = data.draw(st.sampled_from(names + ["nowhere"]))
    producer = {o: n for n in graph.nodes for o in n.outputs}.get(name)
    if kind == "alias_of":
        mutant = _with(plan, name, alias_of=other, alias=t.alias or "inplace")
    elif kind == "alias":
        mutant = _with(plan, name, alias=data.draw(st.sampled_from(["view", "inplace", "copy",
                                                                    None])))
    elif kind == "drop_alias":
        mutant = _with(plan, name, alias_of=None)
    elif kind == "new_alias":  # an input of its producer, at that input's offset
        srcs = [i for i in (producer.inputs if producer else ()) if i in plan.tensors]
        assume(srcs)
        src = data.draw(st.sampled_from(srcs))
        mutant = _with(plan, name, alias_of=src, offset=plan.tensors[src].offset,
                       alias=data.draw(st.sampled_from(["view", "inplace"])))
    elif kind == "slice_of":
        mutant = _with(plan, name, slice_of=other)
    elif kind == "new_slice":  # an input of a Concat into its output, where its first
        # read would sit (or one alignment past it)
        reads = [(n, i) for n in graph.nodes if n.op_type == "Concat" for i in n.inputs
                 if i in plan.tensors]
        assume(reads)
        reader, name = data.draw(st.sampled_from(reads))
        before = reader.inputs[:reader.inputs.index(name)]
        mutant = _with(plan, name, slice_of=reader.outputs[0], offset=plan.tensors[
            reader.outputs[0]].offset + sum(graph.tensors[i].bytes for i in before)
            + data.draw(st.sampled_from([0, 0, plan.alignment])))
    elif kind == "offset":
        mutant = _with(plan, name, offset=t.offset + plan.alignment)
    else:  # a whole storage group moved: offsets agree inside it, not with its links
        roots = _groups(plan)
        tensors = {k: dataclasses.replace(v, offset=v.offset + plan.alignment)
                   if roots[k] == roots[name] else v for k, v in plan.tensors.items()}
        mutant = dataclasses.replace(plan, tensors=tensors)
    if mutant == plan or graphmem.problems(mutant, graph):
        return
    report = verify(mutant, graph)
    assert report.passed, report.mismatch.describe() if report.mismatch else report
