"""Memory of a range plan as formulas of the free dims, segment by segment.

- weights: the plan's ``weights_bytes``;
- graph inputs and outputs (a decode step's KV cache among them): the sum of their
  bytes formulas;
- the aliased peak (what the plan's stats call ``aliased_peak_bytes``): at each step of
  the segment's order the bytes in use are a polynomial of the dims (the segment's
  aliases and live ranges do not change inside it), fitted exactly from the evaluated
  plans at a grid of the segment's bindings (:func:`~graphmem.plan.stats.live_timelines`,
  the statistics' own code) and checked at more; the peak is the largest of them, written
  as ``max(...)`` of those no other one proves at least as large over the segment;
- the arena: the tops of the stacking, a max-plus pass over the formulas (each block's
  top the largest top below it plus its bytes), the same pruning; exact where every
  block's bytes are a multiple of the alignment at every binding (else the arena is
  said to be evaluated per binding: ``None``).
"""
from __future__ import annotations

import random

from graphmem.plan.stats import live_timelines
from graphmem.ranges.evaluate import evaluate
from graphmem.ranges.formulas import Box, Formula, Grid, nonnegative
from graphmem.ranges.rangeplan import RangePlan

# More candidate terms than this in one max: the formula is not written (evaluate instead)
MAX_TERMS = 64


def pruned(fs: list[Formula], box: Box) -> list[Formula]:
    """``fs`` less every formula another one is proved >= over ``box`` (of equal ones
    the first kept); the max of the rest is the max of all at every binding of ``box``.
    A proof is tried only where the values at the box's corners allow it."""
    from itertools import product
    corners = [dict(zip(box, c)) for c in product(*[sorted({lo, hi}) for lo, hi in box.values()])]
    unique = list(dict.fromkeys(fs))
    vals = {f: [f.exact(c) for c in corners] for f in unique}

    def dominates(g: Formula, f: Formula) -> bool:
        return all(a >= b for a, b in zip(vals[g], vals[f])) and nonnegative(g - f, box)
    order = sorted(unique, key=lambda f: [-v for v in vals[f]])
    kept: list[Formula] = []
    for f in order:
        if not any(dominates(g, f) for g in kept):
            kept.append(f)
    # a later one may equal an earlier one's corners and dominate it
    final = [f for i, f in enumerate(kept)
             if not any(j > i and dominates(g, f) and not dominates(f, g)
                        for j, g in enumerate(kept))]
    return final


def max_text(fs: list[Formula] | None) -> str | None:
    if fs is None:
        return None
    if len(fs) == 1:
        return fs[0].text()
    return "max(" + ", ".join(f.text() for f in fs) + ")"


def max_at(fs: list[Formula], binding: dict) -> int:
    return max((f.at(binding) for f in fs), default=0)


def aliased_peak(rp: RangePlan, i: int, checks: int = 3, seed: int = 0) -> list[Formula]:
    """The aliased peak of segment ``i`` as the terms of a max, fitted and checked."""
    seg = rp.segments[i]
    box = dict(seg.dims)
    grid = Grid(box)
    lines = [live_timelines(evaluate(rp, p, i))[0] for p in grid.points]
    steps = [grid.fit([line[s] for line in lines]) for s in range(len(lines[0]))]
    rng = random.Random(seed)
    for _ in range(checks):
        b = {n: rng.randint(lo, hi) for n, (lo, hi) in box.items()}
        line = live_timelines(evaluate(rp, b, i))[0]
        bad = [s for s, f in enumerate(steps) if f.at(b) != line[s]]
        if bad:
            raise ValueError(f"the bytes in use at step {bad[0] - 1} are not a polynomial "
                             f"of {', '.join(box)}")
    return pruned(steps, box)


def arena(rp: RangePlan, i: int) -> list[Formula] | None:
    """The arena of segment ``i`` as the terms of a max, or None where a block's bytes
    are not a multiple of the alignment at every binding (its padding is no polynomial)."""
    seg = rp.segments[i]
    box = dict(seg.dims)
    if not all(b.bytes.divisible_by(rp.alignment) for b in seg.blocks):
        return None
    zero = Formula.const(rp.names, 0)
    tops: list[list[Formula]] = []
    for b, below in zip(seg.stack, seg.below):
        under = [t for j in below for t in tops[j]] or [zero]
        top = pruned([t + seg.blocks[b].bytes for t in pruned(under, box)], box)
        if len(top) > MAX_TERMS:
            return None
        tops.append(top)
    return pruned([t for top in tops for t in top], box) or [zero]


def io_bytes(rp: RangePlan, kind: str) -> Formula:
    total = Formula.const(rp.names, 0)
    for t in rp.tensors.values():
        if t.kind == kind:
            total = total + t.bytes
    return total


def memory(rp: RangePlan) -> dict:
    """The report's formulas: weights, inputs, outputs, and per segment the arena and
    the aliased peak (text a user evaluates, ``max(...)`` of polynomials)."""
    segs = []
    for i, seg in enumerate(rp.segments):
        segs.append({"dims": {n: list(r) for n, r in seg.dims.items()},
                     "arena_bytes": max_text(arena(rp, i)),
                     "aliased_peak_bytes": max_text(aliased_peak(rp, i))})
    return {"dims": {n: list(r) for n, r in rp.dims.items()},
            "weights_bytes": rp.weights_bytes.text(),
            "input_bytes": io_bytes(rp, "input").text(),
            "output_bytes": io_bytes(rp, "output").text(),
            "segments": segs}
