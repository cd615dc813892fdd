"""Activations exporters spell in primitives, differentiated as one op
(graphmem/training/activations.py): the gradients against exact float64 numpy ones,
the forward unchanged, and the backward's activation-sized tensors."""
from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.training.activations import DOMAIN, fuse
from graphmem.training.build import build_training
from graphmem.training.report import load_training, plan_training

RNG = np.random.default_rng(2037)
ERF = np.vectorize(math.erf)


def _run(model, feeds):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), opts,
                             providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.array(value, np.float32), name + "_v"))


def gelu_nodes(x, y, form):
    """The exported erf-GELU chain from ``x`` to ``y`` in one of its spellings."""
    p = y + "_"
    if form == "div":  # TorchScript's nn.GELU: x * (1 + erf(x / sqrt 2)) * 0.5
        return [_const(p + "r2", math.sqrt(2)), _const(p + "one", 1.0),
                _const(p + "half", 0.5),
                helper.make_node("Div", [x, p + "r2"], [p + "s"]),
                helper.make_node("Erf", [p + "s"], [p + "e"]),
                helper.make_node("Add", [p + "e", p + "one"], [p + "t"]),
                helper.make_node("Mul", [x, p + "t"], [p + "m"]),
                helper.make_node("Mul", [p + "m", p + "half"], [y])]
    # 0.5 * x first, x scaled by 1/sqrt 2, operands the other way round
    return [_const(p + "ir2", 1 / math.sqrt(2)), _const(p + "one", 1.0),
            _const(p + "half", 0.5),
            helper.make_node("Mul", [p + "ir2", x], [p + "s"]),
            helper.make_node("Erf", [p + "s"], [p + "e"]),
            helper.make_node("Add", [p + "one", p + "e"], [p + "t"]),
            helper.make_node("Mul", [p + "half", x], [p + "h"]),
            helper.make_node("Mul", [p + "h", p + "t"], [y])]


def mlp(form="div", batch=3, width=5, hidden=7):
    """x @ W1 -> GELU -> @ W2: the Linear-GELU-Linear of a ConvNeXt or ViT block."""
    return _linear_act_linear("mlp", gelu_nodes("h", "a", form), 1.2, batch, width, hidden)


