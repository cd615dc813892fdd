"""The concat pass: Concat inputs written into their slices, safely and with a saving."""
from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import helper

import graphmem
from graphmem.passes.placement.best_fit import best_fit
from graphmem.passes.placement.items import Tied
from graphmem.passes.placement.search import place_records
from graphmem.planning.groups import Record
from models.generate import inception_cell, unet

from conftest import F, make_model, plan_of

NO_CONCAT = ("inplace", "share", "place")


def test_inception_cell_concat_is_at_most_60_percent():
    model = inception_cell()
    with_concat = plan_of(model)
    without = plan_of(model, NO_CONCAT)
    assert with_concat.plan.arena_bytes <= 0.60 * without.plan.arena_bytes
    plan = with_concat.plan
    cat = next(n for n in with_concat.graph.nodes if n.op_type == "Concat")
    out = plan.tensors[cat.outputs[0]]
    for k, t in enumerate(cat.inputs):
        assert plan.tensors[t].slice_of == cat.outputs[0]
        assert plan.tensors[t].offset == out.offset + k * plan.tensors[t].bytes
    concat = next(r for r in with_concat.reports if r.name == "concat")
    assert concat.detail["slices"] == 4 and concat.bytes_saved > 0


def test_inception_cell_with_relu_branches():
    """The in-place rule is per byte range: each branch's ReLU overwrites its conv output
    inside its own slice while the other slices are live (issue 21: at most 0.6 of the
    plain in-place arena; the group-wide rule allowed only the first, 0.625)."""
    model = inception_cell(relu=True)
    result = plan_of(model)  # validated
    with_concat = result.plan
    without = plan_of(model, NO_CONCAT).plan
    assert with_concat.arena_bytes <= 0.60 * without.arena_bytes
    relus = [n for n in result.graph.nodes if n.op_type == "Relu"][:4]
    for n in relus:
        t = with_concat.tensors[n.outputs[0]]
        assert t.alias == "inplace" and t.alias_of == n.inputs[0] and t.slice_of
    assert _simulate(with_concat, result.graph) == []


@pytest.mark.parametrize("seed", [63, 128])
def test_concat_is_dropped_when_it_costs(seed):
    """Two of the random graphs below (18 of the first 400 seeds) where writing the
    branches into their slices gives a larger arena than copying: the pipeline plans
    both and keeps the smaller, and the concat report says so."""
    model = _random_concat_model(seed)
    file_order = ("concat",) + NO_CONCAT  # the reorder pass would change the question
    chosen = plan_of(model, file_order)
    without = plan_of(model, NO_CONCAT)
    report = next(r for r in chosen.reports if r.name == "concat")
    assert report.detail["kept"] is False and report.bytes_saved == 0
    assert report.detail["arena_with_concat"] > report.detail["arena_without_concat"]
    assert chosen.plan.arena_bytes == without.plan.arena_bytes
    assert not any(t.slice_of for t in chosen.plan.tensors.values())
    assert _simulate(chosen.plan, chosen.graph) == []


def test_no_trial_past_the_budget(monkeypatch):
    """Past TRIAL_TENSORS arena tensors the plan keeps the slices without planning the
    graph a second time, and says so."""
    import graphmem.planning.loop
    monkeypatch.setattr(graphmem.planning.loop, "TRIAL_TENSORS", 0)
    model = _random_concat_model(128)
    result = plan_of(model, ("concat",) + NO_CONCAT)
    report = next(r for r in result.reports if r.name == "concat")
    assert report.detail["tried"] is False and "kept" not in report.detail
    assert any(t.slice_of for t in result.plan.tensors.values())


def test_concat_is_kept_when_it_saves():
    report = next(r for r in plan_of(inception_cell()).reports if r.name == "concat")
    assert report.detail["kept"] is True
    assert report.detail["arena_with_concat"] < report.detail["arena_without_concat"]


