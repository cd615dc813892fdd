"""Our reverse rules, patched into onnx_ad 0.3.0 only while it reverses a model.

onnx_ad looks its reverse rules up at call time in ``onnx_ad.rules.REVERSE`` (the table
its ``reverse_rule`` decorator fills) and calls ``rules._conv_weight_adjoint`` for a
Conv's weight; :func:`patched` swaps ours in for the duration of a ``with`` block and puts
onnx_ad's back afterwards. Ours:

- **Conv weight gradient without overhang** (:func:`conv_weight_adjoint`). onnx_ad's
  rule convolves the whole (explicitly padded) input with the output adjoint, dilated by
  the stride, and crops the result to the kernel: for a stride-2 conv whose padded input
  is one longer than the last window needs, the convolution makes extra outputs (a 1x1
  stride-2 conv's weight gradient is computed as 2x2, four times its MACs). Ours gives
  the convolution exactly the end padding the last window used (less than the forward's
  when the forward skipped trailing elements; a crop of the input where even no padding
  is too much), so it produces the kernel and nothing else: its MACs equal the forward
  conv's. The begin padding goes into the convolution too (no ``Pad`` copy).
- **ConvTranspose weight gradient** (group 1; onnx_ad rejects it): ``dW[c, m, k] =
  sum_n,i x[n, c, i] dy[n, m, i*s + k*d - p]``, one convolution of the (transposed)
  output adjoint with the (transposed) input as filters, strides = dilations,
  dilations = strides, padded so that it produces exactly the kernel.
- **AveragePool** with ``ceil_mode=1`` (onnx_ad rejects it) and without: the adjoint
  spreads ``dy / divisor`` back over each window with a grouped ConvTranspose of ones.
  The divisor is a constant computed here from the static shapes, per axis, with ONNX
  Runtime's (and the ONNX reference's) semantics: the real elements of the window
  (``count_include_pad=0``) or its elements inside the padded input
  (``count_include_pad=1``); a ceil-mode window's overhang past the end padding never
  counts. onnx_ad's rule computed the ``count_include_pad=0`` divisor at run time from a
  tensor of ones the size of the input.
- **BatchNormalization in training mode** (``training_mode=1``; onnx_ad differentiates
  only the inference form, an affine map): the batch statistics depend on ``x``, so
  ``dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))`` (means over every
  axis but the channel's), ``dgamma = sum(dy * xhat)``, ``dbeta = sum(dy)``. The rule
  reads only the forward's input ``x`` (which the inference form's rule reads too) and
  recomputes the batch mean and variance from it in backward: ONNX's training-mode node
  outputs the updated running statistics, not the batch ones, and a decomposition into
  primitive ops before reversal would keep ``x - mean`` and ``xhat`` (two more tensors
  of the activation's size) for backward as well.
- **Slice with steps** (onnx_ad differentiates step 1 only): along an axis sliced every
  ``k``-th element from ``start``, the adjoint puts ``dy[j]`` at ``start + j*k`` and zeros
  between: ``Unsqueeze`` a new axis after it, ``Pad`` that axis to ``k`` (the zeros),
  ``Reshape`` the two into one of ``m*k``, then ``Pad`` (or crop) to the input's extent.
  Only data movement, no scatter and no index tensor (Swin's patch merging takes
  ``x[..., 0::2, 0::2, :]`` and its three siblings). Negative steps are refused.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from graphmem.training.activations import reduce_sum_square
from graphmem.training.conv_pads import pad_or_crop, tail_pads


def conv_weight_adjoint(ctx, node, attrs, spatial, seeded):
    """dL/dW of a group-1 Conv: ``Conv(Transpose(x), Transpose(dy), strides=dilations,
    dilations=strides, pads=exact)``, producing the kernel and nothing more."""
    from onnx_ad.rules import UnsupportedOperator, _merge_leading

    x, w, y = node.input[0], node.input[1], node.output[0]
    kernel = ctx.shapes.static(w)
    xs, ys = ctx.shapes.static(x), ctx.shapes.static(y)
    if kernel is None or xs is None or ys is None or None in xs or None in ys:
        raise UnsupportedOperator("a Conv weight gradient needs static shapes in reverse mode")
    rank = 2 + spatial
    pads, strides, dilations = attrs["pads"], attrs["strides"], attrs["dilations"]
    begins = list(pads[:spatial])
    ends = [tail_pads(begins[i], xs[2 + i], ys[2 + i], strides[i], dilations[i],
                      kernel[2 + i]) for i in range(spatial)]
    source, conv_pads = pad_or_crop(ctx, x, 2, begins, ends, xs[2:], "w_crop_x")
    b = ctx.b
    # [batch, out, spatial..., nseed] -> [out*nseed, batch, spatial...]
    filters = _merge_leading(ctx, b.op("Transpose", [seeded],
                                       perm=[1, rank, 0] + list(range(2, rank)),
                                       stem="a_filters"), [ys[0]] + list(ys[2:]))
    swapped = b.op("Transpose", [source], perm=[1, 0] + list(range(2, rank)), stem="w_xt")
    product = b.op("Conv", [swapped, filters], strides=dilations, dilations=strides,
                   pads=conv_pads, group=1, stem="a_conv_w")
    # [in, out*nseed, kernel...] -> [in, out, nseed, kernel...] -> [out, in, kernel..., nseed]
    split = b.op("Reshape", [product, b.ints([kernel[1], kernel[0], -1] + list(kernel[2:]))],
                 stem="a_split")
    return b.op("Transpose", [split], perm=[1, 0] + list(range(3, 3 + spatial)) + [2],
                stem="a_conv_weight")


def conv_transpose_reverse(ctx, node, grads):
    """ConvTranspose: onnx_ad's input and bias adjoints, plus the weight's (group 1)."""
    from onnx_ad.rules import (UnsupportedOperator, _conv_attributes, _conv_transpose_pads,
                               _fold_seed_into_batch, _merge_leading, _unfold_batch_into_seed)

    attrs, spatial = _conv_attributes(ctx, node)
    x, w, y = node.input[0], node.input[1], node.output[0]
    seeded = ctx.full(grads[0], y)
    pads = _conv_transpose_pads(ctx, node, attrs, spatial)
    contributions = [None, None]
    if ctx.asked_for(x):
        convolution = dict(attrs, pads=pads)
        folded = _fold_seed_into_batch(ctx, seeded, y)
        contributions[0] = _unfold_batch_into_seed(
            ctx, ctx.b.op("Conv", [folded, w], stem="a_convt", **convolution), x, ctx.rank(x))
    if ctx.asked_for(w):
        if attrs["group"] != 1:
            raise UnsupportedOperator(
                "a grouped ConvTranspose is not differentiated with respect to its weight")
        kernel = ctx.shapes.static(w)
        xs, ys = ctx.shapes.static(x), ctx.shapes.static(y)
        if kernel is None or xs is None or ys is None or None in xs or None in ys:
            raise UnsupportedOperator(
                "a ConvTranspose weight gradient needs static shapes in reverse mode")
        rank = 2 + spatial
        strides, dilations = attrs["strides"], attrs["dilations"]
        begins = list(pads[:spatial])
        # windows of the adjoint, one per input position, strides apart: taps at
        # i*s + k*d - begin for k < kernel
        ends = [tail_pads(begins[i], ys[2 + i], xs[2 + i], strides[i], dilations[i],
                          kernel[2 + i]) for i in range(spatial)]
        b = ctx.b
        # [batch, out, spatial..., nseed] -> [out*nseed, batch, spatial...]
        source = _merge_leading(ctx, b.op("Transpose", [seeded],
                                          perm=[1, rank, 0] + list(range(2, rank)),
                                          stem="ct_dy"), [ys[0]] + list(ys[2:]))
        source, conv_pads = pad_or_crop(ctx, source, 2, begins, ends, ys[2:], "ct_crop_dy")
        filters = b.op("Transpose", [x], perm=[1, 0] + list(range(2, rank)), stem="ct_xt")
        product = b.op("Conv", [source, filters], strides=dilations, dilations=strides,
                       pads=conv_pads, group=1, stem="a_convt_w")
        # [out*nseed, in, kernel...] -> [out, nseed, in, kernel...] -> [in, out, kernel..., nseed]
        split = b.op("Reshape", [product, b.ints([kernel[1], -1, kernel[0]] + list(kernel[2:]))],
                     stem="ct_split")
        contributions[1] = b.op("Transpose", [split],
                                perm=[2, 0] + list(range(3, 3 + spatial)) + [1],
                                stem="a_convt_weight")
    if len(node.input) > 2 and node.input[2] and ctx.asked_for(node.input[2]):
        outside = [a for a in range(ctx.rank(y)) if a != 1]
        contributions.append(ctx.reshape_like(
            ctx.reduce_sum(seeded, outside, keepdims=0), node.input[2]))
    return contributions


def _window_counts(size, out, kernel, stride, dilation, begin, end, include_pad):
    """Per output position along one axis: how many taps the average divides by."""
    low, high = (-begin, size + end) if include_pad else (0, size)
    taps = np.arange(out)[:, None] * stride - begin + np.arange(kernel)[None, :] * dilation
    return ((taps >= low) & (taps < high)).sum(axis=1)


def average_pool_reverse(ctx, node, grads):
    """AveragePool, ``ceil_mode`` 0 or 1: spread ``dy / divisor`` over each window."""
    from onnx_ad._build import attribute
    from onnx_ad.rules import (UnsupportedOperator, _fold_seed_into_batch, _ones_kernel,
                               _pool_attributes, _unfold_batch_into_seed)

    attrs, spatial = _pool_attributes(ctx, node, reverse=False)  # ceil_mode handled here
    x, y = node.input[0], node.output[0]
    xs, ys = ctx.shapes.static(x), ctx.shapes.static(y)
    if xs is None or ys is None or None in xs or None in ys:
        raise UnsupportedOperator("AveragePool needs static shapes to be differentiated")
    kernel, strides = attrs["kernel_shape"], attrs["strides"]
    dilations, pads = attrs["dilations"], attrs["pads"]
    include = bool(attribute(node, "count_include_pad", 0))
    begins, ends = list(pads[:spatial]), list(pads[spatial:])
    divisor = np.ones([], np.float64)
    for i in range(spatial):
        if strides[i] * (ys[2 + i] - 1) >= xs[2 + i] + begins[i]:
            raise UnsupportedOperator(
                "AveragePool with ceil_mode=1 whose last window starts in the end padding: "
                "ONNX shape inference and ONNX Runtime disagree on its output size")
        counts = _window_counts(xs[2 + i], ys[2 + i], kernel[i], strides[i], dilations[i],
                                begins[i], ends[i], include)
        divisor = np.multiply.outer(divisor, counts)
    # [out spatial..., 1]: broadcasts against the seeded [N, C, out spatial..., nseed]
    scale = ctx.b.constant((1.0 / divisor)[..., None], ctx.dtype(x),
                           list(ys[2:]) + [1])
    divided = ctx.b.op("Mul", [ctx.full(grads[0], y), scale], stem="avg_divided")
    ones, channels = _ones_kernel(ctx, node, attrs)
    # a transposed convolution over exactly the windows' extent gives back x's size
    tail = [tail_pads(begins[i], xs[2 + i], ys[2 + i], strides[i], dilations[i], kernel[i])
            for i in range(spatial)]
    extra = {}
    if any(t < 0 for t in tail):  # trailing input no window reached: zeros there
        extra["output_padding"] = [max(0, -t) for t in tail]
    folded = _fold_seed_into_batch(ctx, divided, y)
    spread = ctx.b.op("ConvTranspose", [folded, ones], group=channels, strides=strides,
                      dilations=dilations, pads=begins + [max(0, t) for t in tail],
                      stem="window_spread", **extra)
    return [_unfold_batch_into_seed(ctx, spread, x, ctx.rank(x))]


def batch_norm_training_reverse(ctx, node, grads):
    """BatchNormalization with ``training_mode=1``: adjoints of ``x``, scale and bias
    through the batch statistics (see the module docstring)."""
    from onnx_ad._build import attribute
    from onnx_ad.rules import UnsupportedOperator

    if any(g is not None for g in grads[1:]):
        raise UnsupportedOperator("the running statistics BatchNormalization updates are "
                                  "not differentiated; seed only its first output")
    x, scale, bias = node.input[0], node.input[1], node.input[2]
    xs = ctx.shapes.static(x)
    if xs is None or None in xs or len(xs) < 2:
        raise UnsupportedOperator("training-mode BatchNormalization needs a static input "
                                  "shape of rank 2 or more to be differentiated")
    rank, dtype, b = len(xs), ctx.dtype(x), ctx.b
    axes = [0] + list(range(2, rank))  # every axis but the channel's
    count = int(np.prod(xs)) // xs[1]  # elements per channel
    epsilon = attribute(node, "epsilon", 1e-5)
    seeded = ctx.full(grads[0], node.output[0])  # [N, C, ..., nseed]
    sum_dy = ctx.reduce_sum(seeded, axes, keepdims=1)  # [1, C, 1..., nseed]
    contributions = [None] * len(node.input)
    if ctx.asked_for(bias):
        contributions[2] = ctx.reshape_like(sum_dy, bias)
    if not ctx.asked_for(x) and not ctx.asked_for(scale):
        return contributions
    # The batch statistics, as the forward computed them (population variance).
    mean = ctx.reduce_mean(x, axes)  # [1, C, 1...]
    centered = b.op("Sub", [x, mean], stem="bn_centered")
    variance = b.op("Mul", [reduce_sum_square(ctx, centered, axes),
                            ctx.constant(1.0 / count, dtype)], stem="bn_var")
    invstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [variance, ctx.constant(
        epsilon, dtype)])])], stem="bn_invstd")
    xhat = ctx.lift(b.op("Mul", [centered, invstd], stem="bn_xhat"))  # [N, C, ..., 1]
    sum_dy_xhat = ctx.reduce_sum(b.op("Mul", [seeded, xhat], stem="bn_dy_xhat"), axes,
                                 keepdims=1)
    if ctx.asked_for(x):
        # dx = g*dy + (g*xhat) * (-sum(dy*xhat)/M) + g * (-sum(dy)/M), g = gamma*invstd:
        # one full-size product per term, each a candidate to overwrite its input.
        channel = b.ints([1, -1] + [1] * (rank - 2))
        gain = ctx.lift(b.op("Mul", [b.op("Reshape", [scale, channel]), invstd],
                             stem="bn_gain"))  # [1, C, 1..., 1]
        per = b.op("Mul", [gain, ctx.constant(-1.0 / count, dtype)], stem="bn_per")
        tilt = b.op("Mul", [sum_dy_xhat, per], stem="bn_tilt")
        shift = b.op("Mul", [sum_dy, per], stem="bn_shift")
        contributions[0] = b.op("Add", [b.op("Add", [
            b.op("Mul", [seeded, gain], stem="bn_scaled"),
            b.op("Mul", [xhat, tilt], stem="bn_tilted")]), shift], stem="bn_dx")
    if ctx.asked_for(scale):
        contributions[1] = ctx.reshape_like(sum_dy_xhat, scale)
    return contributions


def slice_reverse(ctx, node, grads, step_one_rule):
    """Slice: ``step_one_rule`` (onnx_ad's) when every step is 1, else the zero
    interleave of the module docstring."""
    from onnx_ad.rules import UnsupportedOperator, _pad, _slice_bounds

    starts, ends, axes, steps = _slice_bounds(ctx, node)
    if steps is None or all(k == 1 for k in steps):
        return step_one_rule(ctx, node, grads)
    if starts is None or ends is None:
        raise UnsupportedOperator("Slice is differentiable only with constant bounds")
    if any(k <= 0 for k in steps):
        raise UnsupportedOperator("Slice with a negative step is not differentiated in "
                                  "reverse mode")
    x, y = node.input[0], node.output[0]
    rank = ctx.rank(x)
    xs, ys = ctx.shapes.static(x), ctx.shapes.static(y)
    if xs is None or ys is None or None in xs or None in ys:
        raise UnsupportedOperator("Slice with steps needs static shapes to be differentiated")
    axes = list(range(len(starts))) if axes is None else [a % rank for a in axes]
    value = ctx.full(grads[0], y)  # [*ys, nseed]
    current = list(ys)
    before, after = [0] * rank, [0] * rank
    for axis, start, step in zip(axes, starts, steps):
        extent, m = xs[axis], ys[axis]
        start = min(max(start + extent if start < 0 else start, 0), extent)
        if step > 1 and m > 0:
            wide = ctx.unsqueeze(value, [axis + 1])
            tail = [0] * (rank + 2)
            tail[axis + 1] = step - 1
            wide = ctx.b.op("Pad", [wide, ctx.b.ints([0] * (rank + 2) + tail)],
                            mode="constant", stem="slice_gaps")
            current[axis] = m * step
            value = ctx.b.op("Reshape", [wide, ctx.b.ints(current + [-1])],
                             stem="slice_spread")
        before[axis] = start
        after[axis] = extent - start - current[axis]
        if after[axis] < 0:  # the last gap runs past the input's end
            current[axis] += after[axis]
            value = ctx.slice(value, [0], [current[axis]], [axis], stem="slice_cut")
            after[axis] = 0
    padded = _pad(ctx, value, before + [0], after + [0])
    return [padded] + [None] * (len(node.input) - 1)


@contextmanager
def patched(activations: bool = True):
    """onnx_ad with our rules (above, the grouped Conv weight rule of
    :mod:`.grouped_conv`, the MatMul-by-a-matrix rule of :mod:`.matmul_rule` and, unless
    ``activations`` is false, the GELU, HardSwish, LayerNormalization and Softmax rules
    of :mod:`.activations`) for
    the duration of the block; an inference-form
    BatchNormalization still goes to onnx_ad's rule."""
    from onnx_ad import rules

    from graphmem.training.activations import DOMAIN as FUSED
    from graphmem.training.activations import (gelu_reverse, hard_swish_reverse,
                                               layer_norm_reverse, softmax_reverse)
    from graphmem.training.grouped_conv import grouped_weight_adjoint
    from graphmem.training.matmul_rule import matmul_reverse

    original_weight = rules._conv_weight_adjoint
    saved = {op: rules.REVERSE.get(op)
             for op in ("ConvTranspose", "AveragePool", "BatchNormalization", "Slice",
                        "MatMul", "Gelu", "HardSwish", "LayerNormalization", "Softmax")}
    inference_batch_norm = saved["BatchNormalization"]
    step_one_slice = saved["Slice"]
    batched_matmul = saved["MatMul"]

    def batch_norm_dispatch(ctx, node, grads):
        from onnx_ad._build import attribute

        if attribute(node, "training_mode", 0):
            return batch_norm_training_reverse(ctx, node, grads)
        return inference_batch_norm(ctx, node, grads)

    def weight_dispatch(ctx, node, attrs, spatial, seeded):
        if not ctx.asked_for(node.input[1]):
            return None
        if attrs["group"] != 1:
            return grouped_weight_adjoint(ctx, node, attrs, spatial, seeded)
        return conv_weight_adjoint(ctx, node, attrs, spatial, seeded)

    rules._conv_weight_adjoint = weight_dispatch
    rules.REVERSE["ConvTranspose"] = conv_transpose_reverse
    rules.REVERSE["AveragePool"] = average_pool_reverse
    rules.REVERSE["BatchNormalization"] = batch_norm_dispatch
    rules.REVERSE["Slice"] = lambda ctx, node, grads: slice_reverse(ctx, node, grads,
                                                                     step_one_slice)
    rules.REVERSE["MatMul"] = lambda ctx, node, grads: matmul_reverse(ctx, node, grads,
                                                                      batched_matmul)
    standard_gelu = saved["Gelu"]
    standard_layer_norm = saved["LayerNormalization"]

    def gelu_dispatch(ctx, node, grads):
        from onnx_ad._build import attribute

        if node.domain == FUSED or attribute(node, "approximate", "none") == "none":
            return gelu_reverse(ctx, node, grads)
        return standard_gelu(ctx, node, grads)

    if activations:
        rules.REVERSE["Gelu"] = gelu_dispatch
        rules.REVERSE["HardSwish"] = hard_swish_reverse
        rules.REVERSE["LayerNormalization"] = lambda ctx, node, grads: layer_norm_reverse(
            ctx, node, grads, standard_layer_norm)
        rules.REVERSE["Softmax"] = softmax_reverse
    try:
        yield
    finally:
        rules._conv_weight_adjoint = original_weight
        for op, rule in saved.items():
            if rule is None:
                rules.REVERSE.pop(op, None)
            else:
                rules.REVERSE[op] = rule
