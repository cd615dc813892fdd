"""Our reverse rules (graphmem/training/rules.py) against float64 numpy references.

Each tiny model is ``... -> op -> Mul(r) -> sum``; its forward is written again in numpy
(float64), checked against ONNX Runtime's forward, and the training graph's gradients
(ORT, float32) are checked against float64 central differences of that numpy forward.
No torch. Covers the strided Conv weight gradient (no overhang: its MACs equal the
forward's), the ConvTranspose weight gradient and AveragePool with ``ceil_mode=1``.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.analysis.macs import macs_by_phase, matrix_macs, phase
from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.training.build import build_training
from graphmem.training.report import load_training

RNG = np.random.default_rng(22)


# --- numpy references (float64, NCHW) -----------------------------------------------------

def conv_np(x, w, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    eh, ew = dilations[0] * (kh - 1) + 1, dilations[1] * (kw - 1) + 1
    ho = (xp.shape[2] - eh) // strides[0] + 1
    wo = (xp.shape[3] - ew) // strides[1] + 1
    y = np.zeros([n, m, ho, wo])
    mg = m // group
    for g in range(group):
        wg = w[g * mg:(g + 1) * mg]
        xg = xp[:, g * cg:(g + 1) * cg]
        for i in range(ho):
            for j in range(wo):
                r0, c0 = i * strides[0], j * strides[1]
                patch = xg[:, :, r0:r0 + eh:dilations[0], c0:c0 + ew:dilations[1]]
                y[:, g * mg:(g + 1) * mg, i, j] = np.einsum("nckl,mckl->nm", patch, wg)
    return y


def conv_transpose_np(x, w, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                      output_padding=(0, 0)):
    n, c, h, wd = x.shape
    _, m, kh, kw = w.shape
    full = [strides[a] * (x.shape[2 + a] - 1) + output_padding[a]
            + dilations[a] * (w.shape[2 + a] - 1) + 1 for a in range(2)]
    y = np.zeros([n, m] + full)
    for i in range(h):
        for j in range(wd):
            contrib = np.einsum("nc,cmkl->nmkl", x[:, :, i, j], w)
            r0, c0 = i * strides[0], j * strides[1]
            y[:, :, r0:r0 + dilations[0] * (kh - 1) + 1:dilations[0],
              c0:c0 + dilations[1] * (kw - 1) + 1:dilations[1]] += contrib
    return y[:, :, pads[0]:full[0] - pads[2], pads[1]:full[1] - pads[3]]


def avg_pool_np(x, kernel, strides, pads, ceil_mode, count_include_pad):
    """ONNX AveragePool (ORT's semantics; the test checks them against ORT)."""
    n, c = x.shape[:2]
    outs, windows = [], []
    for a in range(2):
        size, k, s = x.shape[2 + a], kernel[a], strides[a]
        begin, end = pads[a], pads[2 + a]
        span = size + begin + end - k
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= size + begin:
            out -= 1
        low, high = (-begin, size + end) if count_include_pad else (0, size)
        per = []
        for o in range(out):
            start = o * s - begin
            taps = [t for t in range(start, start + k) if low <= t < high]
            real = [t for t in range(start, start + k) if 0 <= t < size]
            per.append((real, len(taps)))
        outs.append(out)
        windows.append(per)
    y = np.zeros([n, c] + outs)
    for i, (rows, dr) in enumerate(windows[0]):
        for j, (cols, dc) in enumerate(windows[1]):
            y[:, :, i, j] = x[:, :, rows][:, :, :, cols].sum(axis=(2, 3)) / (dr * dc)
    return y


def central_differences(loss, value, eps=1e-3):
    """d loss / d value, float64, every element."""
    grad = np.zeros_like(value, dtype=np.float64)
    for k in range(value.size):
        up, down = value.astype(np.float64), value.astype(np.float64)
        up.flat[k] += eps
        down.flat[k] -= eps
        grad.flat[k] = (loss(up) - loss(down)) / (2 * eps)
    return grad


# --- helpers --------------------------------------------------------------------------------

def model_of(nodes, x_shape, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v.astype(np.float32), k)
                           for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def run(model, feeds):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), opts,
                             providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def with_output(model, name):
    """The forward model with ``name`` as its output (to check a numpy reference)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return m


def check_gradients(model, x, values, forward, *, rtol=1e-4, atol=1e-4):
    """Training-graph gradients (ORT) == float64 central differences of ``forward``
    (``forward(values) -> y``, loss = sum(y)); ``forward`` is checked against ORT first."""
    want_y = forward({k: v.astype(np.float64) for k, v in values.items()})
    got_y = run(model, {"x": x})["y"]
    np.testing.assert_allclose(got_y, want_y, rtol=1e-4, atol=1e-4)
    tg = build_training(model, x.shape[0], loss="sum")
    out = run(tg.model, tg.feeds({"x": x}))
    for name in values:
        def loss(v, name=name):
            return forward({**{k: u.astype(np.float64) for k, u in values.items()},
                            name: v}).sum()
        want = central_differences(loss, values[name])
        got = out[tg.gradients[name]]
        assert got.shape == values[name].shape, name
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(1, np.abs(want).max()),
                                   err_msg=name)
    return tg


def conv_macs(graph, kind):
    return [(n, matrix_macs(n, graph.tensors)) for n in graph.nodes
            if phase(n) == kind and n.op_type in ("Conv", "ConvTranspose")]


# --- strided Conv weight gradient -----------------------------------------------------------

CONV_CASES = [  # kernel, stride, pads, dilation, size, group
    (1, 2, [0, 0, 0, 0], 1, 8, 1),   # resnet's downsample: the input must be cropped
    (3, 2, [1, 1, 1, 1], 1, 8, 1),   # end padding shrinks to 0
    (3, 2, [1, 1, 1, 1], 1, 7, 1),   # odd: no overhang at all
    (7, 2, [3, 3, 3, 3], 1, 11, 1),  # resnet's stem shape, small
    (3, 3, [0, 1, 2, 0], 1, 10, 1),  # stride 3, asymmetric pads
    (3, 2, [1, 1, 1, 1], 2, 10, 1),  # dilated and strided
    (1, 2, [0, 0, 0, 0], 1, 8, 2),   # grouped, cropped
    (3, 2, [1, 1, 1, 1], 1, 8, 4),   # depthwise, strided
    (3, 1, [1, 1, 1, 1], 2, 9, 4),   # depthwise, dilated
    (1, 2, [0, 0, 0, 0], 1, 8, 4),   # depthwise, cropped
]


@pytest.mark.parametrize("kernel,stride,pads,dilation,size,group", CONV_CASES)
def test_strided_conv_weight_gradient_is_exact_and_costs_the_forward(
        kernel, stride, pads, dilation, size, group):
    n, c, m = 2, 4, 4
    x = RNG.standard_normal([n, c, size, size]).astype(np.float32)
    w = (RNG.standard_normal([m, c // group, kernel, kernel]) * 0.3).astype(np.float32)
    attrs = dict(strides=[stride] * 2, pads=pads, dilations=[dilation] * 2, group=group)
    ho = conv_np(x, w, **{k: v for k, v in attrs.items()}).shape[2:]
    r = RNG.standard_normal([n, m, *ho]).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w"], ["c"], **attrs),
                      helper.make_node("Mul", ["c", "r"], ["y"])],
                     list(x.shape), {"w": w, "r": r})

    def forward(v):
        return conv_np(x.astype(np.float64), v["w"], **attrs) * v["r"]
    tg = check_gradients(model, x, {"w": w, "r": r}, forward)
    graph = load_training(tg)
    (_, fwd), = conv_macs(graph, "forward")
    (node, bwd), = conv_macs(graph, "backward")  # x is data: the weight gradient only
    assert bwd == fwd, (node.name, bwd, fwd)
    crop = [n for n in tg.model.graph.node if n.op_type == "Slice" and n.name.startswith("b:")]
    pad = [n for n in tg.model.graph.node if n.op_type == "Pad"]
    assert not pad
    # an input crop only where the forward skipped trailing input beyond its padding
    extent = dilation * (kernel - 1) + 1
    skipped = any((size + pads[a] + pads[2 + a] - extent) % stride > pads[2 + a]
                  for a in range(2))
    assert bool(crop) == skipped


def test_strided_conv_input_gradient_through_two_convs():
    """x -> Conv(s2, pads 1) -> Tanh -> Conv(1x1, s2) -> Mul(r): dW of the first conv goes
    through the second's input adjoint and the Tanh, still exact."""
    x = RNG.standard_normal([2, 3, 9, 9]).astype(np.float32)
    w1 = (RNG.standard_normal([4, 3, 3, 3]) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal([5, 4, 1, 1]) * 0.3).astype(np.float32)
    r = RNG.standard_normal([2, 5, 3, 3]).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w1"], ["c1"], strides=[2, 2],
                                       pads=[1, 1, 1, 1]),
                      helper.make_node("Tanh", ["c1"], ["a1"]),
                      helper.make_node("Conv", ["a1", "w2"], ["c2"], strides=[2, 2]),
                      helper.make_node("Mul", ["c2", "r"], ["y"])],
                     list(x.shape), {"w1": w1, "w2": w2, "r": r})

    def forward(v):
        a1 = np.tanh(conv_np(x.astype(np.float64), v["w1"], (2, 2), (1, 1, 1, 1)))
        return conv_np(a1, v["w2"], (2, 2)) * v["r"]
    check_gradients(model, x, {"w1": w1, "w2": w2, "r": r}, forward)


