"""Training graphs: gradients against finite differences, the ReLU rewrite, recompute
equivalence on ORT, and the train command on small models."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.cli import main
from graphmem.training.build import build_training
from graphmem.training.cuts import cuts
from graphmem.training.recompute import recompute_sqrt, rewrite
from graphmem.training.report import load_training, plan_training, saved_activations

RNG = np.random.default_rng(7)


def tiny_model(act: str = "Tanh", batch: int = 2) -> onnx.ModelProto:
    """conv -> act -> conv -> act -> (+ skip) -> conv -> act -> Gemm-free head."""
    def w(name, shape):
        return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)
    inits = [w("w1", [4, 3, 3, 3]), w("b1", [4]), w("w2", [4, 4, 3, 3]), w("w3", [4, 4, 1, 1]),
             w("w4", [2, 4, 3, 3])]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node(act, ["c1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node(act, ["c2"], ["a2"]),
             helper.make_node("Add", ["a2", "a1"], ["s2"]),
             helper.make_node("Conv", ["s2", "w3"], ["c3"]),
             helper.make_node(act, ["c3"], ["a3"]),
             helper.make_node("Conv", ["a3", "w4"], ["c4"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node(act, ["c4"], ["y"])]
    g = helper.make_graph(nodes, "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2, 3, 3])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _chain_model(name, nodes, inits, out, batch) -> onnx.ModelProto:
    """A model of ``nodes`` from ``x`` [batch, 4, 8, 8] to ``out`` of the same shape."""
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 8, 8])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, 4, 8, 8])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def chain_model(depth: int = 8, batch: int = 8) -> onnx.ModelProto:
    """A plain chain of conv -> relu layers: the textbook case for recomputation."""
    inits, nodes, x = [], [], "x"
    for i in range(depth):
        inits.append(numpy_helper.from_array(
            (RNG.standard_normal([4, 4, 3, 3]) * 0.3).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"a{i}"])]
        x = f"a{i}"
    return _chain_model("chain", nodes, inits, x, batch)


def run(model: onnx.ModelProto, feeds: dict) -> dict:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def set_weight(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i in m.graph.initializer:
        if i.name == name:
            i.CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
    return m


def test_gradients_match_central_differences():
    tg = build_training(tiny_model("Tanh"), 2, loss="sum")
    x = RNG.standard_normal([2, 3, 6, 6]).astype(np.float32)
    feeds = tg.feeds({"x": x})
    out = run(tg.model, feeds)
    values = {i.name: numpy_helper.to_array(i) for i in tg.model.graph.initializer}
    assert set(tg.weights) == {"w1", "b1", "w2", "w3", "w4"}
    eps = 1e-2
    for w in tg.weights:
        grad = out[tg.gradients[w]]
        assert grad.shape == values[w].shape
        for flat in RNG.choice(values[w].size, size=min(4, values[w].size), replace=False):
            up, down = values[w].copy(), values[w].copy()
            up.flat[flat] += eps
            down.flat[flat] -= eps
            fd = (run(set_weight(tg.model, w, up), feeds)["loss"]
                  - run(set_weight(tg.model, w, down), feeds)["loss"]) / (2 * eps)
            assert grad.flat[flat] == pytest.approx(float(fd), rel=2e-2, abs=2e-3), (w, flat)


def test_relu_mask_rewrite_lets_the_pre_activation_die():
    model = tiny_model("Relu")
    fixed = build_training(model, 2, loss="sum")
    plain = build_training(model, 2, loss="sum", relu_fix=False)
    feeds = fixed.feeds({"x": RNG.standard_normal([2, 3, 6, 6]).astype(np.float32)})
    a, b = run(fixed.model, feeds), run(plain.model, feeds)
    for w in fixed.weights:
        np.testing.assert_allclose(a[fixed.gradients[w]], b[plain.gradients[w]], rtol=1e-6,
                                   atol=1e-7)
    kept_fixed = saved_activations(load_training(fixed))
    kept_plain = saved_activations(load_training(plain))
    assert "c3" in kept_plain and "c3" not in kept_fixed  # pre-activations no longer kept
    assert sum(kept_fixed.values()) < sum(kept_plain.values())


def test_relu_gradient_equals_numpy():
    """conv (pads 1) -> Relu -> sum: dL/dW = sum over positions of x patches where c > 0."""
    x = RNG.standard_normal([1, 2, 4, 4]).astype(np.float32)
    w = RNG.standard_normal([3, 2, 3, 3]).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])],
        [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    tg = build_training(m, 1, loss="sum")
    got = run(tg.model, tg.feeds({"x": x}))[tg.gradients["w"]]
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    want = np.zeros_like(w)
    for o in range(3):
        for i in range(4):
            for j in range(4):
                patch = xp[:, i:i + 3, j:j + 3]
                if (w[o] * patch).sum() > 0:
                    want[o] += patch
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("segments", [2, 3])
def test_recompute_gradients_equal_the_original(segments):
    tg = build_training(tiny_model("Relu", batch=3), 3, loss="sum")
    assert {"a1", "s2", "a3"} <= {main for main, _ in cuts(tg)}
    rc, info = recompute_sqrt(tg, segments)
    assert any(n.name.startswith("r:") for n in rc.model.graph.node)
    feeds = tg.feeds({"x": RNG.standard_normal([3, 3, 6, 6]).astype(np.float32)})
    a, b = run(tg.model, feeds), run(rc.model, feeds)
    assert a["loss"] == pytest.approx(float(b["loss"]))
    for w in tg.weights:
        np.testing.assert_array_equal(a[tg.gradients[w]], b[rc.gradients[w]])
    assert sum(saved_activations(load_training(rc)).values()) < sum(
        saved_activations(load_training(tg)).values())


def test_recompute_keeps_only_checkpoints_before_the_last_segment():
    tg = build_training(tiny_model("Tanh", batch=2), 2, loss="sum")
    rc = rewrite(tg, ["s2"])
    kept = set(saved_activations(load_training(rc)))
    assert not kept & {"c1", "a1", "c2", "a2"}  # recomputed from x
    assert "s2" in kept


def test_train_command_json_on_a_file(tmp_path, capsys):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model("Relu"), str(path))
    assert main(["train", str(path), "--batch", "4", "--loss", "sum", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["batch"] == 4 and d["recompute_macs"] == 0
    weights = 4 * 3 * 9 + 4 + 4 * 4 * 9 + 4 * 4 + 2 * 4 * 9
    assert d["weight_bytes"] == d["gradient_bytes"] == 4 * weights
    assert d["optimizer_bytes"] == 2 * d["weight_bytes"]  # adam by default
    assert d["forward_macs"] == 4 * (144 * 27 + 144 * 36 + 144 * 4 + 18 * 36)  # out x kernel
    assert d["backward_macs"] > d["forward_macs"]
    assert 0 < d["saved_activation_bytes"] < d["arena_bytes"]
    assert main(["train", str(path), "--batch", "4", "--loss", "sum", "--json",
                 "--recompute", "sqrt", "--optimizer", "sgd", "--offload",
                 "--offload-min", "0"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["optimizer_bytes"] == 0 and r["chen_recompute_macs"] > 0
    assert r["recompute_macs"] <= r["chen_recompute_macs"]
    assert r["arena_bytes"] <= r["chen_arena_bytes"]
    assert r["saved_activation_bytes"] <= d["saved_activation_bytes"]
    assert r["offload_bytes"] > 0 and r["stall_seconds"] >= 0
    assert r["offload_arena_bytes"] <= r["arena_bytes"]


def test_train_command_errors(tmp_path, capsys):
    assert main(["train", str(tmp_path / "none.onnx")]) == 2
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), str(path))
    assert main(["train", str(path), "--budget", "lots"]) == 2
    assert main(["train", str(path), "--batch", "0"]) == 2
    assert "graphmem:" in capsys.readouterr().err


def test_train_binds_symbolic_dims_like_plan(tmp_path, capsys):
    """An exporter-style encoder with symbolic batch and seq: train takes --dim, names
    every unbound dim at once, and the batch axis follows --dim or --batch."""
    from models import transformer
    path = tmp_path / "encoder.onnx"
    onnx.save(transformer.build(layers=1, d_model=32, heads=2, d_ff=64), str(path))
    assert main(["train", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert "'seq'" in err and "--dim seq=VALUE" in err and len(err.strip().splitlines()) == 1
    assert main(["train", str(path), "--dim", "seq=8", "--dim", "batch=3", "--json"]) == 0
    three = json.loads(capsys.readouterr().out)
    assert three["batch"] == 3
    assert main(["train", str(path), "--dim", "seq=8", "--batch", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["batch"] == 1 and one["weight_bytes"] == three["weight_bytes"]
    assert one["saved_activation_bytes"] < three["saved_activation_bytes"]
    assert main(["train", str(path), "--dim", "seq=8", "--dim", "batch=3",
                 "--batch", "2"]) == 2
    assert "disagree" in capsys.readouterr().err


def test_batch_rewrites_reshape_targets_written_as_constant_nodes(capsys, tmp_path):
    """PyTorch's exporters write a Reshape's target as a Constant node: --batch rewrites
    its leading batch as it does an initializer's (issue 22: 'unknown rank' before)."""
    w = numpy_helper.from_array((RNG.standard_normal([4, 3, 3, 3]) * 0.3).astype(np.float32),
                                "w")
    fc = numpy_helper.from_array((RNG.standard_normal([64, 5]) * 0.3).astype(np.float32),
                                 "fc")
    target = helper.make_node("Constant", [], ["target"],
                              value=numpy_helper.from_array(np.array([2, 64], np.int64)))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), target,
             helper.make_node("Reshape", ["r", "target"], ["flat"]),
             helper.make_node("MatMul", ["flat", "fc"], ["y"])]
    g = helper.make_graph(nodes, "flat",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
                          [w, fc])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "flat.onnx"
    onnx.save(m, str(path))
    assert main(["train", str(path), "--batch", "6", "--loss", "sum", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["batch"] == 6 and d["forward_macs"] == 6 * (64 * 27 + 5 * 64)


def test_zoo_squeezenet_builds_plans_and_runs():
    from graphmem.frontend.zoo import zoo_path
    tg = build_training(onnx.load(str(zoo_path("squeezenet"))), 1)
    graph = load_training(tg)
    result, _ = plan_training(graph)
    assert result.plan.arena_bytes > 0
    out = run(tg.model, tg.feeds({"data_0": RNG.random([1, 3, 224, 224], np.float32)}))
    assert all(np.isfinite(out[g]).all() for g in tg.gradients.values())


@pytest.mark.parametrize("group,stride", [(2, 1), (4, 2), (4, 1)])
def test_grouped_conv_weight_gradient_matches_numpy(group, stride):
    """Our grouped-Conv weight rule: conv (groups, pads 1) -> sum(y * r) has
    dL/dW[m, c] = sum over n and positions of r[n, m] * x patch of channel g*Cg + c."""
    n, c, m, h = 2, 4, 4 * group // 2, 5
    cg, mg = c // group, m // group
    x = RNG.standard_normal([n, c, h, h]).astype(np.float32)
    w = RNG.standard_normal([m, cg, 3, 3]).astype(np.float32)
    ho = (h + 2 - 3) // stride + 1
    r = RNG.standard_normal([n, m, ho, ho]).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=group,
                          strides=[stride, stride]),
         helper.make_node("Mul", ["c", "r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m, ho, ho])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    tg = build_training(model, n, loss="sum")
    assert "w" in tg.weights  # (r, a float initializer, counts as a parameter too)
    got = run(tg.model, tg.feeds({"x": x}))[tg.gradients["w"]]
    if cg == 1:  # depthwise: the input is read as a view, not transposed
        assert not [t for t in tg.model.graph.node if t.op_type == "Transpose"
                    and t.name.startswith("b:") and "x" in t.input]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros_like(w)
    for o in range(m):
        gi = o // mg
        for i in range(ho):
            for j in range(ho):
                patch = xp[:, gi * cg:(gi + 1) * cg, i * stride:i * stride + 3,
                           j * stride:j * stride + 3]
                want[o] += np.einsum("n,nckl->ckl", r[:, o, i, j], patch)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_budget_picks_recomputation_only_when_needed(tmp_path, capsys):
    from graphmem.commands.sizes import parse_bytes
    assert parse_bytes("2GiB") == 2 * 2**30 and parse_bytes("1.5e3") == 1500
    path = tmp_path / "tiny.onnx"
    onnx.save(chain_model(), str(path))
    args = ["train", str(path), "--batch", "8", "--loss", "sum", "--json", "--optimizer", "sgd"]
    assert main(args + ["--budget", "1GiB"]) == 0
    roomy = json.loads(capsys.readouterr().out)
    assert roomy["recompute_macs"] == 0 and roomy["fits_budget"]
    tight = roomy["weight_bytes"] + roomy["constant_bytes"] + roomy["arena_bytes"] - 1
    assert main(args + ["--budget", str(tight)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["budget_trials"] > 1
    assert d["step_bytes"] == d["weight_bytes"] + d["constant_bytes"] + d["arena_bytes"]
    assert d["fits_budget"] and d["recompute_macs"] > 0 and d["step_bytes"] <= tight


def test_budget_counts_the_master_weights_of_a_mixed_step(tmp_path, capsys):
    """Under mixed precision the step holds float32 master weights beside the float16
    copy: a budget just below the step with nothing recomputed must not be judged met
    by the no-recompute candidate, and every total --json shows is the same sum."""
    path = tmp_path / "tiny.onnx"
    onnx.save(chain_model(), str(path))
    args = ["train", str(path), "--batch", "8", "--loss", "sum", "--json",
            "--optimizer", "sgd", "--precision", "mixed"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["master_weight_bytes"] > 0
    tight = plain["step_bytes"] - 1  # above the total without the master weights
    assert main(args + ["--budget", str(tight)]) == 0
    d = json.loads(capsys.readouterr().out)
    whole = (d["weight_bytes"] + d["master_weight_bytes"] + d["optimizer_bytes"]
             + d["constant_bytes"] + d["arena_bytes"])
    assert d["step_bytes"] == whole
    assert d["fits_budget"] == (d["step_bytes"] <= tight)
    none = next(t for t in d["budget_tried"] if t["choice"] == "none")
    assert none["step_bytes"] == plain["step_bytes"] > tight


def test_gemm_gradients_match_central_differences():
    """A Gemm head (transB=1, as in the zoo): exercises the transpose rewrites."""
    w1 = (RNG.standard_normal([4, 5]) * 0.5).astype(np.float32)
    w2 = (RNG.standard_normal([4, 3]) * 0.5).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
         helper.make_node("Tanh", ["h"], ["a"]),
         helper.make_node("Reshape", ["a", "shape"], ["r"]),
         helper.make_node("Gemm", ["r", "w2"], ["z"]),
         helper.make_node("Softmax", ["z"], ["y"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(np.full([4], 0.1, np.float32), "b1"),
         numpy_helper.from_array(np.array([1, -1], np.int64), "shape")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    tg = build_training(model, 3)  # auto: cross-entropy; the Reshape gets batch 3
    assert "label" in tg.data_inputs and set(tg.weights) == {"w1", "b1", "w2"}
    x = RNG.standard_normal([3, 5]).astype(np.float32)
    label = np.eye(3, dtype=np.float32)[[0, 2, 1]]
    feeds = tg.feeds({"x": x, "label": label})
    out = run(tg.model, feeds)
    eps = 1e-2
    for w in tg.weights:
        value = numpy_helper.to_array(next(i for i in tg.model.graph.initializer if i.name == w))
        for flat in range(0, value.size, 3):
            up, down = value.copy(), value.copy()
            up.flat[flat] += eps
            down.flat[flat] -= eps
            fd = (run(set_weight(tg.model, w, up), feeds)["loss"]
                  - run(set_weight(tg.model, w, down), feeds)["loss"]) / (2 * eps)
            assert out[tg.gradients[w]].flat[flat] == pytest.approx(float(fd), rel=2e-2,
                                                                    abs=2e-3), (w, flat)


def test_our_rewrites_keep_the_gradients():
    """conv (pads 1) -> Relu -> MaxPool -> Reshape -> Gemm -> Softmax: every rewrite
    (ReLU mask, pads into the weight conv, copies to reshapes, seed fills, cancelled
    transposes) applies, and the gradients equal onnx-ad's own graph's."""
    w = (RNG.standard_normal([4, 3, 3, 3]) * 0.3).astype(np.float32)
    fc = (RNG.standard_normal([5, 16]) * 0.3).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["a"]),
         helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Reshape", ["p", "shape"], ["r"]),
         helper.make_node("Gemm", ["r", "fc"], ["z"], transB=1),
         helper.make_node("Softmax", ["z"], ["y"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc"),
         numpy_helper.from_array(np.array([1, 16], np.int64), "shape")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    ours = build_training(model, 3)
    theirs = build_training(model, 3, relu_fix=False, rewrites=False)
    ops = [n.op_type for n in ours.model.graph.node if n.name.startswith("b:")]
    assert "Pad" not in ops and "ConstantOfShape" not in ops
    feeds = ours.feeds({"x": RNG.standard_normal([3, 3, 4, 4]).astype(np.float32),
                        "label": np.eye(5, dtype=np.float32)[[0, 3, 4]]})
    a, b = run(ours.model, feeds), run(theirs.model, feeds)
    for name in ours.weights:
        np.testing.assert_allclose(a[ours.gradients[name]], b[theirs.gradients[name]],
                                   rtol=1e-6, atol=1e-7)
    assert np.abs(a[ours.gradients["w"]]).max() > 0


def test_training_graph_verifies_in_its_arena(tmp_path):
    """The arena verifier runs the squeezenet training step node by node: PASS."""
    import graphmem
    from graphmem.verify.verifier import verify
    path = tmp_path / "sq.train.onnx"
    assert main(["train", "squeezenet", "--batch", "1", "--save", str(path), "--json"]) == 0
    graph = graphmem.load(path)
    plan = graphmem.plan_graph(graph).plan
    report = verify(plan, graph)
    assert report.passed, report


def clip_chain_model(depth: int = 6, batch: int = 4) -> onnx.ModelProto:
    """conv -> Clip(0, 6) layers whose bounds are Constant nodes (PyTorch's ReLU6 export)."""
    inits, nodes, x = [], [], "x"
    for i in range(depth):
        inits.append(numpy_helper.from_array(
            (RNG.standard_normal([4, 4, 3, 3]) * 0.5).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Constant", [], [f"lo{i}"],
                                   value=numpy_helper.from_array(np.array(0, np.float32))),
                  helper.make_node("Constant", [], [f"hi{i}"],
                                   value=numpy_helper.from_array(np.array(6, np.float32))),
                  helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Clip", [f"c{i}", f"lo{i}", f"hi{i}"], [f"a{i}"])]
        x = f"a{i}"
    return _chain_model("clips", nodes, inits, x, batch)


def test_constant_nodes_are_not_activations_for_recompute():
    # The Clip bounds (Constant nodes) are read by every Clip and by backward: taken
    # for activations they made every tensor look live and left no checkpoint candidate
    # but the last ones (mobilenet_v2: 9 candidates, all in the last two blocks).
    tg = build_training(clip_chain_model(), 4, loss="sum")
    mains = [main for main, _ in cuts(tg)]
    assert {f"a{i}" for i in range(5)} <= set(mains)
    assert not any(c.startswith(("lo", "hi")) for c in mains)
    rc = rewrite(tg, ["a1", "a3"])
    assert not any(n.op_type == "Constant" for n in rc.model.graph.node
                   if n.name.startswith("r:"))
    feeds = tg.feeds({"x": (3 * RNG.standard_normal([4, 4, 8, 8])).astype(np.float32)})
    a, b = run(tg.model, feeds), run(rc.model, feeds)
    for w in tg.weights:
        np.testing.assert_array_equal(a[tg.gradients[w]], b[rc.gradients[w]])


def test_training_order_sinks_helpers_and_runs_freeing_masks_early():
    from graphmem.training.schedule import helper_nodes, training_order
    tg = build_training(clip_chain_model(), 4, loss="sum")
    rc = rewrite(tg, ["a1", "a3"])
    graph = load_training(rc)
    floating, early = helper_nodes(graph)
    order = training_order(graph)
    assert sorted(order) == sorted(n.index for n in graph.nodes)
    by = {n.index: n for n in graph.nodes}
    pos = {idx: k for k, idx in enumerate(order)}
    producer = {t: n for n in graph.nodes for t in n.outputs if t}
    for k, idx in enumerate(order):  # a valid schedule
        assert all(pos[producer[t].index] < k for t in by[idx].reads if t in producer)
    # The masks on a Clip's input (Less, Greater: nothing else in backward reads it)
    # run right after its producer, in forward, so the float input dies there.
    masks = [by[i] for i in early if by[i].op_type in ("Less", "Greater")]
    assert masks
    last_forward = max(pos[n.index] for n in graph.nodes if n.name.startswith("f:"))
    assert all(pos[m.index] < last_forward for m in masks)
    # Recomputation and helpers (transposed inputs of weight gradients, reshapes) run
    # just before their first reader: only floating or early nodes in between.
    readers: dict[str, list[int]] = {}
    for n in graph.nodes:
        for t in n.reads:
            readers.setdefault(t, []).append(pos[n.index])
    recomputed = [i for i in floating if by[i].name.startswith("r:")]
    assert recomputed
    for i in floating:
        first = min((p for t in by[i].outputs for p in readers.get(t, ())), default=None)
        if first is not None:
            between = order[pos[i] + 1:first]
            assert all(j in floating or j in early for j in between), by[i].name
    assert min(pos[i] for i in recomputed) > last_forward + 1


def test_recompute_lowers_the_planned_arena_of_a_clip_chain():
    tg = build_training(clip_chain_model(depth=12, batch=16), 16, loss="sum")
    base = plan_training(load_training(tg))[0].plan.arena_bytes
    rc, _ = recompute_sqrt(tg)
    assert plan_training(load_training(rc))[0].plan.arena_bytes < 0.75 * base


def test_trimmed_recompute_keeps_matrix_outputs_and_the_gradients():
    from graphmem.training.recompute import MATRIX_OPS, recompute_planned
    tg = build_training(clip_chain_model(depth=12, batch=16), 16, loss="sum")
    rc, info = recompute_sqrt(tg, full=1)
    assert info["whole_segments"] == 1 and info["matrix_outputs_kept"] > 0
    kept = set(saved_activations(load_training(rc)))
    convs = {n.output[0] for n in rc.model.graph.node
             if n.name.startswith("f:") and n.op_type in MATRIX_OPS}
    assert kept & convs
    feeds = tg.feeds({"x": (3 * RNG.standard_normal([16, 4, 8, 8])).astype(np.float32)})
    a, b = run(tg.model, feeds), run(rc.model, feeds)
    for w in tg.weights:
        np.testing.assert_array_equal(a[tg.gradients[w]], b[rc.gradients[w]])
    # --recompute sqrt: Chen's arena, with no more recomputed MACs than Chen's
    best = recompute_planned(tg, "sgd", 16)
    graph, result, info = best.step.graph, best.step.result, best.info
    assert result.plan.arena_bytes <= info["chen_arena_bytes"]
    from graphmem.analysis.macs import macs_by_phase
    assert macs_by_phase(graph)["recompute"] <= info["chen_recompute_macs"]


def test_balanced_cuts_are_cuts_and_keep_the_gradients():
    from graphmem.training.recompute import choose_balanced, recompute_chosen
    tg = build_training(clip_chain_model(depth=12, batch=16), 16, loss="sum")
    found = cuts(tg)
    chosen = choose_balanced(tg, found)
    live = {t for _, kept in found for t in kept}
    assert chosen and set(chosen) <= live
    rc, info = recompute_chosen(tg, chosen, found)
    assert info["segments"] >= 2
    feeds = tg.feeds({"x": (3 * RNG.standard_normal([16, 4, 8, 8])).astype(np.float32)})
    a, b = run(tg.model, feeds), run(rc.model, feeds)
    for w in tg.weights:
        np.testing.assert_array_equal(a[tg.gradients[w]], b[rc.gradients[w]])
    # the balanced model: for a uniform chain it keeps about sqrt(n) cuts, not all
    assert len(chosen) < len(found)


def _widening_chain(batch: int = 8) -> onnx.ModelProto:
    """Conv -> Relu blocks whose activations grow and shrink (channels 4, 8, 16, 8, 4 ...),
    so the cuts keep different bytes and the best choice is not evenly spaced."""
    widths = [4, 8, 16, 16, 8, 4, 4, 8, 4]
    nodes, inits, x = [], [], "x"
    for i, (cin, cout) in enumerate(zip(widths, widths[1:])):
        inits.append(numpy_helper.from_array(
            (RNG.standard_normal([cout, cin, 3, 3]) * 0.2).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"a{i}"])]
        x = f"a{i}"
    return _chain_model("widening", nodes, inits, x, batch)


def test_the_program_finds_the_least_modelled_peak_then_the_fewest_macs():
    """Against every subset of the cuts, on the program's own model: the least peak
    (held cuts up to the segment plus the segment), and at that peak the fewest MACs."""
    import itertools
    from graphmem.training.cuts import segment_model
    from graphmem.training.optimal import solve
    tg = build_training(_widening_chain(), 8, loss="sum")
    found = cuts(tg)
    model = segment_model(tg, found)
    p, kept, made, macs = model["p"], model["kept"], model["made"], model["macs"]
    m = len(p)
    assert 6 <= m - 2 <= 16  # small enough to enumerate

    def peak_and_macs(subset):
        path = [0, *[j + 1 for j in subset], m - 1]
        peak = max(sum(kept[j] for j in path[1:k + 1]) + made[p[b] + 1] - made[p[a] + 1]
                   for k, (a, b) in enumerate(zip(path, path[1:])))
        cost = sum(macs[p[b] + 1] - macs[p[a] + 1]
                   for a, b in zip(path, path[1:]) if b != m - 1)
        return peak, cost

    every = [peak_and_macs(s) for r in range(m - 1)
             for s in itertools.combinations(range(m - 2), r)]
    least = min(pk for pk, _ in every)
    fewest = min(c for pk, c in every if pk == least)
    chosen, info = solve(model)
    assert abs(info["modelled_peak_bytes"] - least) <= 8
    assert peak_and_macs(sorted(chosen)) == (least, fewest)
    # Chen's model charges every chosen cut at every segment: on this chain the balanced
    # cuts (exact for that model) hold more at the peak of this one
    from graphmem.training.recompute import choose_balanced
    balanced = choose_balanced(tg, found)
    mains = [k for k, (main, _) in enumerate(found) if main in balanced]
    assert peak_and_macs(mains)[0] > least


def test_recompute_optimal_keeps_the_gradients_and_is_never_worse_than_sqrt():
    from graphmem.training.optimal import choose_optimal
    from graphmem.training.recompute import recompute_chosen, recompute_planned
    tg = build_training(_widening_chain(), 8, loss="sum")
    found = cuts(tg)
    chosen, info = choose_optimal(tg, found)
    rc, _ = recompute_chosen(tg, chosen, found)
    feeds = tg.feeds({"x": RNG.standard_normal([8, 4, 8, 8]).astype(np.float32)})
    a, b = run(tg.model, feeds), run(rc.model, feeds)
    for w in tg.weights:
        np.testing.assert_array_equal(a[tg.gradients[w]], b[rc.gradients[w]])
    best = recompute_planned(tg, "sgd", 8, optimal=True)
    result, opt_info = best.step.result, best.info
    assert result.plan.arena_bytes <= opt_info["chen_arena_bytes"]
    planned_sqrt = recompute_planned(tg, "sgd", 8).step.result.plan.arena_bytes
    assert result.plan.arena_bytes <= planned_sqrt
    assert opt_info["optimal"]["optimal_arena_bytes"] > 0


def test_train_recompute_optimal_command_json(tmp_path, capfd):
    """The CLI: --recompute optimal prints JSON and nothing else on stdout (highspy
    writes a banner to the process's standard output when its first solver is made)."""
    import json
    from graphmem.cli import main
    path = tmp_path / "chain.onnx"
    onnx.save(_widening_chain(), str(path))
    assert main(["train", str(path), "--batch", "8", "--loss", "sum",
                 "--recompute", "optimal", "--json"]) == 0
    out = json.loads(capfd.readouterr().out)
    assert out["optimal"]["status"].startswith("Optimal")
    assert out["arena_bytes"] <= out["chen_arena_bytes"]


def test_the_first_solver_of_a_process_prints_no_banner():
    """highspy's banner comes from C++ on descriptor 1, once per process: checked in a
    fresh process (in this one an earlier test may have made the first solver), where
    Python's stdout is another descriptor onto the same pipe, as under pytest's capfd."""
    import subprocess
    import sys
    code = ("import os, sys; sys.stdout = os.fdopen(os.dup(1), 'w'); "
            "from graphmem.core.highs import quiet_highs; quiet_highs(); print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"


def test_budget_and_recompute_together_are_refused(tmp_path, capsys):
    from graphmem.cli import main
    path = tmp_path / "chain.onnx"
    onnx.save(_widening_chain(), str(path))
    assert main(["train", str(path), "--budget", "1MiB", "--recompute", "sqrt"]) == 2
    assert "give --budget or --recompute, not both" in capsys.readouterr().err
