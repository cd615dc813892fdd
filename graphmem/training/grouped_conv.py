"""Our reverse rule for a grouped Conv's weight (onnx_ad 0.3.0 rejects it).

For group G, input channels C = G*Cg and output channels M = G*Mg, the weight gradient
of group g is the correlation of that group's input channels with that group's output
adjoints, summed over the batch. With the batch moved into the channel axis and the
groups kept as groups, it is one grouped convolution:

    input   x[N, G*Cg, H...]      -> [Cg, G*N, H...]          (batch = Cg)
    filters dy[N, G*Mg, Ho..., S] -> [G*S*Mg, N, Ho...]       (group g reads its N)
    Conv(input, filters, group=G, strides=dilations, dilations=strides, pads=exact)
            -> [Cg, G*S*Mg, K...] -> [G*Mg, Cg, K..., S]

which is the group-1 construction of :mod:`.rules` with the group axis carried along:
the convolution pads by itself, with exactly the end padding the last window used (or
the input cropped), so it makes the kernel and no extra outputs to crop. Used only
inside :func:`graphmem.training.rules.patched`, so onnx_ad's module is left as it was
afterwards.
"""
from __future__ import annotations


def grouped_weight_adjoint(ctx, node, attrs, spatial, seeded):
    """The rule for ``group > 1`` (``seeded``: the output adjoint with its seed axis)."""
    from onnx_ad.rules import UnsupportedOperator

    from graphmem.training.conv_pads import pad_or_crop, tail_pads

    x, w = node.input[0], node.input[1]
    group = attrs["group"]
    kernel = ctx.shapes.static(w)
    xs = ctx.shapes.static(x)
    ys = ctx.shapes.static(node.output[0])
    if kernel is None or xs is None or ys is None or None in xs or None in ys:
        raise UnsupportedOperator("a grouped Conv needs static shapes in reverse mode")
    n = xs[0]
    m, cg = kernel[0], kernel[1]
    mg = m // group
    rank = 2 + spatial
    begins = list(attrs["pads"][:spatial])
    ends = [tail_pads(begins[i], xs[2 + i], ys[2 + i], attrs["strides"][i],
                      attrs["dilations"][i], kernel[2 + i]) for i in range(spatial)]
    source, conv_pads = pad_or_crop(ctx, x, 2, begins, ends, xs[2:], "g_crop_x")
    sizes = [xs[2 + i] - max(0, -ends[i]) for i in range(spatial)]
    b = ctx.b
    if cg == 1:
        return _depthwise(b, source, seeded, n, group, mg, m, ys, kernel, attrs, conv_pads,
                          sizes)
    xg = b.op("Reshape", [source, b.ints([n, group, cg] + sizes)], stem="g_x")
    xg = b.op("Transpose", [xg], perm=[2, 1, 0] + list(range(3, rank + 1)), stem="g_xt")
    xg = b.op("Reshape", [xg, b.ints([cg, group * n] + sizes)], stem="g_input")
    dy = b.op("Reshape", [seeded, b.ints([n, group, mg] + list(ys[2:]) + [-1])], stem="g_dy")
    dy = b.op("Transpose", [dy], perm=[1, rank + 1, 2, 0] + list(range(3, rank + 1)),
              stem="g_dyt")
    filters = b.op("Reshape", [dy, b.ints([-1, n] + list(ys[2:]))], stem="g_filters")
    product = b.op("Conv", [xg, filters], strides=attrs["dilations"],
                   dilations=attrs["strides"], pads=conv_pads, group=group,
                   stem="g_conv_w")
    split = b.op("Reshape", [product, b.ints([cg, group, -1, mg] + list(kernel[2:]))],
                 stem="g_split")
    moved = b.op("Transpose", [split],
                 perm=[1, 3, 0] + list(range(4, 4 + spatial)) + [2], stem="g_moved")
    return b.op("Reshape", [moved, b.ints([m, cg] + list(kernel[2:]) + [-1])],
                stem="g_conv_weight")


def _depthwise(b, source, seeded, n, group, mg, m, ys, kernel, attrs, conv_pads, sizes):
    """One input channel a group (depthwise): the input is read where it is, as a view.

    ``x[N, G, H...]`` is ``[1, N*G, H...]`` without a copy; each (sample, group) is a
    group of the convolution, whose filters are that sample's output adjoints:

        filters dy[N, G*Mg, Ho..., S] -> [N*G*S*Mg, 1, Ho...]   (a view when S is 1)
        Conv(x, filters, group=N*G, strides=dilations, dilations=strides, pads=exact)
            -> [1, N*G*S*Mg, K...] -> sum over N -> [G*Mg, 1, K..., S]

    The same MACs as the forward convolution; the transposed copy of the input that the
    general rule makes (the largest tensor at mobilenet_v2's training peak) is gone.
    """
    spatial = len(kernel) - 2
    lead = list(range(spatial))
    dy = b.op("Reshape", [seeded, b.ints([n, group, mg] + list(ys[2:]) + [-1])], stem="d_dy")
    dy = b.op("Transpose", [dy], perm=[0, 1, 3 + spatial, 2] + [3 + i for i in lead],
              stem="d_dyt")
    filters = b.op("Reshape", [dy, b.ints([-1, 1] + list(ys[2:]))], stem="d_filters")
    xv = b.op("Reshape", [source, b.ints([1, n * group] + sizes)], stem="d_input")
    product = b.op("Conv", [xv, filters], strides=attrs["dilations"],
                   dilations=attrs["strides"], pads=conv_pads, group=n * group,
                   stem="d_conv_w")
    split = b.op("Reshape", [product, b.ints([n, group, -1, mg] + list(kernel[2:]))],
                 stem="d_split")
    summed = b.op("ReduceSum", [split, b.ints([0])], keepdims=0, stem="d_sum")
    moved = b.op("Transpose", [summed], perm=[0, 2] + [3 + i for i in lead] + [1],
                 stem="d_moved")
    return b.op("Reshape", [moved, b.ints([m, 1] + list(kernel[2:]) + [-1])],
                stem="d_conv_weight")