# --- ConvTranspose --------------------------------------------------------------------------

CONVT_CASES = [  # stride, pads, output_padding, dilation
    (1, [0, 0, 0, 0], [0, 0], 1),
    (1, [1, 1, 1, 1], [0, 0], 1),
    (2, [0, 0, 0, 0], [0, 0], 1),
    (2, [1, 1, 1, 1], [0, 0], 1),
    (2, [1, 1, 1, 1], [1, 1], 1),
    (2, [0, 1, 2, 0], [1, 0], 1),  # asymmetric: the adjoint must be cropped on one axis
    (3, [1, 1, 1, 1], [2, 1], 2),
]


@pytest.mark.parametrize("stride,pads,output_padding,dilation", CONVT_CASES)
def test_conv_transpose_gradients(stride, pads, output_padding, dilation):
    """x -> Conv(3x3, pads 1) -> ConvTranspose(w, b) -> Mul(r): the weight and bias
    gradients of the ConvTranspose (ours) and the first conv's (through onnx_ad's input
    adjoint of the ConvTranspose) against float64 central differences."""
    n, c, mid, m, size = 2, 3, 4, 3, 5
    x = RNG.standard_normal([n, c, size, size]).astype(np.float32)
    w0 = (RNG.standard_normal([mid, c, 3, 3]) * 0.3).astype(np.float32)
    w = (RNG.standard_normal([mid, m, 3, 3]) * 0.3).astype(np.float32)
    b = RNG.standard_normal([m]).astype(np.float32)
    attrs = dict(strides=[stride] * 2, pads=pads, output_padding=output_padding,
                 dilations=[dilation] * 2)
    np_attrs = dict(strides=attrs["strides"], pads=pads, dilations=attrs["dilations"],
                    output_padding=output_padding)
    shape = conv_transpose_np(np.zeros([n, mid, size, size]), w, **np_attrs).shape
    r = RNG.standard_normal(shape).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
                      helper.make_node("ConvTranspose", ["c0", "w", "b"], ["t"], **attrs),
                      helper.make_node("Mul", ["t", "r"], ["y"])],
                     list(x.shape), {"w0": w0, "w": w, "b": b, "r": r})

    def forward(v):
        c0 = conv_np(x.astype(np.float64), v["w0"], pads=(1, 1, 1, 1))
        t = conv_transpose_np(c0, v["w"], **np_attrs) + v["b"][None, :, None, None]
        return t * v["r"]
    tg = check_gradients(model, x, {"w0": w0, "w": w, "b": b, "r": r}, forward)
    graph = load_training(tg)
    fwd = dict((n.op_type, k) for n, k in conv_macs(graph, "forward"))
    macs = macs_by_phase(graph)
    # backward: the ConvTranspose's input and weight gradients, the first conv's weight's
    assert macs["backward"] == 2 * fwd["ConvTranspose"] + fwd["Conv"]


