"""Our reverse rule for ``MatMul(a, W)`` with a matrix ``W`` (a Linear layer).

onnx_ad 0.3.0 differentiates MatMul batch by batch: for ``a[*batch, M, K] @ W[K, N]``
it computes ``a^T @ dz`` for every batch entry (a ``[*batch, K, N]`` temporary, summed
over the batch afterwards, the gradient's size times the batch entries) and ``dz @
W^T`` with ``W^T`` a transposed copy of the weight, which the planner folds and holds
all step like a weight. PyTorch's Linear backward flattens the batch axes instead:

    dW = a2^T @ dz2      a2 = a as [rows, K], dz2 = dz as [rows, N]    one Gemm, transA
    da = dz2 @ W^T                                                      one Gemm, transB

so the weight gradient is one product of the forward's MACs with no temporary beyond
its output, and ``W`` is read where it is. With the seed axis ``S`` trailing (onnx_ad's
layout, ``dz[*batch, M, N, S]``): ``dz`` as ``[rows, N*S]`` gives ``dW`` as
``[K, N*S]``; for ``da`` the seed axis is moved before ``N`` first (a view when ``S`` is
1, which is what ``train`` binds). Two activations of one batch shape whose transposed
copy would be larger than the product and the other operand are
:func:`activation_matmul_reverse`'s; other MatMuls (a weight on the left, unknown shapes)
go to onnx_ad's rule. Used only inside
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
        flipped = activation_matmul_reverse(ctx, node, grads)
        return fallback(ctx, node, grads) if flipped is None else flipped
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


def activation_matmul_reverse(ctx, node, grads):
    """``[da, db]`` of ``z = a @ b`` for two activations of one static batch shape (an
    attention's ``P @ V``), or None where onnx_ad's rule is as good.

    onnx_ad computes ``db = a^T @ dz`` and ``da = dz @ b^T`` with a transposed copy of
    ``a`` (or ``b``): ONNX's MatMul takes no transposed operand (PyTorch's reads a
    strided view). Where that operand is larger than ``z`` and the other operand
    together, the product is taken the other way round and its result transposed:
    ``db = (dz^T @ a)^T``, ``da = (b @ dz^T)^T``, copying ``dz`` and the result instead.
    ViT's ``P @ V`` (``P`` 197x197 a head, ``V`` and ``z`` 197x64): ``P^T`` was live
    at the end of backward, where the peak is."""
    a, b_, z = node.input[0], node.input[1], node.output[0]
    sa, sb, sz = ctx.shapes.static(a), ctx.shapes.static(b_), ctx.shapes.static(z)
    if (sa is None or sb is None or sz is None or len(sa) < 3 or
            not len(sa) == len(sb) == len(sz) or sa[:-2] != sb[:-2]):
        return None
    size_a, size_b, size_z = math.prod(sa), math.prod(sb), math.prod(sz)
    flip_b = ctx.asked_for(b_) and size_a > size_z + size_b
    flip_a = ctx.asked_for(a) and size_b > size_z + size_a
    if not (flip_a or flip_b):
        return None
    r, b = len(sz), ctx.b
    batch = list(range(r - 2))
    seeded = ctx.full(grads[0], z)  # [*batch, M, N, S]
    # [S, *batch, ...] results back to [*batch, ..., S]: the last two axes swapped or not
    back_swapped = [i + 1 for i in batch] + [r, r - 1, 0]
    back = list(range(1, r + 1)) + [0]
    dz_t = front = None

    def transposed_dz():
        nonlocal dz_t
        if dz_t is None:  # [S, *batch, N, M]
            dz_t = b.op("Transpose", [seeded], perm=[r] + batch + [r - 1, r - 2],
                        stem="mm_dz_t")
        return dz_t

    def dz_front():
        nonlocal front
        if front is None:  # [S, *batch, M, N]: a view when S is 1
            front = b.op("Transpose", [seeded], perm=[r] + list(range(r)), stem="mm_dz_front")
        return front

    swap = batch + [r - 1, r - 2]
    out = [None, None]
    if ctx.asked_for(a):
        if flip_a:  # (b @ dz^T)^T
            out[0] = b.op("Transpose", [b.op("MatMul", [b_, transposed_dz()], stem="mm_b_dzt")],
                          perm=back_swapped, stem="mm_da_flipped")
        else:
            out[0] = b.op("Transpose", [b.op("MatMul", [dz_front(), b.op(
                "Transpose", [b_], perm=swap, stem="mm_bt")], stem="mm_dz_bt")], perm=back,
                stem="mm_da_back")
    if ctx.asked_for(b_):
        if flip_b:  # (dz^T @ a)^T
            out[1] = b.op("Transpose", [b.op("MatMul", [transposed_dz(), a], stem="mm_dzt_a")],
                          perm=back_swapped, stem="mm_db_flipped")
        else:
            out[1] = b.op("Transpose", [b.op("MatMul", [b.op(
                "Transpose", [a], perm=swap, stem="mm_at"), dz_front()], stem="mm_at_dz")],
                perm=back, stem="mm_db_back")
    return out
