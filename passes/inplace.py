"""In-place and view aliasing, driven by the op tables in ``graphmem.ops``.

Walks the order once. A view output joins its input's storage group. An
element-wise output overwrites an input's storage when every tensor of that
group is read for the last time at this step, the group holds no graph input,
and the sizes and dtypes match exactly.
"""
from __future__ import annotations

from graphmem.assignment import Assignment, Context, roots
from graphmem.ops import OVERWRITE, VIEW, overwrite_pairs, view_pairs


def run(ctx: Context, a: Assignment) -> tuple[Assignment, dict]:
    graph, iv = ctx.graph, ctx.intervals
    by_index = {n.index: n for n in graph.nodes}
    alias = dict(a.alias)
    root_of = roots(a, iv)
    parent: dict[str, str] = {t: root_of[t][0] for t in iv}  # union-find over groups
    group_last: dict[str, int] = {}
    for t, r in parent.items():
        group_last[r] = max(group_last.get(r, -1), iv[t].last)
    pinned = {parent[t] for t in graph.inputs if t in parent}
    views = overwrites = 0

    def find(t: str) -> str:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    def join(out: str, src: str, kind: str) -> None:
        old, new = find(out), find(src)
        alias[out] = (src, kind)
        parent[old] = new
        group_last[new] = max(group_last[new], group_last.pop(old, -1))
        if old in pinned:
            pinned.add(new)

    for pos, idx in enumerate(ctx.order):
        node = by_index[idx]
        if node.op_type not in VIEW and node.op_type not in OVERWRITE:
            continue  # neither table lists it: both pair lists would be empty
        for i, o in view_pairs(node):
            src, out = node.inputs[i], node.outputs[o]
            if _can_alias(ctx, alias, src, out):
                join(out, src, "view")
                views += 1
        for i, o in overwrite_pairs(node):
            src, out = node.inputs[i], node.outputs[o]
            if not _can_alias(ctx, alias, src, out):
                continue
            s, d = graph.tensors[src], graph.tensors[out]
            if s.dtype != d.dtype or s.shape != d.shape or ctx.sizes[src] == 0:
                continue
            r = find(src)
            if r in pinned or group_last[r] > pos:
                continue
            join(out, src, "inplace")
            overwrites += 1
    new = a.with_(alias=alias)
    return new, {"views": views, "inplace": overwrites}


def _can_alias(ctx: Context, alias, src: str, out: str) -> bool:
    """Both are arena tensors, the output is not aliased yet and sizes match."""
    if not src or not out or src not in ctx.intervals or out not in ctx.intervals:
        return False
    if out in alias or src == out:
        return False
    return ctx.sizes[src] == ctx.sizes[out]  # both are arena tensors: cached sizes