def test_a_slice_ending_off_the_alignment_leaves_only_aligned_gaps():
    # y = Concat(a, x, x): a (48 bytes) is y's only slice, at offset 0; y's bytes from
    # 48 on are free until the Concat runs, and the dead, short-lived b and c may use
    # them, but only from an aligned offset (hypothesis found b placed at y + 48).
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"]),
             helper.make_node("Relu", ["x"], ["c"]),
             helper.make_node("Concat", ["a", "x", "x"], ["y"], axis=0)]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [9, 4])])
    plan = plan_of(model).plan  # validated: every offset a multiple of 64
    assert plan.tensors["a"].slice_of == "y"
    assert all(t.offset % 64 == 0 for t in plan.tensors.values())


def _cat_then_read_slice():
    # a and b are sliced into y; then Relu(a) runs while y is still to be read.
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["y"], axis=1),
             helper.make_node("Relu", ["a"], ["z"]), helper.make_node("Sigmoid", ["y"], ["w"])]
    return make_model(nodes, [("x", F, [1, 16])], [("z", F, [1, 16]), ("w", F, [1, 32])])


def test_no_inplace_write_into_a_concat_still_to_be_read():
    res = plan_of(_cat_then_read_slice())
    plan = res.plan
    assert plan.tensors["a"].slice_of == "y" and plan.tensors["b"].slice_of == "y"
    assert plan.tensors["z"].alias_of is None  # Relu(a) may not overwrite a inside y
    assert _simulate(plan, res.graph) == []


def test_simulation_catches_an_overwrite_the_validator_also_rejects():
    # the same plan with Relu(a) written over a inside y, which is still to be read
    import dataclasses
    res = plan_of(_cat_then_read_slice())
    t = dict(res.plan.tensors)
    t["z"] = dataclasses.replace(t["z"], offset=t["a"].offset, alias_of="a", alias="inplace")
    bad = dataclasses.replace(res.plan, tensors=t, stats={})
    assert _simulate(bad, res.graph)
    assert any("read later" in p for p in graphmem.problems(bad, res.graph))


def test_slices_not_for_graph_inputs_outputs_or_repeats():
    nodes = [helper.make_node("Neg", ["x"], ["a"]),
             helper.make_node("Concat", ["x", "a", "a", "o"], ["y"], axis=1),
             helper.make_node("Neg", ["x"], ["o"])]
    nodes = [nodes[0], nodes[2], nodes[1]]
    model = make_model(nodes, [("x", F, [1, 16])], [("y", F, [1, 64]), ("o", F, [1, 16])])
    plan = plan_of(model).plan
    assert all(t.slice_of is None for t in plan.tensors.values())


def test_non_contiguous_concat_is_not_sliced():
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    model = make_model(nodes, [("x", F, [2, 16])], [("y", F, [2, 32])])
    plan = plan_of(model).plan
    assert plan.tensors["a"].slice_of is None


def test_nested_concats_and_views():
    # c1 = Concat(a, b) is itself a slice of c2 = Concat(c1, r), r a view of d
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c1"], axis=1),
             helper.make_node("Neg", ["x"], ["d"]),
             helper.make_node("Reshape", ["d", "shape"], ["r"]),
             helper.make_node("Concat", ["c1", "r"], ["c2"], axis=1),
             helper.make_node("Neg", ["c2"], ["y"])]
    shape = helper.make_tensor("shape", 7, [2], [1, 16])
    model = make_model(nodes, [("x", F, [1, 16])], [("y", F, [1, 48])], [shape])
    res = plan_of(model)
    t = res.plan.tensors
    assert t["c1"].slice_of == "c2" and t["a"].slice_of == "c1" and t["r"].slice_of == "c2"
    assert t["b"].offset == t["c2"].offset + 64
    assert t["d"].offset == t["r"].offset == t["c2"].offset + 128  # view source moves too
    assert _simulate(res.plan, res.graph) == []


def test_unet_concat_skips_validate():
    res = plan_of(unet())
    assert any(t.slice_of for t in res.plan.tensors.values())
    assert _simulate(res.plan, res.graph) == []
    assert res.plan.arena_bytes < plan_of(unet(), NO_CONCAT).plan.arena_bytes


