"""Memory of a range plan as formulas of the free dims, segment by segment.

- weights: the plan's ``weights_bytes``;
- graph inputs and outputs (a decode step's KV cache among them): the sum of their
  bytes formulas;
- the aliased peak (what the plan's stats call ``aliased_peak_bytes``): at each step of
  the segment's order the bytes in use are a formula of the dims (the segment's aliases
  and live ranges do not change inside it): the bytes of the blocks live there, where
  no block holds a Concat slice, else fitted exactly from the evaluated plans' own live
  timelines (:func:`~graphmem.plan.stats.live_timelines`, the statistics' own code);
  either way checked against the evaluated plans at more bindings. The peak is the
  largest of them, written as ``max(...)`` of those no other one is proved at least as
  large over the segment;
- the arena: the tops of the stacking, a max-plus pass over the formulas (each block's
  top the largest top below it plus its bytes rounded up to the alignment: a
  ``64*ceil(q/64)`` term where the bytes are not a multiple of it at every binding),
  chains another is proved at least as large as pruned; ``None`` past
  :data:`MAX_TERMS` chains.
"""
from __future__ import annotations

import math
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
    """The aliased peak of segment ``i`` as the terms of a max: each step's bytes in use,
    from the blocks live there (a segment without Concat slices: a block is its storage
    group, live over its members' whole life), else fitted from the evaluated plans'
    own live timelines; either way checked against the evaluated plans (ValueError
    where a step's bytes are no formula)."""
    seg = rp.segments[i]
    box = dict(seg.dims)
    grid = Grid(box)
    steps = _steps_from_blocks(rp, seg)
    if steps is None or not _matches(rp, i, steps, grid.points):
        lines = [live_timelines(evaluate(rp, p, i))[0] for p in grid.points]
        steps = [grid.fit([line[s] for line in lines]) for s in range(len(lines[0]))]
    rng = random.Random(seed)
    extra = [{n: rng.randint(lo, hi) for n, (lo, hi) in box.items()} for _ in range(checks)]
    if not _matches(rp, i, steps, extra):
        raise ValueError(f"the bytes in use at a step are not a formula of {', '.join(box)}")
    return pruned(steps, box)


def _steps_from_blocks(rp: RangePlan, seg) -> list[Formula] | None:
    """The bytes in use at each position (-1 .. len(order)) as formulas, where no block
    holds a Concat slice (None where one does)."""
    if any(p.slice_of is not None for p in seg.placed.values()):
        return None
    zero = Formula.const(rp.names, 0)
    steps = [zero] * (len(seg.order) + 2)
    for b in seg.blocks:
        for pos in range(b.live[0], b.live[1] + 1):
            steps[pos + 1] = steps[pos + 1] + b.bytes
    return steps


def _matches(rp: RangePlan, i: int, steps: list[Formula], bindings) -> bool:
    for b in bindings:
        line = live_timelines(evaluate(rp, b, i))[0]
        if len(line) != len(steps) or any(f.at(b) != v for f, v in zip(steps, line)):
            return False
    return True


class Chain:
    """A sum of block sizes up a stacking: ``base`` (the blocks whose bytes are a
    multiple of the alignment at every binding) plus each of ``padded`` rounded up to
    the alignment."""

    __slots__ = ("base", "padded")

    def __init__(self, base: Formula, padded: tuple):
        self.base, self.padded = base, padded

    def plus(self, size: Formula, alignment: int) -> "Chain":
        if size.divisible_by(alignment):
            return Chain(self.base + size, self.padded)
        if size.is_const():  # its padding is a number
            return Chain(self.base + Formula.const(size.names, -(-math.ceil(size.constant()) // alignment)
                                                   * alignment), self.padded)
        return Chain(self.base, tuple(sorted(self.padded + (size,), key=Formula.text)))

    def at(self, binding: dict, alignment: int) -> int:
        return self.base.at(binding) + sum(-(-q.at(binding) // alignment) * alignment
                                           for q in self.padded)

    def key(self):
        return (self.base, self.padded)

    def text(self, alignment: int) -> str:
        parts = [] if (self.base.is_const() and self.base.constant() == 0
                       and self.padded) else [self.base.text()]
        parts += [f"{alignment}*ceil(({q.text()})/{alignment})" for q in self.padded]
        return " + ".join(parts)


def _at_least(d: Chain, c: Chain, box: Box, alignment: int) -> bool:
    """Is chain ``d`` proved >= chain ``c`` over ``box``? Common padded terms cancel; a
    padded term of ``d`` counts as its bytes, one of ``c`` as its bytes plus
    ``alignment - 1``."""
    rest_c = list(c.padded)
    rest_d = []
    for q in d.padded:
        if q in rest_c:
            rest_c.remove(q)
        else:
            rest_d.append(q)
    diff = d.base - c.base
    for q in rest_d:
        diff = diff + q
    for q in rest_c:
        diff = diff - q - Formula.const(d.base.names, alignment - 1)
    return nonnegative(diff, box)


def _pruned_chains(chains: list[Chain], box: Box, alignment: int) -> list[Chain]:
    unique = list({c.key(): c for c in chains}.values())
    corners = [dict(zip(box, c)) for c in
               __import__("itertools").product(*[sorted({lo, hi}) for lo, hi in box.values()])]
    vals = {c.key(): [c.at(p, alignment) for p in corners] for c in unique}
    unique.sort(key=lambda c: [-v for v in vals[c.key()]])
    kept: list[Chain] = []
    for c in unique:
        if not any(all(a >= b for a, b in zip(vals[d.key()], vals[c.key()]))
                   and _at_least(d, c, box, alignment) for d in kept):
            kept.append(c)
    return kept


def arena(rp: RangePlan, i: int) -> list[Chain] | None:
    """The arena of segment ``i`` as the chains of a max (a max-plus pass up the
    stacking, dominated chains pruned by proof), or None past :data:`MAX_TERMS`."""
    seg = rp.segments[i]
    box = dict(seg.dims)
    zero = Chain(Formula.const(rp.names, 0), ())
    tops: list[list[Chain]] = []
    for b, below in zip(seg.stack, seg.below):
        under = [t for j in below for t in tops[j]] or [zero]
        if len(below) > 1:
            under = _pruned_chains(under, box, rp.alignment)
        top = [t.plus(seg.blocks[b].bytes, rp.alignment) for t in under]
        if len(top) > MAX_TERMS:
            return None
        tops.append(top)
    return _pruned_chains([t for top in tops for t in top], box, rp.alignment) or [zero]


def arena_text(chains: list[Chain] | None, alignment: int) -> str | None:
    if chains is None:
        return None
    texts = [c.text(alignment) for c in chains]
    return texts[0] if len(texts) == 1 else "max(" + ", ".join(texts) + ")"


def arena_at(chains: list[Chain], binding: dict, alignment: int) -> int:
    return max(c.at(binding, alignment) for c in chains)


def peak_or_none(rp: RangePlan, i: int) -> list[Formula] | None:
    """:func:`aliased_peak`, or None where a step's bytes are no polynomial of the free
    dims alone (a floor of a division among them): evaluated per binding then."""
    try:
        return aliased_peak(rp, i)
    except ValueError:
        return None


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
                     "arena_bytes": arena_text(arena(rp, i), rp.alignment),
                     "aliased_peak_bytes": max_text(peak_or_none(rp, i))})
    return {"dims": {n: list(r) for n, r in rp.dims.items()},
            "weights_bytes": rp.weights_bytes.text(),
            "input_bytes": io_bytes(rp, "input").text(),
            "output_bytes": io_bytes(rp, "output").text(),
            "segments": segs}
