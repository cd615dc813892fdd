"""Training-mode BatchNormalization (graphmem/training/rules.py, build.py) against float64
numpy: the gradient through the batch statistics, the running-statistic outputs, and the
inference form behind ``bn="inference"``. No torch."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.training.build import build_training, running_stat_outputs
from test_training_grads import central_differences, conv_np, model_of, run

RNG = np.random.default_rng(14)
EPS, MOMENTUM = 1e-5, 0.8


def bn_np(x, scale, bias, mean, var, training):
    """ONNX BatchNormalization over NCHW..., float64: (y, running mean', running var')."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = [1, -1] + [1] * (x.ndim - 2)
    if training:
        mu, sigma2 = x.mean(axis=axes), x.var(axis=axes)  # population variance
    else:
        mu, sigma2 = mean, var
    y = ((x - mu.reshape(shape)) / np.sqrt(sigma2.reshape(shape) + EPS) * scale.reshape(shape)
         + bias.reshape(shape))
    return y, MOMENTUM * mean + (1 - MOMENTUM) * mu, MOMENTUM * var + (1 - MOMENTUM) * sigma2


def conv_bn_model(x_shape, training_attr=None):
    """x -> Conv(w) -> BN(s, b; m, v) -> Relu -> Mul(r) -> y, and its values."""
    n, c = x_shape[:2]
    k = 3
    values = {
        "w": RNG.standard_normal([k, c, 3, 3]) * 0.4,
        "s": 1 + 0.3 * RNG.standard_normal([k]),
        "b": 0.2 * RNG.standard_normal([k]),
    }
    stats = {"m": 0.1 * RNG.standard_normal([k]), "v": 1 + 0.2 * RNG.random([k])}
    conv_shape = [n, k, x_shape[2] - 2, x_shape[3] - 2]
    values["r"] = RNG.standard_normal(conv_shape)
    bn = helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"],
                          epsilon=EPS, momentum=MOMENTUM)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), bn,
             helper.make_node("Relu", ["n"], ["a"]), helper.make_node("Mul", ["a", "r"], ["y"])]
    return model_of(nodes, list(x_shape), {**values, **stats}), values, stats


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradients_and_running_statistics(training):
    x = RNG.standard_normal([3, 2, 6, 5]).astype(np.float32)
    model, values, stats = conv_bn_model(x.shape)
    x64 = x.astype(np.float64)

    def forward(v):
        c = conv_np(x64, v["w"])
        y, _, _ = bn_np(c, v["s"], v["b"], stats["m"], stats["v"], training)
        return np.maximum(y, 0) * v["r"]

    tg = build_training(model, 3, loss="sum", bn="training" if training else "inference")
    node, = [n for n in tg.model.graph.node if n.op_type == "BatchNormalization"]
    assert any(a.name == "training_mode" and a.i == 1 for a in node.attribute) == training
    out = run(tg.model, tg.feeds({"x": x}))
    np.testing.assert_allclose(out["loss"], forward(values).sum(), rtol=1e-4, atol=1e-4)
    for name in values:
        def loss(v, name=name):
            return forward({**values, name: v}).sum()
        want = central_differences(loss, values[name].astype(np.float32).astype(np.float64))
        got = out[tg.gradients[name]]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * max(1, np.abs(want).max()),
                                   err_msg=name)
    running = running_stat_outputs(tg.model)
    if not training:
        assert running == {}
        return
    assert running == {"m": "running/m", "v": "running/v"}
    c = conv_np(x64, values["w"].astype(np.float32).astype(np.float64))
    _, mean, var = bn_np(c, values["s"], values["b"], stats["m"].astype(np.float32),
                         stats["v"].astype(np.float32), True)
    np.testing.assert_allclose(out["running/m"], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["running/v"], var, rtol=1e-5, atol=1e-6)


def test_training_mode_gradient_is_not_the_inference_one():
    """The batch statistics carry gradient: with them the conv weight's gradient differs
    from the frozen-statistics one (a rule that ignored them would pass neither test)."""
    x = RNG.standard_normal([4, 2, 5, 5]).astype(np.float32)
    model, _, _ = conv_bn_model(x.shape)
    grads = {}
    for mode in ("training", "inference"):
        tg = build_training(model, 4, loss="sum", bn=mode)
        grads[mode] = run(tg.model, tg.feeds({"x": x}))[tg.gradients["w"]]
    assert not np.allclose(grads["training"], grads["inference"], rtol=1e-2, atol=1e-3)