def test_conv_transpose_with_output_shape():
    x = RNG.standard_normal([1, 2, 4, 4]).astype(np.float32)
    w = (RNG.standard_normal([2, 3, 3, 3]) * 0.3).astype(np.float32)
    r = RNG.standard_normal([1, 3, 8, 8]).astype(np.float32)
    model = model_of([helper.make_node("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2],
                                       output_shape=[8, 8]),
                      helper.make_node("Mul", ["t", "r"], ["y"])],
                     list(x.shape), {"w": w, "r": r})

    def forward(v):  # the spec's split of the padding 1: at the start, none at the end
        return conv_transpose_np(x.astype(np.float64), v["w"], (2, 2), (1, 1, 0, 0)) * v["r"]
    check_gradients(model, x, {"w": w, "r": r}, forward)


def test_grouped_conv_transpose_weight_is_refused_clearly():
    x = RNG.standard_normal([1, 4, 4, 4]).astype(np.float32)
    w = RNG.standard_normal([4, 1, 3, 3]).astype(np.float32)
    model = model_of([helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2)],
                     list(x.shape), {"w": w})
    with pytest.raises(GraphmemError, match="grouped ConvTranspose"):
        build_training(model, 1, loss="sum")


# --- AveragePool ----------------------------------------------------------------------------

