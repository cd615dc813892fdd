"""MACs (multiply-accumulates) per op, for inference graphs and training steps alike, and a
convolution's im2col workspace. The one home of graphmem's MAC counting: ``report`` and
``train`` both count with the rules below.

**The convention.** One MAC is one multiply and one add; FLOPs = 2 x MACs. The figure
graphmem calls *MACs* -- ``report``'s ``matrix_macs`` total, and ``train``'s forward,
backward and recompute MACs (:func:`macs_by_phase`) -- counts the matrix ops only
(:data:`MATRIX_OPS`: Conv, ConvTranspose, Gemm, MatMul, Einsum, the gate products of
LSTM/GRU/RNN, and the fused, quantized and attention ops of deployed graphs), with the
rules below. That is what published counts (AlexNet, VGG,
torchvision's ResNets) and PyTorch's ``torch.utils.flop_counter.FlopCounterMode``
count: FlopCounterMode counts matrix products and convolutions (mm, addmm, bmm,
convolution and convolution_backward, attention) as 2 x MACs and nothing else, so its
FLOPs / 2 equal ours (``tools/training/macs_vs_pytorch.py`` checks resnet18 and resnet50, forward
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
- Deployed graphs' matrix ops count what the unfused graph they replace counts:
  FusedConv, ConvInteger and QLinearConv as Conv; FusedGemm and QGemm as Gemm;
  MatMulInteger, QLinearMatMul, MatMulIntegerToFloat, DynamicQuantizeMatMul as MatMul;
  FusedMatMul as MatMul with its transposes; MatMulNBits as MatMul with its ``K``
  attribute (B is packed blocks). Attention: the heads' ``Q K^T`` and ``softmax(.) V``,
  ``T * (query elements + output elements)`` over the ``T`` key positions (past and new;
  the present key's length where the node writes one), plus, for ONNX Runtime's
  Attention and QAttention, the Q/K/V projection ``B*S * hidden * (q + k + v)``.
  GroupQueryAttention's shared KV heads save no MACs (each query head runs over all
  ``T``); where its cache is one shared buffer, ``T`` is the buffer's length, the cost of
  a step with a full cache. ONNX Runtime's element-wise fusions (SkipLayerNormalization,
  BiasGelu, FastGelu, EmbedLayerNormalization, ...) count as the ops they fuse.
- Any other op: ``None`` (unknown), reported as such rather than guessed; it makes every
  total a lower bound (:func:`mac_totals`' ``macs_at_least``), since an op without a rule
  may do matrix work.

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
    """MACs of one run of ``node`` (see the module docstring), or None for an op without
    a rule (or whose tensors the rule needs are unknown)."""
    outs = [tensors[o] for o in node.outputs if o and o in tensors]
    ins = [tensors.get(i) if i else None for i in node.inputs]
    if not standard_domain(node.domain):
        rule = _DEPLOYED.get((node.domain, node.op_type))
        return _applied(rule, node, ins, outs)
    op = node.op_type
    out = outs[0] if outs else None
    if op in _MOVEMENT:
        return 0
    if out is None:
        return None
    if op in _DEPLOYED_STANDARD:
        return _applied(_DEPLOYED_STANDARD[op], node, ins, outs)
    if op == "Conv":
        return out.numel * prod(ins[1].shape[1:])
    if op == "ConvTranspose":
        return ins[0].numel * prod(ins[1].shape[1:])
    if op == "Gemm":
        return _gemm(node, ins[0], out)
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


def _applied(rule, node: Node, ins, outs) -> int | None:
    """``rule(node, ins, outs)``, or None without a rule or without the tensors it reads."""
    if rule is None or not outs:
        return None
    try:
        return rule(node, ins, outs)
    except (AttributeError, IndexError, TypeError, ZeroDivisionError):
        return None  # an input the rule reads is absent or has no known shape


# ---------------------------------------------------------------------- deployed graphs
# The matrix ops of deployed graphs: fused (ONNX Runtime's FusedConv, FusedGemm,
# FusedMatMul), quantized (the standard QLinear*/Integer ops, ONNX Runtime's
# MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm, MatMulNBits) and attention. Each
# counts exactly what the unfused graph it replaces counts: its MatMuls and Convs, with
# the rules above (tests/test_deployed_macs.py builds both and compares).

def _gemm(node: Node, a: Tensor, out: Tensor) -> int:
    k = a.shape[0] if node.attrs.get("transA", 0) else a.shape[1]
    return out.numel * k


def _conv_weight_at(index: int):
    """Conv's rule, the weight at input ``index``: output elements x per-output fan-in."""
    return lambda node, ins, outs: outs[0].numel * prod(ins[index].shape[1:])


