"""MACs (multiply-accumulates) per op, for inference graphs and training steps alike, and a
convolution's im2col workspace. The one home of graphmem's MAC counting: ``report`` and
``train`` both count with the rules below.

**The convention.** One MAC is one multiply and one add; FLOPs = 2 x MACs. The figure
graphmem calls *MACs* -- ``report``'s ``matrix_macs`` total, and ``train``'s forward,
backward and recompute MACs (:func:`macs_by_phase`) -- counts the matrix ops only
(:data:`MATRIX_OPS`: Conv, ConvTranspose, Gemm, MatMul, Einsum, the gate products of
LSTM/GRU/RNN), with the rules below. That is what published counts (AlexNet, VGG,
torchvision's ResNets) and PyTorch's ``torch.utils.flop_counter.FlopCounterMode``
count: FlopCounterMode counts matrix products and convolutions (mm, addmm, bmm,
convolution and convolution_backward, attention) as 2 x MACs and nothing else, so its
FLOPs / 2 equal ours (``tools/macs_vs_pytorch.py`` checks resnet18 and resnet50, forward
and forward+backward). A backward pass is counted by the same rules on its own nodes: a
Conv weight gradient is a Conv, so it costs exactly its forward conv's MACs (see
:mod:`graphmem.training.rules`), as in PyTorch's ``convolution_backward``.

Every other op also has a cost rule (:func:`node_macs`): element-wise work, pooling,
normalisation, softmax. ``report`` shows it per layer (and uses it for the roofline
times) and totals it as ``macs`` ("all ops"); it is not part of the MACs above, as it is
not in PyTorch's count.

Rules (output elements = the product of an output's shape, batch included):

- Conv: ``N * C_out * prod(out spatial) * (C_in / group) * prod(kernel)``, i.e. output
  elements times the weight's per-output fan-in. Bias adds are not counted, as in the
  published counts we check against (AlexNet conv1: 55*55*96 * 3*11*11 = 105,415,200).
- ConvTranspose: input elements times ``(C_out / group) * prod(kernel)``.
- Gemm: ``M * N * K``; MatMul: output elements (batch dims included) times ``K``. Bias,
  alpha and beta are not counted. Einsum (without ``...``): the product of the sizes of
  all its indices.
- LSTM, GRU, RNN: per time step and sequence, the gate products ``W x + R h``, i.e.
  ``steps * batch * (|W| + |R|)``; the gate nonlinearities are not counted.
- Resize, Upsample: one per output element.
- MaxPool, AveragePool, LpPool: output elements times the kernel size; global pools and
  Reduce* ops: input elements (each input element is visited once).
- Element-wise ops (Relu, Add, Mul, Sigmoid, Clip, ...): one per output element; a
  variadic Sum/Max/Min/Mean of k inputs: ``k - 1`` per output element.
- BatchNormalization (inference): 2 per element (normalise, then scale and shift);
  Instance/Layer/Group normalisation: 4 per element (mean, variance, normalise, affine);
  LRN: ``size + 2`` per element (the window's sum of squares, the power, the divide);
  Softmax and LogSoftmax: 3 per element (exp, sum, divide).
- Data movement (Reshape, Transpose, Concat, Slice, Gather, Pad, Cast, Dropout at
  inference, ...): 0 MACs; they still move bytes, which the analysis counts.
- Any other op: ``None`` (unknown), reported as such rather than guessed.

Training graphs name their nodes by phase (``f:`` forward, ``r:`` recompute, anything
else backward: :mod:`graphmem.training.build`); :func:`macs_by_phase` sums the MACs of
each.

Workspace: a runtime that lowers a convolution to a matrix product (Caffe, ONNX
Runtime's CPU Conv) unfolds one image and one group at a time into a
``(C_in / group) * prod(kernel)`` by ``prod(out spatial)`` matrix, and reuses that one
buffer for every convolution; a 1x1 convolution with stride 1 and no padding reads its
input directly and needs none (Caffe's ``is_1x1_``, ORT's pointwise path).
"""
from __future__ import annotations

from math import prod
from typing import Mapping

from graphmem.core.ir import Graph, Node, Tensor, standard_domain

_ELEMENTWISE = {
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "Sigmoid",
    "HardSigmoid", "HardSwish", "Tanh", "Softplus", "Softsign", "Exp", "Log", "Abs", "Neg",
    "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Erf", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Clip", "Not",
    "Gelu", "Mish", "Shrink", "Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor",
    "BitShift", "Mod", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Where",
    "IsNaN", "IsInf", "QuantizeLinear", "DequantizeLinear",
}
_VARIADIC = {"Sum", "Max", "Min", "Mean"}
_PER_ELEMENT = {"BatchNormalization": 2, "InstanceNormalization": 4,
                "LayerNormalization": 4, "GroupNormalization": 4,
                "Softmax": 3, "LogSoftmax": 3}
_POOL = {"MaxPool", "AveragePool", "LpPool"}
_GLOBAL_POOL = {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",
           "ArgMin"}