def _linear_act_linear(name, activation, scale, batch, width, hidden):
    """x @ W1 -> h, the ``activation`` nodes h -> a, a @ W2 -> y; W1 drawn at ``scale``."""
    w1 = (RNG.standard_normal([width, hidden]) * scale).astype(np.float32)
    w2 = (RNG.standard_normal([hidden, 4]) * 0.5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"])] + activation + \
        [helper.make_node("MatMul", ["a", "w2"], ["y"])]
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [batch, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, w1, w2


def exact_gradients(x, w1, w2):
    """d sum(gelu(x @ w1) @ w2) / d(w1, w2), float64, by the closed form."""
    x, w1, w2 = (v.astype(np.float64) for v in (x, w1, w2))
    h = x @ w1
    cdf = 0.5 * (1 + ERF(h / math.sqrt(2)))
    a = h * cdf
    da = np.ones([x.shape[0], w2.shape[1]]) @ w2.T
    dh = da * (cdf + h * np.exp(-h * h / 2) / math.sqrt(2 * math.pi))
    return x.T @ dh, a.T @ np.ones([x.shape[0], w2.shape[1]])


@pytest.mark.parametrize("form", ["div", "mul"])
def test_gelu_gradients_are_exact(form):
    m, w1, w2 = mlp(form)
    # values where erf and exp(-s^2) both matter, the tails included
    x = (RNG.standard_normal([3, 5]) * 1.5).astype(np.float32)
    tg = build_training(m, 3, loss="sum")
    out = _run(tg.model, tg.feeds({"x": x}))
    g1, g2 = exact_gradients(x, w1, w2)
    np.testing.assert_allclose(out[tg.gradients["w1"]], g1, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out[tg.gradients["w2"]], g2, rtol=2e-5, atol=2e-5)
    # the forward is the exporter's chain again, node for node; no fused node is left
    ops = [n.op_type for n in tg.model.graph.node if n.name.startswith("f:")]
    assert "Erf" in ops and not any(n.domain == DOMAIN for n in tg.model.graph.node)
    assert all(o.domain != DOMAIN for o in tg.model.opset_import)


def test_gelu_gradients_equal_the_unfused_rule_and_finite_differences():
    m, w1, w2 = mlp("div")
    x = (RNG.standard_normal([3, 5])).astype(np.float32)
    fused = build_training(m, 3, loss="sum")
    plain = build_training(m, 3, loss="sum", rewrites=False)  # onnx_ad op by op
    a = _run(fused.model, fused.feeds({"x": x}))
    b = _run(plain.model, plain.feeds({"x": x}))
    for w in ("w1", "w2"):
        np.testing.assert_allclose(a[fused.gradients[w]], b[plain.gradients[w]],
                                   rtol=1e-5, atol=1e-6)
    # float64 central differences of the loss through the chain itself
    def loss(v):
        h = x.astype(np.float64) @ v
        return (h * 0.5 * (1 + ERF(h / math.sqrt(2))) @ w2.astype(np.float64)).sum()
    eps, fd = 1e-6, np.zeros(w1.shape)
    for i in np.ndindex(*w1.shape):
        up, down = w1.astype(np.float64), w1.astype(np.float64)
        up[i] += eps
        down[i] -= eps
        fd[i] = (loss(up) - loss(down)) / (2 * eps)
    np.testing.assert_allclose(a[fused.gradients["w1"]], fd, rtol=1e-4, atol=1e-5)


def test_chain_is_fused_only_when_its_intermediates_are_its_own():
    m, _, _ = mlp("div")
    # the Erf's output also read elsewhere: not the GELU's alone, left as it is
    m.graph.output.append(helper.make_tensor_value_info("a_e", TensorProto.FLOAT, None))
    assert fuse(m) == {}
    m2, _, _ = mlp("div")
    for n in m2.graph.node:  # a different constant: not a GELU
        if n.op_type == "Constant" and n.output[0] == "a_r2":
            n.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(1.5, np.float32),
                                                               "v"))
    assert fuse(m2) == {}
    m3, _, _ = mlp("div")
    assert list(fuse(m3)) == ["a"]
    assert [n.op_type for n in m3.graph.node if n.domain == DOMAIN] == ["Gelu"]


def test_gelu_backward_holds_three_activation_sized_tensors():
    """The GELU's backward reads only its input and the output's adjoint and makes one
    new tensor while both live (erf): at most three activation-sized tensors at once,
    where onnx_ad's rules op by op held four (PyTorch's fused kernel: three)."""
    hidden = 64
    m, _, _ = mlp("div", batch=32, width=4, hidden=hidden)
    size = 32 * hidden * 4  # bytes of one activation-sized float32 tensor
    assert backward_peaks(m, 32, size) == {True: 3, False: 4}


def backward_peaks(m, batch: int, size: int) -> dict[bool, int]:
    """How many tensors of ``size`` bytes the training plan holds at once at its worst,
    with our activation rules (True) and with onnx_ad's (False)."""
    peaks = {}
    for ours in (True, False):
        tg = build_training(m, batch, loss="sum", fuse_activations=ours)
        result, _ = plan_training(load_training(tg))
        peaks[ours] = largest_concurrent(result.plan, size)
    return peaks


def largest_concurrent(plan, size):
    """The most storages holding a tensor of ``size`` bytes or more live at one step of
    the plan (a view or an in-place output shares its input's storage)."""
    from graphmem.plan.columns import group_roots

    roots = group_roots(plan)
    events: dict[int, set] = {}
    for name, t in plan.tensors.items():
        if t.bytes >= size:
            for step in range(t.live[0], t.live[1] + 1):
                events.setdefault(step, set()).add(roots[name])
    return max(len(v) for v in events.values())


def hard_swish_mlp(batch=3, width=5, hidden=7):
    return _linear_act_linear("hswish", [helper.make_node("HardSwish", ["h"], ["a"])], 2.5,
                              batch, width, hidden)


