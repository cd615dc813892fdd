"""The rules of a range plan, proved over its whole box, not sampled.

What depends on the binding is proved from the formulas: the segments cover the box;
in each segment every pair of blocks that share a step is ordered by the stacking (one
reaches the other through the ``below`` lists), so their evaluated byte ranges never
overlap; every size is non-negative over the segment's box; every tensor lies inside
its block, at an offset that is a multiple of the alignment at every binding; every
alias holds as formulas (a view has its input's bytes, an in-place output its input's
dtype and shape and more than zero bytes, a Concat slice starts where the bytes of the
Concat's earlier inputs end). What does not depend on the binding (the order, the live
ranges, which op may run in place) is the ordinary validator's, at one binding of each
segment (:func:`structural_problems`): it imports nothing of the planner.
"""
from __future__ import annotations

from itertools import product
from typing import Callable

from graphmem.core.ir import Graph
from graphmem.plan.validate import problems as plan_problems
from graphmem.ranges.formulas import Formula, nonnegative
from graphmem.ranges.rangeplan import RangePlan, Segment
from graphmem.ranges.stacking import unordered_pairs

LIMIT = 20  # problems reported at most


def range_problems(rp: RangePlan, graph: Graph | None = None) -> list[str]:
    """Every broken rule of ``rp`` over its box (``graph``: the model at any binding, for
    the Concat inputs a slice's start is computed from)."""
    out = _cover_problems(rp)
    for i, seg in enumerate(rp.segments):
        out += [f"segment {i} ({_box(seg.dims)}): {p}" for p in _segment_problems(rp, seg, graph)]
        if len(out) >= LIMIT:
            break
    return out[:LIMIT]


def _box(dims) -> str:
    return ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in dims.items())


def _cover_problems(rp: RangePlan) -> list[str]:
    """The segments lie in the box and cover every integer binding of it: each cell
    between consecutive segment ends, dim by dim, lies in some segment."""
    out = []
    for s in rp.segments:
        for n, (lo, hi) in s.dims.items():
            blo, bhi = rp.dims[n]
            if not blo <= lo <= hi <= bhi:
                out.append(f"segment {_box(s.dims)} is not inside the plan's {_box(rp.dims)}")
    cuts = {}
    for n, (lo, hi) in rp.dims.items():
        ends = {lo, hi + 1}
        for s in rp.segments:
            ends |= {min(max(s.dims[n][0], lo), hi + 1), min(max(s.dims[n][1] + 1, lo), hi + 1)}
        cuts[n] = sorted(ends)
    names = list(rp.dims)
    for cell in product(*[c[:-1] for c in (cuts[n] for n in names)]):
        point = dict(zip(names, cell))
        if not any(all(s.dims[n][0] <= point[n] <= s.dims[n][1] for n in names)
                   for s in rp.segments):
            out.append(f"no segment holds {point}")
            break
    return out