def test_tied_records_keep_relative_offsets_and_reuse_early_bytes():
    # a Concat group of 3 slices: slice 2 is produced late, so a short-lived buffer
    # that dies before it may use its bytes
    tied = Tied(0, 300, 0, 9, ((0, Record(0, 100, 0, 9)), (100, Record(1, 100, 2, 9)),
                               (200, Record(2, 100, 6, 9))))
    early = Record(1, 100, 3, 5)
    offsets, total, *_ = place_records([tied, early])
    assert total == 300 and offsets[1] == offsets[0] + 200
    # placed before the set, the short buffer pushes it up: the set moves as one
    offsets, total = best_fit([early, tied])
    assert offsets == {1: 0, 0: 100} and total == 400


def test_tied_random_against_bruteforce_overlap():
    rng = random.Random(1)
    for _ in range(50):
        items, rid = [], 0
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.4:
                last = rng.randint(5, 12)
                parts, rel = [], 0
                for k in range(rng.randint(2, 4)):
                    n = rng.choice([64, 128, 256])
                    parts.append((rel, Record(k, n, rng.randint(0, last), last)))
                    rel += n
                items.append(Tied(rid, rel, min(p.first for _, p in parts), last, tuple(parts)))
            else:
                f = rng.randint(0, 10)
                items.append(Record(rid, rng.choice([64, 192, 320]), f, f + rng.randint(0, 4)))
            rid += 1
        offsets, total, *_ = place_records(items, alignment=64)
        boxes = []
        for it in items:
            for rel, p in (it.parts if isinstance(it, Tied) else ((0, it),)):
                boxes.append((offsets[it.id] + rel, p.bytes, p.first, p.last))
        for i, (o1, n1, f1, l1) in enumerate(boxes):
            assert o1 % 64 == 0 and o1 + n1 <= total
            for o2, n2, f2, l2 in boxes[i + 1:]:
                assert not (o1 < o2 + n2 and o2 < o1 + n1 and f1 <= l2 and f2 <= l1)


def test_inplace_on_concat_output_after_its_last_read():
    # Relu(y) is y's last reader and no slice is read later: it may overwrite y
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["y"], axis=1),
             helper.make_node("Relu", ["y"], ["z"]), helper.make_node("Neg", ["z"], ["w"])]
    model = make_model(nodes, [("x", F, [1, 16])], [("w", F, [1, 32])])
    res = plan_of(model)
    t = res.plan.tensors
    assert t["a"].slice_of == "y" and t["z"].alias_of == "y" and t["z"].alias == "inplace"
    assert _simulate(res.plan, res.graph) == []


@pytest.mark.parametrize("alignment", [4, 64])
@pytest.mark.parametrize("seed", range(25))
def test_random_concat_graphs_are_safe(seed, alignment):
    """Random graphs of element-wise ops, views and Concats: every default plan
    validates and an execution simulated byte by byte reads only intact values."""
    model = _random_concat_model(seed)
    res = plan_of(model, alignment=alignment)
    assert _simulate(res.plan, res.graph) == []


def _random_concat_model(seed):
    rng = random.Random(seed)
    width = {"x": 16}
    names = ["x"]
    nodes = []
    inits = []
    for i in range(rng.randint(4, 14)):
        kind = rng.random()
        out = f"t{i}"
        if kind < 0.3 and len(names) >= 2:
            ins = rng.sample(names, rng.randint(2, min(4, len(names))))
            nodes.append(helper.make_node("Concat", ins, [out], axis=1))
            width[out] = sum(width[t] for t in ins)
        elif kind < 0.45:
            src = rng.choice(names)
            shape = f"s{i}"
            inits.append(helper.make_tensor(shape, 7, [2], [1, width[src]]))
            nodes.append(helper.make_node("Reshape", [src, shape], [out]))
            width[out] = width[src]
        elif kind < 0.7:
            src = rng.choice(names)
            nodes.append(helper.make_node(rng.choice(["Relu", "Neg", "Sigmoid"]), [src], [out]))
            width[out] = width[src]
        else:
            src = rng.choice(names)
            same = [t for t in names if width[t] == width[src]]
            nodes.append(helper.make_node("Add", [src, rng.choice(same)], [out]))
            width[out] = width[src]
        names.append(out)
    outs = [names[-1]] + ([rng.choice(names[1:-1])] if len(names) > 3 and rng.random() < 0.5
                          else [])
    outs = list(dict.fromkeys(outs))
    return make_model(nodes, [("x", F, [1, 16])], [(t, F, [1, width[t]]) for t in outs], inits)


