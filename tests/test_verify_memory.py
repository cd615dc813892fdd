"""verify's memory: the reference holds only what a comparison still needs, and the
weights are mapped once, not copied (issue 55). Counts of buffers and bytes on tiny
graphs, no timing or RSS (that is tools/bench/verify_memory.py's figure)."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.verify.arena_run import ArenaRun
from graphmem.verify.inputs import random_inputs
from graphmem.verify.reference import LiveReference, constant_values, load_weights
from graphmem.verify.verifier import verify

from conftest import make_model
from test_verify_mutations import shorten_live_range

F = TensorProto.FLOAT
N = 24  # nodes of the chain


def _chain(tmp_path, external: bool = False):
    """x -> Sigmoid -> ... (N nodes) -> Add(first, last) -> y: ``h0`` (the first
    output) is read again at the end, everything else by the next node only."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 64 * 64, dtype=np.float32)
                                .reshape(64, 64), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"])]
    for i in range(1, N):
        nodes.append(helper.make_node("Sigmoid", [f"h{i - 1}"], [f"h{i}"]))
    nodes.append(helper.make_node("Add", ["h0", f"h{N - 1}"], ["y"]))
    model = make_model(nodes, [("x", F, [64, 64])], [("y", F, [64, 64])], [w])
    path = tmp_path / "chain.onnx"
    if external:
        onnx.save(model, str(path), save_as_external_data=True, location="chain.data",
                  size_threshold=0)
    else:
        path.write_bytes(model.SerializeToString())
    return graphmem.load(path)


def _reference(graph, plan):
    weights = load_weights(graph)
    constants = constant_values(weights.model, graph, weights.values)
    runner = ArenaRun(plan, graph, weights.model, constants, "CPUExecutionProvider", "cpu",
                      None)
    ref = LiveReference(graph, plan.order, runner.offsets, runner.runner)
    return runner, ref


def test_reference_drops_each_tensor_after_its_last_reader(tmp_path):
    graph = _chain(tmp_path)
    plan = graphmem.plan_graph(graph, []).plan
    runner, ref = _reference(graph, plan)
    feeds = random_inputs(graph, 0)
    held = []
    ref_step = ref.step

    def step(pos):  # the buffers held while each node runs
        ref_step(pos)
        held.append(set(ref.buffers))
    ref.step = step
    final, mismatch, reads, _ = runner.run(feeds, ref)
    assert mismatch is None and reads == N + 2
    # x, h0 (read again by the last node), the node's input and its output: never more
    assert max(len(h) for h in held) == ref.peak_buffers <= 4
    assert all("h0" in h for h in held[1:])  # kept until its last reader, the Add
    assert "h3" not in held[6] and "x" not in held[2]
    assert set(ref.buffers) == {"y"}  # at the end: the graph outputs alone
    every = sum(graph.tensors[t].bytes for t in plan.tensors)
    assert ref.peak_bytes == ref.planned_peak_bytes(graph.inputs) <= 4 * 64 * 64 * 4
    assert ref.peak_bytes < every / 4
    assert np.array_equal(final["y"], ref.raw("y"))


def test_verify_reports_the_reference_peak_and_still_passes(tmp_path):
    graph = _chain(tmp_path)
    plan = graphmem.plan_graph(graph, []).plan
    report = verify(plan, graph)
    assert report.passed
    every = sum(graph.tensors[t].bytes for t in plan.tensors)
    assert 0 < report.reference_bytes < every / 4


def _over_h0(graph, plan):
    """h{N/2} written over h0, which the last node reads: caught at that read."""
    mid = f"h{N // 2}"
    tensors = dict(plan.tensors)
    tensors[mid] = dataclasses.replace(tensors[mid], offset=tensors["h0"].offset)
    return dataclasses.replace(plan, tensors=tensors), len(plan.order) - 1, "h0"


@pytest.mark.parametrize("mutate", [shorten_live_range, _over_h0])
def test_wrong_plan_still_caught_with_a_dropping_reference(tmp_path, mutate):
    graph = _chain(tmp_path)
    plan = graphmem.plan_graph(graph, []).plan
    bad, pos, tensor = mutate(graph, plan)
    report = verify(bad, graph, runtime_only=True)
    assert not report.passed and report.mismatch is not None
    assert report.mismatch.position <= pos and report.mismatch.tensor == tensor
    # the whole-model line still compares every graph output (the reference ran on)
    assert report.whole_model and all(o.ok for o in report.whole_model)