POOL_CASES = [  # size, kernel, stride, pads, ceil_mode, count_include_pad
    (8, 3, 2, [0, 0, 0, 0], 1, 0),   # ceil: one window overhangs by one
    (8, 3, 2, [0, 0, 0, 0], 1, 1),
    (7, 2, 2, [0, 0, 0, 0], 1, 0),   # odd size, kernel 2: the last window is half outside
    (7, 2, 2, [0, 0, 0, 0], 1, 1),
    (7, 3, 2, [0, 0, 1, 1], 1, 0),   # ceil past the end padding
    (7, 3, 2, [0, 0, 1, 1], 1, 1),
    (8, 3, 2, [1, 1, 1, 1], 1, 0),
    (8, 3, 2, [1, 1, 1, 1], 1, 1),
    (7, 3, 2, [1, 1, 1, 1], 1, 1),   # odd, kernel 3 stride 2: ceil changes nothing
    (8, 3, 2, [1, 1, 1, 1], 0, 0),   # floor mode: the last input row is read by no window
    (8, 3, 2, [1, 1, 1, 1], 0, 1),
]


@pytest.mark.parametrize("size,kernel,stride,pads,ceil_mode,include", POOL_CASES)
def test_average_pool_gradients(size, kernel, stride, pads, ceil_mode, include):
    """x -> Conv(3x3, pads 1) -> AveragePool -> Mul(r): the conv's weight gradient goes
    through the pool's adjoint (ours)."""
    n, c, m = 2, 3, 4
    x = RNG.standard_normal([n, c, size, size]).astype(np.float32)
    w = (RNG.standard_normal([m, c, 3, 3]) * 0.3).astype(np.float32)
    pool = dict(kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=pads,
                ceil_mode=ceil_mode, count_include_pad=include)
    shape = avg_pool_np(np.zeros([n, m, size, size]), [kernel] * 2, [stride] * 2, pads,
                        ceil_mode, include).shape
    r = RNG.standard_normal(shape).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                      helper.make_node("AveragePool", ["c"], ["p"], **pool),
                      helper.make_node("Mul", ["p", "r"], ["y"])],
                     list(x.shape), {"w": w, "r": r})

    def forward(v):
        c = conv_np(x.astype(np.float64), v["w"], pads=(1, 1, 1, 1))
        return avg_pool_np(c, [kernel] * 2, [stride] * 2, pads, ceil_mode, include) * v["r"]
    check_gradients(model, x, {"w": w, "r": r}, forward)


def test_average_pool_reference_matches_ort_on_ceil_windows():
    """The numpy reference's divisors are ORT's, including overhanging windows."""
    x = RNG.standard_normal([1, 2, 8, 8]).astype(np.float32)
    for pads in ([0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0]):
        for include in (0, 1):
            m = model_of([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                                           strides=[2, 2], pads=pads, ceil_mode=1,
                                           count_include_pad=include)], [1, 2, 8, 8], {})
            np.testing.assert_allclose(
                run(m, {"x": x})["y"],
                avg_pool_np(x.astype(np.float64), [3, 3], [2, 2], pads, 1, include),
                rtol=1e-5, atol=1e-6)


def test_average_pool_window_in_end_padding_is_refused_clearly():
    """A ceil-mode window starting in the end padding: onnx's shape inference counts it,
    ORT drops it; we refuse rather than plan a wrong shape."""
    w = RNG.standard_normal([2, 2, 1, 1]).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w"], ["c"]),
                      helper.make_node("AveragePool", ["c"], ["y"], kernel_shape=[2, 2],
                                       strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)],
                     [1, 2, 5, 5], {"w": w})
    with pytest.raises(GraphmemError, match="ceil_mode=1"):
        build_training(model, 1, loss="sum")


# --- the train command ----------------------------------------------------------------------

