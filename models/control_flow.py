"""Small models with control flow (Loop, Scan, If), built with onnx.helper.

Each holds its memory inside a body, so planning the body is what sizes the arena:

- ``loop_decoder``: a Loop of a fixed trip count whose body makes a wide intermediate
  per step (an up-projection) and emits one row per step as a scan output, reading
  weights and an activation of the outer graph;
- ``scan_rnn``: a Scan over time of a tanh RNN cell, the hidden state carried;
- ``if_branches``: an If whose then-branch is much larger than its else-branch;
- ``nested``: an If whose then-branch holds a Loop (the body of ``loop_decoder``).

    python models/control_flow.py --out DIR      # writes DIR/<name>.onnx for each
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
F = TensorProto.FLOAT


def _w(rng, name, *shape, scale=0.05):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return m


def _decoder_body(batch: int, d: int, wide: int, prefix: str = "") -> onnx.GraphProto:
    """Loop body (iter, cond, h) -> (cond, h', y): h' = h + W2 tanh(W1 h) * gate, y = h'."""
    p = prefix
    nodes = [
        helper.make_node("Identity", ["cond_in"], [p + "cond_out"]),
        helper.make_node("MatMul", ["h_in", "W1"], [p + "up"]),        # [batch, wide]
        helper.make_node("Tanh", [p + "up"], [p + "act"]),
        helper.make_node("Mul", [p + "act", p + "act"], [p + "sq"]),
        helper.make_node("Add", [p + "sq", p + "act"], [p + "mix"]),
        helper.make_node("MatMul", [p + "mix", "W2"], [p + "down"]),   # [batch, d]
        helper.make_node("Mul", [p + "down", "gate"], [p + "gated"]),  # outer activation
        helper.make_node("Add", ["h_in", p + "gated"], [p + "h_out"]),
        helper.make_node("Neg", [p + "h_out"], [p + "y"]),
    ]
    return helper.make_graph(
        nodes, p + "decoder_body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", F, [batch, d])],
        [helper.make_tensor_value_info(p + "cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info(p + "h_out", F, [batch, d]),
         helper.make_tensor_value_info(p + "y", F, [batch, d])])


