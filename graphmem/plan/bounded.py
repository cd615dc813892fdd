"""The plan's marks for the sizes that depend on the data (issue 53): each tensor a
bounded symbol governs gets ``bounded_by`` (symbol -> bound), the plan its ``bounds``
(:mod:`graphmem.frontend.data_bounds` finds them; docs/plan-format.md says what a
runtime may assume of them)."""
from __future__ import annotations

from dataclasses import replace

from graphmem.plan.format import Plan


def with_bounds(plan: Plan, graph) -> Plan:
    """``plan`` with the marks of ``graph.data_bounds`` (itself where there are none)."""
    record = graph.data_bounds
    if record is None or not (record.symbols or record.body_symbols):
        return plan
    tensors = dict(plan.tensors)
    for name, t in tensors.items():
        symbols = record.governed.get(name)
        if symbols:
            tensors[name] = replace(t, bounded_by={s: record.symbols[s].bound
                                                   for s in symbols})
    return Plan(**{**plan.__dict__, "tensors": tensors, "bounds": record.to_dict()})


def bounded_bytes(plan: Plan) -> int:
    """The arena bytes the bounded tensors reserve: each slot of its own (not a view or
    a slice of another) counted once."""
    return sum(t.bytes for t in plan.tensors.values()
               if t.bounded_by and not t.alias_of and not t.slice_of)


def summary(plan: Plan) -> dict | None:
    """What the bounds govern in ``plan``: per symbol its bound and the tensors it
    governs; the bounded tensors' slots (each storage counted once), and the arena
    bytes that hold a bounded tensor at some step (the union of their byte ranges)."""
    if not plan.bounds:
        return None
    governs: dict[str, list[str]] = {s: [] for s in plan.bounds}
    ranges = []
    for name, t in plan.tensors.items():
        if not t.bounded_by:
            continue
        for s in t.bounded_by:
            governs.setdefault(s, []).append(name)
        if t.bytes:
            ranges.append((t.offset, t.offset + t.bytes))
    covered, end = 0, -1
    for lo, hi in sorted(ranges):
        if hi <= end:
            continue
        covered += hi - max(lo, end)
        end = hi
    return {"symbols": {s: {**plan.bounds[s], "tensors": governs.get(s, [])}
                        for s in plan.bounds},
            "tensors": sum(1 for t in plan.tensors.values() if t.bounded_by),
            "slot_bytes": bounded_bytes(plan), "arena_bytes_covered": covered}