_MOVEMENT = {
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose",
    "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Pad", "Cast",
    "CastLike", "Expand", "Tile", "Shape", "Size", "ConstantOfShape", "Constant",
    "DepthToSpace", "SpaceToDepth", "ScatterElements", "ScatterND", "Range", "NonZero",
}


def node_macs(node: Node, tensors: Mapping[str, Tensor]) -> int | None:
    """MACs of one run of ``node`` (see the module docstring), or None for an unknown op."""
    if not standard_domain(node.domain):
        return None
    op = node.op_type
    outs = [tensors[o] for o in node.outputs if o and o in tensors]
    out = outs[0] if outs else None
    ins = [tensors.get(i) if i else None for i in node.inputs]
    if op in _MOVEMENT:
        return 0
    if out is None:
        return None
    if op == "Conv":
        return out.numel * prod(ins[1].shape[1:])
    if op == "ConvTranspose":
        return ins[0].numel * prod(ins[1].shape[1:])
    if op == "Gemm":
        a = ins[0]
        k = a.shape[0] if node.attrs.get("transA", 0) else a.shape[1]
        return out.numel * k
    if op == "MatMul":
        return out.numel * ins[0].shape[-1]
    if op == "Einsum":
        return _einsum_macs(str(node.attrs.get("equation", "")), ins)
    if op in ("LSTM", "GRU", "RNN"):
        x, w, r = ins[0], ins[1], ins[2]
        return x.numel // x.shape[-1] * (w.numel + r.numel)
    if op in ("Resize", "Upsample"):
        return out.numel
    if op in _POOL:
        return out.numel * prod(node.attrs.get("kernel_shape") or [1])
    if op in _GLOBAL_POOL or op in _REDUCE:
        return ins[0].numel
    if op in _ELEMENTWISE:
        return out.numel
    if op in _VARIADIC:
        return out.numel * max(1, len([i for i in node.inputs if i]) - 1)
    if op == "LRN":
        return out.numel * (int(node.attrs.get("size", 1)) + 2)
    if op in _PER_ELEMENT:
        return out.numel * _PER_ELEMENT[op]
    return None


# The matrix ops: what graphmem calls MACs (report's matrix_macs, train's phases) counts
# these alone, as PyTorch's FlopCounterMode does (see the module docstring).
MATRIX_OPS = frozenset(("Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum",
                        "LSTM", "GRU", "RNN"))


def matrix_macs(node: Node, tensors: Mapping[str, Tensor]) -> int:
    """:func:`node_macs` of a matrix op (``MATRIX_OPS``), 0 for any other node: the
    MACs of the convention."""
    if node.op_type not in MATRIX_OPS or not standard_domain(node.domain):
        return 0
    return node_macs(node, tensors) or 0


PHASES = ("forward", "backward", "recompute")


def phase(node: Node) -> str:
    """A training graph node's phase by its name: forward (``f:``), recompute (``r:``) or
    backward (anything else: onnx_ad's adjoint nodes, ``b:``)."""
    if node.name.startswith("f:"):
        return "forward"
    if node.name.startswith("r:"):
        return "recompute"
    return "backward"


def macs_by_phase(graph: Graph) -> dict[str, int]:
    """``{"forward", "backward", "recompute"}``: the :func:`matrix_macs` of a training
    graph's nodes, summed by :func:`phase`."""
    out = dict.fromkeys(PHASES, 0)
    for n in graph.nodes:
        out[phase(n)] += matrix_macs(n, graph.tensors)
    return out


def _einsum_macs(equation: str, ins) -> int | None:
    lhs = equation.replace(" ", "").split("->")[0]
    terms = lhs.split(",")
    if "." in lhs or len(terms) != len(ins) or any(t is None for t in ins):
        return None
    size: dict[str, int] = {}
    for term, t in zip(terms, ins):
        if len(term) != len(t.shape):
            return None
        for letter, d in zip(term, t.shape):
            size[letter] = max(size.get(letter, 1), d)
    return prod(size.values())


def im2col_bytes(node: Node, tensors: Mapping[str, Tensor]) -> int:
    """Bytes of the unfolded input one image and one group of a Conv needs (0 if none)."""
    if node.op_type != "Conv" or not standard_domain(node.domain):
        return 0
    x, w, y = tensors[node.inputs[0]], tensors[node.inputs[1]], tensors[node.outputs[0]]
    kernel = w.shape[2:]
    spatial = len(kernel)
    strides = node.attrs.get("strides") or [1] * spatial
    pads = node.attrs.get("pads") or [0] * (2 * spatial)
    dilations = node.attrs.get("dilations") or [1] * spatial
    pointwise = (all(k == 1 for k in kernel) and all(s == 1 for s in strides)
                 and all(p == 0 for p in pads) and all(d == 1 for d in dilations))
    if pointwise:
        return 0
    elements = prod(w.shape[1:]) * prod(y.shape[2:])
    return (elements * x.bits + 7) // 8
