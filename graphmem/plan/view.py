"""A plan seen per step and per tensor: the plain data the three exports share.

The annotated ONNX model, the HTML report and the GraphML file all show the same
numbers; they come from here so that they cannot disagree. Everything is computed
from the plan and the graph's static types, never from the planner's internals.
"""
from __future__ import annotations

from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph
from graphmem.plan.format import Plan
from graphmem.plan.columns import group_roots
from graphmem.plan.stats import live_timelines
from graphmem.plan.validate import problems


@record
class TensorRow:
    """One arena tensor with everything a reviewer asks about it."""

    name: str
    kind: str  # input | output | activation
    bytes: int
    offset: int
    first: int
    last: int
    storage: int  # id of its alias/slice group: tensors with one id share bytes
    alias_of: str | None
    alias: str | None  # view | inplace
    slice_of: str | None
    dtype: str
    shape: tuple[int, ...]
    producer: int | None  # node index in the file; None for a graph input
    producer_op: str
    producer_name: str


@record
class StepRow:
    """One position of the execution order (a node that runs)."""

    step: int  # position in plan.order
    node: int  # node index in the file's graph.node
    op: str
    name: str
    live_bytes: int  # bytes the arena must hold here: each storage group counted once
    live_bytes_unaliased: int  # the same with every tensor counted on its own


@record
class PlanView:
    plan: Plan
    tensors: list[TensorRow]  # in plan order (graph inputs, then node outputs)
    steps: list[StepRow]
    # live bytes at positions -1 .. len(order) (index 0 is position -1)
    live: list[int]
    live_unaliased: list[int]
    peak_step: int  # position with the most aliased live bytes (first such)
    peak_tensors: list[str]  # every tensor live at peak_step
    file_nodes: int = 0  # nodes in the model file, folded ones included
    folded_nodes: int = 0


def layer_label(op: str, name: str = "", step: int | None = None,
                node: int | None = None) -> str:
    """How every view names a layer: ``Conv 'conv1' (step 12, node 251)`` (the op, the
    node's name in the model, its position in the plan's order and its index in the
    file). The text report, the JSON, the HTML page and the training report all write it
    this way."""
    where = ", ".join(w for w in (f"step {step}" if step is not None else "",
                                  f"node {node}" if node is not None else "") if w)
    text = f"{op} '{name}'" if name else op
    return f"{text} ({where})" if where else text


def check_plan_fits(plan: Plan, graph: Graph, source: str) -> None:
    """Refuse a plan that was made for another model (or another --dim binding)."""
    found = problems(plan, graph)
    if found:
        raise GraphmemError(f"{source}: plan for {plan.model!r} does not fit this model "
                            f"({found[0]})")


def build(plan: Plan, graph: Graph) -> PlanView:
    """Per-tensor rows, per-step rows and the live-bytes timeline of a valid plan."""
    roots = group_roots(plan)
    storage_ids: dict[str, int] = {}
    for name in plan.tensors:
        storage_ids.setdefault(roots[name], len(storage_ids))
    producers = graph.producers()
    rows = []
    for name, t in plan.tensors.items():
        info = graph.tensors[name]
        node = producers.get(name)
        rows.append(TensorRow(
            name=name, kind=t.kind, bytes=t.bytes, offset=t.offset, first=t.live[0],
            last=t.live[1], storage=storage_ids[roots[name]], alias_of=t.alias_of,
            alias=t.alias, slice_of=t.slice_of, dtype=info.dtype, shape=tuple(info.shape),
            producer=node.index if node else None,
            producer_op=node.op_type if node else "(graph input)",
            producer_name=node.name if node else ""))
    live, live_u = live_timelines(plan)
    by_index = {n.index: n for n in graph.nodes}
    steps = [StepRow(step=pos, node=idx, op=by_index[idx].op_type, name=by_index[idx].name,
                     live_bytes=live[pos + 1], live_bytes_unaliased=live_u[pos + 1])
             for pos, idx in enumerate(plan.order)]
    peak_i = max(range(len(live)), key=lambda i: (live[i], -i)) if live else 0
    peak_step = peak_i - 1
    peak_tensors = [r.name for r in rows if r.first <= peak_step <= r.last]
    return PlanView(plan, rows, steps, live, live_u, peak_step, peak_tensors,
                    graph.node_count, len(graph.folded_nodes))