def test_hard_swish_gradients_are_exact_in_all_three_pieces():
    m, w1, w2 = hard_swish_mlp()
    x = (RNG.standard_normal([3, 5])).astype(np.float32)
    h = x.astype(np.float64) @ w1
    assert (h < -3).any() and (h > 3).any() and (abs(h) < 3).any()
    assert not np.isclose(abs(h), 3, atol=1e-3).any()  # no ties at the kinks
    tg = build_training(m, 3, loss="sum")
    out = _run(tg.model, tg.feeds({"x": x}))
    a = h * np.clip(h / 6 + 0.5, 0, 1)
    slope = np.where(h < -3, 0.0, np.where(h > 3, 1.0, h / 3 + 0.5))
    ones = np.ones([3, 4])
    np.testing.assert_allclose(out[tg.gradients["w1"]], x.T @ ((ones @ w2.T) * slope),
                               rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out[tg.gradients["w2"]], a.T @ ones, rtol=2e-5, atol=2e-5)
    ops = {n.op_type for n in tg.model.graph.node if not n.name.startswith("f:")}
    assert "ThresholdedRelu" in ops and not {"Max", "Min", "Where"} & ops


def test_hard_swish_backward_holds_fewer_activation_sized_tensors():
    """Here the plan computes the derivative before the output's adjoint exists: ours
    holds the input and one more tensor (``t - 1`` beside ``t``), onnx_ad's the input,
    the clipped line's Max or Min and its Where: two against three."""
    m, _, _ = hard_swish_mlp(batch=32, width=4, hidden=64)
    assert backward_peaks(m, 32, 32 * 64 * 4) == {True: 2, False: 3}


def layer_norm_net(axis=-1, batch=2, tokens=3, width=6, bias=True):
    """x @ W1 -> LayerNormalization(axis) -> @ W2, rank 3 (the scale is a required
    input)."""
    w1 = (RNG.standard_normal([4, width]) * 0.8).astype(np.float32)
    w2 = (RNG.standard_normal([width, 2]) * 0.5).astype(np.float32)
    gamma = (1 + 0.3 * RNG.standard_normal([tokens, width][axis % 3 - 1:])).astype(np.float32)
    beta = (0.2 * RNG.standard_normal(gamma.shape)).astype(np.float32)
    inits = {"w1": w1, "w2": w2, "gamma": gamma}
    ln_in = ["h", "gamma"]
    if bias:
        inits["beta"] = beta
        ln_in.append("beta")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("LayerNormalization", ln_in, ["n"], axis=axis, epsilon=1e-5),
             helper.make_node("MatMul", ["n", "w2"], ["y"])]
    g = helper.make_graph(nodes, "ln",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [batch, tokens, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [batch, tokens, 2])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, inits


def layer_norm_loss(x, values, axis):
    h = x.astype(np.float64) @ values["w1"]
    axes = tuple(range(axis % 3, 3))
    c = h - h.mean(axis=axes, keepdims=True)
    n = c / np.sqrt((c * c).mean(axis=axes, keepdims=True) + 1e-5)
    n = n * values["gamma"]
    if "beta" in values:
        n = n + values["beta"]
    return (n @ values["w2"]).sum()


@pytest.mark.parametrize("axis,bias", [(-1, True), (1, True), (-1, False)])
def test_layer_norm_gradients_match_central_differences(axis, bias):
    m, inits = layer_norm_net(axis, bias=bias)
    x = RNG.standard_normal([2, 3, 4]).astype(np.float32)
    tg = build_training(m, 2, loss="sum")
    out = _run(tg.model, tg.feeds({"x": x}))
    values = {k: v.astype(np.float64) for k, v in inits.items()}
    for name in inits:
        fd = np.zeros(values[name].shape)
        for i in np.ndindex(*fd.shape):
            up = {**values, name: values[name].copy()}
            down = {**values, name: values[name].copy()}
            up[name][i] += 1e-6
            down[name][i] -= 1e-6
            fd[i] = (layer_norm_loss(x, up, axis) - layer_norm_loss(x, down, axis)) / 2e-6
        np.testing.assert_allclose(out[tg.gradients[name]], fd, rtol=1e-4, atol=1e-4,
                                   err_msg=name)
    ops = [n.op_type for n in tg.model.graph.node if not n.name.startswith("f:")]
    assert "ReduceSumSquare" in ops  # ours, not onnx_ad's rule


def test_layer_norm_backward_holds_three_activation_sized_tensors():
    """Its input (overwritten by ``x - mean``), the output's adjoint and one product
    being reduced; the variance by ReduceSumSquare (no squared copy). On this small net
    the plan of onnx_ad's rule holds three too (its squared copy made before the
    adjoint exists)."""
    m, _ = layer_norm_net(batch=8, tokens=16, width=64)
    assert backward_peaks(m, 8, 8 * 16 * 64 * 4) == {True: 3, False: 3}


def attention_like(m_rows, k, n, batch=2, heads=3):
    """a = x @ w1, b = x2 @ w2 (two activations of one batch shape), z = a @ b."""
    w1 = RNG.standard_normal([4, k]).astype(np.float32)
    w2 = RNG.standard_normal([4, n]).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]),       # [B, H, M, K]
             helper.make_node("MatMul", ["x2", "w2"], ["b"]),      # [B, H, K, N]
             helper.make_node("MatMul", ["a", "b"], ["z"])]
    g = helper.make_graph(nodes, "att",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [batch, heads, m_rows, 4]),
                           helper.make_tensor_value_info("x2", TensorProto.FLOAT,
                                                         [batch, heads, k, 4])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                         [batch, heads, m_rows, n])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, w1, w2


