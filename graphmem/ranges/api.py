"""Range plans from Python: :func:`plan_range` (load, build, prove) and
:func:`range_plan_at` (a range plan at one binding)::

    import graphmem
    built = graphmem.plan_range("gpt2.onnx", {"batch": (1, 32), "past_seq": (1, 8192)},
                                fixed={"seq": 1})
    built.plan.save("gpt2.rangeplan.json")
    plan = graphmem.range_plan_at(built.plan, {"batch": 4, "past_seq": 100})
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from graphmem.errors import PlanInvalid
from graphmem.frontend.reader import load
from graphmem.plan.format import Plan
from graphmem.ranges.build import Built, build_range_plan
from graphmem.ranges.evaluate import evaluate, free_binding
from graphmem.ranges.formulas import Formula
from graphmem.ranges.prove import range_problems, structural_problems
from graphmem.ranges.rangeplan import RangePlan
from graphmem.ranges.sizes import binding_key


def plan_range(path: str | os.PathLike, dims: Mapping[str, tuple[int, int]], *,
               fixed: Mapping[str, int] | None = None,
               follow: Mapping[str, Formula] | None = None,
               dim_default: int | None = None, model_name: str | None = None,
               progress=None, **options) -> Built:
    """The range plan of the model at ``path`` over ``dims`` (name -> (lo, hi), both
    included), with ``fixed`` dims bound and ``follow`` dims computed from the free ones
    (name -> a :class:`~graphmem.ranges.formulas.Formula` of them); ``options``: those of
    :func:`~graphmem.pipeline.plan_graph` (passes, alignment, placement, provider, ...).
    The plan is proved over the box before it is returned (:class:`PlanInvalid` else)."""
    fixed, follow = dict(fixed or {}), dict(follow or {})

    def load_at(binding: dict):
        return load(path, {**fixed, **{n: f.at(binding) for n, f in follow.items()},
                           **binding}, dim_default=dim_default)
    built = build_range_plan(load_at, dict(dims), model_name=model_name or Path(path).name,
                             options=options, progress=progress)
    rp = built.plan
    found = range_problems(rp, built.formulas.graph)
    found += structural_problems(rp, lambda b: built.formulas.loaded.get(binding_key(b))
                                 or load_at(b), evaluate)
    if found:
        raise PlanInvalid(found)
    return built


def range_plan_at(rp: RangePlan, binding: Mapping[str, int]) -> Plan:
    """The ordinary ``graphmem.plan/1`` plan of ``rp`` at ``binding`` (the free dims'
    values; the plan's other dims may be given too, as they are there)."""
    return evaluate(rp, free_binding(rp, binding))
