"""graphmem verify: zoo plans run correctly inside their arenas; the CLI's exit codes."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from onnx import TensorProto, helper

import graphmem
from graphmem.verify.cuda import cuda_usable
from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.verify.compare import tolerance_dtypes
from graphmem.verify.verifier import random_inputs, verify
from graphmem.frontend.zoo import ZOO, zoo_path

from conftest import make_model
from test_verify_mutations import shorten_live_range, tiny_model

F = TensorProto.FLOAT
PASS_SETS = {"default": list(graphmem.DEFAULT_PASSES), "inplace": ["inplace"],
             "share": ["share"], "place": ["place"], "none": []}
# Each pass alone on a few graphs that cover the ops (Concat, Sum, BN, Reshape,
# Transpose, Dropout) in the default run; every graph under -m slow.
QUICK = ("squeezenet", "shufflenet", "inception_v1")


@pytest.fixture(scope="module")
def graphs():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = graphmem.load(zoo_path(name))
        return cache[name]
    return get


def _check(graph, passes, **kw):
    plan = graphmem.plan_graph(graph, passes).plan
    report = verify(plan, graph, **kw)
    assert report.passed, (report.problems, report.mismatch and report.mismatch.describe())
    assert report.nodes_run + report.nodes_skipped == len(plan.order)
    return report


# The zoo's outputs do not depend on its inputs (constant weights), so these runs
# compare every tensor (check_all), the check that sees finite corruption too.
@pytest.mark.parametrize("name", ZOO)
def test_zoo_default_passes_verify(graphs, name):
    report = _check(graphs(name), PASS_SETS["default"], check_all=True)
    assert all(o.max_abs_diff <= 1e-5 for o in report.outputs)


@pytest.mark.parametrize("passes", ["inplace", "share", "place", "none"])
@pytest.mark.parametrize("name", QUICK)
def test_zoo_each_pass_alone_verifies(graphs, name, passes):
    _check(graphs(name), PASS_SETS[passes], check_all=True)


@pytest.mark.slow
@pytest.mark.parametrize("passes", ["inplace", "share", "place", "none"])
@pytest.mark.parametrize("name", [n for n in ZOO if n not in QUICK])
def test_zoo_each_pass_alone_verifies_all(graphs, name, passes):
    _check(graphs(name), PASS_SETS[passes], check_all=True)


def _reads(graph, plan):
    """(node, tensor) reads of arena tensors in ``plan``, Concats of slices left out."""
    slices = {t for t, p in plan.tensors.items() if p.slice_of}
    return sum(len({t for t in n.reads if t in plan.tensors})
               for n in graph.nodes
               if not (n.op_type == "Concat" and {t for t in n.inputs if t} <= slices
                       and all(plan.tensors[t].slice_of == n.outputs[0]
                               for t in n.inputs if t)))


def test_default_mode_compares_every_read(graphs):
    """Every tensor a node reads is compared with the reference before the node runs:
    a finite wrong value shows even where the outputs ignore the input (the zoo's
    constant weights make the softmax the same for any input)."""
    graph = graphs("resnet50")
    plan = graphmem.plan_graph(graph).plan
    report = verify(plan, graph)
    assert report.passed and report.intermediates_checked == 0
    assert report.reads_checked == _reads(graph, plan) > len(graph.nodes)


def test_check_all_compares_every_tensor(graphs):
    graph = graphs("squeezenet")
    report = _check(graph, PASS_SETS["default"], check_all=True)
    assert report.intermediates_checked == len(graph.arena_tensors()) - len(graph.inputs)


def test_the_verdict_is_bit_exact(graphs):
    """Same sessions, same inputs, only the addresses differ: the outputs are equal bit
    for bit, and so is the arena run's every tensor."""
    graph = graphs("inception_v1")
    report = _check(graph, PASS_SETS["default"], check_all=True)
    assert all(o.max_abs_diff == 0 and o.ok for o in report.outputs)
    assert report.spread_tensors == 0
    assert report.whole_model and all(o.ok for o in report.whole_model)


def test_ortvalue_arena_on_cpu_runs_the_cuda_code_path(tmp_path, graphs):
    """The device arena (one OrtValue, copies through ORT) passes and fails like the host one."""
    graph = graphs("squeezenet")
    _check(graph, PASS_SETS["default"], arena="ortvalue", check_all=True)
    _shortened_range_fails(tmp_path, arena="ortvalue")


def _shortened_range_fails(tmp_path, **verify_options):
    """A plan with one live range cut short fails at the step where it was cut."""
    tiny = graphmem.load(tiny_model(tmp_path))
    plan = graphmem.plan_graph(tiny, []).plan
    bad, q, _ = shorten_live_range(tiny, plan)
    report = verify(bad, tiny, runtime_only=True, **verify_options)
    assert not report.passed and report.mismatch.position == q


