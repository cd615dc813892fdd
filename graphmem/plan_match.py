"""Is a plan file meant for this model at all? (bad input, exit 2, before any rule check)

A plan made for another model is the user's mistake, not a wrong plan: it names
tensors or nodes this model does not have. A plan that names only this model's
tensors and nodes but breaks a rule of ``graphmem.plan/1`` is a wrong plan and is
left to :func:`graphmem.plan.problems`.
"""
from __future__ import annotations

from pathlib import Path

from .errors import GraphmemError
from .ir import Graph
from .plan import Plan


def check_plan_for(plan: Plan, graph: Graph, source: str = "plan") -> None:
    """Raise GraphmemError when ``plan`` names tensors or nodes ``graph`` does not have."""
    model = Path(graph.model_path).name if graph.model_path else graph.name
    made_for = f" (it was made for {plan.model!r})" if plan.model != model else ""
    foreign = [t for t in plan.tensors if t not in graph.tensors]
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise GraphmemError(f"{source} is not a plan for {model}{made_for}: tensor "
                            f"{foreign[0]!r}{more} not in the model")
    count = graph.node_count or len(graph.nodes)
    bad = [i for i in plan.order if not 0 <= i < count]
    if bad:
        raise GraphmemError(f"{source} is not a plan for {model}{made_for}: node {bad[0]} "
                            f"in its order, but the model has {count} nodes")