def test_train_command_on_conv_transpose_and_ceil_pool(tmp_path, capsys):
    w = (RNG.standard_normal([4, 3, 3, 3]) * 0.3).astype(np.float32)
    wt = (RNG.standard_normal([4, 2, 3, 3]) * 0.3).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1],
                                       strides=[2, 2]),
                      helper.make_node("Relu", ["c"], ["a"]),
                      helper.make_node("AveragePool", ["a"], ["p"], kernel_shape=[3, 3],
                                       strides=[2, 2], ceil_mode=1),
                      helper.make_node("ConvTranspose", ["p", "wt"], ["y"], strides=[2, 2],
                                       pads=[1, 1, 1, 1], output_padding=[1, 1])],
                     [1, 3, 16, 16], {"w": w, "wt": wt})
    path = tmp_path / "up.onnx"
    onnx.save(model, str(path))
    assert main(["train", str(path), "--batch", "2", "--loss", "sum", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["batch"] == 2 and d["gradient_bytes"] == 4 * (w.size + wt.size)
    assert d["arena_bytes"] > 0 and d["backward_macs"] > 0


# --- phases and the plan's own figures ------------------------------------------------------

def test_lowered_forward_nodes_count_as_forward():
    """onnx_ad lowers LRN into several primal nodes: the forward ends at the loss, so
    the conv after the LRN is forward (its MACs, its output saved), not backward."""
    w1 = (RNG.standard_normal([4, 3, 3, 3]) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal([4, 4, 3, 3]) * 0.3).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
                      helper.make_node("LRN", ["c1"], ["l"], size=3),
                      helper.make_node("Conv", ["l", "w2"], ["y"], pads=[1, 1, 1, 1])],
                     [2, 3, 6, 6], {"w1": w1, "w2": w2})
    tg = build_training(model, 2, loss="sum")
    graph = load_training(tg)
    names = {n.name: n for n in graph.nodes}
    loss = next(n for n in graph.nodes if "loss" in n.outputs)
    assert phase(loss) == "forward"
    assert all(phase(names[f"f:{i}"]) == "forward" for i in range(int(loss.name[2:]) + 1))
    macs = macs_by_phase(graph)
    assert macs["forward"] == 2 * 36 * (4 * 27 + 4 * 36)
    assert macs["backward"] == 2 * 36 * (4 * 27 + 2 * 4 * 36)  # dW1; dX2 and dW2


def test_plan_saved_activations_and_peak():
    """On the plan: storage made before the loss and read after it (views counted once),
    and the backward tensors live at the arena's peak."""
    from graphmem.training.report import (backward_peak, first_backward_position,
                                          plan_saved_activations, plan_training,
                                          saved_activations)
    w = (RNG.standard_normal([4, 3, 3, 3]) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal([4, 4, 3, 3]) * 0.3).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                      helper.make_node("Tanh", ["c"], ["a"]),
                      helper.make_node("Conv", ["a", "w2"], ["y"], pads=[1, 1, 1, 1],
                                       strides=[2, 2])],
                     [4, 3, 8, 8], {"w": w, "w2": w2})
    tg = build_training(model, 4, loss="sum")
    graph = load_training(tg)
    result, _ = plan_training(graph)
    plan = result.plan
    boundary = first_backward_position(graph, plan)
    by_index = {n.index: n for n in graph.nodes}
    # the first step of the chain rule: a backward node reading an adjoint and a
    # forward value (the nodes before it that read only the seed and constants do not
    # count; nor does the loss node, which nothing reads)
    at = by_index[plan.order[boundary]]
    assert phase(at) == "backward" and set(at.reads) - graph.weights - {"loss_seed"}
    saved = plan_saved_activations(graph, plan)
    # x (the first weight gradient reads it) and the Tanh output (its adjoint and the
    # second weight gradient) cross the boundary; each once, at its full size. With a
    # sum loss the backward needs no forward value past y, so the plan may run some of
    # it before the loss: what it makes there and reads later crosses too.
    assert saved["x"] == 4 * 3 * 64 * 4 and saved["a"] == 4 * 4 * 64 * 4
    producers = graph.producers()
    assert all(phase(producers[t]) != "forward" for t in set(saved) - {"x", "a"})
    assert set(saved_activations(graph)) == {"a"}  # the phase-based figure has no inputs
    peak = backward_peak(graph, plan)
    aliased = max(__import__("graphmem.plan.stats", fromlist=["x"]).live_timelines(plan)[0])
    assert peak["live_bytes"] == aliased == sum(peak["bytes_by_kind"].values())
    assert all(h["bytes"] > 0 for h in peak["helpers"])
    assert [h["bytes"] for h in peak["helpers"]] == sorted(
        (h["bytes"] for h in peak["helpers"]), reverse=True)
    assert all(phase(producers[h["name"]]) != "forward" for h in peak["helpers"])


# --- Slice with steps -------------------------------------------------------------------------

