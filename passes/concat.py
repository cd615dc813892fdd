"""Zero-copy concatenation: Concat inputs are written straight into their slices.

For a Concat whose axis is in range for its output's rank and whose slices are
contiguous in memory (``ops.concat_axis``; the slice rule of docs/plan-format.md, "The
in-place rule", which the validator implements apart), each input that qualifies gets ``slice_of`` = the Concat output and its byte offset inside it, so
the Concat copies nothing. An input qualifies when it is an arena activation (not a
graph input or output, not a weight or folded constant), it is not empty, it appears
once among the Concat's inputs, it is not already a slice of another Concat, and its
offset inside the output is a multiple of the alignment (a plan's offsets must be).
Chains nest: a Concat output may itself be a slice.

This pass runs before ``inplace``, so no aliases exist yet; ``inplace`` then keeps
the in-place rule over the whole group a slice creates (see ``passes/inplace.py``)
and never joins a slice to a graph input or to a second slice.
"""
from __future__ import annotations

from graphmem.core.ops import concat_axis, is_concat
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions


def run(ctx: Context, a: Assignment, options: PassOptions) -> tuple[Assignment, dict]:
    graph = ctx.graph
    by_index = {n.index: n for n in graph.nodes}
    pinned = set(graph.inputs) | set(graph.outputs)
    slice_of = dict(a.slice_of)
    slice_offset = dict(a.slice_offset)
    concats = sliced = 0
    saved = 0
    # issue 53: a Concat of sizes the data decides has its slices' offsets known only at
    # run time (graphmem/frontend/data_bounds.py); it copies
    bounded = graph.data_bounds.governed if graph.data_bounds else {}
    for idx in ctx.order:
        node = by_index[idx]
        if not is_concat(node) or not node.outputs or node.outputs[0] not in ctx.intervals:
            continue
        if node.outputs[0] in bounded:
            continue
        out = node.outputs[0]
        shape = graph.tensors[out].shape
        axis, contiguous = concat_axis(shape, node.attrs.get("axis", 0))
        if not (0 <= axis < len(shape) and contiguous):
            continue
        before = 0
        hit = False
        for t in node.inputs:
            nbytes = graph.tensors[t].bytes if t in graph.tensors else 0
            if (t in ctx.intervals and t not in pinned and nbytes > 0
                    and node.inputs.count(t) == 1 and t not in slice_of
                    and t not in a.alias and before % ctx.alignment == 0):
                slice_of[t], slice_offset[t] = out, before
                sliced += 1
                saved += nbytes
                hit = True
            before += nbytes
        concats += hit
    new = a.with_(slice_of=slice_of, slice_offset=slice_offset)
    return new, {"concats": concats, "slices": sliced, "copy_bytes_saved": saved}


PASS = Pass("concat", "alias", reads=(), provides=("slices",), run=run,
            summary="zero-copy Concat: each input written straight into its slice",
            trial=True)
