"""The memory and compute analysis: MACs against published counts, the breakdown, the
per-layer table, and the report command on every zoo model."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.analysis import breakdown as analysis
from graphmem.cli import main
from graphmem.frontend.reader import from_model
from graphmem.analysis.macs import im2col_bytes, node_macs
from graphmem.frontend.zoo import ZOO, zoo_path

from conftest import F, make_model


def conv_model(n, c_in, hw, c_out, k, stride, pad=0, group=1):
    w = numpy_helper.from_array(np.zeros((c_out, c_in // group, k, k), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k],
                            strides=[stride, stride], pads=[pad] * 4, group=group)
    out = (hw + 2 * pad - k) // stride + 1
    return make_model([node], [("x", F, [n, c_in, hw, hw])], [("y", F, [n, c_out, out, out])],
                      [w])


def conv_gemm_macs(graph) -> int:
    return sum(node_macs(n, graph.tensors) for n in graph.nodes
               if n.op_type in ("Conv", "Gemm", "MatMul"))


def zoo_graph(name, input_hw=None):
    model = onnx.load(str(zoo_path(name)))
    if input_hw is not None:
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[2].dim_value = dims[3].dim_value = input_hw
    return from_model(model)


# ---------------------------------------------------------------------- MACs

def test_alexnet_conv1_at_227_is_the_published_count():
    # AlexNet's first layer: 96 filters of 11x11x3, stride 4, on a 227x227 image give a
    # 55x55 map: 55*55*96 * 11*11*3 = 105,415,200 MACs (Sze, Chen, Yang, Emer, "Efficient
    # Processing of Deep Neural Networks: A Tutorial and Survey", Proc. IEEE 2017; the
    # Eyeriss paper, ISSCC 2016, gives 666M MACs for AlexNet's five conv layers).
    g = from_model(conv_model(1, 3, 227, 96, 11, 4))
    assert g.tensors["y"].shape == (1, 96, 55, 55)
    assert node_macs(g.nodes[0], g.tensors) == 105_415_200


def test_zoo_alexnet_conv1_at_its_224_input():
    # The zoo's bvlc_alexnet takes 224x224 with the same 11x11 stride-4 unpadded conv1:
    # floor((224 - 11) / 4) + 1 = 54, so 54*54*96 * 363 MACs.
    g = zoo_graph("bvlc_alexnet")
    conv1 = next(n for n in g.nodes if n.op_type == "Conv")
    assert g.tensors[conv1.outputs[0]].shape == (1, 96, 54, 54)
    assert node_macs(conv1, g.tensors) == 54 * 54 * 96 * 363 == 101_616_768


def test_alexnet_total_matches_the_original_at_227():
    # Sze et al. 2017 (above), Table: AlexNet 724M MACs, of which CONV 666M and FC 58.6M
    # (the two-tower original with groups of 2 in conv2, conv4 and conv5, 227x227 input).
    # The zoo's Caffe model is that network; only its input is 224x224, and pool5 pads
    # one extra row and column so that the FC input stays 256x6x6. At 227 the counts are
    # the published ones exactly.
    g = zoo_graph("bvlc_alexnet", input_hw=227)
    conv = sum(node_macs(n, g.tensors) for n in g.nodes if n.op_type == "Conv")
    fc = sum(node_macs(n, g.tensors) for n in g.nodes if n.op_type == "Gemm")
    assert conv == 665_784_864          # 666M
    assert fc == 58_621_952             # 58.6M
    assert round((conv + fc) / 1e6) == 724
    # At the zoo's own 224 input the conv layers see smaller maps (54, 26, 12 instead of
    # 55, 27, 13); the FC layers are unchanged.
    g224 = zoo_graph("bvlc_alexnet")
    assert conv_gemm_macs(g224) == 654_560_384
    assert sum(node_macs(n, g224.tensors) for n in g224.nodes if n.op_type == "Gemm") == fc
    # 60,965,224 parameters: the layer sizes of Krizhevsky et al. 2012, weights and biases
    # (conv 2,334,080 + fc 58,631,144); Sze et al. round it to 61M.
    assert analysis.param_count(g224) == 60_965_224


def test_vgg19_matches_torchvision():
    # torchvision's VGG19_Weights.IMAGENET1K_V1 lists num_params 143,667,240 and
    # "GFLOPS 19.63", which torchvision counts as multiply-adds of conv and linear layers
    # (https://pytorch.org/vision/stable/models/generated/torchvision.models.vgg19.html).
    g = zoo_graph("vgg19")
    assert round(conv_gemm_macs(g) / 1e9, 2) == 19.63
    assert analysis.param_count(g) == 143_667_240


def test_resnet50_matches_torchvision_v1_5():
    # The zoo's (Caffe2) ResNet-50 strides its bottlenecks in the 3x3 conv: the "v1.5"
    # that torchvision ships, listed with num_params 25,557,032 and "GFLOPS 4.09" (conv
    # and linear multiply-adds; https://pytorch.org/vision/stable/models/generated/
    # torchvision.models.resnet50.html). He et al. 2016 give 3.8e9 for the original,
    # strided in the first 1x1, which has fewer MACs in the strided blocks.
    g = zoo_graph("resnet50")
    strided = [n for n in g.nodes if n.op_type == "Conv" and n.attrs.get("strides") == [2, 2]]
    assert [g.tensors[n.inputs[1]].shape[2] for n in strided] == [7, 3, 1, 3, 1, 3, 1]
    assert round(conv_gemm_macs(g) / 1e9, 2) == 4.09
    # torchvision counts BatchNorm's weight and bias but not its running mean and variance
    # (buffers); the ONNX graph reads all four, and graphmem names them apart.
    bn_channels = sum(g.tensors[n.inputs[1]].numel for n in g.nodes
                      if n.op_type == "BatchNormalization")
    assert analysis.param_count(g) == 25_557_032
    assert analysis.running_stat_count(g) == 2 * bn_channels == 53_120


def test_macs_of_each_op_kind():
    w = numpy_helper.from_array(np.zeros((6, 2, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.zeros((5, 7), np.float32), "b")
    s = numpy_helper.from_array(np.ones(6, np.float32), "s")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], group=2),    # 2x6x6x6
        helper.make_node("BatchNormalization", ["c", "s", "s", "s", "s"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Sum", ["r", "r", "r"], ["sum"]),
        helper.make_node("MaxPool", ["sum"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["gp"]),
        helper.make_node("Reshape", ["gp", "shape"], ["flat"]),
        helper.make_node("MatMul", ["m", "b"], ["mm"]),                               # 3x4x7
        helper.make_node("Softmax", ["mm"], ["sm"]),
        helper.make_node("LRN", ["c"], ["lrn"], size=3),
    ]
    shape = numpy_helper.from_array(np.array([2, 6], np.int64), "shape")
    model = make_model(nodes, [("x", F, [2, 4, 8, 8]), ("m", F, [3, 4, 5])],
                       [("flat", F, [2, 6]), ("sm", F, [3, 4, 7]), ("lrn", F, [2, 6, 6, 6])],
                       [w, b, s, shape])
    g = from_model(model)
    macs = {n.outputs[0]: node_macs(n, g.tensors) for n in g.nodes}
    out = 2 * 6 * 6 * 6
    assert macs == {"c": out * 2 * 9, "bn": 2 * out, "r": out, "sum": 2 * out,
                    "p": 2 * 6 * 3 * 3 * 4, "gp": 2 * 6 * 3 * 3, "flat": 0,
                    "mm": 3 * 4 * 7 * 5, "sm": 3 * 3 * 4 * 7, "lrn": 5 * out}
    unknown = helper.make_node("TopK", ["v", "k"], ["vals", "idx"])
    g2 = from_model(make_model([unknown], [("v", F, [10])],
                               [("vals", F, [3]), ("idx", TensorProto.INT64, [3])],
                               [numpy_helper.from_array(np.array([3], np.int64), "k")]))
    assert node_macs(g2.nodes[0], g2.tensors) is None


def test_einsum_and_recurrent_macs():
    nodes = [helper.make_node("Einsum", ["a", "b"], ["e"], equation="bij,bjk->bik"),
             helper.make_node("LSTM", ["x", "w", "r"], ["", "h"], hidden_size=8)]
    w = numpy_helper.from_array(np.zeros((1, 32, 5), np.float32), "w")
    r = numpy_helper.from_array(np.zeros((1, 32, 8), np.float32), "r")
    g = from_model(make_model(nodes, [("a", F, [2, 3, 4]), ("b", F, [2, 4, 6]),
                                      ("x", F, [7, 2, 5])],
                              [("e", F, [2, 3, 6]), ("h", F, [1, 2, 8])], [w, r]))
    einsum, lstm = g.nodes
    assert node_macs(einsum, g.tensors) == 2 * 3 * 4 * 6
    # 7 steps x 2 sequences x 4 gates x 8 units x (5 inputs + 8 recurrent)
    assert node_macs(lstm, g.tensors) == 7 * 2 * 4 * 8 * (5 + 8)


def test_gemm_macs_follow_trans_a():
    a = numpy_helper.from_array(np.zeros((5, 3), np.float32), "a")  # K=5, M=3 with transA
    node = helper.make_node("Gemm", ["a", "x"], ["y"], transA=1)
    g = from_model(make_model([node], [("x", F, [5, 4])], [("y", F, [3, 4])], [a]))
    assert node_macs(g.nodes[0], g.tensors) == 3 * 4 * 5


def test_im2col_workspace():
    g = from_model(conv_model(4, 3, 227, 96, 11, 4))
    # one image: (3*11*11) x (55*55) floats, whatever the batch
    assert im2col_bytes(g.nodes[0], g.tensors) == 363 * 55 * 55 * 4
    pointwise = from_model(conv_model(1, 64, 14, 32, 1, 1))
    assert im2col_bytes(pointwise.nodes[0], pointwise.tensors) == 0
    strided = from_model(conv_model(1, 64, 14, 32, 1, 2))  # a strided 1x1 must gather
    assert im2col_bytes(strided.nodes[0], strided.tensors) == 64 * 7 * 7 * 4
    grouped = from_model(conv_model(1, 8, 10, 8, 3, 1, pad=1, group=4))
    assert im2col_bytes(grouped.nodes[0], grouped.tensors) == 2 * 9 * 10 * 10 * 4


# ---------------------------------------------------------------------- breakdown, layers

def test_weights_count_what_running_nodes_read():
    # data -> Mul(scale) where scale = Unsqueeze(raw): the folded Unsqueeze output is the
    # weight; raw feeds only a folded node and is not counted twice.
    raw = numpy_helper.from_array(np.ones(8, np.float32), "raw")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Unsqueeze", ["raw", "axes"], ["scale"]),
             helper.make_node("Mul", ["x", "scale"], ["y"])]
    g = from_model(make_model(nodes, [("x", F, [2, 8, 1])], [("y", F, [2, 8, 1])], [raw, axes]))
    assert "scale" in g.constants
    assert analysis.static_reads(g) == ["scale"]
    assert analysis.weight_bytes(g) == 32
    assert analysis.param_count(g) == 8


def test_device_presets_and_roofline():
    g = from_model(conv_model(1, 3, 227, 96, 11, 4))
    plan = graphmem.plan_graph(g).plan
    [row] = analysis.layer_table(g, plan, analysis.device("a100"))
    moved = (3 * 227 * 227 + 96 * 363 + 96 * 55 * 55) * 4
    assert row["bytes_moved"] == moved
    assert row["intensity"] == pytest.approx(105_415_200 / moved)
    assert row["bound"] == "compute"  # 57 MAC/B against an A100 FP32 ridge of 4.8
    slow_memory = analysis.device(flops=1e15, bandwidth=1e9)
    assert analysis.layer_table(g, plan, slow_memory)[0]["bound"] == "bandwidth"
    assert analysis.device("h200").bandwidth == 4.8e12
    assert analysis.device("t4", compute="float16").flops == 65e12
    with pytest.raises(graphmem.GraphmemError, match="unknown device"):
        analysis.device("abacus")
    with pytest.raises(graphmem.GraphmemError, match="both"):
        analysis.device(flops=1e12)


def test_view_moves_no_bytes():
    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    g = from_model(make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, [2, 12])], [shape]))
    plan = graphmem.plan_graph(g).plan
    relu, reshape = analysis.layer_table(g, plan)
    assert plan.tensors["y"].alias == "view"
    assert reshape["bytes_moved"] == 0 and reshape["bound"] == "none"
    assert relu["bytes_moved"] == 2 * 96 and relu["macs"] == 24
    assert reshape["params"] == 0 and reshape["param_bytes"] == 16  # a shape, not a parameter


@pytest.fixture(scope="module", params=ZOO)
def zoo_report(request):
    graph = graphmem.load(zoo_path(request.param))
    result = graphmem.plan_graph(graph)
    return request.param, graph, result.plan, analysis.report(graph, result.plan)


def test_zoo_report_is_consistent(zoo_report):
    name, graph, plan, rep = zoo_report
    t, layers = rep["totals"], rep["layers"]
    assert [r["node"] for r in layers] == plan.order
    assert t["macs_unknown_ops"] == []
    assert t["macs"] == sum(r["macs"] for r in layers) > 0
    # the convention's MACs: the matrix ops (Conv, Gemm, ...) alone
    assert t["matrix_macs"] == conv_gemm_macs(graph) <= t["macs"]
    assert t["arena_bytes"] == plan.arena_bytes
    assert t["activation_bytes_naive"] == plan.stats["naive_bytes"]
    assert t["total_bytes"] == t["weight_bytes"] + t["arena_bytes"] + t["workspace_bytes"]
    # weights are counted once even when several nodes read them
    assert t["weight_bytes"] <= sum(r["param_bytes"] for r in layers)
    assert t["workspace_bytes"] > 0 and t["workspace_node"] is not None
    assert max(r["workspace_bytes"] for r in layers) == t["workspace_bytes"]
    # the busiest step of the plan fills the aliased peak (each alias group once)
    assert max(r["live_bytes"] for r in layers) == plan.stats["aliased_peak_bytes"]
    # and the peak's storage entries add up to it
    assert sum(e["bytes"] for e in rep["peak"]["tensors"]) == rep["peak"]["live_bytes"] \
        == plan.stats["aliased_peak_bytes"]
    written: dict[int, int] = {}
    for tensor, node in graph.producers().items():
        written[node.index] = written.get(node.index, 0) + graph.tensors[tensor].bytes
    for r in layers:
        assert r["bound"] in ("compute", "bandwidth", "none")
        assert r["activation_bytes"] == written[r["node"]]
        if r["bytes_moved"]:
            assert r["intensity"] == pytest.approx(r["macs"] / r["bytes_moved"])
    json.dumps(rep)  # JSON-ready as it is


def test_report_json_cli(capsys):
    assert main(["report", "squeezenet", "--json", "--device", "t4"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("weight_bytes", "params", "activation_bytes_naive", "arena_bytes", "macs",
                "workspace_bytes"):
        assert isinstance(data["totals"][key], int)
    assert data["device"]["name"] == "t4" and data["device"]["flops"] == 8.1e12
    row = data["layers"][0]
    for key in ("node", "op", "output_shapes", "param_bytes", "activation_bytes", "macs",
                "bytes_moved", "intensity", "bound"):
        assert key in row
    assert "whatif" not in data


def test_report_text_cli(capsys):
    assert main(["report", "bvlc_alexnet", "--batch", "1,4", "--dtype", "float32,int8",
                 "--device-flops", "1e13", "--device-bw", "9e11"]) == 0
    out = capsys.readouterr().out
    assert "activations, arena" in out and "per layer" in out and "what-if" in out
    assert "custom" in out and "ridge 5.6 MAC/B" in out


@pytest.mark.parametrize("argv, message", [
    (["--device", "abacus"], "unknown device"),
    (["--device-flops", "1e12"], "both"),
    (["--device", "a100", "--device-flops", "1e12", "--device-bw", "1e9"], "not both"),
    (["--batch", "0"], "at least 1"),
    (["--batch", "two"], "not a list of integers"),
    (["--dtype", "float7"], "unknown dtype"),
])
def test_report_bad_options(argv, message, capsys):
    assert main(["report", "squeezenet", "--json", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("graphmem: ") and message in err[-1]


def test_peak_lists_shared_storage_once():
    shape = numpy_helper.from_array(np.array([4, 16], np.int64), "shape")
    nodes = [helper.make_node("Exp", ["x"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["v"]),  # a view: a's storage
             helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Add", ["v", "s"], ["t"]),
             helper.make_node("Mul", ["t", "a"], ["y"])]
    g = from_model(make_model(nodes, [("x", F, [4, 16])], [("y", F, [4, 16])], [shape]))
    plan = graphmem.plan_graph(g).plan
    assert plan.tensors["v"].alias == "view"
    p = analysis.peak(g, plan)
    assert (p["node"], p["op"]) == (2, "Sigmoid")
    assert p["live_bytes"] == 3 * 256 == sum(e["bytes"] for e in p["tensors"])
    assert sorted((e["name"], e["shares_with"]) for e in p["tensors"]) == \
        [("s", []), ("v", ["a"]), ("x", [])]


def test_live_bytes_is_the_union_of_live_byte_ranges_at_every_step():
    """The sweep (a segment tree over byte cuts) equals the union taken step by step,
    on random spans that overlap in bytes and in time."""
    import random

    from graphmem.analysis.breakdown import live_bytes_per_step
    from graphmem.plan.format import Plan, TensorPlan
    rng = random.Random(7)
    for _ in range(30):
        steps = rng.randrange(1, 25)
        tensors = {}
        for i in range(rng.randrange(0, 40)):
            first = rng.randrange(-1, steps)
            tensors[f"t{i}"] = TensorPlan("activation", rng.choice([0, 16, 64, 100]),
                                          rng.randrange(0, 10) * 32,
                                          (first, min(steps, first + rng.randrange(0, 8))))
        plan = Plan("m", {}, 1, list(range(steps)), [], 0, tensors)
        want = []
        for pos in range(steps):
            covered = set()
            for t in tensors.values():
                if t.live[0] <= pos <= t.live[1]:
                    covered.update(range(t.offset, t.offset + t.bytes))
            want.append(len(covered))
        assert live_bytes_per_step(plan) == want
