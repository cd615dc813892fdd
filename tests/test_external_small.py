"""Small initializers kept in an external file (onnx's ``save_model(...,
save_as_external_data=True, size_threshold=0)``: a Reshape's two-element shape included)
are read in by the loader (:mod:`graphmem.frontend.external_values`): every command sees
their values, and the plan is the one of the same model with them stored inside."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.cli import main


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _reshape_model() -> onnx.ModelProto:
    """x[N, 6] @ W -> Relu -> Reshape to [-1, 3, 2] (the shape an initializer)."""
    w = np.random.default_rng(0).standard_normal([6, 6]).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Reshape", ["r", "shape"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", 3, 2])],
        [_init("W", w), _init("shape", np.array([-1, 3, 2], np.int64))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _ops_model() -> onnx.ModelProto:
    """Every input read as a value from an initializer: ReduceSum's axes, Slice's
    starts/ends/axes, a Gather index into a Shape and a Concat tail (ConstantOfShape's
    shape, computed), Expand's shape, TopK's k, Resize's scales; and a Reshape's shape
    from a Constant node (its value an attribute)."""
    nodes = [
        helper.make_node("ReduceSum", ["x", "raxes"], ["s"], keepdims=1),
        helper.make_node("Add", ["x", "s"], ["r"]),
        helper.make_node("Constant", [], ["rshape"],
                         value=_init("rshape_value", np.array([-1, 3, 2], np.int64))),
        helper.make_node("Reshape", ["r", "rshape"], ["rs"]),
        helper.make_node("Slice", ["rs", "starts", "ends", "axes"], ["sl"]),
        helper.make_node("Shape", ["sl"], ["shp"]),
        helper.make_node("Gather", ["shp", "idx0"], ["d0"], axis=0),
        helper.make_node("Concat", ["d0", "tail"], ["cos_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["cos_shape"], ["cos"],
                         value=_init("v", np.array([1.0], np.float32))),
        helper.make_node("Add", ["cos", "sl"], ["a"]),
        helper.make_node("Expand", ["a", "eshape"], ["ex"]),
        helper.make_node("TopK", ["ex", "k"], ["tv", "ti"], axis=-1),
        helper.make_node("Resize", ["tv", "", "scales"], ["y"], mode="nearest"),
    ]
    inits = [_init("raxes", np.array([1], np.int64)),
             _init("starts", np.array([0], np.int64)), _init("ends", np.array([2], np.int64)),
             _init("axes", np.array([1], np.int64)), _init("idx0", np.array([0], np.int64)),
             _init("tail", np.array([2, 2], np.int64)),
             _init("eshape", np.array([2, 1, 2, 2], np.int64)),
             _init("k", np.array([1], np.int64)),
             _init("scales", np.array([1, 1, 2, 1], np.float32))]
    g = helper.make_graph(nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["N", 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         ["a", "b", "c", "d"])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _save_both(model: onnx.ModelProto, folder, name: str, attributes: bool = False):
    """The model saved with every tensor external (size_threshold=0; ``attributes``:
    the nodes' tensor attributes too, onnx's convert_attribute) and inside."""
    folder.mkdir()
    external, inside = folder / f"{name}.onnx", folder / f"{name}_inside.onnx"
    onnx.save_model(model, str(inside))
    onnx.save_model(model, str(external), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=f"{name}.data", size_threshold=0,
                    convert_attribute=attributes)
    stored = onnx.load(str(external), load_external_data=False).graph.initializer
    assert stored and all(t.data_location == TensorProto.EXTERNAL for t in stored)
    return external, inside


def _plan(model, out, dims, capsys) -> dict:
    args = ["plan", str(model), "-o", str(out), "--quiet"]
    for d in dims:
        args += ["--dim", d]
    assert main(args) == 0, capsys.readouterr().err
    plan = json.loads(out.read_text())
    plan.pop("model", None)  # the file's name
    return plan


def _nested_model() -> onnx.ModelProto:
    """models/control_flow.py's If inside a Loop: its bodies hold initializers too."""
    from models.control_flow import nested
    return nested(steps=2, batch=2, d=8, wide=16)