SLICE_CASES = [  # starts, ends, axes, steps
    ([0], [5], [1], [2]),  # 0, 2, 4: the last gap runs past the end (cropped)
    ([1, 0], [5, 7], [1, 2], [2, 3]),  # two axes
    ([-4], [2 ** 62], [2], [2]),  # negative start, end past the extent
    ([0, 1], [5, 7], [1, 2], [1, 2]),  # a step of 1 beside a step of 2
    ([1], [5], [1], [1]),  # all steps 1: onnx_ad's own rule
]


@pytest.mark.parametrize("starts, ends, axes, steps", SLICE_CASES)
def test_strided_slice_gradients(starts, ends, axes, steps):
    """Swin's patch merging reads x[..., 0::2, 0::2, :]: the adjoint interleaves zeros."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal([5, 7])
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Mul", ["x", "w"], ["a"]),
             helper.make_node("Slice", ["a", "st", "en", "ax", "sp"], ["s"]),
             helper.make_node("Mul", ["s", "s"], ["y"])]
    model = model_of(nodes, [2, 5, 7], {"w": w})
    model.graph.initializer.extend([i64("st", starts), i64("en", ends), i64("ax", axes),
                                    i64("sp", steps)])

    def forward(v):
        a = x.astype(np.float64) * v["w"]
        index = [slice(None)] * 3
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            index[ax] = slice(st, min(en, a.shape[ax]), sp)
        s = a[tuple(index)]
        return s * s

    x = rng.standard_normal([2, 5, 7]).astype(np.float32)
    check_gradients(model, x, {"w": w}, forward)


def test_negative_slice_step_is_refused_clearly():
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Mul", ["x", "w"], ["a"]),
             helper.make_node("Slice", ["a", "st", "en", "ax", "sp"], ["y"])]
    model = model_of(nodes, [2, 5, 7], {"w": np.ones([5, 7])})
    model.graph.initializer.extend([i64("st", [4]), i64("en", [-6]), i64("ax", [1]),
                                    i64("sp", [-1])])
    with pytest.raises(GraphmemError, match="negative step"):
        build_training(model, 2, loss="sum")


def test_channel_shuffle_with_sizes_read_from_shape():
    """ShuffleNet's channel shuffle as the TorchScript exporter writes it: the Reshape
    sizes come from Shape -> Gather -> Concat, which onnx's inference (no data
    propagation) leaves unknown, and onnx_ad refused the next Conv ('needs a declared
    input shape'); graphmem's loader supplies the types."""
    rng = np.random.default_rng(9)
    w1, w2 = rng.standard_normal([4, 2, 3, 3]) * 0.4, rng.standard_normal([3, 2, 1, 1]) * 0.4
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    N = helper.make_node
    nodes = [N("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]), N("Shape", ["c"], ["s"]),
             *[N("Gather", ["s", f"i{k}"], [f"d{k}"], axis=0) for k in range(4)],
             N("Concat", ["d0", "two", "two", "d2", "d3"], ["split"], axis=0),
             N("Reshape", ["c", "split"], ["g"]),
             N("Transpose", ["g"], ["t"], perm=[0, 2, 1, 3, 4]),
             N("Concat", ["d0", "minus1", "d2", "d3"], ["merge"], axis=0),
             N("Reshape", ["t", "merge"], ["sh"]),
             # x.chunk(2, dim=1)[1]: bounds from the channel count, Div and Mul of a Shape
             N("Div", ["d1", "two"], ["half"]), N("Mul", ["half", "two"], ["end"]),
             N("Slice", ["sh", "half", "end", "one"], ["second"]),
             N("Conv", ["second", "w2"], ["o"]), N("Mul", ["o", "o"], ["y"])]
    model = model_of(nodes, [2, 2, 5, 5], {"w1": w1, "w2": w2})
    model.graph.initializer.extend([i64(f"i{k}", [k]) for k in range(4)]
                                   + [i64("two", [2]), i64("minus1", [-1]), i64("one", [1])])

    def forward(v):
        c = conv_np(x.astype(np.float64), v["w1"], pads=(1, 1, 1, 1))
        sh = c.reshape(2, 2, 2, 5, 5).transpose(0, 2, 1, 3, 4).reshape(2, 4, 5, 5)
        o = conv_np(sh[:, 2:4], v["w2"])
        return o * o

    x = rng.standard_normal([2, 2, 5, 5]).astype(np.float32)
    check_gradients(model, x, {"w1": w1, "w2": w2}, forward)
