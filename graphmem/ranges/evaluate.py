"""A range plan at one binding: an ordinary ``graphmem.plan/1`` plan, made by evaluating
the formulas and one pass over the segment's stacking (no planning), so the validator,
verify and every tool read it unchanged."""
from __future__ import annotations

import dataclasses
from typing import Mapping

from graphmem.errors import GraphmemError
from graphmem.plan.format import Plan, TensorPlan
from graphmem.plan.stats import plan_stats
from graphmem.ranges.rangeplan import RangePlan
from graphmem.ranges.stacking import stacked_offsets


def free_binding(rp: RangePlan, dims: Mapping[str, int]) -> dict[str, int]:
    """The free dims' values out of ``dims``, which may also give the plan's other dims
    (a fixed one, or one the model computes): a value other than the plan's is refused."""
    unknown = [n for n in dims if n not in rp.dims and n not in rp.bindings]
    if unknown:
        raise GraphmemError(f"the range plan has no dim {unknown[0]!r}; its free dims: "
                            + ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in rp.dims.items()))
    out = {n: int(v) for n, v in dims.items() if n in rp.dims}
    rp.segment_at(out)  # every free dim given, inside the box
    for name, value in dims.items():
        if name not in rp.dims and rp.bindings[name].at(out) != value:
            raise GraphmemError(f"--dim {name}={value}, but the range plan has "
                                f"{name}={rp.bindings[name].at(out)} there")
    return out


def evaluate(rp: RangePlan, binding: Mapping[str, int], segment: int | None = None) -> Plan:
    """The plan at ``binding`` (a value for every free dim, inside the plan's box), by
    the first segment that holds it (or by ``segment``)."""
    binding = dict(binding)
    seg = rp.segments[rp.segment_at(binding) if segment is None else segment]
    sizes = [b.bytes.at(binding) for b in seg.blocks]
    offsets, arena = stacked_offsets(seg.stack, seg.below, sizes, rp.alignment)
    tensors = {}
    for name, t in rp.tensors.items():
        p = seg.placed[name]
        tensors[name] = TensorPlan(t.kind, t.bytes.at(binding),
                                   offsets[p.block] + p.rel.at(binding), tuple(p.live),
                                   p.alias_of, p.alias, p.slice_of)
    bindings = {n: f.at(binding) for n, f in rp.bindings.items()}
    bindings.update(binding)
    plan = Plan(model=rp.model, bindings=bindings, alignment=rp.alignment,
                order=list(seg.order), constants=list(rp.constants), arena_bytes=arena,
                tensors=tensors, passes=[], stats={}, target=rp.target)
    return dataclasses.replace(plan, stats=plan_stats(plan))
