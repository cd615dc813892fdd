"""The end padding of the exact weight-gradient convolutions (:mod:`.rules`' group-1
Conv and ConvTranspose, :mod:`.grouped_conv`'s grouped Conv): how much padding makes the
last window end where the forward's did, and the crop where even none is too much.
"""
from __future__ import annotations


def tail_pads(begin, in_size, out_size, stride, dilation, kernel):
    """End padding for a convolution over ``in_size`` (padded ``begin`` in front) whose
    ``out_size`` windows, ``stride`` apart, must yield exactly ``kernel`` outputs at
    ``dilation``: the extent the windows reach minus what is there. Negative: crop."""
    reach = stride * (out_size - 1) + dilation * (kernel - 1) + 1
    return reach - in_size - begin


def pad_or_crop(ctx, value, axis_base, begins, ends, sizes, stem):
    """Conv pads for ``begins``/``ends``; a negative end becomes a Slice of ``value``
    (spatial axis ``axis_base + i``). Returns the value and the pads."""
    crop = [max(0, -e) for e in ends]
    if any(crop):
        spatial = len(sizes)
        value = ctx.b.op("Slice", [value, ctx.b.ints([0] * spatial),
                                   ctx.b.ints([s - c for s, c in zip(sizes, crop)]),
                                   ctx.b.ints([axis_base + i for i in range(spatial)])],
                         stem=stem)
    return value, list(begins) + [max(0, e) for e in ends]