def _concat_model(tmp_path):
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Sigmoid", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Mul", ["c", "c"], ["y"])]
    model = make_model(nodes, [("x", F, [1, 2, 4, 4])], [("y", F, [1, 4, 4, 4])])
    path = tmp_path / "concat.onnx"
    path.write_bytes(model.SerializeToString())
    return graphmem.load(path)


def _as_slices(plan, first, second):
    c = plan.tensors["c"]
    t = dict(plan.tensors)
    t["a"] = dataclasses.replace(t["a"], offset=c.offset + first, slice_of="c")
    t["b"] = dataclasses.replace(t["b"], offset=c.offset + second, slice_of="c")
    return dataclasses.replace(plan, tensors=t)


def test_concat_of_slices_is_skipped_and_checked(tmp_path):
    graph = _concat_model(tmp_path)
    plan = graphmem.plan_graph(graph, []).plan
    n = plan.tensors["a"].bytes
    good = _as_slices(plan, 0, n)
    report = verify(good, graph, runtime_only=True, check_all=True)
    assert report.passed and report.nodes_skipped == 1 and report.nodes_run == 3
    swapped = _as_slices(plan, n, 0)  # each input written into the other's slice
    report = verify(swapped, graph, runtime_only=True)
    assert not report.passed
    assert report.mismatch.node.startswith("node 2 (Concat")


def test_index_inputs_stay_in_range(tmp_path):
    nodes = [helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)]
    model = make_model(nodes, [("table", F, [3, 5]), ("idx", TensorProto.INT64, [64])],
                       [("y", F, [64, 5])])
    path = tmp_path / "gather.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    feeds = random_inputs(graph, 0)
    assert feeds["idx"].min() >= 0 and feeds["idx"].max() < 3
    _check(graph, PASS_SETS["default"])


# ------------------------------------------------------------------------- CLI

def test_cli_verify_passes(capsys):
    assert main(["verify", "squeezenet"]) == 0
    out = capsys.readouterr().out
    assert "CPUExecutionProvider" in out and "PASS" in out and "softmaxout_1" in out
    # the concat pass writes the fire modules' branches into their Concat outputs,
    # so those 8 Concats have nothing to copy and are skipped
    assert "58 of 66, 8 Concat skipped" in out


