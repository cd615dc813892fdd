"""Shapes of the ops ONNX Runtime's optimizers write: a table of per-op rules.

ORT's graph optimizer (``SessionOptions.optimized_model_filepath``) and its transformer
optimizer save graphs of com.microsoft (and com.microsoft.nchwc) ops without shape
annotations, and onnx's shape inference knows none of them. Each rule here takes the
(element type, shape) of a node's inputs, its attributes and the values of its constant
inputs (a :class:`Call`), and gives its outputs' (element type, shape), as the op's
schema in ORT's sources (``onnxruntime/core/graph/contrib_ops/*_defs.cc``) computes
them, and where the schema leaves an output unsized (attention's presents without a
past), as the kernel makes it; the tests (``tests/test_contrib_shapes.py``) run each op
alone in ONNX Runtime and compare (an op or form no CPU kernel runs: with ORT's
symbolic inference).

The table is read by two drivers: the loader's walk
(:func:`graphmem.frontend.shape_walk.propagate`, one pass over the nodes with onnx's
per-node inference between the rules) and the adapter of ONNX Runtime's own
``SymbolicShapeInference`` (:mod:`graphmem.frontend.ort_symbolic`), which puts these
rules in front of its handlers. The table has the ops ORT's inference does not know or
sizes incompletely (SkipLayerNormalization's optional outputs, GroupQueryAttention's
present length, GatherBlockQuantized's packed elements, MultiHeadAttention's presents),
and those of the deployment forms of common models (Attention, MultiHeadAttention,
MatMulNBits, RotaryEmbedding, EmbedLayerNormalization, ...); ORT's inference knows the
rest (DecoderMaskedMultiHeadAttention, PackedAttention, LongformerAttention,
SparseAttention, PagedAttention, RelativePositionBias, RemovePadding, NhwcConv, ...).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from graphmem.core.dtypes import ENUM_BY_NAME

MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"
ONNX = ""  # ORT registers a few contrib ops in the standard domain

# TensorProto.DataType values, from the one table of them (graphmem.core.dtypes)
FLOAT, UINT8, INT8, INT32, INT64, BOOL, FLOAT16 = (
    ENUM_BY_NAME[name] for name in ("float32", "uint8", "int8", "int32", "int64", "bool",
                                    "float16"))

Shape = tuple  # of int (a dim unknown here: None)
Value = tuple  # (elem_type: int, shape: Shape)


@dataclass
class Call:
    """What a rule sees of one node: its inputs by position (None: absent or unknown),
    which inputs the node names (an optional input left out is not named), attributes,
    the values of constant inputs (None where not constant), and how many outputs it
    has."""
    inputs: list
    attrs: dict
    outputs: int = 1
    values: Callable[[int], object] = lambda i: None  # the value of input i, if constant
    given: Optional[list] = None  # whether the node names input i (default: it is known)

    def input(self, i: int) -> Optional[Value]:
        return self.inputs[i] if i < len(self.inputs) else None

    def has(self, i: int) -> bool:
        """Whether the node names input ``i``: an optional input it gives may still be
        unknown here (its producer not sized), and then is no absent one."""
        if self.given is None:
            return self.input(i) is not None
        return i < len(self.given) and bool(self.given[i])

    def shape(self, i: int) -> Optional[Shape]:
        v = self.input(i)
        return None if v is None else v[1]

    def elem(self, i: int) -> Optional[int]:
        v = self.input(i)
        return None if v is None else v[0]

    def value(self, i: int):
        """Input ``i``'s value when it is a small constant (else None)."""
        return self.values(i) if i < len(self.inputs) else None

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)


Rule = Callable[[Call], list]
RULES: dict[tuple[str, str], Rule] = {}


def rule(*keys: tuple[str, str]):
    """Register a function as the rule of the ops ``keys`` ((domain, op_type) each)."""
    def add(fn: Rule) -> Rule:
        for key in keys:
            RULES[key] = fn
        return fn
    return add


def rule_for(domain: str, op_type: str) -> Optional[Rule]:
    """The rule of an op, the standard domain written '' or 'ai.onnx'."""
    return RULES.get((ONNX if domain == "ai.onnx" else domain, op_type))


