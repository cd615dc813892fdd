"""A minimal multiply-accumulate counter for Conv, ConvTranspose, Gemm and MatMul.

Other ops count as zero: the training figures (forward, backward and recompute MACs,
and the recompute overhead in percent) are defined on these matrix ops alone.
``graphmem/macs.py`` counts every op for the report; switching the training
accounting to it would change those figures, so the two stay apart for now.
"""
from __future__ import annotations

from math import prod

from graphmem.core.ir import Graph, Node


def node_macs(graph: Graph, node: Node) -> int:
    """MACs of one node from its static shapes (0 for ops this counter ignores)."""
    t = graph.tensors
    op = node.op_type
    if op == "Conv":
        out, w = t[node.outputs[0]].shape, t[node.inputs[1]].shape
        return prod(out) * prod(w[1:])  # w is [M, C/group, k...]
    if op == "ConvTranspose":
        x, w = t[node.inputs[0]].shape, t[node.inputs[1]].shape
        return prod(x) * prod(w[1:])  # each input element scatters into C/group*k... outputs
    if op == "Gemm":
        a = t[node.inputs[0]].shape
        k = a[0] if node.attrs.get("transA", 0) else a[1]
        return prod(t[node.outputs[0]].shape) * k
    if op == "MatMul":
        a = t[node.inputs[0]].shape
        return prod(t[node.outputs[0]].shape) * (a[-1] if a else 1)
    return 0


def macs_by_phase(graph: Graph) -> dict[str, int]:
    """``{"forward", "backward", "recompute"}`` MACs, by the phase in each node's name."""
    out = {"forward": 0, "backward": 0, "recompute": 0}
    for n in graph.nodes:
        out[phase(n)] += node_macs(graph, n)
    return out


def phase(node: Node) -> str:
    """forward (``f:``), recompute (``r:``) or backward (anything else onnx_ad made)."""
    if node.name.startswith("f:"):
        return "forward"
    if node.name.startswith("r:"):
        return "recompute"
    return "backward"