def test_external_weights_are_mapped_not_copied(tmp_path):
    graph = _chain(tmp_path, external=True)
    weights = load_weights(graph)
    w = weights.values["w"]
    assert not w.flags.owndata and not w.flags.writeable  # a view of the mapped file
    init = next(t for t in weights.model.graph.initializer if t.name == "w")
    assert init.data_location == TensorProto.EXTERNAL and not init.raw_data
    assert np.array_equal(w, np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64))
    constants = constant_values(weights.model, graph, weights.values)
    assert constants["w"] is w
    plan = graphmem.plan_graph(graph, []).plan
    report = verify(plan, graph)
    assert report.passed and report.whole_model and all(o.ok for o in report.whole_model)


def test_external_weights_keep_the_path_rule(tmp_path):
    graph = _chain(tmp_path, external=True)
    data = tmp_path / "chain.data"
    (tmp_path / "other.data").write_bytes(data.read_bytes())
    import os
    os.link(data, tmp_path / "second_name")  # a file with two hard links: refused
    with pytest.raises(graphmem.GraphmemError, match="hard links"):
        load_weights(graph)


def test_int4_weights_baked_in_a_session_of_their_own_and_dropped(tmp_path):
    """MatMulNBits takes its packed weights as initializers of its own session (read by
    ONNX Runtime from the external data, no dequantized copy per run), dropped after
    its node ran in both runs; a wrong plan of that model is still caught."""
    from models.decoder import build
    path = tmp_path / "dec.onnx"
    onnx.save(build(layers=2, int4=True), str(path), save_as_external_data=True,
              location="dec.data", size_threshold=1024)
    dims = {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 7,
            "total_sequence_length": 8}
    graph = graphmem.load(path, dims)
    plan = graphmem.plan_graph(graph, []).plan
    runner, ref = _reference(graph, plan)
    matmuls = [n for n in graph.nodes if n.op_type == "MatMulNBits"]
    assert matmuls and all(runner.sessions._baked(runner.sessions.model.graph.node[n.index])
                           for n in matmuls)
    _, mismatch, _, _ = runner.run(random_inputs(graph, 0), ref)
    assert mismatch is None
    assert not runner.sessions._baked_keys  # every baked session dropped after its node
    report = verify(plan, graph)
    assert report.passed and all(o.ok and o.max_abs_diff == 0 for o in report.whole_model)
    bad, pos, tensor = shorten_live_range(graph, plan)
    report = verify(bad, graph, runtime_only=True)
    assert not report.passed and report.mismatch.tensor == tensor


def test_weights_inside_the_file_are_held_once(tmp_path):
    """A large weight kept inside the model file is taken out of the proto into one
    array (not held twice); the whole-model session is given that array."""
    from graphmem.verify.weights import IN_MEMORY, TAKEN_OUT_BYTES
    side = 160  # 102,400 bytes of float32: past TAKEN_OUT_BYTES
    assert side * side * 4 > TAKEN_OUT_BYTES
    w = numpy_helper.from_array(np.linspace(-1, 1, side * side, dtype=np.float32)
                                .reshape(side, side), "w")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")  # small: stays
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Unsqueeze", ["h", "axes"], ["y"])]
    model = make_model(nodes, [("x", F, [8, side])], [("y", F, [1, 8, side])], [w, axes])
    path = tmp_path / "inside.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    weights = load_weights(graph)
    assert set(weights.in_memory) == {"w"}
    by_name = {t.name: t for t in weights.model.graph.initializer}
    assert not by_name["w"].raw_data and by_name["axes"].raw_data
    assert {e.value for e in by_name["w"].external_data if e.key == "location"} == {IN_MEMORY}
    assert np.array_equal(weights.values["w"], numpy_helper.to_array(w))
    plan = graphmem.plan_graph(graph, []).plan
    report = verify(plan, graph)
    assert report.passed and report.whole_model_problem is None
    assert report.whole_model and all(o.ok for o in report.whole_model)


