"""Reverse rules for activations and normalisations that keep what PyTorch's fused
kernels keep: exported erf-GELU chains differentiated as one op, HardSwish,
LayerNormalization and Softmax by in-place-friendly rules (:func:`hard_swish_reverse`,
:func:`layer_norm_reverse`, :func:`softmax_reverse`).
:func:`graphmem.training.rules.patched` puts them into onnx_ad while it reverses.

PyTorch's TorchScript exporter writes ``nn.GELU()`` as
``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)``. Differentiated op by op (onnx_ad),
its backward computes ``x / sqrt 2``, its ``Erf``, ``-(x / sqrt 2)^2`` and its ``Exp``,
each a new tensor of the activation's size while ``x`` and the output's adjoint are
still live: ONNX Runtime's CPU kernels for Div, Erf, Neg and Exp have no in-place
evidence (graphmem/core/inplace_evidence.json), so four such tensors were live at once
in convnext_tiny's checkpointed step, where PyTorch's fused GELU backward needs three
(its input, the output's adjoint and the result).

:func:`fuse` replaces each such chain by one node (``Gelu`` in :data:`DOMAIN`) before
reversal; :func:`gelu_reverse` is its rule, reading only ``x`` and ``dy`` with
``s = x / sqrt 2``::

    dx = dy * (0.5 + 0.5 erf(s)) + (dy * s / sqrt pi) * exp(-s^2)

ordered so that at most three activation-sized tensors are live: ``s`` (written over
``x`` where this is ``x``'s last reader), ``erf(s)`` (the one op that must write a new
tensor while both inputs live), then products and sums that may each overwrite an input
that dies there (Mul, Add: in-place on the CPU), ``dy * s`` over ``dy``, ``-s^2`` over
``s``, and ``exp(-s^2)`` as ``Elu(-s^2) + 1`` (``Elu`` is ``exp(z) - 1`` for ``z <= 0``
and may run in place; ``Exp`` may not). :func:`unfuse` puts the forward chain back
after reversal, node for node as the exporter wrote it, so the forward computes
exactly what it did.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

DOMAIN = "ai.graphmem.fused"
SQRT2 = math.sqrt(2.0)


def _constants(g: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    out = {t.name: t for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and len(n.output) == 1:
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    t = onnx.TensorProto()
                    t.CopyFrom(a.t)
                    t.name = n.output[0]
                    out[n.output[0]] = t
                elif a.name == "value_float":
                    out[n.output[0]] = numpy_helper.from_array(
                        np.array(a.f, np.float32), n.output[0])
    return out


def _scalar(consts, name) -> float | None:
    t = consts.get(name)
    if t is None:
        return None
    value = numpy_helper.to_array(t)
    if value.size != 1 or value.dtype.kind != "f":
        return None
    return float(value.reshape(()))


def _close(value, target) -> bool:
    return value is not None and abs(value - target) <= 1e-6 * abs(target)


def _gelu_at(erf, producer, readers, consts, outputs):
    """The erf-GELU chain around the ``Erf`` node ``erf``: ``(x, y, nodes)`` or None."""
    def only(t):  # the single reader of an intermediate that is not a graph output
        r = readers.get(t, [])
        return r[0] if len(r) == 1 and t not in outputs else None

    def other(node, t):
        return node.input[1] if node.input[0] == t else node.input[0]

    scale = producer.get(erf.input[0])
    if scale is None or only(erf.input[0]) is not erf:
        return None
    if scale.op_type == "Div" and _close(_scalar(consts, scale.input[1]), SQRT2):
        x = scale.input[0]
    elif scale.op_type == "Mul" and any(_close(_scalar(consts, t), 1 / SQRT2)
                                        for t in scale.input):
        x = scale.input[1] if _scalar(consts, scale.input[1]) is None else scale.input[0]
    else:
        return None
    plus = only(erf.output[0])
    if plus is None or plus.op_type != "Add" or \
            not _close(_scalar(consts, other(plus, erf.output[0])), 1.0):
        return None
    first = only(plus.output[0])
    if first is None or first.op_type != "Mul":
        return None
    b = other(first, plus.output[0])
    if b == x:  # x * (1 + erf) then * 0.5
        last = only(first.output[0])
        if last is None or last.op_type != "Mul" or \
                not _close(_scalar(consts, other(last, first.output[0])), 0.5):
            return None
        chain = [scale, erf, plus, first, last]
    else:  # (0.5 * x) * (1 + erf)
        half = producer.get(b)
        if half is None or half.op_type != "Mul" or only(b) is not first or \
                x not in half.input or not _close(_scalar(consts, other(half, x)), 0.5):
            return None
        last = first
        chain = [scale, erf, plus, half, first]
    return x, last.output[0], chain


def fuse(model: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    """Replace each erf-GELU chain of ``model`` (in place) by one ``Gelu`` node of
    :data:`DOMAIN`; returns ``{its output: the chain's nodes}`` for :func:`unfuse`."""
    g = model.graph
    consts = _constants(g)
    producer = {o: n for n in g.node for o in n.output if o}
    readers: dict[str, list] = {}
    for n in g.node:
        for t in dict.fromkeys(n.input):
            if t:
                readers.setdefault(t, []).append(n)
    outputs = {o.name for o in g.output}
    chains: dict[str, list[onnx.NodeProto]] = {}
    replaced: dict[int, onnx.NodeProto] = {}
    dropped: set[int] = set()
    for n in g.node:
        if n.op_type != "Erf":
            continue
        found = _gelu_at(n, producer, readers, consts, outputs)
        if found is None or any(id(c) in dropped for c in found[2]):
            continue
        x, y, chain = found
        kept = []
        for c in chain:
            copy = onnx.NodeProto()
            copy.CopyFrom(c)
            kept.append(copy)
            dropped.add(id(c))
        # the constants the chain reads: reversal may drop what nothing reads
        chains[y] = kept + [numpy_helper.from_array(numpy_helper.to_array(consts[t]), t)
                            for c in chain for t in c.input if t in consts]
        replaced[id(chain[-1])] = helper.make_node("Gelu", [x], [y], name=chain[-1].name,
                                                   domain=DOMAIN)
    if not chains:
        return {}
    nodes = [replaced.get(id(n), n) for n in g.node
             if id(n) not in dropped or id(n) in replaced]
    del g.node[:]
    g.node.extend(nodes)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return chains


def unfuse(model: onnx.ModelProto, chains: dict) -> None:
    """Put each fused node's chain back (in place), and the constants it reads."""
    if not chains:
        return
    g = model.graph
    have = {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
    nodes = []
    for n in g.node:
        if n.domain == DOMAIN and n.output[0] in chains:
            for item in chains[n.output[0]]:
                if isinstance(item, onnx.NodeProto):
                    nodes.append(item)
                elif item.name not in have:
                    g.initializer.append(item)
                    have.add(item.name)
        else:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    keep = [o for o in model.opset_import if o.domain != DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(keep)


def reduce_sum_square(ctx, value, axes):
    """ReduceSumSquare, keepdims: axes an attribute before opset 18, an input from it."""
    if ctx.opset >= 18:
        return ctx.b.op("ReduceSumSquare", [value, ctx.b.ints(axes)], keepdims=1)
    return ctx.b.op("ReduceSumSquare", [value], axes=list(axes), keepdims=1)


def gelu_reverse(ctx, node, grads):
    """The adjoint of ``x`` for ``y = x * Phi(x)`` (exact GELU); see the module
    docstring for the order of the ops."""
    x, y = node.input[0], node.output[0]
    dtype = ctx.dtype(x, y)
    b, c = ctx.b, lambda v: ctx.constant(v, dtype)
    dy = grads[0]
    s = b.op("Mul", [ctx.lift(x), c(1 / SQRT2)], stem="gelu_s")
    phi = b.op("Add", [b.op("Mul", [b.op("Erf", [s], stem="gelu_erf"), c(0.5)],
                            stem="gelu_half"), c(0.5)], stem="gelu_cdf")
    first = b.op("Mul", [phi, dy], stem="gelu_dy_cdf")
    slope = b.op("Mul", [b.op("Mul", [dy, s], stem="gelu_dy_s"), c(1 / math.sqrt(math.pi))],
                 stem="gelu_dy_density")
    square = b.op("Mul", [b.op("Mul", [s, s], stem="gelu_s2"), c(-1.0)], stem="gelu_neg_s2")
    gauss = b.op("Add", [b.op("Elu", [square], alpha=1.0, stem="gelu_expm1"), c(1.0)],
                 stem="gelu_exp")
    return [b.op("Add", [first, b.op("Mul", [slope, gauss], stem="gelu_tail")],
                 stem="gelu_dx")]


def hard_swish_reverse(ctx, node, grads):
    """HardSwish ``y = x * clip(x/6 + 1/2, 0, 1)``: ``dx = dy * d`` with ``d`` 0 below
    -3, ``x/3 + 1/2`` up to 3 and 1 above, written as ``t - ThresholdedRelu(t - 1, 1/2)``
    over ``t = ThresholdedRelu(x/3 + 1/2, -1/2)``: every op may overwrite its input on
    the CPU (Mul, Add, Sub, ThresholdedRelu), so besides ``x`` and ``dy`` one more
    activation-sized tensor is live (``t - 1`` beside ``t``), as in PyTorch's fused
    kernel. onnx_ad's rule builds the clipped line, its Max, its Min and a Where, each a
    new tensor (Max, Min and Where have no in-place evidence), with ``x`` and ``dy`` live.
    At exactly -3 and 3 the derivative is onnx_ad's left and PyTorch's right limit."""
    x = node.input[0]
    dtype = ctx.dtype(x, node.output[0])
    b, c = ctx.b, lambda v: ctx.constant(v, dtype)
    t = b.op("Add", [b.op("Mul", [ctx.lift(x), c(1 / 3)], stem="hswish_third"), c(0.5)],
             stem="hswish_line")
    over = b.op("ThresholdedRelu", [b.op("Sub", [t, c(1.0)], stem="hswish_over")], alpha=0.5,
                stem="hswish_above")
    low = b.op("ThresholdedRelu", [t], alpha=-0.5, stem="hswish_inside")
    slope = b.op("Sub", [low, over], stem="hswish_slope")
    return [b.op("Mul", [grads[0], slope], stem="hswish_dx")]


def layer_norm_reverse(ctx, node, grads, standard_rule):
    """LayerNormalization: ``dx = invstd * (g - mean(g) - xhat * mean(g * xhat))`` with
    ``g = dy * scale``, ``dscale = sum(dy * xhat)``, ``dbias = sum(dy)``, the statistics
    recomputed from ``x`` (the variance by ReduceSumSquare: no squared copy). The weight
    gradients are made first, then ``g`` may overwrite ``dy`` and each later product or
    difference its input, so besides ``x`` (overwritten by ``x - mean`` where this is
    its last reader) and ``dy`` one activation-sized tensor is live at a time (a
    product being reduced), as in PyTorch's kernel. onnx_ad's rule keeps ``dy``, ``dy *
    scale``, its centred copy, ``xhat`` and a product live together. Without static
    shapes: ``standard_rule`` (onnx_ad's)."""
    from onnx_ad._build import attribute
    from onnx_ad.rules import UnsupportedOperator

    if any(g is not None for g in grads[1:]):
        raise UnsupportedOperator(
            "the mean and inverse standard deviation LayerNormalization reports are not "
            "differentiated; seed only its first output")
    x, y = node.input[0], node.output[0]
    shape = ctx.shapes.static(x)
    if shape is None:
        return standard_rule(ctx, node, grads)
    rank, dtype, b = len(shape), ctx.dtype(y, x), ctx.b
    axis = attribute(node, "axis", -1) % rank
    axes = list(range(axis, rank))
    count = int(np.prod(shape[axis:]))
    epsilon = attribute(node, "epsilon", 1e-5)
    seeded = ctx.full(grads[0], y)
    centered = b.op("Sub", [x, ctx.reduce_mean(x, axes)], stem="ln_centered")
    variance = b.op("Mul", [reduce_sum_square(ctx, centered, axes),
                            ctx.constant(1.0 / count, dtype)], stem="ln_var")
    invstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [
        variance, ctx.constant(epsilon, dtype)])])], stem="ln_invstd")
    xhat = ctx.lift(b.op("Mul", [centered, invstd], stem="ln_xhat"))
    scale = node.input[1] if len(node.input) > 1 and node.input[1] else None
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    contributions = [None] * len(node.input)
    if bias and ctx.asked_for(bias):
        contributions[2] = ctx.unbroadcast(seeded, rank, bias)
    if scale and ctx.asked_for(scale):
        contributions[1] = ctx.unbroadcast(b.op("Mul", [seeded, xhat], stem="ln_dy_xhat"),
                                           rank, scale)
    if ctx.asked_for(x):
        g = b.op("Mul", [seeded, ctx.lift(scale)], stem="ln_g") if scale else seeded
        first = ctx.reduce_mean(g, axes)
        second = ctx.reduce_mean(b.op("Mul", [g, xhat], stem="ln_g_xhat"), axes)
        tilted = b.op("Sub", [g, b.op("Mul", [xhat, second], stem="ln_tilt")],
                      stem="ln_tilted")
        contributions[0] = b.op("Mul", [b.op("Sub", [tilted, first], stem="ln_shifted"),
                                        ctx.lift(invstd)], stem="ln_dx")
    return contributions


def softmax_reverse(ctx, node, grads):
    """Softmax: ``dx = y*dy - y*sum(y*dy)``. onnx_ad's ``y * (dy - sum(y*dy))`` keeps
    ``dy`` for the difference, so ``y``, ``dy`` and ``y*dy`` are live at once; here
    ``y*dy`` may overwrite ``dy`` (its last reader) and ``y*sum(...)`` overwrite ``y``:
    two tensors of the softmax's size, where PyTorch's kernel holds three (``y``, ``dy``
    and the result): for a ViT, an attention's probabilities at the end of backward."""
    from onnx_ad.rules import _softmax_axis

    axis, y = _softmax_axis(ctx, node), node.output[0]
    b = ctx.b
    lifted = ctx.lift(y)
    weighted = b.op("Mul", [ctx.full(grads[0], y), lifted], stem="softmax_y_dy")
    total = ctx.reduce_sum(weighted, [axis], keepdims=1)
    return [b.op("Sub", [weighted, b.op("Mul", [lifted, total], stem="softmax_y_sum")],
                 stem="softmax_dx")]