def _segment_problems(rp: RangePlan, seg: Segment, graph: Graph | None) -> list[str]:
    box = dict(seg.dims)
    names = rp.names
    zero = Formula.const(names, 0)
    out: list[str] = []
    first = [b.live[0] for b in seg.blocks]
    last = [b.live[1] for b in seg.blocks]
    try:
        pairs = unordered_pairs(seg.stack, seg.below, first, last)
    except ValueError as exc:
        return [str(exc)]
    out += [f"blocks {seg.blocks[a].root!r} and {seg.blocks[b].root!r} share a step but "
            f"neither is stacked on the other" for a, b in pairs]
    for b in seg.blocks:
        if not nonnegative(b.bytes, box):
            out.append(f"block {b.root!r}: bytes {b.bytes.text()} not >= 0 over the segment")
        root = seg.placed.get(b.root)
        if root is None or seg.blocks[root.block] is not b or root.rel != zero:
            out.append(f"block {b.root!r}: its root is not at its start")
        elif b.bytes != rp.tensors[b.root].bytes:
            out.append(f"block {b.root!r}: bytes {b.bytes.text()}, its root's "
                       f"{rp.tensors[b.root].bytes.text()}")
    producer = {t: n for n in graph.nodes for t in n.outputs if t} if graph else {}
    for name, p in seg.placed.items():
        t = rp.tensors[name]
        block = seg.blocks[p.block]
        where = f"tensor {name!r}"
        if not (block.live[0] <= p.live[0] and p.live[1] <= block.live[1]):
            out.append(f"{where}: live {list(p.live)} outside its block's {list(block.live)}")
        for axis in t.shape:
            if not nonnegative(axis, box):
                out.append(f"{where}: dim {axis.text()} not >= 0 over the segment")
        if not p.rel.divisible_by(rp.alignment):
            out.append(f"{where}: offset in block {p.rel.text()} not a multiple of "
                       f"{rp.alignment} at every binding")
        if not (nonnegative(p.rel, box)
                and nonnegative(block.bytes - p.rel - t.bytes, box)):
            out.append(f"{where}: not inside its block {block.root!r} at every binding")
        out += [f"{where}: {e}" for e in _link_problems(rp, seg, name, producer, box)]
        if len(out) >= LIMIT:
            break
    return out


def _link_problems(rp: RangePlan, seg: Segment, name: str, producer, box) -> list[str]:
    p, t = seg.placed[name], rp.tensors[name]
    out = []
    if p.alias_of is not None:
        s = seg.placed.get(p.alias_of)
        if s is None:
            return [f"alias_of {p.alias_of!r}: no such tensor"]
        src = rp.tensors[p.alias_of]
        if s.block != p.block or s.rel != p.rel:
            out.append(f"not at the offset of {p.alias_of!r} at every binding")
        if p.alias == "view":
            if t.bytes != src.bytes:
                out.append(f"a view of {p.alias_of!r} with bytes {t.bytes.text()}, not "
                           f"{src.bytes.text()}")
        elif p.alias == "inplace":
            if t.dtype != src.dtype or t.shape != src.shape:
                out.append(f"written in place over {p.alias_of!r} of another dtype or shape")
            if not nonnegative(t.bytes - Formula.const(rp.names, 1), box):
                out.append("written in place with no bytes at some binding")
        else:
            out.append(f"alias {p.alias!r} is neither view nor inplace")
    if p.slice_of is not None:
        c = seg.placed.get(p.slice_of)
        if c is None:
            return out + [f"slice_of {p.slice_of!r}: no such tensor"]
        if c.block != p.block:
            out.append(f"a slice of {p.slice_of!r} in another block")
        node = producer.get(p.slice_of)
        if producer and (node is None or node.op_type != "Concat"):
            out.append(f"slice_of {p.slice_of!r}, not the output of a Concat")
        elif node is not None:
            prefix = Formula.const(rp.names, 0)
            for i in node.inputs:
                if i == name:
                    break
                if i:
                    prefix = prefix + rp.tensors[i].bytes
            if p.rel != c.rel + prefix:
                out.append(f"not where the bytes of the Concat's earlier inputs end "
                           f"({(c.rel + prefix).text()}) at every binding")
    return out


def structural_problems(rp: RangePlan, graph_at: Callable[[dict], Graph],
                        evaluate: Callable[[RangePlan, dict, int], object]) -> list[str]:
    """The ordinary validator's problems with each segment's plan at the segment's lower
    corner (what does not depend on the binding: the order, live ranges, which op runs
    in place), ``graph_at`` loading the model there."""
    out = []
    for i, seg in enumerate(rp.segments):
        low = {n: lo for n, (lo, hi) in seg.dims.items()}
        out += [f"segment {_box(seg.dims)} at {low}: {p}"
                for p in plan_problems(evaluate(rp, low, i), graph_at(low))]
    return out[:LIMIT]
