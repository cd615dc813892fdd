"""MACs of a training step by phase: forward, backward and recompute.

The training figures (and the recompute overhead in percent) count the matrix ops alone
(Conv, ConvTranspose, Gemm, MatMul: :func:`graphmem.analysis.macs.matrix_macs`, the
report's own counts for those ops), so that they compare with published training
FLOP counts; the report (``graphmem report``) counts every op.
"""
from __future__ import annotations

from graphmem.analysis.macs import matrix_macs
from graphmem.core.ir import Graph, Node


def macs_by_phase(graph: Graph) -> dict[str, int]:
    """``{"forward", "backward", "recompute"}`` MACs, by the phase in each node's name."""
    out = {"forward": 0, "backward": 0, "recompute": 0}
    for n in graph.nodes:
        out[phase(n)] += matrix_macs(n, graph.tensors)
    return out


def phase(node: Node) -> str:
    """forward (``f:``), recompute (``r:``) or backward (anything else onnx_ad made)."""
    if node.name.startswith("f:"):
        return "forward"
    if node.name.startswith("r:"):
        return "recompute"
    return "backward"