def loop_decoder(steps: int = 6, batch: int = 16, d: int = 64, wide: int = 2048,
                 seed: int = 0) -> onnx.ModelProto:
    """x [batch, d] -> (h [batch, d], ys [steps, batch, d]); the body's [batch, wide]
    intermediates (128 KiB each at the defaults) are the model's peak."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["gate"]),
        helper.make_node("Loop", ["M", "", "x"], ["h", "ys"], name="decode",
                         body=_decoder_body(batch, d, wide)),
    ]
    g = helper.make_graph(
        nodes, "loop_decoder", [helper.make_tensor_value_info("x", F, [batch, d])],
        [helper.make_tensor_value_info("h", F, [batch, d]),
         helper.make_tensor_value_info("ys", F, [steps, batch, d])],
        [numpy_helper.from_array(np.array(steps, np.int64), "M"),
         _w(rng, "W1", d, wide), _w(rng, "W2", wide, d)])
    return _model(g)


def scan_rnn(steps: int = 12, batch: int = 4, inp: int = 16, hidden: int = 256,
             seed: int = 0) -> onnx.ModelProto:
    """A tanh RNN over time: X [steps, batch, inp], h0 [batch, hidden] ->
    (Y [steps, batch, hidden], h_last [batch, hidden])."""
    rng = np.random.default_rng(seed)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "Wx"], ["xw"]),
         helper.make_node("MatMul", ["h_prev", "Wh"], ["hw"]),
         helper.make_node("Add", ["xw", "hw"], ["pre0"]),
         helper.make_node("Add", ["pre0", "b"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_next"]),
         helper.make_node("Identity", ["h_next"], ["y_t"])],
        "rnn_cell",
        [helper.make_tensor_value_info("h_prev", F, [batch, hidden]),
         helper.make_tensor_value_info("x_t", F, [batch, inp])],
        [helper.make_tensor_value_info("h_next", F, [batch, hidden]),
         helper.make_tensor_value_info("y_t", F, [batch, hidden])])
    nodes = [
        helper.make_node("Relu", ["X"], ["Xr"]),
        helper.make_node("Scan", ["h0", "Xr"], ["h_last", "Y"], name="rnn", body=body,
                         num_scan_inputs=1),
        helper.make_node("ReduceMean", ["Y"], ["Ymean"], axes=[0], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "scan_rnn",
        [helper.make_tensor_value_info("h0", F, [batch, hidden]),
         helper.make_tensor_value_info("X", F, [steps, batch, inp])],
        [helper.make_tensor_value_info("h_last", F, [batch, hidden]),
         helper.make_tensor_value_info("Ymean", F, [batch, hidden])],
        [_w(rng, "Wx", inp, hidden), _w(rng, "Wh", hidden, hidden), _w(rng, "b", hidden)])
    return _model(g)


def _big_branch(rows: int, d: int, wide: int, out: str) -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("MatMul", ["xr", "Wa"], ["t_up"]),
         helper.make_node("Relu", ["t_up"], ["t_act"]),
         helper.make_node("Softmax", ["t_act"], ["t_soft"], axis=-1),
         helper.make_node("MatMul", ["t_soft", "Wb"], [out])],
        "then_branch", [], [helper.make_tensor_value_info(out, F, [rows, d])])


def if_branches(rows: int = 32, d: int = 128, wide: int = 1024, seed: int = 0
                ) -> onnx.ModelProto:
    """y = cond ? softmax(relu(x Wa)) Wb : -x, cond = sum(x) > 0 (a data-dependent
    branch; the then-branch holds [rows, wide] intermediates)."""
    rng = np.random.default_rng(seed)
    small = helper.make_graph([helper.make_node("Neg", ["xr"], ["e_out"])], "else_branch", [],
                              [helper.make_tensor_value_info("e_out", F, [rows, d])])
    nodes = [
        helper.make_node("Relu", ["x"], ["xr"]),
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], name="branch",
                         then_branch=_big_branch(rows, d, wide, "t_out"), else_branch=small),
    ]
    g = helper.make_graph(
        nodes, "if_branches", [helper.make_tensor_value_info("x", F, [rows, d])],
        [helper.make_tensor_value_info("y", F, [rows, d])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero"),
         _w(rng, "Wa", d, wide), _w(rng, "Wb", wide, d)])
    return _model(g)


def nested(steps: int = 4, batch: int = 8, d: int = 64, wide: int = 1024, seed: int = 0
           ) -> onnx.ModelProto:
    """An If (always true: sum |x| + 1 > 0) whose then-branch runs a Loop of the
    decoder body; the else-branch is a plain Relu."""
    rng = np.random.default_rng(seed)
    then = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["t_h", "t_ys"], name="inner_loop",
                          body=_decoder_body(batch, d, wide)),
         helper.make_node("ReduceSum", ["t_ys"], ["t_sum"], axes=[0], keepdims=0) if OPSET < 13
         else helper.make_node("ReduceSum", ["t_ys", "axis0"], ["t_sum"], keepdims=0),
         helper.make_node("Add", ["t_sum", "t_h"], ["t_out"])],
        "then_loop", [], [helper.make_tensor_value_info("t_out", F, [batch, d])],
        [numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["e_out"])], "else_relu", [],
                              [helper.make_tensor_value_info("e_out", F, [batch, d])])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["gate"]),
        helper.make_node("Abs", ["x"], ["ax"]),
        helper.make_node("ReduceSum", ["ax"], ["total"], keepdims=0),
        helper.make_node("Add", ["total", "one"], ["total1"]),
        helper.make_node("Greater", ["total1", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], name="outer_if", then_branch=then,
                         else_branch=other),
    ]
    g = helper.make_graph(
        nodes, "nested", [helper.make_tensor_value_info("x", F, [batch, d])],
        [helper.make_tensor_value_info("y", F, [batch, d])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero"),
         numpy_helper.from_array(np.array(1, np.float32), "one"),
         numpy_helper.from_array(np.array(steps, np.int64), "M"),
         _w(rng, "W1", d, wide), _w(rng, "W2", wide, d)])
    return _model(g)


MODELS = {"loop_decoder": loop_decoder, "scan_rnn": scan_rnn, "if_branches": if_branches,
          "nested": nested}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write the models into")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, build in MODELS.items():
        onnx.save(build(), str(out / f"{name}.onnx"))
        print(out / f"{name}.onnx")


if __name__ == "__main__":
    main()