def _matmul_k_of_input(index: int):
    """MatMul's rule, A at input ``index``: output elements x A's last dim."""
    return lambda node, ins, outs: outs[0].numel * ins[index].shape[-1]


def _fused_matmul(node: Node, ins, outs) -> int:
    """FusedMatMul: transA transposes A's last two dims; transBatchA first moves A's
    first dim behind the batch dims, so the contraction dim is then A's first."""
    a = ins[0]
    if len(a.shape) == 1 or not node.attrs.get("transA", 0):
        k = a.shape[-1]
    else:
        k = a.shape[0] if node.attrs.get("transBatchA", 0) else a.shape[-2]
    return outs[0].numel * k


def _matmul_nbits(node: Node, ins, outs) -> int:
    """MatMulNBits (and MatMulBnb4): B is packed blocks; K is an attribute."""
    return outs[0].numel * int(node.attrs["K"])


def _heads_product(total_seq: int, query_elements: int, out: Tensor) -> int:
    """Q K^T and the attention-weighted V of every head: for each query position and
    head, ``total_seq`` x (the head's query size + its value size); summed over heads and
    positions that is ``total_seq`` x (query elements + output elements)."""
    return total_seq * (query_elements + out.numel)


def _ms_attention(node: Node, ins, outs) -> int:
    """com.microsoft Attention (and QAttention): the Q, K, V projection of the input
    (``B*S x hidden`` times the ``hidden x (q + k + v)`` weight), then the heads over the
    past and new positions. The output projection is a separate MatMul."""
    x, w, out = ins[0], ins[1], outs[0]
    rows = x.numel // x.shape[-1]
    sizes = node.attrs.get("qkv_hidden_sizes")
    q_hidden = int(sizes[0]) if sizes else w.shape[1] // 3
    seq = x.shape[-2] if len(x.shape) == 3 else 1
    present = _output_named(node, outs, 1)
    at = 8 if node.op_type == "QAttention" else 4  # the past's input position
    past = ins[at] if len(ins) > at else None
    if present is not None:
        total = present.shape[3]  # (2, B, N, total, head)
    elif past is not None:
        total = past.shape[3] + seq
    else:
        total = seq
    return rows * w.shape[0] * w.shape[1] + _heads_product(total, rows * q_hidden, out)


def _output_named(node: Node, outs, position: int):
    """The tensor of output ``position`` if the node writes it and its type is known."""
    if position >= len(node.outputs) or not node.outputs[position]:
        return None
    found = [t for t in outs if t.name == node.outputs[position]]
    return found[0] if found else None


def _multihead_attention(node: Node, ins, outs) -> int:
    """com.microsoft MultiHeadAttention: Q, K, V come projected (query (B, S, D), or
    packed (B, S, N, 3, H) with no key); the heads run over the total key length: the
    present key's (B, N, total, H), else the key's (3-D (B, L, D), 4-D (B, N, L, H),
    packed (B, L, N, 2, H)) after a past key's (B, N, P, H)."""
    q = ins[0]
    query_elements = q.numel // 3 if len(q.shape) == 5 else q.numel
    present = _output_named(node, outs, 1)
    if present is not None:
        total = present.shape[2]
    else:
        key = ins[1] if len(ins) > 1 else None
        if key is None:
            total = q.shape[1]
        elif len(key.shape) == 4:
            total = key.shape[2]  # (B, N, L, H): the whole key, past included
        else:
            total = key.shape[1]  # (B, L, D) or packed (B, L, N, 2, H)
            past = ins[6] if len(ins) > 6 else None
            total += past.shape[2] if past is not None else 0
    return _heads_product(total, query_elements, outs[0])