def test_the_benchmark_reads_a_childs_own_peak_not_its_parents():
    """tools/bench/verify_memory.py's measure: a child that takes 200 MB reads about
    that, and one that takes nothing reads far less, however big this process is."""
    import sys
    from tools.bench.verify_memory import _PEAK, _peak
    ballast = np.ones(300 << 20, np.uint8)  # this process: 300 MB more than the children
    code, big, _ = _peak([sys.executable, "-c", _PEAK + "b = bytearray(200 << 20)"])
    assert code == 0 and 200 << 20 < big < 300 << 20
    code, small, _ = _peak([sys.executable, "-c", _PEAK + "pass"])
    assert code == 0 and 0 < small < 100 << 20
    del ballast


def test_the_benchmark_table_has_the_ratio_and_the_bar():
    from tools.bench.verify_memory import BAR, table
    row = {"case": "m", "file_bytes": 10 << 20, "ort_peak": 100 << 20, "arena": 4 << 20,
           "verify_peak": 130 << 20, "ratio": 130 / 104, "verdict": "PASS"}
    text = table([row])
    assert f"verify <= {BAR} x (ORT + arena)" in text
    assert "| m | 10.0 | 100 | 4.00 | 130 | 1.25 | PASS |" in text


def _bounded_chain(tmp_path):
    """x [32, 32] -> Greater 0 -> NonZero [2, n] -> Transpose -> Cast -> MatMul by the
    external weight w [2, 1024] -> h0 [n, 1024] -> Sigmoid ... (N nodes) -> Add(h0,
    last) -> y: every tensor past the NonZero sized by the data (n <= 1,024)."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 2 * 1024, dtype=np.float32)
                                .reshape(2, 1024), "w")
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    n = helper.make_node
    nodes = [n("Greater", ["x", "zero"], ["pos"]), n("NonZero", ["pos"], ["nz"]),
             n("Transpose", ["nz"], ["nzt"], perm=[1, 0]), n("Cast", ["nzt"], ["f"], to=F),
             n("MatMul", ["f", "w"], ["h0"])]
    for i in range(1, N):
        nodes.append(n("Sigmoid", [f"h{i - 1}"], [f"h{i}"]))
    nodes.append(n("Add", ["h0", f"h{N - 1}"], ["y"]))
    model = make_model(nodes, [("x", F, [32, 32])], [("y", F, ["n", 1024])], [w, zero])
    path = tmp_path / "bounded.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="bounded.data",
              size_threshold=1024)
    return path


def test_bounded_verify_maps_the_weights_and_drops_reference_tensors(tmp_path, monkeypatch):
    """Issue 53's verify with the sizes the data gives: the external weight is mapped
    (the whole model is never read with its weights), and the reference holds what a
    comparison still needs, not every tensor of the run."""
    import graphmem.verify.reference as reference

    def whole(graph):
        raise AssertionError("the bounded verify read the weights whole")
    monkeypatch.setattr(reference, "model_with_weights", whole)
    graph = graphmem.load(_bounded_chain(tmp_path))
    assert graph.data_bounds
    plan = graphmem.plan_graph(graph).plan
    x = np.where(np.arange(32 * 32).reshape(32, 32) % 3 == 0, 1.0, -1.0).astype(np.float32)
    report = verify(plan, graph, inputs={"x": x})
    assert report.passed, report
    kept = int((x > 0).sum())  # 342 of 1,024
    assert any(c.tensor == "nz" and c.shape == (2, kept) for c in report.bounded)
    # held at once: x, h0 (read again at the end), a node's input and its output
    actual = kept * 1024 * 4
    assert actual * 3 <= report.reference_bytes <= actual * 3 + x.nbytes + 2 * kept * 16
    assert report.reference_bytes < (N + 1) * actual / 4


def test_bounded_verify_still_catches_a_clobbered_input_after_dropping(tmp_path):
    """h{N/2} written over h0, which the last node reads: the dropping reference still
    holds h0 to compare."""
    graph = graphmem.load(_bounded_chain(tmp_path))
    plan = graphmem.plan_graph(graph).plan
    bad, pos, tensor = _over_h0(graph, plan)
    x = np.ones((32, 32), np.float32)
    report = verify(bad, graph, runtime_only=True, inputs={"x": x})
    assert not report.passed and report.mismatch is not None
    assert report.mismatch.tensor == tensor and report.mismatch.position <= pos
