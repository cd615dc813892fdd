"""The scratch memory convolution kernels take beside the arena, by runtime rule.

A kernel's working buffer is not a tensor of the graph: the runtime allocates it for
the node's run and frees it after, so one buffer of the largest size is what a run
adds to the arena. How large depends on the kernel, so the rule is a choice:

- ``mlas``: what ONNX Runtime's CPU provider allocates. Its float ``Conv`` kernel
  (onnxruntime/core/providers/cpu/nn/conv.cc, ``Conv<float>::Compute``) asks MLAS
  (onnxruntime/core/mlas/lib/convolve.cpp, ``MlasConvPrepare``) for a working buffer
  and allocates that many floats from the session's temporary-space allocator:

  * none for a pointwise convolution (1x1 kernel, strides 1, no padding), nor for a
    single-channel kernel as wide as its input (MLAS runs a GEMM on the input itself);
  * the whole unfolded image (output pixels x input channels per group x kernel
    elements) when the filters outnumber the output pixels (``ExpandThenGemm``);
  * otherwise 128 x 128 floats per thread it slices the output across
    (``ExpandThenGemmSegmented``): as many threads as the work warrants, at most the
    session's intra-op threads (``threads``); for more than one image or group, one
    slice per thread, for up to batch x groups threads.

  ``python -m tools.upstream.mlas_workspace`` checks this against the allocations the installed ONNX
  Runtime makes (a malloc log around one run of a one-Conv model) and prints the
  version it measured. MLAS's newer sources size each thread's buffer as a whole
  unfolded image in the batch-or-groups case; the tool says which one the installed
  runtime follows, and the rule here is the one it measures. The provider runs
  float16 convolutions in float32 behind Casts it inserts (there is no float16 Conv
  kernel for x86), so the buffer is float32 whatever the graph's type. At the default
  optimization level on an AVX2 or AVX-512 machine ONNX Runtime rewrites most
  convolutions into its NCHWc form (domain ``com.microsoft.nchwc``), whose direct
  kernels take no working buffer: ``--ort-optimize all`` plans that graph, and this
  rule gives its NCHWc convolutions none.
- ``im2col``: one unfolded image of one group, in the input's type: what a runtime that
  lowers every non-pointwise convolution to a GEMM over an im2col buffer keeps
  (Caffe-style, and ONNX Runtime's generic ``Conv<T>``).
- ``none``: no working buffer. cuDNN picks an algorithm per convolution and takes its
  workspace from the provider's own scratch allocator (bounded by the CUDA provider's
  ``cudnn_conv_use_max_workspace``), outside any plan graphmem makes; ``none`` leaves
  it out, as it does for kernels that need none.
"""
from __future__ import annotations

from math import prod
from typing import Mapping

from graphmem.analysis.macs import im2col_bytes
from graphmem.core.ir import Graph, Node, Tensor, standard_domain
from graphmem.errors import GraphmemError

RULES = ("mlas", "im2col", "none")
# The rule that matches each --provider's kernels by default.
PROVIDER_RULE = {"cpu": "mlas", "cuda": "none"}

# MLAS's constants (onnxruntime/core/mlas/lib/mlasi.h).
_STRIDE_N = 128  # MLAS_SGEMM_STRIDEN
_STRIDE_K = 128  # MLAS_SGEMM_STRIDEK
_PER_THREAD = _STRIDE_N * _STRIDE_K  # MLAS_CONV_WORKING_BUFFER_SIZE_PER_THREAD
_THREAD_COMPLEXITY = 64 * 1024  # MLAS_SGEMM_THREAD_COMPLEXITY
_MAX_THREADS = 16  # MLAS_MAXIMUM_THREAD_COUNT
_THREAD_ALIGN = 16  # MLAS_SGEMM_STRIDEN_THREAD_ALIGN
_FLOAT = {"float32", "float16", "bfloat16"}


def rule_for(provider: str, choice: str | None = None) -> str:
    """The rule ``choice`` names, or the one that matches ``provider``'s kernels."""
    if choice is None:
        return PROVIDER_RULE.get(provider, "none")
    if choice not in RULES:
        raise GraphmemError(f"--workspace {choice!r}: one of {', '.join(RULES)}")
    return choice