# --------------------------------------------------------------------------- helpers

def is_dim(d) -> bool:
    """A dim that is a known number (not None, a name or a bool)."""
    return isinstance(d, int) and not isinstance(d, bool) and d >= 0


def _broadcast(*shapes: Shape) -> Optional[Shape]:
    """numpy's broadcast of ``shapes`` (None where a dim is not known)."""
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        known = [d for d in dims if is_dim(d) and d != 1]
        if known:
            out.append(known[0])
        elif all(is_dim(d) for d in dims):
            out.append(1)
        else:
            out.append(None)
    return tuple(out)


def _spatial(size, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int,
             auto_pad: str, ceil_mode: bool = False):
    """One output dim of a convolution or pooling window (onnx's convPoolShapeInference)."""
    if not is_dim(size):
        return None
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return -(-size // stride)
    effective = (kernel - 1) * dilation + 1
    if auto_pad == "VALID":
        pad_begin = pad_end = 0
    span = size + pad_begin + pad_end - effective
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + pad_begin:  # the last window starts in the padding
            out -= 1
        return out
    return span // stride + 1


def _window(x: Shape, kernel: list[int], attrs: dict, *, channels_last: bool = False,
            ceil_mode: bool = False) -> Optional[list]:
    """The spatial output dims of a sliding window over ``x`` (NCHW, or NHWC)."""
    rank = len(kernel)
    spatial = x[1:1 + rank] if channels_last else x[2:2 + rank]
    if len(spatial) != rank:
        return None
    strides = list(attrs.get("strides") or [1] * rank)
    dilations = list(attrs.get("dilations") or [1] * rank)
    pads = list(attrs.get("pads") or [0] * (2 * rank))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    return [_spatial(spatial[i], kernel[i], strides[i], dilations[i], pads[i],
                     pads[i + rank], auto_pad, ceil_mode) for i in range(rank)]


def _conv(x: Shape, w: Shape, attrs: dict, *, channels_last: bool = False) -> Optional[Shape]:
    """A convolution's output shape: [N, M, spatial...] (or [N, spatial..., M])."""
    if x is None or w is None or len(w) < 3:
        return None
    kernel = list(attrs.get("kernel_shape") or w[2:])
    spatial = _window(x, kernel, attrs, channels_last=channels_last)
    if spatial is None:
        return None
    return (x[0], *spatial, w[0]) if channels_last else (x[0], w[0], *spatial)


def _pool(x: Shape, attrs: dict, *, channels_last: bool = False) -> Optional[Shape]:
    if x is None or not attrs.get("kernel_shape"):
        return None
    spatial = _window(x, list(attrs["kernel_shape"]), attrs, channels_last=channels_last,
                      ceil_mode=bool(attrs.get("ceil_mode", 0)))
    if spatial is None:
        return None
    return (x[0], *spatial, x[-1]) if channels_last else (x[0], x[1], *spatial)


def _global_pool(x: Shape, channels_last: bool = False) -> Optional[Shape]:
    if x is None:
        return None
    if channels_last:
        return (x[0], *[1] * (len(x) - 2), x[-1])
    return (x[0], x[1], *[1] * (len(x) - 2))


def _matmul(a: Shape, b: Shape) -> Optional[Shape]:
    """numpy.matmul's output shape."""
    if a is None or b is None or not a or not b:
        return None
    left = (1, *a) if len(a) == 1 else a
    right = (*b, 1) if len(b) == 1 else b
    batch = _broadcast(left[:-2], right[:-2])
    if batch is None:
        return None
    out = list(batch)
    if len(a) != 1:
        out.append(left[-2])
    if len(b) != 1:
        out.append(right[-1])
    return tuple(out)


def _same(i: int = 0, elem: Optional[int] = None):
    """A rule: output 0 has input ``i``'s shape (and its element type, or ``elem``)."""
    def same(call: Call) -> list:
        v = call.input(i)
        return [None if v is None else (elem or v[0], v[1])]
    return same


# --------------------------------------------------------------------------- the rules
# CPU graph optimizer, ORT_ENABLE_EXTENDED: activations fused into Conv, Gemm and
# MatMul (conv_activation_fusion.cc, gemm_activation_fusion.cc, matmul_transpose_fusion.cc)

@rule((MS, "FusedConv"))
def fused_conv(call: Call) -> list:
    """Conv + activation (+ Z, a tensor added before the activation): Conv's shape."""
    out = _conv(call.shape(0), call.shape(1), call.attrs)
    return [None if out is None else (call.elem(0), out)]


@rule((MS, "FusedGemm"))
def fused_gemm(call: Call) -> list:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [None]
    m = a[1] if call.attr("transA", 0) else a[0]
    n = b[0] if call.attr("transB", 0) else b[1]
    return [(call.elem(0), (m, n))]


def _transposed(shape: Shape, trans: bool, trans_batch: bool) -> Shape:
    """FusedMatMul's view of an input: transBatch moves the first axis to the second last;
    trans swaps the last two (contrib_defs.cc, FusedMatMulShapeInference)."""
    rank = len(shape)
    if rank == 1:
        return shape
    start, end = (1, rank - 1) if trans_batch else (0, rank - 2)
    rows = shape[0] if trans_batch else shape[rank - 2]
    cols = shape[rank - 1]
    if trans:
        rows, cols = cols, rows
    return (*shape[start:end], rows, cols)


@rule((MS, "FusedMatMul"), (MS, "TransposeMatMul"))
def fused_matmul(call: Call) -> list:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None:
        return [None]
    a = _transposed(a, bool(call.attr("transA", 0)), bool(call.attr("transBatchA", 0)))
    b = _transposed(b, bool(call.attr("transB", 0)), bool(call.attr("transBatchB", 0)))
    out = _matmul(a, b)
    return [None if out is None else (call.elem(0), out)]


# CPU graph optimizer, ORT_ENABLE_ALL (layout): the NCHWc transformer
# (nchwc_transformer.cc; schemas in nchwc_schema_defs.cc). An NCHWc tensor keeps the
# logical NCHW shape with its channels padded to the block size of the machine's MLAS
# kernels; the reordered weights carry the padded output channels.

@rule((NCHWC, "Conv"))
def nchwc_conv(call: Call) -> list:
    out = _conv(call.shape(0), call.shape(1), call.attrs)
    return [None if out is None else (call.elem(0), out)]


@rule((NCHWC, "MaxPool"), (NCHWC, "AveragePool"))
def nchwc_pool(call: Call) -> list:
    out = _pool(call.shape(0), call.attrs)
    return [None if out is None else (call.elem(0), out)]


@rule((NCHWC, "GlobalMaxPool"), (NCHWC, "GlobalAveragePool"))
def nchwc_global_pool(call: Call) -> list:
    out = _global_pool(call.shape(0))
    return [None if out is None else (call.elem(0), out)]


@rule((NCHWC, "Upsample"))
def nchwc_upsample(call: Call) -> list:
    x, scales = call.shape(0), call.attr("scales")
    if x is None or not scales or len(scales) != len(x):
        return [None]
    return [(call.elem(0), tuple(d * s if is_dim(d) else None for d, s in zip(x, scales)))]


@rule((NCHWC, "ReorderInput"))
def reorder_input(call: Call) -> list:
    """To NCHWc: the channels rounded up to the block size (channels_last: from NHWC)."""
    x = call.shape(0)
    if x is None or len(x) < 2:
        return [None]
    last = bool(call.attr("channels_last", 0))
    channels = x[-1] if last else x[1]
    if is_dim(channels):
        block = nchwc_block_size(channels)
        channels = -(-channels // block) * block
    spatial = x[1:-1] if last else x[2:]
    return [(call.elem(0), (x[0], channels, *spatial))]


@rule((NCHWC, "ReorderOutput"))
def reorder_output(call: Call) -> list:
    """From NCHWc: the true channel count (attribute ``channels``), NCHW or NHWC."""
    x, channels = call.shape(0), call.attr("channels", 0)
    if x is None or len(x) < 2 or channels <= 0:
        return [None]
    if call.attr("channels_last", 0):
        return [(call.elem(0), (x[0], *x[2:], channels))]
    return [(call.elem(0), (x[0], channels, *x[2:]))]


_BLOCK: list[int] = []


def nchwc_block_size(channels: int) -> int:
    """The NCHWc block size that rounds ``channels`` up. MLAS uses 8 (AVX2) or 16
    (AVX-512) on x86 and smaller ones elsewhere, and ORT only writes NCHWc tensors whose
    channels are a multiple of it; a count that is a multiple of 16 is unchanged by
    every one. Otherwise the block of this machine's MLAS is measured, once: ORT's
    optimizer writes NCHWc graphs for the machine that runs them."""
    if channels % 16 == 0:
        return 16
    if not _BLOCK:
        _BLOCK.append(_measured_block_size())
    return _BLOCK[0]


def _measured_block_size() -> int:
    """ReorderInput of four channels (its kernel's smallest), run in ONNX Runtime: its
    output has one block."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper
    node = helper.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC)
    graph = helper.make_graph([node], "block", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 1, 1])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid(NCHWC, 1)],
                              ir_version=8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return int(sess.run(None, {"x": np.zeros((1, 4, 1, 1), np.float32)})[0].shape[1])


# Quantized ops: the QDQ transformers fuse DequantizeLinear -> op -> QuantizeLinear into
# QLinear* ops (qdq_transformer/selectors_actions), ORT_ENABLE_EXTENDED; the NHWC
# transformer writes channels-last QLinearConv and NhwcMaxPool (ORT_ENABLE_ALL).

def _quantized_elem(call: Call, zero_point: int, fallback: int) -> Optional[int]:
    """The output's element type: its zero point's, else input ``fallback``'s."""
    return call.elem(zero_point) or call.elem(fallback)


@rule((MS, "QLinearConv"))
def qlinear_conv(call: Call) -> list:
    out = _conv(call.shape(0), call.shape(3), call.attrs,
                channels_last=bool(call.attr("channels_last", 0)))
    return [None if out is None else (_quantized_elem(call, 7, 0), out)]


# The channels-last convolutions the transformer optimizer writes for CUDA (Stable
# Diffusion's UNet: fusion_nhwc_conv.py). ORT's schema (convPoolShapeInferenceNhwc) runs
# ONNX Conv's inference on the input transposed to NCHW and the weight as given: the
# kernel is kernel_shape (which the fusion copies from the Conv), else W's dims from 2.
@rule((MS, "NhwcConv"), (MS, "NhwcFusedConv"))
def nhwc_conv(call: Call) -> list:
    out = _conv(call.shape(0), call.shape(1), call.attrs, channels_last=True)
    return [None if out is None else (call.elem(0), out)]


@rule((MS, "NhwcMaxPool"))
def nhwc_max_pool(call: Call) -> list:
    out = _pool(call.shape(0), call.attrs, channels_last=True)
    return [None if out is None else (call.elem(0), out)]


@rule((MS, "QLinearAveragePool"))
def qlinear_average_pool(call: Call) -> list:
    out = _pool(call.shape(0), call.attrs, channels_last=bool(call.attr("channels_last", 0)))
    return [None if out is None else (_quantized_elem(call, 4, 0), out)]


@rule((MS, "QLinearGlobalAveragePool"))
def qlinear_global_average_pool(call: Call) -> list:
    out = _global_pool(call.shape(0), bool(call.attr("channels_last", 0)))
    return [None if out is None else (_quantized_elem(call, 4, 0), out)]


@rule((MS, "QLinearAdd"), (MS, "QLinearMul"))
def qlinear_binary(call: Call) -> list:
    out = _broadcast(call.shape(0), call.shape(3))
    return [None if out is None else (_quantized_elem(call, 7, 0), out)]


@rule((MS, "QLinearSigmoid"), (MS, "QLinearLeakyRelu"), (MS, "QLinearSoftmax"))
def qlinear_unary(call: Call) -> list:
    x = call.shape(0)
    return [None if x is None else (_quantized_elem(call, 4, 0), x)]


@rule((MS, "QLinearConcat"))
def qlinear_concat(call: Call) -> list:
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per tensor."""
    xs = [call.shape(i) for i in range(2, len(call.inputs), 3)]
    if not xs or any(s is None for s in xs):
        return [None]
    axis = call.attr("axis", 0)
    axis = axis + len(xs[0]) if axis < 0 else axis
    dims = [s[axis] for s in xs]
    total = sum(dims) if all(is_dim(d) for d in dims) else None
    return [(_quantized_elem(call, 1, 2), (*xs[0][:axis], total, *xs[0][axis + 1:]))]


@rule((MS, "QLinearWhere"))
def qlinear_where(call: Call) -> list:
    """Inputs: condition, X, x_scale, x_zp, Y, y_scale, y_zp, z_scale, z_zp."""
    out = _broadcast(call.shape(0), call.shape(1), call.shape(4))
    return [None if out is None else (_quantized_elem(call, 8, 1), out)]


@rule((MS, "QGemm"))
def qgemm(call: Call) -> list:
    """Inputs: A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp: a float output
    without y_scale, else quantized like y_zp."""
    a, b = call.shape(0), call.shape(3)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [None]
    m = a[1] if call.attr("transA", 0) else a[0]
    n = b[0] if call.attr("transB", 0) else b[1]
    elem = FLOAT if not call.has(7) else _quantized_elem(call, 8, 0)
    return [(elem, (m, n))]


@rule((MS, "MatMulIntegerToFloat"), (MS, "DynamicQuantizeMatMul"))
def matmul_to_float(call: Call) -> list:
    out = _matmul(call.shape(0), call.shape(1))
    scale = call.elem(2)  # a_scale (MatMulIntegerToFloat) or b_scale: the float type
    return [None if out is None else (scale or FLOAT, out)]


@rule((MS, "MatMulInteger16"))
def matmul_integer16(call: Call) -> list:
    out = _matmul(call.shape(0), call.shape(1))
    return [None if out is None else (INT32, out)]


# The QDQ pairs quantize_static writes in ORT's domain (extra option UseQDQContribOps,
# and for 16-bit activations): the input's shape (quantization_defs.cc).

@rule((MS, "DequantizeLinear"))
def dequantize_linear(call: Call) -> list:
    """The scale's type (float or float16)."""
    x, elem = call.shape(0), call.elem(1)
    return [None if x is None or elem is None else (elem, x)]


@rule((MS, "QuantizeLinear"))
def quantize_linear(call: Call) -> list:
    """The zero point's type; uint8 without one."""
    x = call.shape(0)
    elem = call.elem(2) if call.has(2) else UINT8
    return [None if x is None or elem is None else (elem, x)]


# Transformer fusions (ORT_ENABLE_EXTENDED on CPU and CUDA, and the transformer
# optimizer): elementwise ops, and RotaryEmbedding, keep their input's shape.

for _op in ("BiasGelu", "FastGelu", "QuickGelu", "Gelu", "RotaryEmbedding"):
    RULES[(MS, _op)] = _same(0)


def _stats_shape(x: Shape, axis: int) -> Shape:
    """The shape of a normalization's mean or inverse deviation: ``x`` with the
    normalized axes (``axis`` on) set to 1."""
    axis = axis + len(x) if axis < 0 else axis
    return (*x[:axis], *[1] * (len(x) - axis))


@rule((MS, "SkipLayerNormalization"), (MS, "SkipSimplifiedLayerNormalization"))
def skip_layer_norm(call: Call) -> list:
    """Outputs: output, mean, inv_std_var (float, the last axis reduced), and
    input_skip_bias_sum (the input's). SkipSimplified has no mean: its outputs are
    output, mean (unused, as in ORT's schema), inv_std_var, input_skip_bias_sum."""
    x = call.input(0)
    if x is None:
        return [None] * call.outputs
    elem, shape = x
    stats = (FLOAT, _stats_shape(shape, -1))
    return [(elem, shape), stats, stats, (elem, shape)][:call.outputs]


@rule((ONNX, "SimplifiedLayerNormalization"), (ONNX, "LayerNormalization"))
def layer_norm(call: Call) -> list:
    """ORT's own (ORT registers these in the standard domain, version 1; onnx has
    LayerNormalization only from opset 17): Y, then mean and inv_std_dev (Simplified:
    inv_std_var alone) of type ``stash_type`` (float), the axes from ``axis`` set to 1."""
    x = call.input(0)
    if x is None:
        return [None] * call.outputs
    elem, shape = x
    stats = (FLOAT if call.attr("stash_type", 1) == 1 else elem,
             _stats_shape(shape, call.attr("axis", -1)))
    return [(elem, shape), stats, stats][:call.outputs]


@rule((MS, "GroupQueryAttention"))
def group_query_attention(call: Call) -> list:
    """Outputs: output [B, S, num_heads * head_size], present key and value [B,
    kv_num_heads, P, head_size] with P = max(past length, total_sequence_length) when
    the total is a known value, else the past buffer's length (bert_defs.cc,
    BaseGroupQueryAttentionTypeAndShapeInference). Packed QKV when key is absent."""
    q = call.input(0)
    heads, kv_heads = call.attr("num_heads", 0), call.attr("kv_num_heads", 0)
    if q is None or len(q[1]) != 3 or not heads or not is_dim(q[1][2]):
        return [None] * call.outputs
    elem, (batch, seq, hidden) = q
    packed = not call.has(1)
    head = hidden // (heads + 2 * kv_heads) if packed else hidden // heads
    outs = [(elem, (batch, seq, heads * head))]
    past, total = call.shape(3), _scalar(call.value(6))
    if past is not None and len(past) == 4:
        length = past[2]
        if total is not None and is_dim(length):
            length = max(length, total)
        elif length == 0:
            length = None  # grows to a total only the run knows
        present = (elem, (batch, kv_heads, length, head))
    elif total is not None:
        present = (elem, (batch, kv_heads, total, head))
    else:
        present = None
    return (outs + [present, present])[:call.outputs] + [None] * max(0, call.outputs - 3)


def _scalar(value) -> Optional[int]:
    """A constant input's one integer (None when not known)."""
    if value is None:
        return None
    try:
        items = [int(v) for v in (value.reshape(-1) if hasattr(value, "reshape") else
                                  (value if isinstance(value, (list, tuple)) else [value]))]
    except (TypeError, ValueError):  # a symbolic value
        return None
    return items[0] if len(items) == 1 else None


@rule((MS, "GatherBlockQuantized"))
def gather_block_quantized(call: Call) -> list:
    """Gather of block-quantized data, dequantized: data's shape with the gather axis
    replaced by the indices' shape; uint8 data packs 8 / bits elements per byte along
    the quantize axis. The output has the scales' type."""
    data, indices, scales = call.shape(0), call.shape(1), call.elem(2)
    if data is None or indices is None or scales is None:
        return [None]
    rank = len(data)
    gather = call.attr("gather_axis", 0) % rank
    quantize = call.attr("quantize_axis", 1) % rank
    dims = list(data)
    if call.elem(0) == UINT8 and is_dim(dims[quantize]):
        dims[quantize] *= 8 // call.attr("bits", 4)
    return [(scales, (*dims[:gather], *indices, *dims[gather + 1:]))]


# Attention (the transformer optimizer's fusion of BERT's, GPT-2's and ViT's self
# attention; QAttention: quantize_dynamic of it). ORT's AttentionTypeAndShapeInference
# (shape_inference_functions.cc), and where it leaves the present unsized, the kernel's
# shape (attention_base.cc, GetPresent), checked by running it.

def _div(a, b) -> Optional[int]:
    return a // b if is_dim(a) and is_dim(b) and b else None


def _with_length(shape: Shape, axis: int, more) -> Optional[Shape]:
    """``shape`` with ``more`` added to its dim ``axis`` (None when either is unknown)."""
    if not is_dim(shape[axis]) or not is_dim(more):
        return None
    return (*shape[:axis], shape[axis] + more, *shape[axis + 1:])


def _attention(call: Call, past_index: int) -> list:
    """Input [B, S, input_hidden], weights [input_hidden, q + k + v]: the output is
    [B, S, v] (v from qkv_hidden_sizes, else a third of the bias; without a bias, which
    the CPU kernel does not run, a third of the weights, as ORT's symbolic inference), of
    the bias's type. The present, [2, B, heads, total, head]: the past's with S added
    to its length (with past_present_share_buffer the past's own: one buffer of the
    longest length), or without a past [2, B, heads, S, v / heads]."""
    x = call.shape(0)
    if x is None or len(x) != 3:
        return [None] * call.outputs
    sizes = call.attr("qkv_hidden_sizes")
    if sizes:
        v_hidden = sizes[2] if len(sizes) == 3 else None
    else:
        qkv = call.shape(2) if call.has(2) else call.shape(1)
        v_hidden = None if qkv is None else _div(qkv[-1], 3)
    elem = call.elem(2) if call.has(2) else call.elem(0)
    if v_hidden is None or elem is None:
        return [None] * call.outputs
    outs = [(elem, (x[0], x[1], v_hidden))]
    if call.has(past_index):
        past = call.shape(past_index)
        if past is None or len(past) != 5:
            present = None
        elif call.attr("past_present_share_buffer", 0):
            present = (call.elem(past_index), past)
        else:
            grown = _with_length(past, 3, x[1])
            present = None if grown is None else (elem, grown)
    else:
        heads = call.attr("num_heads", 0)
        head = _div(v_hidden, heads)
        present = None if head is None else (elem, (2, x[0], heads, x[1], head))
    return (outs + [present] + [None] * call.outputs)[:call.outputs]


@rule((MS, "Attention"))
def attention(call: Call) -> list:
    """Inputs: input, weights, bias, mask_index, past, attention_bias,
    past_sequence_length."""
    return _attention(call, 4)


@rule((MS, "QAttention"))
def qattention(call: Call) -> list:
    """Inputs: input, weight, bias, input_scale, weight_scale, mask_index,
    input_zero_point, weight_zero_point, past: Attention's shapes, a float output (the
    bias's type) from quantized input and weight."""
    return _attention(call, 8)


@rule((MS, "MultiHeadAttention"))
def multi_head_attention(call: Call) -> list:
    """Inputs: query, key, value, bias, key_padding_mask, attention_bias, past_key,
    past_value, past_sequence_length, cache_indirection; outputs: output, present_key,
    present_value, qk (bert_defs.cc, MultiHeadAttentionTypeAndShapeInference).

    The output [B, S, v_hidden] of the query's type: v_hidden the value's last dim
    (3-D value), heads * head_size of a 4-D one (cross attention on BNSH key and value),
    heads * head_size of a packed QKV query [B, S, heads, 3, head]; a packed KV key [B,
    L, heads, 2, head] with no value: the query's shape.

    The presents [B, heads, length, head]: with a past and a 3-D value, the past's
    length plus the value's (ORT's schema sizes them only so); with the past shared with
    the present (past_sequence_length given), the past's own; without a past, the 3-D
    key and value split into heads, or a 4-D key and value as they are (what the CPU
    kernel makes; the schema leaves them unsized). A packed QKV query's, which the CPU
    kernel does not run: ORT's symbolic inference's [B, heads, past + S, head]. The qk
    output is left unknown."""
    n = call.outputs
    q = call.input(0)
    if q is None or len(q[1]) not in (3, 5):
        return [None] * n
    elem, qs = q
    key = call.shape(1) if call.has(1) else ()
    value = call.shape(2) if call.has(2) else ()
    outs: list = [None] * max(n, 3)
    if len(qs) == 5:
        if is_dim(qs[2]) and is_dim(qs[4]):
            outs[0] = (elem, (qs[0], qs[1], qs[2] * qs[4]))
    elif value:
        if len(value) == 3:
            outs[0] = (elem, (qs[0], qs[1], value[2]))
        elif len(value) == 4 and is_dim(value[1]) and is_dim(value[3]):
            outs[0] = (elem, (qs[0], qs[1], value[1] * value[3]))
    elif value == () and key and len(key) == 5:
        outs[0] = q
    if n > 1:
        outs[1], outs[2] = _mha_presents(call, elem, qs, key, value)
    return outs[:n]


def _mha_presents(call: Call, elem: int, qs: Shape, key, value) -> tuple:
    heads = call.attr("num_heads", 0)
    if call.has(6):
        past_k, past_v = call.input(6), call.input(7)
        if past_k is None or past_v is None or len(past_k[1]) != 4 or len(past_v[1]) != 4:
            return None, None
        if call.attr("past_present_share_buffer", 0) or call.has(8):
            return past_k, past_v
        if len(qs) == 5:
            more = qs[1]
        elif value and len(value) == 3:
            more = value[1]
        else:
            return None, None
        grown = [_with_length(p[1], 2, more) for p in (past_k, past_v)]
        return tuple(None if g is None else (elem, g) for g in grown)
    if len(qs) == 5:
        present = (elem, (qs[0], qs[2], qs[1], qs[4]))
        return present, present
    if not key or not value or len(key) != len(value):
        return None, None
    if len(key) == 4:
        return (elem, key), (elem, value)
    if len(key) != 3:
        return None, None
    split = [_div(x[2], heads) for x in (key, value)]
    return tuple(None if h is None else (elem, (qs[0], heads, x[1], h))
                 for h, x in zip(split, (key, value)))


@rule((MS, "EmbedLayerNormalization"))
def embed_layer_norm(call: Call) -> list:
    """Inputs: input_ids [B, S], segment_ids, word_embedding [vocab, hidden], ...;
    outputs: output [B, S, hidden] of the embeddings' type, mask_index [B] (the ids'
    type, int32) and embedding_sum, the output's shape and type
    (shape_inference_functions.cc, EmbedLayerNormalizationShapeInference)."""
    ids, word = call.input(0), call.input(2)
    if ids is None or word is None or len(ids[1]) != 2 or len(word[1]) != 2:
        return [None] * call.outputs
    out = (word[0], (*ids[1], word[1][1]))
    return [out, (ids[0], ids[1][:1]), out][:call.outputs]


# Stable Diffusion's UNet through the transformer optimizer (diffusion_defs.cc; CUDA
# kernels), and GemmFastGelu (CUDA and ROCm): checked against ORT's symbolic inference

for _op in ("BiasAdd", "GroupNorm"):
    RULES[(MS, _op)] = _same(0)


@rule((MS, "SkipGroupNorm"))
def skip_group_norm(call: Call) -> list:
    """Outputs: Y and S (the sum of input, skip and bias), each the input's shape."""
    x = call.input(0)
    return [x, x][:call.outputs]


@rule((MS, "BiasSplitGelu"))
def bias_split_gelu(call: Call) -> list:
    """X [N, S, D] plus bias [D], halved along D: [N, S, D / 2]."""
    x, bias = call.input(0), call.shape(1)
    if x is None or bias is None or len(x[1]) != 3 or len(bias) != 1:
        return [None]
    half = _div(bias[0], 2)
    return [None if half is None else (x[0], (*x[1][:2], half))]


@rule((MS, "GemmFastGelu"))
def gemm_fast_gelu(call: Call) -> list:
    """MatMul (numpy's shapes) then FastGelu."""
    out = _matmul(call.shape(0), call.shape(1))
    return [None if out is None else (call.elem(0), out)]


# Weights quantized in blocks (MatMulNBits: onnxruntime.quantization's
# matmul_nbits_quantizer, the int4 LLMs of onnxruntime-genai; MatMulBnb4: bitsandbytes'
# FP4/NF4). B is a packed blob; the attributes K and N give the matrix it stands for.

def _quantized_weight_matmul(call: Call, n_last: bool) -> list:
    """A [..., K] times the dequantized weight: A's dims but the last, then N (or K when
    the weight is not transposed); A's element type (contrib_defs.cc,
    MatmulWithQuantWeightShapeInference)."""
    a = call.input(0)
    out = call.attr("N") if n_last else call.attr("K")
    if a is None or not a[1] or not is_dim(out):
        return [None]
    return [(a[0], (*a[1][:-1], out))]


@rule((MS, "MatMulNBits"))
def matmul_nbits(call: Call) -> list:
    """B [N, blocks, blob] of ``bits``-bit weights: the output is [..., N]."""
    return _quantized_weight_matmul(call, True)


@rule((MS, "MatMulBnb4"))
def matmul_bnb4(call: Call) -> list:
    """transB (default 1) multiplies by B^T, [..., K] -> [..., N]; transB 0 (the backward
    pass) by B, [..., N] -> [..., K]."""
    return _quantized_weight_matmul(call, bool(call.attr("transB", 1)))
