"""Serving fit from a range plan: the largest batch whose weights + arena fit a budget at
each context length, and the longest context at each batch, by evaluating the range
plan (one pass over a stacking per probe, no planning).

The total at a binding is ``weights_bytes + arena`` of the plan evaluated there; graph
inputs and outputs (a decode step's KV cache) are arena tensors, counted in it. The
answer ``n`` is checked both ways: the total at ``n`` fits, at ``n + 1`` (inside the
range) it does not.
"""
from __future__ import annotations

from graphmem.ranges.evaluate import evaluate
from graphmem.ranges.rangeplan import RangePlan


def total(rp: RangePlan, binding: dict) -> dict:
    """weights, arena, the larger of the graph inputs' and outputs' bytes (in the arena)
    and the total at ``binding``."""
    plan = evaluate(rp, binding)
    weights = rp.weights_bytes.at(binding)
    # the larger of the graph inputs and outputs (a KV cache in, one out: never both
    # whole in the arena at once where the inputs die before the last step)
    io = max(sum(t.bytes for t in plan.tensors.values() if t.kind == kind)
             for kind in ("input", "output"))
    return {"weights_bytes": weights, "arena_bytes": plan.arena_bytes, "io_bytes": io,
            "total_bytes": weights + plan.arena_bytes}


def dominant(parts: dict) -> str:
    """Which term is largest: weights, the graph inputs or outputs (the larger: a KV
    cache), or the other activations (the arena less that)."""
    terms = {"weights": parts["weights_bytes"], "graph inputs or outputs (KV cache)": parts["io_bytes"],
             "other activations": max(parts["arena_bytes"] - parts["io_bytes"], 0)}
    return max(terms, key=terms.get)


def largest(rp: RangePlan, dim: str, others: dict, budget: int) -> dict:
    """The largest value of ``dim`` (others fixed) whose total fits ``budget``: its
    parts and the next value's total (None at the range's end); ``value`` None when even
    the smallest does not fit. The total is taken as growing with ``dim`` (a binary
    search), and the answer is checked at it and at the next value."""
    lo, hi = rp.dims[dim]

    def fits(v: int) -> bool:
        return total(rp, {**others, dim: v})["total_bytes"] <= budget
    if not fits(lo):
        return {"value": None, "next_total_bytes": total(rp, {**others, dim: lo})["total_bytes"]}
    a, b = lo, hi
    while a < b:  # fits(a) holds
        m = (a + b + 1) // 2
        if fits(m):
            a = m
        else:
            b = m - 1
    parts = total(rp, {**others, dim: a})
    after = total(rp, {**others, dim: a + 1})["total_bytes"] if a < hi else None
    if after is not None and after <= budget:
        raise ValueError(f"{dim}={a + 1} fits too: the total does not grow with {dim} here")
    return {"value": a, **parts, "dominant": dominant(parts), "next_total_bytes": after}


def probe_values(lo: int, hi: int, count: int = 8) -> list[int]:
    """Values spread over [lo, hi] by ratio (both ends included)."""
    if hi - lo + 1 <= count:
        return list(range(lo, hi + 1))
    out = {lo, hi}
    for k in range(1, count - 1):
        out.add(round((lo + 1) * ((hi + 1) / (lo + 1)) ** (k / (count - 1))) - 1)
    return sorted(v for v in out if lo <= v <= hi)


def batch_dim(rp: RangePlan) -> str:
    """The free dim that counts sequences: one named like ``batch``, else the first."""
    return next((n for n in rp.dims if "batch" in n.lower()), next(iter(rp.dims)))


def serving_fit(rp: RangePlan, budget: int) -> dict:
    """The largest batch at each probed value of the other free dims and, with one other
    dim, the longest context at each probed batch."""
    bdim = batch_dim(rp)
    rest = [n for n in rp.dims if n != bdim]
    out = {"budget_bytes": budget, "batch_dim": bdim, "by_context": [], "by_batch": []}
    if not rest:
        out["by_context"].append({"context": {}, **largest(rp, bdim, {}, budget)})
        return out
    lows = {n: rp.dims[n][0] for n in rest}
    for n in rest:
        for v in probe_values(*rp.dims[n]):
            ctx = {**lows, n: v}
            out["by_context"].append({"context": ctx, **largest(rp, bdim, ctx, budget)})
    if len(rest) == 1:
        cdim = rest[0]
        for bv in probe_values(*rp.dims[bdim]):
            r = largest(rp, cdim, {bdim: bv}, budget)
            out["by_batch"].append({"batch": bv, "context_dim": cdim, **r})
    return out