def _group_query_attention(node: Node, ins, outs) -> int:
    """com.microsoft GroupQueryAttention: each query head over the total sequence; the
    KV heads are shared, not smaller work. The total is the present key's length (B,
    kv_N, T, H). Where the cache is one shared buffer (past and present of one length),
    that is the buffer's capacity, the cost of a step with a full cache."""
    present = _output_named(node, outs, 1)
    if present is not None:
        total = present.shape[2]
    else:
        past = ins[3] if len(ins) > 3 else None
        total = ins[0].shape[1] + (past.shape[2] if past is not None else 0)
    out = outs[0]  # (B, S, num_heads * H): the query's size too
    return _heads_product(total, out.numel, out)


def _onnx_attention(node: Node, ins, outs) -> int:
    """The standard Attention (opset 23): Q (B, Nq, S, H) or (B, S, Nq*H); the heads run
    over the present key's length, else the key's (4-D (B, Nkv, L, H), 3-D (B, L, D))
    after the past key's (B, Nkv, P, H)."""
    q, k = ins[0], ins[1]
    present = _output_named(node, outs, 1)
    if present is not None:
        total = present.shape[2]
    else:
        total = k.shape[2] if len(k.shape) == 4 else k.shape[1]
        past = ins[4] if len(ins) > 4 else None
        total += past.shape[2] if past is not None else 0
    return _heads_product(total, q.numel, outs[0])


def _per_element(count: int):
    return lambda node, ins, outs: outs[0].numel * count


def _skip_norm(norm: int):
    """Skip(Simplified)LayerNormalization: the skip add, the optional bias add, the norm."""
    return lambda node, ins, outs: outs[0].numel * (
        norm + 1 + (1 if len(node.inputs) > 4 and node.inputs[4] else 0))


def _embed_layer_norm(node: Node, ins, outs) -> int:
    """EmbedLayerNormalization: gathers (no MACs), the adds of the position (and segment)
    embedding, LayerNormalization's 4 per element."""
    segment = len(node.inputs) > 3 and bool(node.inputs[3])
    return outs[0].numel * (4 + 1 + (1 if segment else 0))