@pytest.mark.parametrize("make", [_reshape_model, _ops_model, _nested_model],
                         ids=["reshape", "ops", "bodies"])
def test_external_shape_values_plan_as_inside(tmp_path, capsys, make):
    external, inside = _save_both(make(), tmp_path / "m", "m")
    assert _plan(external, tmp_path / "e.json", ["N=2"], capsys) == \
        _plan(inside, tmp_path / "i.json", ["N=2"], capsys)


@pytest.mark.parametrize("make", [_reshape_model, _ops_model, _nested_model],
                         ids=["reshape", "ops", "bodies"])
def test_external_shape_values_verify_whole_model(tmp_path, capsys, make):
    external, _ = _save_both(make(), tmp_path / "m", "m")
    capsys.readouterr()
    assert main(["verify", str(external), "--dim", "N=2"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    # the whole-model session is given the small values inside its proto (ORT's load
    # reads a Reshape's shape from there), and so runs
    assert "agrees with the node-by-node run" in out, out


@pytest.mark.parametrize("command", [["report"], ["train"], ["plan", "--verify", "-o", "p.json"],
                                     ["export", "--annotated", "m/a.onnx"]])
def test_external_shape_values_in_every_command(tmp_path, monkeypatch, capsys, command):
    external, _ = _save_both(_reshape_model(), tmp_path / "m", "m")
    monkeypatch.chdir(tmp_path)  # not the model's folder: its data is read from there
    assert main([command[0], str(external), "--dim", "N=2", *command[1:]]) == 0, \
        capsys.readouterr().err


def test_a_missing_data_file_is_named_where_a_shape_needs_it(tmp_path, capsys):
    external, _ = _save_both(_reshape_model(), tmp_path / "m", "m")
    (tmp_path / "m" / "m.data").unlink()
    assert main(["plan", str(external), "--dim", "N=2", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'shape' not read" in err[0] and "No such file" in err[0], err
    assert not (tmp_path / "p.json").exists()


def test_a_decoder_saved_all_external_plans_as_inside(tmp_path, capsys):
    from models.decoder import build
    external, inside = _save_both(build(layers=1), tmp_path / "d", "decoder")
    dims = ["batch_size=1", "sequence_length=1", "past_sequence_length=7",
            "total_sequence_length=8"]
    assert _plan(external, tmp_path / "e.json", dims, capsys) == \
        _plan(inside, tmp_path / "i.json", dims, capsys)


def test_ort_optimize_says_why_onnx_runtime_refuses_it(tmp_path, capsys):
    # ONNX Runtime's load runs onnx's shape inference, which reads no external file: it
    # refuses the model (graphmem plans it without --ort-optimize, see above)
    external, _ = _save_both(_reshape_model(), tmp_path / "m", "m")
    capsys.readouterr()
    assert main(["plan", str(external), "--dim", "N=2", "--ort-optimize", "basic",
                 "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "size_threshold above 0" in err[0], err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("command", [["plan"], ["verify"]])
def test_external_constant_attributes(tmp_path, capsys, command):
    """Saved with convert_attribute=True: a Constant's value and ConstantOfShape's are
    external too (onnx's checker refused the model before)."""
    external, inside = _save_both(_ops_model(), tmp_path / "m", "m", attributes=True)
    node = onnx.load(str(external), load_external_data=False).graph.node[2]
    assert node.op_type == "Constant" and node.attribute[0].t.data_location == \
        TensorProto.EXTERNAL
    if command == ["plan"]:
        assert _plan(external, tmp_path / "e.json", ["N=2"], capsys) == \
            _plan(inside, tmp_path / "i.json", ["N=2"], capsys)
    else:
        capsys.readouterr()
        assert main(["verify", str(external), "--dim", "N=2"]) == 0, capsys.readouterr().err
        assert "agrees with the node-by-node run" in capsys.readouterr().out