@pytest.mark.parametrize("m_rows,k,n,flipped", [
    (7, 7, 2, "mm_db_flipped"),   # P @ V: P^T larger than z and V together
    (1, 6, 5, "mm_da_flipped"),   # a row times a wide matrix: b^T the large copy
    (3, 2, 3, None)])             # neither: onnx_ad's rule
def test_activation_matmul_gradients_are_exact(m_rows, k, n, flipped):
    m, w1, w2 = attention_like(m_rows, k, n)
    x = RNG.standard_normal([2, 3, m_rows, 4]).astype(np.float32)
    x2 = RNG.standard_normal([2, 3, k, 4]).astype(np.float32)
    tg = build_training(m, 2, loss="sum")
    out = _run(tg.model, tg.feeds({"x": x, "x2": x2}))
    a, b = x.astype(np.float64) @ w1, x2.astype(np.float64) @ w2
    dz = np.ones([2, 3, m_rows, n])
    da, db = dz @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ dz
    g1 = np.einsum("bhmi,bhmk->ik", x, da)
    g2 = np.einsum("bhki,bhkn->in", x2, db)
    np.testing.assert_allclose(out[tg.gradients["w1"]], g1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[tg.gradients["w2"]], g2, rtol=1e-5, atol=1e-5)
    stems = {o.rstrip("_0123456789") for n_ in tg.model.graph.node for o in n_.output}
    if flipped:
        assert flipped in stems
    else:
        assert not {"mm_db_flipped", "mm_da_flipped"} & stems


def softmax_net(batch=2, rows=3, width=5, out=4, axis=-1):
    """x @ W1 -> Softmax(axis) -> @ W2, rank 3."""
    w1 = (RNG.standard_normal([4, width]) * 1.5).astype(np.float32)
    w2 = RNG.standard_normal([width, out]).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=axis),
             helper.make_node("MatMul", ["p", "w2"], ["y"])]
    g = helper.make_graph(nodes, "softmax",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [batch, rows, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [batch, rows, out])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, w1, w2


@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_gradients_are_exact(axis):
    m, w1, w2 = softmax_net(axis=axis)
    x = RNG.standard_normal([2, 3, 4]).astype(np.float32)
    tg = build_training(m, 2, loss="sum")
    out = _run(tg.model, tg.feeds({"x": x}))
    s = x.astype(np.float64) @ w1
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    p = e / e.sum(axis=axis, keepdims=True)
    dp = np.ones([2, 3, 4]) @ w2.T.astype(np.float64)
    ds = p * (dp - (p * dp).sum(axis=axis, keepdims=True))
    np.testing.assert_allclose(out[tg.gradients["w1"]], np.einsum("bri,brk->ik", x, ds),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[tg.gradients["w2"]],
                               np.einsum("brk,bro->ko", p, np.ones([2, 3, 4])),
                               rtol=1e-5, atol=1e-5)
    assert any(o.startswith("softmax_dx") for n in tg.model.graph.node for o in n.output)


def test_softmax_backward_holds_two_softmax_sized_tensors():
    """The probabilities and the output's adjoint; onnx_ad's rule adds their product."""
    m, _, _ = softmax_net(batch=8, rows=16, width=64, out=2)
    assert backward_peaks(m, 8, 8 * 16 * 64 * 4) == {True: 2, False: 3}