_MS = "com.microsoft"
_DEPLOYED_STANDARD = {
    "ConvInteger": _conv_weight_at(1),
    "QLinearConv": _conv_weight_at(3),
    "MatMulInteger": _matmul_k_of_input(0),
    "QLinearMatMul": _matmul_k_of_input(0),
    "Attention": _onnx_attention,
    "DynamicQuantizeLinear": _per_element(3),  # min-max scan, scale, round and clip
    "RotaryEmbedding": _per_element(3),
    "RMSNormalization": _per_element(3),
    "SimplifiedLayerNormalization": _per_element(3),  # ONNX Runtime's, in the onnx domain
}
_DEPLOYED = {
    (_MS, "FusedConv"): _conv_weight_at(1),
    (_MS, "QLinearConv"): _conv_weight_at(3),
    (_MS, "FusedGemm"): lambda node, ins, outs: _gemm(node, ins[0], outs[0]),
    (_MS, "QGemm"): lambda node, ins, outs: _gemm(node, ins[0], outs[0]),
    (_MS, "FusedMatMul"): _fused_matmul,
    (_MS, "TransposeMatMul"): _fused_matmul,
    (_MS, "MatMulIntegerToFloat"): _matmul_k_of_input(0),
    (_MS, "DynamicQuantizeMatMul"): _matmul_k_of_input(0),
    (_MS, "MatMulNBits"): _matmul_nbits,
    (_MS, "MatMulBnb4"): _matmul_nbits,
    (_MS, "Attention"): _ms_attention,
    (_MS, "QAttention"): _ms_attention,
    (_MS, "MultiHeadAttention"): _multihead_attention,
    (_MS, "GroupQueryAttention"): _group_query_attention,
    # the element-wise and normalisation ops of ONNX Runtime's fusions, counted as the
    # unfused ops they replace (rules above)
    (_MS, "SkipLayerNormalization"): _skip_norm(4),
    (_MS, "SkipSimplifiedLayerNormalization"): _skip_norm(3),
    (_MS, "EmbedLayerNormalization"): _embed_layer_norm,
    (_MS, "BiasGelu"): _per_element(2),
    (_MS, "FastGelu"): lambda node, ins, outs: outs[0].numel * (
        2 if len(node.inputs) > 1 and node.inputs[1] else 1),
    (_MS, "Gelu"): _per_element(1),
    (_MS, "QuickGelu"): _per_element(1),
    (_MS, "BiasAdd"): _per_element(2),
    (_MS, "BiasSoftmax"): _per_element(4),
    (_MS, "BiasDropout"): _per_element(2),
    (_MS, "RotaryEmbedding"): _per_element(3),
    (_MS, "QuantizeLinear"): _per_element(1),
    (_MS, "DequantizeLinear"): _per_element(1),
    (_MS, "GatherBlockQuantized"): _per_element(1),  # a gather (0) that dequantizes
    (_MS, "QLinearAdd"): _per_element(1),
    (_MS, "QLinearMul"): _per_element(1),
    (_MS, "QLinearSigmoid"): _per_element(1),
    (_MS, "QLinearLeakyRelu"): _per_element(1),
    (_MS, "QLinearGlobalAveragePool"): lambda node, ins, outs: ins[0].numel,
    (_MS, "QLinearAveragePool"): lambda node, ins, outs: outs[0].numel * prod(
        node.attrs.get("kernel_shape") or [1]),
}


# The matrix ops: what graphmem calls MACs (report's matrix_macs, train's phases) counts
# these alone, as PyTorch's FlopCounterMode does (see the module docstring).
MATRIX_OPS = frozenset(("Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum",
                        "LSTM", "GRU", "RNN", "ConvInteger", "QLinearConv",
                        "MatMulInteger", "QLinearMatMul", "Attention", "FusedConv",
                        "FusedGemm", "QGemm", "FusedMatMul", "TransposeMatMul",
                        "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits",
                        "MatMulBnb4", "QAttention", "MultiHeadAttention",
                        "GroupQueryAttention"))


def is_matrix_op(node: Node) -> bool:
    """Is ``node`` one of the matrix ops (:data:`MATRIX_OPS`, standard or ONNX Runtime's
    ``com.microsoft`` domain)?"""
    return node.op_type in MATRIX_OPS and (standard_domain(node.domain)
                                           or node.domain == _MS)


def matrix_macs(node: Node, tensors: Mapping[str, Tensor]) -> int:
    """:func:`node_macs` of a matrix op (``MATRIX_OPS``), 0 for any other node: the
    MACs of the convention. 0 also for a matrix op without a count: :func:`mac_totals`
    says where a total is a lower bound."""
    if not is_matrix_op(node):
        return 0
    return node_macs(node, tensors) or 0


def mac_totals(graph: Graph) -> dict:
    """``matrix_macs`` and ``macs`` (all ops) of the graph's running nodes, and where they
    are lower bounds: ``macs_unknown_ops`` (the op types without a count) and
    ``macs_at_least`` (true when there is one: an op without a rule may do matrix work,
    so neither total is exact)."""
    matrix = every = 0
    unknown: set[str] = set()
    for n in graph.nodes:
        m = node_macs(n, graph.tensors)
        if m is None:
            unknown.add(n.op_type if standard_domain(n.domain) else f"{n.domain}.{n.op_type}")
            continue
        every += m
        if is_matrix_op(n):
            matrix += m
    return {"matrix_macs": matrix, "macs": every, "macs_unknown_ops": sorted(unknown),
            "macs_at_least": bool(unknown)}


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
