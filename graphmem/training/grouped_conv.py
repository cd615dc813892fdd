"""Our reverse rule for a grouped Conv's weight (onnx_ad 0.3.0 rejects it).

For group G, input channels C = G*Cg and output channels M = G*Mg, the weight gradient
of group g is the correlation of that group's input channels with that group's output
adjoints, summed over the batch. With the batch moved into the channel axis and the
groups kept as groups, it is one grouped convolution:

    input   x[N, G*Cg, H...]      -> [Cg, G*N, H...]          (batch = Cg)
    filters dy[N, G*Mg, Ho..., S] -> [G*S*Mg, N, Ho...]       (group g reads its N)
    Conv(input, filters, group=G, strides=dilations, dilations=strides)
            -> [Cg, G*S*Mg, K'...] -> crop to K -> [G*Mg, Cg, K..., S]

which is onnx_ad's own group-1 construction with the group axis carried along. Used
only inside :func:`patched`, so onnx_ad's module is left as it was afterwards.
"""
from __future__ import annotations

from contextlib import contextmanager


def grouped_weight_adjoint(ctx, node, attrs, spatial, seeded):
    """The rule for ``group > 1`` (``seeded``: the output adjoint with its seed axis)."""
    from onnx_ad.rules import UnsupportedOperator, _pad

    x, w = node.input[0], node.input[1]
    group = attrs["group"]
    kernel = ctx.shapes.static(w)
    xs = ctx.shapes.static(x)
    ys = ctx.shapes.static(node.output[0])
    if kernel is None or xs is None or ys is None or None in xs or None in ys:
        raise UnsupportedOperator("a grouped Conv needs static shapes in reverse mode")
    n, c = xs[0], xs[1]
    m, cg = kernel[0], kernel[1]
    mg = m // group
    rank = 2 + spatial
    pads = attrs["pads"]
    padded = x if not any(pads) else _pad(
        ctx, x, [0, 0] + list(pads[:spatial]), [0, 0] + list(pads[spatial:]))
    padded_sp = [xs[2 + i] + pads[i] + pads[spatial + i] for i in range(spatial)]
    b = ctx.b
    xg = b.op("Reshape", [padded, b.ints([n, group, cg] + padded_sp)], stem="g_x")
    xg = b.op("Transpose", [xg], perm=[2, 1, 0] + list(range(3, rank + 1)), stem="g_xt")
    xg = b.op("Reshape", [xg, b.ints([cg, group * n] + padded_sp)], stem="g_input")
    dy = b.op("Reshape", [seeded, b.ints([n, group, mg] + list(ys[2:]) + [-1])], stem="g_dy")
    dy = b.op("Transpose", [dy], perm=[1, rank + 1, 2, 0] + list(range(3, rank + 1)),
              stem="g_dyt")
    filters = b.op("Reshape", [dy, b.ints([-1, n] + list(ys[2:]))], stem="g_filters")
    product = b.op("Conv", [xg, filters], strides=attrs["dilations"],
                   dilations=attrs["strides"], pads=[0] * (2 * spatial), group=group,
                   stem="g_conv_w")
    product = b.op("Slice", [product, b.ints([0] * spatial), b.ints(list(kernel[2:])),
                             b.ints(list(range(2, rank)))], stem="g_crop")
    split = b.op("Reshape", [product, b.ints([cg, group, -1, mg] + list(kernel[2:]))],
                 stem="g_split")
    moved = b.op("Transpose", [split],
                 perm=[1, 3, 0] + list(range(4, 4 + spatial)) + [2], stem="g_moved")
    del c
    return b.op("Reshape", [moved, b.ints([m, cg] + list(kernel[2:]) + [-1])],
                stem="g_conv_weight")


@contextmanager
def patched():
    """onnx_ad with grouped Conv weight gradients, for the duration of the block."""
    from onnx_ad import rules

    original = rules._conv_weight_adjoint

    def dispatch(ctx, node, attrs, spatial, seeded):
        if attrs["group"] != 1 and ctx.asked_for(node.input[1]):
            return grouped_weight_adjoint(ctx, node, attrs, spatial, seeded)
        return original(ctx, node, attrs, spatial, seeded)

    rules._conv_weight_adjoint = dispatch
    try:
        yield
    finally:
        rules._conv_weight_adjoint = original
