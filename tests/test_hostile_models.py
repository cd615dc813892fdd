"""Issue 38's reproducers and generated hostile files as regression tests: each run of
``graphmem`` in a process limited to 2 GB of address space and 20 s ends in a plan or in
exactly one ``graphmem:`` line with exit 2 (tools/fuzz_reader.py runs the campaign;
its generated cases are the ones here, their floods a tenth of the size)."""
from __future__ import annotations

import importlib.util
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

ROOT = Path(__file__).resolve().parent.parent
F = TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fuzz = _tool("fuzz_reader")


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


REPRODUCERS = {
    # (model bytes, what the one line says, or None for a plan)
    "loop-trip-count-inf": (_loop(numpy_helper.from_array(np.array(np.inf, np.float32), "M")),
                            "its trip count is of type float32, not an integer"),
    "loop-trip-count-float8": (_loop(_float8_trip()),
                               "its trip count is of type float8_e5m2fnuz, not an integer"),
    "loop-constant-data-past-its-shape": (
        _loop_of_a_constant_with_too_much_data(),
        "Constant 'M': its data does not fill its shape [] (cannot reshape array of size 2"),
    "scan-unnamed-input": (_scan_with_an_unnamed_input(),
                           "its input 1 has no name; a Scan's inputs cannot be left out"),
}


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
    assert line.startswith("graphmem: the arena of 6442450944 bytes does not fit in the "
                           "memory this process can take")


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