def node_workspace(node: Node, tensors: Mapping[str, Tensor], rule: str,
                   threads: int = 1) -> int:
    """Bytes of the working buffer ``node`` takes under ``rule`` (0 if none)."""
    if rule == "none":
        return 0
    if rule == "im2col":
        return im2col_bytes(node, tensors)
    if rule != "mlas":
        raise GraphmemError(f"unknown workspace rule {rule!r}; one of {', '.join(RULES)}")
    conv = ((node.op_type == "Conv" and standard_domain(node.domain))
            or (node.op_type == "FusedConv" and node.domain == "com.microsoft"))
    if not conv or len(node.inputs) < 2 or tensors[node.inputs[0]].dtype not in _FLOAT:
        return 0
    return 4 * mlas_conv_elements(node, tensors, threads)


def mlas_conv_elements(node: Node, tensors: Mapping[str, Tensor], threads: int = 1) -> int:
    """Floats ``MlasConvPrepare`` asks for this convolution (see the module's text)."""
    x, w, y = tensors[node.inputs[0]], tensors[node.inputs[1]], tensors[node.outputs[0]]
    kernel = list(w.shape[2:])
    dims = len(kernel)
    if not 1 <= dims <= 3:  # Conv<float> unfolds one image of one group itself
        return prod(w.shape[1:]) * prod(y.shape[2:])
    batch, groups = x.shape[0], node.attrs.get("group", 1) or 1
    channels = x.shape[1] // groups
    filters = w.shape[0] // groups
    in_shape, out_shape = list(x.shape[2:]), list(y.shape[2:])
    strides = node.attrs.get("strides") or [1] * dims
    pads = node.attrs.get("pads") or [0] * (2 * dims)
    dilations = node.attrs.get("dilations") or [1] * dims
    out_size = prod(out_shape)
    k = channels * prod(kernel)
    if dims == 1:  # MLAS promotes 1D to 2D: a height of 1
        in_shape, kernel = [1, in_shape[0]], [1, kernel[0]]
        dims = 2
    if all(s == 1 for s in strides) and all(p == 0 for p in pads):
        if k == channels:
            return 0  # pointwise: a GEMM on the input
        if dims == 2 and all(d == 1 for d in dilations) and channels == 1:
            if kernel[1] == in_shape[1] or (kernel[0] == in_shape[0] and kernel[1] == 1):
                return 0
    if filters > out_size:
        return out_size * k  # ExpandThenGemm: the whole unfolded image
    complexity = filters * out_size * k
    target = (complexity // _THREAD_COMPLEXITY + 1
              if complexity < _THREAD_COMPLEXITY * _MAX_THREADS else _MAX_THREADS)
    target = min(target, threads)
    stride_n = -(-out_size // target)
    if target > 1:
        stride_n = (stride_n + _THREAD_ALIGN - 1) & ~(_THREAD_ALIGN - 1)
        if stride_n >= out_size:
            target = 1
        elif stride_n * (target - 1) >= out_size:
            target -= 1
    if batch > 1 or groups > 1:  # threads take whole images and groups, one slice each
        target = min(threads, batch * groups)
    return target * _PER_THREAD


def largest(graph: Graph, rule: str, threads: int = 1) -> tuple[int, int | None]:
    """(bytes, node index) of the largest working buffer over the graph's nodes under
    ``rule``; (0, None) where no node takes one."""
    best, where = 0, None
    for n in graph.nodes:
        b = node_workspace(n, graph.tensors, rule, threads)
        if b > best:
            best, where = b, n.index
    return best, where


def float16_convs(graph: Graph) -> int:
    """Convolutions (standard domain) whose input is float16: ONNX Runtime's CPU provider
    runs them in float32 behind Casts it inserts."""
    return sum(1 for n in graph.nodes if n.op_type == "Conv" and standard_domain(n.domain)
               and n.inputs and graph.tensors[n.inputs[0]].dtype == "float16")
