"""Issue 38's reproducers and generated hostile files as regression tests: each run of
``graphmem`` in a process limited to 2 GB of address space and 20 s ends in a plan or in
exactly one ``graphmem:`` line with exit 2 (tools/faults/fuzz_reader.py runs the campaign;
its generated cases are the ones here, their floods a tenth of the size)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tools.faults import fuzz_reader as fuzz  # the campaign's mutations and generated models

ROOT = Path(__file__).resolve().parent.parent
F = TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits=(), opset=17) -> bytes:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m.SerializeToString()


def _loop(trip: TensorProto) -> bytes:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["x", "x"], ["s"])],
        "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, [])],
        [vi("cond_out", TensorProto.BOOL, []), vi("s", F, [4])])
    return _model([helper.make_node("Loop", ["M", ""], ["out"], body=body)],
                  [vi("x", F, [4])], [vi("out", F, [3, 4])], [trip])


def _float8_trip() -> TensorProto:
    t = TensorProto(name="M", data_type=TensorProto.FLOAT8E5M2FNUZ, dims=[])
    t.raw_data = b"\x80"  # NaN in float8e5m2fnuz
    return t


def _scan_with_an_unnamed_input() -> bytes:
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Identity", ["x"], ["y"])],
        "body", [vi("s", F, [4]), vi("x", F, [4])], [vi("s2", F, [4]), vi("y", F, [4])])
    return _model([helper.make_node("Scan", ["s0", ""], ["sf", "ys"], body=body,
                                    num_scan_inputs=1)],
                  [vi("s0", F, [4]), vi("xs", F, [3, 4])], [vi("sf", F, [4]), vi("ys", F, [3, 4])])


def _loop_of_a_constant_with_too_much_data() -> bytes:
    m = onnx.ModelProto.FromString(_loop(numpy_helper.from_array(np.array(3, np.int64), "M")))
    t = TensorProto(name="c", data_type=TensorProto.INT64, dims=[])
    t.raw_data = np.array([3, 4], np.int64).tobytes()  # two values for a scalar
    del m.graph.initializer[:]
    m.graph.node.insert(0, helper.make_node("Constant", [], ["M"], value=t))
    return m.SerializeToString()


def _bert_with_reshape_target(raw: bytes) -> bytes:
    """issue 38's reproducer 1: in the BERT export, the Constant '/m/Constant_26' (a
    Reshape target, [-1]) holding other bytes."""
    m = onnx.load(str(ROOT / "tests/data/corpus/bert-ts.onnx"))
    (node,) = [n for n in m.graph.node if n.name == "/m/Constant_26"]
    node.attribute[0].t.raw_data = raw
    return m.SerializeToString()


def _constant_of_shape_of_a_reshaped_shape(n: int) -> bytes:
    """A Reshape target of n in the file, whose output's Shape sizes a ConstantOfShape
    that a Mul reads: onnx's data propagation materialized it (bad_alloc under 4 GB at
    n = 1e9)."""
    c = lambda name, v, dt=np.int64: numpy_helper.from_array(np.array(v, dt), name)
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["s", "t"], ["r"]),
             helper.make_node("Shape", ["r"], ["rs"]),
             helper.make_node("ConstantOfShape", ["rs"], ["o"]),
             helper.make_node("Mul", ["o", "m"], ["mo"]),
             helper.make_node("ReduceSum", ["mo"], ["z"], keepdims=0),
             helper.make_node("Add", ["x", "z"], ["y"])]
    return _model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
                  [c("t", [n]), c("m", -1.0, np.float32)])


def _utf8_dim_param() -> bytes:
    data = _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, ["@@N@@", 4])],
                  [vi("y", F, ["@@N@@", 4])])
    return data.replace(b"@@N@@", b"\xff\xfeN\x80\x81")


def _reads_its_own_output() -> bytes:
    return _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Add", ["z", "y"], ["z"])],
                  [vi("x", F, [4])], [vi("z", F, [4])])


def _gather_out_of_range() -> bytes:
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.array(v, np.int64)))
    return _model([c("d", [1, 2, 3, 4]), c("i", [7]), helper.make_node("Gather", ["d", "i"], ["g"]),
                   helper.make_node("Reshape", ["x", "g"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                  [vi("x", F, [4])], [vi("z", F, [4])])


REPRODUCERS = {
    # (model bytes, what the one line says, or None for a plan)
    "loop-trip-count-inf": (_loop(numpy_helper.from_array(np.array(np.inf, np.float32), "M")),
                            "its trip count is of type float32, not an integer"),
    "loop-trip-count-float8": (_loop(_float8_trip()),
                               "its trip count is of type float8_e5m2fnuz, not an integer"),
    "loop-constant-data-past-its-shape": (
        _loop_of_a_constant_with_too_much_data(),
        "Constant 'M': its data does not fill its shape [] (cannot reshape array of size 2"),
    "bert-reshape-target-8-bytes": (
        _bert_with_reshape_target(bytes.fromhex("dec8484122516d20")),
        "node 106 (Reshape '/m/Reshape_2'): its output would hold 2336612989241182430 "
        "elements of 8 bytes (from '/m/Constant_26_output_0' = [2336612989241182430]), past "
        "the 2**62 bytes graphmem can plan"),
    "bert-reshape-target-9-bytes": (
        _bert_with_reshape_target(bytes.fromhex("dec8484122516d20ff")),
        "(ConstantOfShape '/m/ConstantOfShape_1'): its output would hold"),
    "bert-reshape-target-2**40": (_bert_with_reshape_target((1 << 40).to_bytes(8, "little")),
                                  "cannot infer the shape of tensor"),
    "constant-of-shape-of-1e9": (_constant_of_shape_of_a_reshaped_shape(10 ** 9), None),
    "dim-param-not-utf8": (_utf8_dim_param(), "the model is corrupt: dim_param "
                           "b'\\xff\\xfeN\\x80\\x81' (axis 0 of graph input 'x') is not valid UTF-8"),
    "reads-its-own-output": (_reads_its_own_output(), "the graph has a cycle"),
    "gather-index-out-of-range": (_gather_out_of_range(), "constant 'g' not computed: Gather node"),
    "scan-unnamed-input": (_scan_with_an_unnamed_input(),
                           "its input 1 has no name; a Scan's inputs cannot be left out"),
}


@pytest.mark.heavy  # fuzz replays under the campaign's time limit: CI's heavy stage
@pytest.mark.parametrize("name", sorted(REPRODUCERS))
def test_reproducers_end_in_one_line_or_a_plan(tmp_path, name):
    data, says = REPRODUCERS[name]
    (tmp_path / "m.onnx").write_bytes(data)
    o = fuzz.run_plan(tmp_path / "m.onnx", ["--dim-default", "2"])
    if says is None:
        assert o.kind == "plan", o
    else:
        assert o.kind == "one line, exit 2" and says in o.detail, o
    assert o.seconds < fuzz.LIMIT_SECONDS and o.peak_mb < fuzz.LIMIT_BYTES / 2**20


GENERATED = fuzz.generated(scale=0.1)


@pytest.mark.heavy  # fuzz replays under the campaign's time limit: CI's heavy stage
@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_hostile_files_end_in_one_line_or_a_plan(tmp_path, name):
    """Nesting 20,000 deep (refused, as protobuf refuses it) and just under protobuf's
    limit, floods of repeated fields, dims of 2^62."""
    (tmp_path / "m.onnx").write_bytes(GENERATED[name])
    o = fuzz.run_plan(tmp_path / "m.onnx", ["--dim-default", "2"])
    assert o.kind in ("plan", "one line, exit 2"), o
    assert o.seconds < fuzz.LIMIT_SECONDS and o.peak_mb < fuzz.LIMIT_BYTES / 2**20


def _verify(cwd: Path, *args: str, limit: int | None = None, env=None) -> subprocess.CompletedProcess:
    code = ("import resource, sys\n"
            + (f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n" if limit else "")
            + "from graphmem.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code, "verify", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))


@pytest.fixture
def loop_plan(tmp_path):
    (tmp_path / "m.onnx").write_bytes(_loop(numpy_helper.from_array(np.array(3, np.int64), "M")))
    proc = subprocess.run([sys.executable, "-m", "graphmem", "plan", "m.onnx", "-o", "p.json",
                           "-q"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return tmp_path, json.loads((tmp_path / "p.json").read_text())


def test_verify_runtime_only_of_a_body_plan_with_a_tensor_the_body_lacks(loop_plan):
    folder, plan = loop_plan
    plan["scopes"][0]["tensors"]["ghost"] = {"kind": "temp", "bytes": 8, "offset": 0,
                                             "live": [0, 1]}
    (folder / "bad.json").write_text(json.dumps(plan))
    proc = _verify(folder, "m.onnx", "--plan", "bad.json", "--runtime-only")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "graphmem: the plan was made for another model: it places tensor 'ghost', which "
        "'body' does not have"]


def test_verify_of_an_arena_past_the_memory_it_may_take(loop_plan):
    """An arena of 6 GiB in a process limited to 4 GB: one line, not a MemoryError."""
    folder, plan = loop_plan
    plan["arena_bytes"] = 6 << 30
    (folder / "big.json").write_text(json.dumps(plan))
    proc = _verify(folder, "m.onnx", "--plan", "big.json", "--runtime-only", limit=4 << 30)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    # the limit counts: MemAvailable alone said 20 GB and let numpy's MemoryError through
    # (the reference holds at most 64 bytes of this Loop model at once: it drops a tensor
    # once its last reader is compared)
    assert line.startswith("graphmem: verifying needs about 6,442,451,008 bytes (an arena of "
                           "6,442,450,944"), line
    assert int(line.rsplit(" has ", 1)[1].split()[0].replace(",", "")) < 4 << 30


def test_onnx_runtime_writes_nothing_outside_the_outputs(tmp_path):
    """ONNX Runtime's telemetry wrote ~/.cache/Microsoft/DeveloperTools/.onnxruntime and
    $TMPDIR/.ses at its first session (issue 38): graphmem's commands opt out."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    from graphmem.frontend.zoo import zoo_path
    shutil.copy(zoo_path("squeezenet"), tmp_path / "m.onnx")
    env = {"HOME": str(home), "TMPDIR": str(tmp)}
    env.pop("ORT_DISABLE_TELEMETRY", None)
    base = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    proc = subprocess.run([sys.executable, "-m", "graphmem", "verify", "m.onnx"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**base, **env})
    assert proc.returncode == 0, proc.stderr
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []


def _sparse_model(dims=(4, 4), indices=(0, 5, 10), coordinates=False) -> bytes:
    values = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "sp")
    idx = np.array(indices, np.int64)
    if coordinates:
        idx = np.stack(np.unravel_index(idx, dims), axis=1)
    sp = helper.make_sparse_tensor(values, numpy_helper.from_array(idx, "sp_idx"), list(dims))
    g = helper.make_graph([helper.make_node("MatMul", ["x", "sp"], ["y"])], "g",
                          [vi("x", F, [2, dims[0]])], [vi("y", F, [2, dims[1]])])
    g.sparse_initializer.extend([sp])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m.SerializeToString()


@pytest.mark.parametrize("coordinates", [False, True])
def test_a_sparse_initializer_is_planned_at_its_stored_size_and_verified(tmp_path, coordinates):
    """A sparse initializer was refused ("reads tensor 'sp', which no node produces"): it
    is read as a dense one for the shapes, and its weight is what the file stores (3
    float values and 3 int64 indices, or 3 rows of 2 coordinates: not 16 floats)."""
    import graphmem
    (tmp_path / "m.onnx").write_bytes(_sparse_model(coordinates=coordinates))
    graph = graphmem.load(tmp_path / "m.onnx")
    assert graph.tensors["sp"].shape == (4, 4)
    assert graph.weight_bytes() == 3 * 4 + 3 * 8 * (2 if coordinates else 1)
    proc = subprocess.run([sys.executable, "-m", "graphmem", "verify", "m.onnx"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr


def test_a_sparse_index_out_of_its_shape_is_one_line(tmp_path):
    (tmp_path / "m.onnx").write_bytes(_sparse_model(indices=(0, 5, 16)))
    o = fuzz.run_plan(tmp_path / "m.onnx", [])
    assert o.kind == "one line, exit 2" and "sparse initializer 'sp'" in o.detail, o


def test_folding_prints_no_numpy_warning(tmp_path):
    """T5's folding printed "divide by zero encountered in log" even with --quiet: a
    Log of 0 folded for a shape (its result cast to a count) prints nothing."""
    c = numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "z")
    nodes = [helper.make_node("Log", ["z"], ["l"]), helper.make_node("Exp", ["l"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["s"]),
             helper.make_node("Cast", ["s"], ["shape"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "shape"], ["y"]),
             helper.make_node("Relu", ["y"], ["out"])]
    (tmp_path / "m.onnx").write_bytes(_model(
        nodes, [vi("x", F, [2])], [vi("out", F, [1, 2])],
        [c, numpy_helper.from_array(np.array(1.0, np.float32), "one")]))
    proc = subprocess.run([sys.executable, "-m", "graphmem", "plan", "m.onnx", "-o", "p.json",
                           "-q"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
