"""Generated test networks: randomly wired networks, Inception-style cells, U-Nets.

Each function returns an ``onnx.ModelProto`` with real (seeded random) weights as
initializers, small enough for ONNX Runtime to run in milliseconds::

    python models/generate.py --out DIR     # writes randwire_*.onnx, inception_cell.onnx, unet.onnx

Randomly wired networks follow "Exploring Randomly Wired Neural Networks" (Xie et al.,
2019): a Watts-Strogatz graph, edges oriented from the lower to the higher node index
(so the node index order is a topological order), each node an aggregation (Sum of its
inputs), a ReLU and a 3x3 convolution. Node widths are mixed; an input whose width
differs from the node's is projected by a 1x1 convolution on its edge first.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
F = TensorProto.FLOAT


class _Builder:
    """Collects nodes and initializers; names every tensor uniquely."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, shape: tuple[int, ...], prefix: str) -> str:
        fan_in = int(np.prod(shape[1:])) or 1
        w = (self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(w, name))
        return name

    def op(self, op_type: str, inputs: list[str], prefix: str, **attrs) -> str:
        out = self.name(prefix)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_op", **attrs))
        return out

    def conv(self, x: str, c_in: int, c_out: int, k: int = 1, stride: int = 1) -> str:
        w = self.weight((c_out, c_in, k, k), "w")
        b = self.weight((c_out,), "b")
        pad = k // 2
        return self.op("Conv", [x, w, b], "conv", kernel_shape=[k, k],
                       pads=[pad] * 4, strides=[stride, stride])

    def model(self, name: str, inp: tuple[str, tuple], out: tuple[str, tuple]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name,
                                  [helper.make_tensor_value_info(inp[0], F, list(inp[1]))],
                                  [helper.make_tensor_value_info(out[0], F, list(out[1]))],
                                  self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="graphmem.models.generate")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def randwire(nodes: int = 32, k: int = 4, p: float = 0.75, seed: int = 0,
             widths: tuple[int, ...] = (8, 16, 32, 64), size: int = 16,
             in_channels: int = 8) -> onnx.ModelProto:
    """A randomly wired network on a Watts-Strogatz graph WS(nodes, k, p)."""
    ws = nx.connected_watts_strogatz_graph(nodes, k, p, seed=seed)
    b = _Builder(seed)
    rng = np.random.default_rng(seed + 1)
    width = [int(rng.choice(widths)) for _ in range(nodes)]
    preds = {j: sorted(i for i in ws.neighbors(j) if i < j) for j in range(nodes)}
    has_succ = {i for j in range(nodes) for i in preds[j]}
    x = "input"
    out_of: dict[int, tuple[str, int]] = {}  # node -> (tensor, width)
    for j in range(nodes):
        sources = [out_of[i] for i in preds[j]] or [(x, in_channels)]
        # the node reads at its first input's width; others are projected to it
        c_agg = sources[0][1]
        parts = [t if c == c_agg else b.conv(t, c, c_agg) for t, c in sources]
        agg = parts[0] if len(parts) == 1 else b.op("Sum", parts, "sum")
        act = b.op("Relu", [agg], "relu")
        out_of[j] = (b.conv(act, c_agg, width[j], k=3), width[j])
    sinks = [out_of[j] for j in range(nodes) if j not in has_succ]
    c_out = sinks[0][1]
    parts = [t if c == c_out else b.conv(t, c, c_out) for t, c in sinks]
    y = parts[0] if len(parts) == 1 else b.op("Sum", parts, "sum")
    b.nodes.append(helper.make_node("Identity", [y], ["output"], name="output_op"))
    return b.model(f"randwire_{nodes}_{seed}", ("input", (1, in_channels, size, size)),
                   ("output", (1, c_out, size, size)))


def inception_cell(in_channels: int = 16, branch: int = 64, out_channels: int = 32,
                   size: int = 28, relu: bool = False, seed: int = 0) -> onnx.ModelProto:
    """Four 1x1 conv branches (each followed by a ReLU if ``relu``), concatenated (the
    peak), then narrowed by a 1x1 conv and a ReLU."""
    b = _Builder(seed)
    branches = [b.conv("input", in_channels, branch) for _ in range(4)]
    if relu:
        branches = [b.op("Relu", [t], "relu") for t in branches]
    cat = b.op("Concat", branches, "concat", axis=1)
    y = b.conv(cat, 4 * branch, out_channels)
    b.nodes.append(helper.make_node("Relu", [y], ["output"], name="output_op"))
    return b.model("inception_cell", ("input", (1, in_channels, size, size)),
                   ("output", (1, out_channels, size, size)))


def unet(depth: int = 3, base: int = 8, size: int = 32, in_channels: int = 3,
         seed: int = 0) -> onnx.ModelProto:
    """A small U-Net: conv+ReLU per level, MaxPool down, Resize up, Concat skips."""
    b = _Builder(seed)
    x, c = "input", in_channels
    skips = []
    for level in range(depth):
        w = base * 2 ** level
        x = b.op("Relu", [b.conv(x, c, w, k=3)], "relu")
        c = w
        skips.append((x, c))
        x = b.op("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2])
    w = base * 2 ** depth
    x = b.op("Relu", [b.conv(x, c, w, k=3)], "relu")
    c = w
    scales = b.name("scales")
    b.inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), scales))
    for skip, cs in reversed(skips):
        up = b.op("Resize", [x, "", scales], "up", mode="nearest")
        x = b.op("Concat", [up, skip], "concat", axis=1)
        x = b.op("Relu", [b.conv(x, c + cs, cs, k=3)], "relu")
        c = cs
    y = b.conv(x, c, 1)
    b.nodes.append(helper.make_node("Identity", [y], ["output"], name="output_op"))
    return b.model("unet", ("input", (1, in_channels, size, size)), ("output", (1, 1, size, size)))


def randwire_suite(count: int = 10, nodes: int = 32) -> dict[str, onnx.ModelProto]:
    """The benchmark's randomly wired networks: seeds 0..count-1."""
    return {f"randwire_{nodes}_{s}": randwire(nodes=nodes, seed=s) for s in range(count)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write generated ONNX test networks")
    ap.add_argument("--out", required=True, help="folder to write the .onnx files into")
    ap.add_argument("--count", type=int, default=10, help="randomly wired networks (default 10)")
    ap.add_argument("--nodes", type=int, default=32, help="nodes per randomly wired network")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = randwire_suite(args.count, args.nodes)
    models["inception_cell"] = inception_cell()
    models["inception_cell_relu"] = inception_cell(relu=True)
    models["unet"] = unet()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from graphmem.plan.io import write_atomic
    for name, model in models.items():
        write_atomic(out / f"{name}.onnx", model.SerializeToString())
        print(out / f"{name}.onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
