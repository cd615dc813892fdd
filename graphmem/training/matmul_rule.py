"""Our reverse rule for ``MatMul(a, W)`` with a matrix ``W`` (a Linear layer).

onnx_ad 0.3.0 differentiates MatMul batch by batch: for ``a[*batch, M, K] @ W[K, N]``
it computes ``a^T @ dz`` for every batch entry (a ``[*batch, K, N]`` temporary, summed
over the batch afterwards: 504 MiB for one of convnext_tiny's 768x3072 layers at batch
8, against the 9 MiB gradient) and ``dz @ W^T`` with ``W^T`` a transposed copy of the
weight, which the planner folds and holds all step like a weight (99 MiB for
convnext_tiny). PyTorch's Linear backward flattens the batch axes instead:

    dW = a2^T @ dz2      a2 = a as [rows, K], dz2 = dz as [rows, N]    one Gemm, transA
    da = dz2 @ W^T                                                      one Gemm, transB

so the weight gradient is one product of the forward's MACs with no temporary beyond
its output, and ``W`` is read where it is. With the seed axis ``S`` trailing (onnx_ad's
layout, ``dz[*batch, M, N, S]``): ``dz`` as ``[rows, N*S]`` gives ``dW`` as
``[K, N*S]``; for ``da`` the seed axis is moved before ``N`` first (a view when ``S`` is
1, which is what ``train`` binds). Other MatMuls (a weight on the left, two
activations, unknown shapes) go to onnx_ad's rule. Used only inside
:func:`graphmem.training.rules.patched`.
"""
from __future__ import annotations

import math


def matmul_reverse(ctx, node, grads, fallback):
    """``[da, dW]`` of ``MatMul(a, W)`` for a rank-2 ``W`` and a statically shaped ``a``
    of rank 2 or more; anything else goes to ``fallback`` (onnx_ad's rule)."""
    a, w, z = node.input[0], node.input[1], node.output[0]
    sa, sw, sz = ctx.shapes.static(a), ctx.shapes.static(w), ctx.shapes.static(z)
    if (sw is None or len(sw) != 2 or sa is None or len(sa) < 2 or sz is None
            or None in sa or None in sw or None in sz or len(sz) != len(sa)):
        return fallback(ctx, node, grads)
    k, n = sw
    rows = math.prod(sa[:-1])
    rank = len(sz)
    seeded = ctx.full(grads[0], z)  # [*batch, M, N, S]
    b = ctx.b
    out = [None, None]
    if ctx.asked_for(w):
        a2 = b.op("Reshape", [a, b.ints([rows, k])], stem="mm_a")
        dz = b.op("Reshape", [seeded, b.ints([rows, -1])], stem="mm_dz")
        dw = b.op("Gemm", [a2, dz], transA=1, stem="mm_dw")  # [K, N*S]
        out[1] = b.op("Reshape", [dw, b.ints([k, n, -1])], stem="mm_weight")
    if ctx.asked_for(a):
        swap = list(range(rank - 1)) + [rank, rank - 1]
        moved = b.op("Transpose", [seeded], perm=swap, stem="mm_seed_inner")  # [.., S, N]
        flat = b.op("Reshape", [moved, b.ints([-1, n])], stem="mm_dz_rows")
        da = b.op("Gemm", [flat, w], transB=1, stem="mm_da")  # [rows*S, K]
        da = b.op("Reshape", [da, b.ints(list(sa[:-1]) + [-1, k])], stem="mm_da_seed")
        out[0] = b.op("Transpose", [da], perm=swap, stem="mm_input")  # [*batch, M, K, S]
    return out