def _simulate(plan, graph) -> list[str]:
    """Run the plan's order on a model of the arena: each write tags its bytes with the
    value written; every read checks its bytes still hold the value it expects."""
    tag = np.full(max(plan.arena_bytes, 1), -1, dtype=np.int64)
    ids = {name: i for i, name in enumerate(plan.tensors)}
    by_index = {n.index: n for n in graph.nodes}
    t = plan.tensors

    def value(name):  # the tensor whose write produced this tensor's bytes
        while t[name].alias == "view":
            name = t[name].alias_of
        return name

    def expected(name):  # [(lo, hi, value id)] a read of ``name`` must find
        name = value(name)
        node = next((n for n in graph.nodes if name in n.outputs), None)
        if node is not None and node.op_type == "Concat" and t[name].alias is None:
            out, off = [], t[name].offset
            for inp in node.inputs:
                n = graph.tensors[inp].bytes
                src = value(inp) if t.get(inp) and t[inp].slice_of == name else name
                out += expected(inp) if src != name else [(off, off + n, ids[name])]
                off += n
            return out
        return [(t[name].offset, t[name].offset + t[name].bytes, ids[value(name)])]

    problems = []
    for inp in graph.inputs:
        if inp in t:
            tag[t[inp].offset:t[inp].offset + t[inp].bytes] = ids[inp]
    for pos, idx in enumerate(plan.order):
        node = by_index[idx]
        for r in node.reads:
            if r in t:
                for lo, hi, want in expected(r):
                    if not (tag[lo:hi] == want).all():
                        problems.append(f"position {pos}: {r!r} was overwritten")
        for o in node.outputs:
            if o not in t or t[o].alias == "view" or not t[o].bytes:
                continue
            if node.op_type == "Concat":
                off = t[o].offset
                for inp in node.inputs:
                    n = graph.tensors[inp].bytes
                    if not (t.get(inp) and t[inp].slice_of == o):
                        tag[off:off + n] = ids[o]
                    off += n
            else:
                tag[t[o].offset:t[o].offset + t[o].bytes] = ids[o]
    for o in graph.outputs:
        if o in t:
            for lo, hi, want in expected(o):
                if not (tag[lo:hi] == want).all():
                    problems.append(f"output {o!r} was overwritten")
    return problems


@pytest.mark.parametrize("change, message", [
    (lambda t: {"a": {"offset": t["a"].offset + 64}}, "slice of 'y' at offset"),
    (lambda t: {"a": {"slice_of": "z"}}, "slice_of 'z', which is not a Concat reading it once"),
    (lambda t: {"a": {"slice_of": "x"}}, "slice_of 'x', which is not a Concat reading it once"),
    (lambda t: {"a": {"slice_of": "nowhere"}}, "slice_of 'nowhere' is not an arena tensor"),
    (lambda t: {"b": {"slice_of": "z"}, "a": {"slice_of": "z"}},
     "slice_of 'z', which is not a Concat reading it once"),
])
def test_validation_words_each_broken_slice_rule(change, message):
    """Every slice rule of the plan format, broken one at a time on a planner's plan."""
    import dataclasses
    res = plan_of(_cat_then_read_slice())
    assert graphmem.problems(res.plan, res.graph) == []
    t = dict(res.plan.tensors)
    for name, fields in change(t).items():
        t[name] = dataclasses.replace(t[name], **fields)
    found = graphmem.problems(dataclasses.replace(res.plan, tensors=t, stats={}), res.graph)
    assert any(message in p for p in found), found