def test_cli_plan_verify(tmp_cwd, capsys):
    assert main(["plan", "zfnet512", "--verify", "-q"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert (tmp_cwd / "zfnet512.plan.json").is_file()


def test_cli_plan_file_and_bad_inputs(tmp_cwd, capsys):
    assert main(["plan", "squeezenet", "-q", "-o", "sq.json"]) == 0
    assert main(["verify", "squeezenet", "--plan", "sq.json"]) == 0
    capsys.readouterr()
    # a plan made for another model
    assert main(["verify", "zfnet512", "--plan", "sq.json"]) == 2
    assert "another model" in capsys.readouterr().err
    # not a plan, not JSON, no file, not a model
    (tmp_cwd / "x.json").write_text(json.dumps({"format": "other/1"}))
    assert main(["verify", "squeezenet", "--plan", "x.json"]) == 2
    (tmp_cwd / "y.json").write_text("{not json")
    assert main(["verify", "squeezenet", "--plan", "y.json"]) == 2
    assert main(["verify", "squeezenet", "--plan", "missing.json"]) == 2
    (tmp_cwd / "m.onnx").write_bytes(b"garbage")
    assert main(["verify", "m.onnx"]) == 2
    err = capsys.readouterr().err
    assert all(line.startswith("graphmem: ") for line in err.strip().splitlines())


def test_cli_rule_broken_names_the_rule(tmp_cwd, capsys):
    assert main(["plan", "squeezenet", "-q", "-o", "sq.json"]) == 0
    d = json.loads((tmp_cwd / "sq.json").read_text())
    d["alignment"] = 128
    d["tensors"]["data_0"]["offset"] = 64
    (tmp_cwd / "bad.json").write_text(json.dumps(d))
    assert main(["verify", "squeezenet", "--plan", "bad.json"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "is not a non-negative multiple of the alignment 128" in out


def test_provider_cuda_without_gpu_is_bad_input(capsys):
    if cuda_usable():
        pytest.skip("the CUDA provider runs here")
    assert main(["verify", "squeezenet", "--provider", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "onnxruntime-gpu" in err and "CUDA" in err
    lines = err.strip().splitlines()  # graphmem's own lines only: no ORT log
    assert all(line.startswith("graphmem: ") for line in lines) and "CUDA" in lines[-1]


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_usable(),
                    reason="needs onnxruntime-gpu with CUDAExecutionProvider and a CUDA device")
@pytest.mark.parametrize("name", ZOO)
def test_zoo_verifies_on_cuda(graphs, name):
    report = _check(graphs(name), PASS_SETS["default"], provider="cuda", check_all=True)
    assert report.provider == "CUDAExecutionProvider"


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_usable(),
                    reason="needs onnxruntime-gpu with CUDAExecutionProvider and a CUDA device")
def test_cuda_mutation_fails(tmp_path):
    _shortened_range_fails(tmp_path, provider="cuda")


def test_verify_refuses_unknown_provider(graphs):
    graph = graphs("squeezenet")
    with pytest.raises(GraphmemError):
        verify(graphmem.plan_graph(graph).plan, graph, provider="tpu")


def test_symbolic_dims_from_the_command_line_and_from_the_plan(tmp_cwd, capsys):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["s"]),
             helper.make_node("Add", ["s", "x"], ["y"])]
    model = make_model(nodes, [("x", F, ["N", 8])], [("y", F, ["N", 8])])
    (tmp_cwd / "dyn.onnx").write_bytes(model.SerializeToString())
    assert main(["verify", "dyn.onnx", "--dim", "N=3"]) == 0
    assert main(["plan", "dyn.onnx", "--dim", "N=5", "-q", "-o", "dyn.json"]) == 0
    assert main(["verify", "dyn.onnx", "--plan", "dyn.json"]) == 0  # N=5 from the plan
    assert "PASS" in capsys.readouterr().out
    assert main(["verify", "dyn.onnx", "--plan", "dyn.json", "--dim", "N=4"]) == 2
    assert "N=5" in capsys.readouterr().err


def test_verify_with_npz_inputs(tmp_path, capsys):
    """--inputs FILE.npz: an array per input name (or arr_N by position)."""
    import numpy as np
    import onnx as _onnx
    folder = Path(_onnx.__file__).parent / "backend/test/data/simple/test_expand_shape_model1"
    model = folder / "model.onnx"
    from graphmem.verify.verifier import read_inputs
    graph = graphmem.load(model)
    feeds = read_inputs(folder / "test_data_set_0", graph)
    np.savez(tmp_path / "named.npz", **feeds)
    np.savez(tmp_path / "positional.npz", *[feeds[n] for n in graph.inputs])
    for f in ("named.npz", "positional.npz"):
        assert main(["verify", str(model), "--inputs", str(tmp_path / f)]) == 0
    assert "PASS" in capsys.readouterr().out
    np.savez(tmp_path / "other.npz", nothing=np.zeros(3))
    assert main(["verify", str(model), "--inputs", str(tmp_path / "other.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "names no graph input" in err[0]


def test_verify_with_shipped_inputs(capsys, tmp_path):
    """--inputs DIR reads an ONNX test-data folder; random inputs would break Expand here."""
    import onnx as _onnx
    folder = Path(_onnx.__file__).parent / "backend/test/data/simple/test_expand_shape_model1"
    model, data = folder / "model.onnx", folder / "test_data_set_0"
    assert main(["verify", str(model), "--inputs", str(data)]) == 0
    assert "PASS" in capsys.readouterr().out
    assert main(["verify", str(model), "--inputs", str(tmp_path)]) == 2
    assert "no input_*.pb" in capsys.readouterr().err


def test_a_declared_float16_rounding_is_kept_in_the_reference(tmp_path):
    """Found by the property test: Sigmoid in float16, then Cast to float32. With only
    the graph output asked for, ONNX Runtime drops the Cast pair around its float32
    fallback for the float16 Sigmoid and returns the unrounded value, which the arena
    run (each node as declared) cannot match: verify reported a plain one-buffer-each
    plan as FAIL. The reference now materialises every tensor at its declared type."""
    model = make_model([helper.make_node("Sigmoid", ["h"], ["s"]),
                        helper.make_node("Cast", ["s"], ["y"], to=F)],
                       [("h", TensorProto.FLOAT16, [2, 3])], [("y", F, [2, 3])])
    path = tmp_path / "fp16.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    for passes in ([], list(graphmem.DEFAULT_PASSES)):
        report = verify(graphmem.plan_graph(graph, passes).plan, graph)
        assert report.passed, report.mismatch.describe() if report.mismatch else report


def test_a_float16_rounding_the_reference_skips_is_within_tolerance(tmp_path):
    """Found by the property test after the fix above: Sigmoid and Add in float16, then
    Cast to float32. Even with every tensor an output, ONNX Runtime's float16 fallback
    feeds the Cast its float32 sum, so the float32 output differs from the node-by-node
    one by a float16 rounding (6.1e-05), past the float32 tolerance. A tensor computed
    from float16 values is now compared at the float16 tolerance."""
    model = make_model([helper.make_node("Sigmoid", ["h"], ["s"]),
                        helper.make_node("Add", ["h", "s"], ["a"]),
                        helper.make_node("Cast", ["a"], ["y"], to=F)],
                       [("h", TensorProto.FLOAT16, [2, 3])], [("y", F, [2, 3])])
    path = tmp_path / "fp16_add.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    assert tolerance_dtypes(graph) == {"y": "float16"}
    for passes in ([], list(graphmem.DEFAULT_PASSES)):
        report = verify(graphmem.plan_graph(graph, passes).plan, graph)
        assert report.passed, report.mismatch.describe() if report.mismatch else report


def test_tolerance_follows_the_least_precise_float_upstream(tmp_path):
    D, H, I = TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64
    model = make_model([helper.make_node("Cast", ["h"], ["f"], to=F),
                        helper.make_node("Cast", ["d"], ["g"], to=F),
                        helper.make_node("Add", ["f", "g"], ["s"]),
                        helper.make_node("Cast", ["s"], ["i"], to=I),
                        helper.make_node("Cast", ["g"], ["e"], to=D)],
                       [("h", H, [4]), ("d", D, [4])],
                       [("s", F, [4]), ("i", I, [4]), ("e", D, [4])])
    path = tmp_path / "mixed.onnx"
    path.write_bytes(model.SerializeToString())
    # f and s carry float16 precision; integers compare exactly; g and e: float32's
    assert tolerance_dtypes(graphmem.load(path)) == {"f": "float16", "s": "float16",
                                                     "e": "float32"}


def test_progress_lines_without_a_terminal(tmp_path, capsys, monkeypatch):
    """stderr not a terminal (a CI log): a progress line every PROGRESS_EVERY seconds,
    here every step, and the report as usual on stdout."""
    import time
    from graphmem.commands import progress
    from graphmem.commands import verify as verify_command
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.0)
    monkeypatch.setenv("GRAPHMEM_PROGRESS_AFTER", "0")  # the first line at once
    real = verify_command.verify

    def slow_verify(*args, **kwargs):  # long enough for the heartbeat to beat
        time.sleep(0.1)
        return real(*args, **kwargs)
    monkeypatch.setattr(verify_command, "verify", slow_verify)
    nodes = [helper.make_node("Relu" if i % 2 == 0 else "Neg", [f"t{i}"], [f"t{i + 1}"])
             for i in range(6)]
    path = tmp_path / "chain.onnx"
    import onnx
    onnx.save(make_model(nodes, [("t0", TensorProto.FLOAT, [4])],
                         [("t6", TensorProto.FLOAT, [4])]), str(path))
    assert main(["verify", str(path)]) == 0
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("graphmem: verify: ") for line in lines)
    assert "PASS" in out


def test_the_heartbeat_names_the_stage_under_way(capsys, monkeypatch):
    """A stage inside ONNX Runtime calls nothing back: the heartbeat's own thread
    prints what is under way (a 200k-node chain showed nothing for minutes)."""
    import time
    from graphmem.commands import progress
    from graphmem.commands import verify as verify_command
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.05)
    monkeypatch.setenv("GRAPHMEM_PROGRESS_AFTER", "0")  # the first line at once
    with verify_command.Heartbeat() as beat:
        beat.status = "the reference run on ONNX Runtime"
        time.sleep(0.2)
        beat.on_step(3, 6)
        time.sleep(0.2)
    time.sleep(0.1)
    lines = capsys.readouterr().err.strip().splitlines()
    assert any("the reference run on ONNX Runtime" in line for line in lines)
    assert any("3 of 6 nodes" in line for line in lines)
    count = len(lines)
    time.sleep(0.15)
    assert len(capsys.readouterr().err.strip().splitlines()) == 0 and count > 2  # stopped


def test_runtime_errors_keep_what_a_user_acts_on():
    from graphmem.verify.node_sessions import runtime_message
    exc = RuntimeError(
        "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 "
        "onnxruntime::Model::Model(onnx::ModelProto&&, const onnxruntime::PathString&, const "
        "onnxruntime::logging::Logger&, const onnxruntime::ModelOptions&) Unsupported model IR "
        "version: 14, max supported IR version: 13\n")
    assert runtime_message(exc) == ("[ONNXRuntimeError] : 1 : FAIL : Unsupported model IR "
                                    "version: 14, max supported IR version: 13")
    assert len(runtime_message(RuntimeError("x" * 2000), 100)) == 100