def test_batch_norm_on_a_rank_3_input_and_a_data_input():
    """BN1d-style [N, C, L] straight on the data input: x is not differentiated, so only
    the scale and bias gradients are built."""
    x = RNG.standard_normal([4, 3, 7]).astype(np.float32)
    values = {"s": 1 + 0.3 * RNG.standard_normal([3]), "b": 0.2 * RNG.standard_normal([3]),
              "r": RNG.standard_normal([4, 3, 7])}
    stats = {"m": np.zeros(3), "v": np.ones(3)}
    model = model_of([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"],
                                       epsilon=EPS, momentum=MOMENTUM),
                      helper.make_node("Mul", ["n", "r"], ["y"])],
                     list(x.shape), {**values, **stats})
    tg = build_training(model, 4, loss="sum")
    out = run(tg.model, tg.feeds({"x": x}))
    x64 = x.astype(np.float64)
    for name in ("s", "b"):
        def loss(v, name=name):
            p = {**values, name: v}
            return (bn_np(x64, p["s"], p["b"], stats["m"], stats["v"], True)[0] * p["r"]).sum()
        want = central_differences(loss, values[name].astype(np.float32).astype(np.float64))
        np.testing.assert_allclose(out[tg.gradients[name]], want, rtol=2e-4, atol=2e-4)


def test_bn_mode_errors(tmp_path):
    model, _, _ = conv_bn_model([2, 2, 5, 5])
    with pytest.raises(GraphmemError, match="BatchNormalization mode"):
        build_training(model, 2, loss="sum", bn="frozen")
    stats_as_inputs = model_of([helper.make_node("BatchNormalization",
                                                 ["x", "s", "b", "m", "v"], ["y"])],
                               [2, 3, 4], {"s": np.ones(3), "b": np.zeros(3)})
    for name in ("m", "v"):
        stats_as_inputs.graph.input.append(helper.make_tensor_value_info(name, 1, [3]))
    with pytest.raises(GraphmemError, match="must be initializers.*--bn inference"):
        build_training(stats_as_inputs, 2, loss="sum")


def test_train_command_bn_flag(tmp_path, capsys):
    model, _, _ = conv_bn_model([2, 2, 6, 6])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    results = {}
    for mode in ("training", "inference"):
        assert main(["train", str(path), "--batch", "2", "--loss", "sum", "--bn", mode,
                     "--json"]) == 0
        results[mode] = json.loads(capsys.readouterr().out)
    assert results["training"]["bn"] == "training"
    assert results["inference"]["bn"] == "inference"
    assert results["training"]["running_stat_bytes"] == 2 * 3 * 4
    assert results["inference"]["running_stat_bytes"] == 0
    # the saved training-mode step runs in its planned arena, node by node
    saved = tmp_path / "m.train.onnx"
    assert main(["train", str(path), "--batch", "2", "--loss", "sum", "--save", str(saved),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["verify", str(saved)]) == 0



def test_running_statistics_written_as_identities_of_one_initializer():
    """PyTorch's TorchScript exporter writes equal tensors once and an Identity for each
    other name (every fresh BatchNorm's running variance is ones): in training mode each
    statistic becomes an initializer of its own, updated separately, and the gradients
    are those of the model with separate initializers."""
    import onnx
    model, values, stats = conv_bn_model([2, 3, 6, 6])
    shared = onnx.ModelProto()
    shared.CopyFrom(model)
    g = shared.graph
    v = next(i for i in g.initializer if i.name == "v")
    v.name = "ones_like_v"
    g.node.insert(0, helper.make_node("Identity", ["ones_like_v"], ["v"]))
    x = RNG.standard_normal([2, 3, 6, 6]).astype(np.float32)
    a, b = build_training(model, 2, loss="sum"), build_training(shared, 2, loss="sum")
    assert sorted(running_stat_outputs(b.model)) == ["m", "v"]
    ra, rb = run(a.model, a.feeds({"x": x})), run(b.model, b.feeds({"x": x}))
    for w in values:
        np.testing.assert_array_equal(ra[a.gradients[w]], rb[b.gradients[w]])
    for stat, out in running_stat_outputs(b.model).items():
        np.testing.assert_array_equal(rb[out], ra[running_stat_outputs(a.model)[stat]])
