"""Careless command lines and models: one 'graphmem:' line, exit 2, nothing opened that
the model does not own (issue 25)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.cli import main
from graphmem.frontend.zoo import zoo_path


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(zoo_path("squeezenet"), "m.onnx")
    return tmp_path / "m.onnx"


@pytest.mark.parametrize("argv, says", [
    (["fit", "m.onnx", "--budget", "1e400"], "past the largest size"),
    (["fit", "m.onnx", "--budget", "-5GiB"], "a size cannot be negative"),
    (["verify", "m.onnx", "--seed", "-1"], "-1 is negative"),
    (["plan", "m.onnx", "--dim-default", str(2 ** 62)], "past the largest dimension"),
    (["plan", "m.onnx", "--dim", f"N={2 ** 50}"], "past the largest dimension"),
    (["plan", "m.onnx", "--no-such-option"],
     "plan: unrecognized arguments: --no-such-option (see graphmem plan --help)"),
    # a second positional (verify reads its plan with --plan): the command's help is named
    (["verify", "m.onnx", "m.plan.json"],
     "verify: unrecognized arguments: m.plan.json (see graphmem verify --help)"),
    (["plan"], "required: model"),
])
def test_one_line_and_exit_2(model, capsys, argv, says):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors leave through sys.exit
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graphmem: ") and says in err[0], err


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "a/../../b.bin"])
@pytest.mark.parametrize("command", [["plan", "-o", "p.json"], ["report"], ["verify"],
                                     ["export", "--html", "h.html"]])
def test_external_data_outside_the_folder_is_refused_unopened(tmp_path, monkeypatch, capsys,
                                                              location, command):
    monkeypatch.chdir(tmp_path)
    _external_model("ext.onnx", location, 256)
    assert main([command[0], "ext.onnx", *command[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"graphmem: ext.onnx: tensor 'w' keeps its data at {location!r}, "
                   f"outside the model's folder; refused"]


@pytest.mark.parametrize("command", [["plan", "-o", "p.json"], ["report"], ["verify"],
                                     ["export", "--html", "h.html"]])
def test_external_data_through_a_link_out_of_the_folder_is_refused(tmp_path, monkeypatch,
                                                                   capsys, command):
    # the name stays inside the folder, the link it names leads out of it: every command
    # refuses it, plan/report/export included (they never open weights, verify does)
    (tmp_path / "m").mkdir()
    (tmp_path / "outside.bin").write_bytes(np.ones(64, np.float32).tobytes())
    (tmp_path / "m" / "w.bin").symlink_to(tmp_path / "outside.bin")
    monkeypatch.chdir(tmp_path / "m")
    _external_model("ext.onnx", "w.bin", 256)
    assert main([command[0], "ext.onnx", *command[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["graphmem: ext.onnx: tensor 'w' keeps its data at 'w.bin', "
                   "outside the model's folder; refused"]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


@pytest.mark.parametrize("command", [["plan", "-o", "p.json"], ["report"], ["verify"]])
def test_an_external_location_written_as_a_huge_enum_is_checked(tmp_path, monkeypatch, capsys,
                                                                command):
    """issue 38: data_location 2^32 + 1 is EXTERNAL to protobuf (an enum keeps the low 32
    bits of its varint); graphmem's reader read it as inline and skipped the location
    check. The weight names a link out of the folder: refused, in one line."""
    (tmp_path / "m").mkdir()
    (tmp_path / "outside.bin").write_bytes(np.ones(64, np.float32).tobytes())
    (tmp_path / "m" / "w.bin").symlink_to(tmp_path / "outside.bin")
    monkeypatch.chdir(tmp_path / "m")
    _external_model("ext.onnx", "w.bin", 256)
    model = onnx.load("ext.onnx", load_external_data=False)
    tensor = model.graph.initializer[0].SerializeToString()
    assert tensor.count(b"\x70\x01") == 1  # data_location = EXTERNAL, as onnx writes it
    tensor = tensor.replace(b"\x70\x01", b"\x70" + _varint((1 << 32) + 1))
    del model.graph.initializer[:]
    graph = model.graph.SerializeToString() + b"\x2a" + _varint(len(tensor)) + tensor
    model.ClearField("graph")
    data = model.SerializeToString() + b"\x3a" + _varint(len(graph)) + graph
    assert onnx.ModelProto.FromString(data).graph.initializer[0].data_location == 1
    (tmp_path / "m" / "ext.onnx").write_bytes(data)
    assert main([command[0], "ext.onnx", *command[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["graphmem: ext.onnx: tensor 'w' keeps its data at 'w.bin', "
                   "outside the model's folder; refused"]


def test_external_data_shorter_than_its_shape_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.bin").write_bytes(np.ones(16, np.float32).tobytes())
    _external_model("s.onnx", "w.bin", 64)
    assert main(["verify", "s.onnx"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "initializer 'w': its data does not fill its shape [1, 64]" in err[0]


def _external_model(path: str, location: str, length: int) -> None:
    """y = x + w, with w (float32[1, 64]) kept in external data at ``location``."""
    w = numpy_helper.from_array(np.ones((1, 64), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(length))):
        e = w.external_data.add()
        e.key, e.value = k, v
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_huge_range_of_constants_plans_in_bounded_memory(tmp_path):
    """Range(0, 3e9, 1) of initializers: onnx's data propagation would materialize its
    24 GB output (12 GB and more before); graphmem infers without it and plans in a
    process limited to 2 GB of address space beyond its start."""
    import subprocess
    import sys
    import numpy as np
    from onnx import helper, numpy_helper
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("start", 0), ("limit", 3_000_000_000), ("delta", 1))]
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Cast", ["r"], ["f"], to=1),
             helper.make_node("Add", ["f", "x"], ["y"])]
    graph = helper.make_graph(nodes, "range", [helper.make_tensor_value_info("x", 1, [1])],
                              [helper.make_tensor_value_info("y", 1, [3_000_000_000])], inits)
    path = tmp_path / "range.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(path))
    code = ("import resource, sys; from graphmem.cli import main; "
            "soft = resource.getrlimit(resource.RLIMIT_AS)[0]; "
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY)); "
            f"sys.exit(main(['plan', {str(path)!r}, '-o', {str(tmp_path / 'p.json')!r}, '-q']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-500:]
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["tensors"]["y"]["bytes"] == 12_000_000_000


def test_position_ids_from_a_range_over_the_sequence():
    """The exporters' position ids, Range(0, seq) with seq from Shape: inferred without
    data propagation, their shapes come from the small constants' values."""
    import numpy as np
    from onnx import helper, numpy_helper
    from graphmem.frontend.reader import from_model
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.ones((64, 8), np.float32), "pos_emb")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Range", ["zero", "seq", "one"], ["pos"]),
             helper.make_node("Gather", ["pos_emb", "pos"], ["pe"]),
             helper.make_node("Add", ["x", "pe"], ["y"])]
    graph = helper.make_graph(nodes, "pos", [helper.make_tensor_value_info("x", 1, [2, "seq", 8])],
                              [helper.make_tensor_value_info("y", 1, [2, "seq", 8])], inits)
    g = from_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                   {"seq": 5})
    assert g.tensors["pos"].shape == (5,) and g.tensors["y"].shape == (2, 5, 8)
    assert "pos" in g.arena_tensors()  # computed from a bound dim: it runs
