"""Training memory against PyTorch's (issue 37): exports that share one Reshape target
across several Reshapes, recomputation that never plans above no recomputation, and
element-wise chains recomputed in backward instead of kept."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from graphmem.cli import main
from graphmem.training.build import build_training
from graphmem.training.prepare import prepare_inference

RNG = np.random.default_rng(37)


def _model(nodes, inits, inputs, outputs) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _run(model: onnx.ModelProto, feeds: dict) -> dict:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), opts,
                             providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def shared_target_model(batch: int = 2, weight_reshape: bool = False) -> onnx.ModelProto:
    """Three Reshapes of activations read one target initializer ``[batch, 4, 16]``, as
    PyTorch's dynamo exporter writes GPT-2's head splits; ``weight_reshape``: a fourth
    reshapes a weight by it (not an activation: its target must stay)."""
    def w(name, shape):
        return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)
    inits = [w("wq", [32, 64]), w("wk", [32, 64]),
             numpy_helper.from_array(np.array([batch, 4, 16], np.int64), "val_501"),
             numpy_helper.from_array(np.array([batch, 64], np.int64), "flat")]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("Reshape", ["q", "val_501"], ["q4"]),
             helper.make_node("Reshape", ["k", "val_501"], ["k4"]),
             helper.make_node("Mul", ["q4", "k4"], ["s"])]
    if weight_reshape:
        inits.append(w("wb", [batch, 64]))
        nodes += [helper.make_node("Reshape", ["wb", "val_501"], ["wb4"]),
                  helper.make_node("Add", ["s", "wb4"], ["s2"])]
    nodes += [helper.make_node("Tanh", [nodes[-1].output[0]], ["t"]),
              helper.make_node("Reshape", ["t", "val_501"], ["t4"]),
              helper.make_node("Reshape", ["t4", "flat"], ["y"])]
    return _model(nodes, inits,
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 32])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 64])])


def test_one_target_shared_by_several_reshapes_is_rewritten_once(tmp_path, capsys):
    """GPT-2's dynamo export failed: 'duplicate tensor name val_501__batch1: two
    initializers' (one new initializer per Reshape of a shared target)."""
    m = prepare_inference(shared_target_model(weight_reshape=True), 5)
    names = [i.name for i in m.graph.initializer]
    assert len(names) == len(set(names))
    target = {n.output[0]: n.input[1] for n in m.graph.node if n.op_type == "Reshape"}
    assert target["q4"] == target["k4"] == target["t4"] == "val_501__batch5"
    assert target["wb4"] == "val_501"  # a weight's Reshape keeps the original target
    tg = build_training(shared_target_model(), 5, loss="sum")
    x = RNG.standard_normal([5, 32]).astype(np.float32)
    out = _run(tg.model, tg.feeds({"x": x}))
    assert out[tg.gradients["wq"]].shape == (32, 64)
    assert all(np.isfinite(out[g]).all() for g in tg.gradients.values())
    path = tmp_path / "shared.onnx"
    onnx.save(shared_target_model(), str(path))
    assert main(["train", str(path), "--batch", "3", "--loss", "sum", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"] == 3
