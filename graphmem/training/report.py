"""Plan a training graph and account for its memory: weights, gradients, optimizer
state, activations kept for backward, the planned arena, MACs.

Two measures of what backward keeps: ``kept_for_backward_bytes`` is measured on the
plan (arena storage made before backward starts in the plan's order and read after it:
:func:`plan_saved_activations`); it is live all at once at the boundary, so it never
exceeds the arena. ``saved_activation_bytes`` adds up every forward-made tensor a
backward node reads, each counted alone wherever the plan runs it: tensors that share
storage (an in-place ReLU over its BatchNormalization) count once each, and tensors the
plan frees before others are made count too, so it can exceed the arena.

The step total (``step_bytes``) is what the device holds for one step: the weights (the
frozen ones too, and, for mixed precision, the float32 master weights of the trained
ones), the optimizer state, the folded
constants and the planned arena (which holds the gradients, the activations kept for
backward and backward's own tensors).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from graphmem.core.ir import Graph
from graphmem.core.records import record
from graphmem.frontend.reader import from_model
from graphmem.pipeline import DEFAULT_PASSES, Result, plan_graph
from graphmem.plan.format import Plan
from graphmem.training.build import TrainingGraph
from graphmem.training.precision import master_bytes, retype
from graphmem.analysis.macs import macs_by_phase, phase
from graphmem.analysis.breakdown import covered_bytes
from graphmem.training.schedule import sink_floating, training_order

# Optimizer state in multiples of the trainable weights.
OPTIMIZER_STATE = {"sgd": 0, "momentum": 1, "adam": 2}


@dataclass
class TrainingReport:
    batch: int
    weight_bytes: int  # trainable parameters, in the step's type (half under --precision)
    gradient_bytes: int
    optimizer_bytes: int
    saved_activation_bytes: int  # forward tensors read by backward (or by recomputation)
    saved_activations: int
    arena_bytes: int  # planned arena of the whole step (gradients included: graph outputs)
    # Tensors computed from constants only (weight transposes, zero fills of adjoints):
    # the planner folds them, so they sit outside the arena, like weights.
    constant_bytes: int
    forward_macs: int
    backward_macs: int
    recompute_macs: int
    nodes: int
    order: str
    extra: dict = field(default_factory=dict)
    optimizer: str = "adam"
    precision: str = "fp32"  # graphmem.training.precision.PRECISIONS
    master_weight_bytes: int = 0  # float32 master weights beside the step (mixed only)
    # parameters read but not trained (TrainingGraph.frozen), in the step's type
    frozen_weight_bytes: int = 0

    @property
    def step_bytes(self) -> int:
        """The step total: weights (trained and frozen), master weights, optimizer
        state, folded constants and the planned arena (gradients and activations are
        inside the arena)."""
        return (self.weight_bytes + self.frozen_weight_bytes + self.master_weight_bytes
                + self.optimizer_bytes + self.constant_bytes + self.arena_bytes)

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        extra = d.pop("extra")
        d["step_bytes"] = self.step_bytes
        d.update(extra)
        return d


def load_training(tg: TrainingGraph) -> Graph:
    """The training model as graphmem IR (weights are not copied), its floating tensors
    in the type of ``tg.precision`` (:mod:`graphmem.training.precision`)."""
    return retype(from_model(tg.model, check=False), tg.precision)


def saved_activations(graph: Graph) -> dict[str, int]:
    """Forward-produced tensors that a backward or recompute node reads: the tensors
    a training step keeps alive across the forward/backward boundary."""
    static = graph.weights | set(graph.constants)
    forward_out = {t for n in graph.nodes if phase(n) == "forward" for t in n.outputs if t}
    kept = {}
    for n in graph.nodes:
        if phase(n) == "forward":
            continue
        for t in n.reads:
            if t in forward_out and t not in static:
                kept[t] = graph.tensors[t].bytes
    return kept


def first_backward_position(graph: Graph, plan: Plan) -> int:
    """Where backward starts in the plan's order: at the first node that reads the loss
    seed's adjoint together with a forward value (the first step of the chain rule).
    Nodes that read only constants, data inputs and the seed (seed fills, a view of the
    input for the first weight gradient) and backward helpers that read no adjoint
    (masks) may run earlier and do not move the boundary; nor does the loss node, which
    nothing reads and the reorder pass may run last. Without such a node: just after
    the last forward node."""
    from graphmem.training.rewrites import SEED

    by_index = {n.index: n for n in graph.nodes}
    static = set(graph.weights) | set(graph.constants) | set(graph.inputs)
    adjoint, pure = {SEED}, {SEED}
    for n in graph.nodes:  # file order is topological
        if phase(n) == "forward":
            continue
        if any(t in adjoint for t in n.reads):
            adjoint.update(t for t in n.outputs if t)
        if all(t in static or t in pure for t in n.reads):
            pure.update(t for t in n.outputs if t)
    for k, idx in enumerate(plan.order):
        n = by_index[idx]
        if phase(n) != "forward" and any(t in adjoint for t in n.reads) and not all(
                t in static or t in pure for t in n.reads):
            return k
    last = max((k for k, idx in enumerate(plan.order) if phase(by_index[idx]) == "forward"),
               default=-1)
    return last + 1


def plan_saved_activations(graph: Graph, plan: Plan) -> dict[str, int]:
    """Saved activations measured on the plan: arena storage made before backward
    starts in the plan's order (:func:`first_backward_position`) and read after.

    Backward nodes the plan runs before the boundary (seed fills; with a sum or mean
    loss, whatever needs no forward value past the output) count on the forward side:
    what they make and backward reads later is held across the boundary too.
    Unlike :func:`saved_activations` this follows the order the plan runs (a
    forward-phase node sunk past the boundary counts on its side of it), counts the data
    inputs a backward node reads, and counts storage shared by views, in-place outputs
    and Concat slices once (the union of its crossing members' byte ranges), under the
    name of its first-made crossing member. Returns name -> bytes.
    """
    from graphmem.plan.columns import group_roots

    order = plan.order
    boundary = first_backward_position(graph, plan)
    by_index = {n.index: n for n in graph.nodes}
    made = {t: -1 for t in graph.inputs}
    for k, idx in enumerate(order):
        for t in by_index[idx].outputs:
            if t:
                made[t] = k
    crossing: set[str] = set()
    for idx in order[boundary:]:
        for t in by_index[idx].reads:
            if t in plan.tensors and made.get(t, len(order)) < boundary:
                crossing.add(t)
    roots = group_roots(plan)
    groups: dict[str, list[str]] = {}
    for t in crossing:
        if plan.tensors[t].bytes:
            groups.setdefault(roots[t], []).append(t)
    out = {}
    for members in groups.values():
        main = min(members, key=lambda m: (made.get(m, -1), m))
        out[main] = covered_bytes([(plan.tensors[m].offset, plan.tensors[m].offset
                             + plan.tensors[m].bytes) for m in members])
    return out


def backward_peak(graph: Graph, plan: Plan, top: int = 5) -> dict:
    """The position of the most aliased live bytes (the arena's peak), what is live
    there by kind, and the largest backward helper tensors live there.

    Kinds: ``saved`` (made before backward starts), ``gradients`` (graph
    outputs made in backward), ``backward`` (everything else backward or recompute
    nodes made: adjoints, transposed inputs of weight-gradient convolutions, masks,
    fills). Storage shared by views, in-place outputs and Concat slices is one entry,
    named after its largest live member; ``helpers`` are the ``top`` largest
    ``backward`` entries (name, bytes, producing op and node, shape).
    """
    from graphmem.plan.columns import live_groups
    from graphmem.plan.stats import live_timelines

    aliased, _ = live_timelines(plan)  # index 0 is position -1
    if not aliased:
        return {"position": None}
    k = max(range(len(aliased)), key=aliased.__getitem__)
    pos = k - 1
    boundary = first_backward_position(graph, plan)
    by_index = {n.index: n for n in graph.nodes}
    producer = {t: n for n in graph.nodes for t in n.outputs if t}
    outputs = set(graph.outputs)
    kinds = {"saved": 0, "gradients": 0, "backward": 0}
    helpers = []
    for members in live_groups(plan, pos):
        main = max(members, key=lambda m: (plan.tensors[m].bytes, m))
        nbytes = covered_bytes([(plan.tensors[m].offset, plan.tensors[m].offset
                          + plan.tensors[m].bytes) for m in members])
        first = min(plan.tensors[m].live[0] for m in members)
        if first < boundary:
            kinds["saved"] += nbytes
        elif any(m in outputs for m in members):
            kinds["gradients"] += nbytes
        else:
            kinds["backward"] += nbytes
            node = producer.get(main)
            helpers.append({"name": main, "bytes": nbytes,
                            "op": node.op_type if node is not None else None,
                            "node": node.name if node is not None else None,
                            "shape": list(graph.tensors[main].shape)})
    helpers.sort(key=lambda d: (-d["bytes"], d["name"]))
    at = by_index[plan.order[pos]] if 0 <= pos < len(plan.order) else None
    return {"position": pos, "node": at.name if at is not None else None,
            "op": at.op_type if at is not None else None, "live_bytes": aliased[k],
            "first_backward_position": boundary, "bytes_by_kind": kinds,
            "helpers": helpers[:top]}


def plan_training(graph: Graph, passes=DEFAULT_PASSES) -> tuple[Result, str]:
    """Plan under :func:`training_order` (every helper and recomputation just before its
    first reader, freeing masks early), under :func:`sink_floating` (only nodes that
    read no activation and recomputation sunk: better where onnx-ad's own placement of
    the masks is) and in file order; keep the smallest arena. (The planner's reorder pass runs on each
    and keeps what is smaller.)"""
    best = None
    for name, order in (("sunk helpers", training_order(graph)),
                        ("sunk floating", sink_floating(graph)), ("file", None)):
        r = plan_graph(graph, passes, order=order)
        if best is None or r.plan.arena_bytes < best[0].plan.arena_bytes:
            best = (r, name)
    return best


def account(tg: TrainingGraph, graph: Graph, result: Result, order_name: str, batch: int,
            optimizer: str) -> TrainingReport:
    """The memory and compute figures of one planned training step. The optimizer keeps
    its state in the type of the weights it updates: the step's own, or the float32
    master weights under mixed precision."""
    wbytes = sum(graph.tensors[w].bytes for w in tg.weights)
    master = master_bytes(tg.precision, sum(graph.tensors[w].numel for w in tg.weights))
    gbytes = sum(graph.tensors[g].bytes for g in tg.gradients.values())
    saved = saved_activations(graph)
    macs = macs_by_phase(graph)
    on_plan = plan_saved_activations(graph, result.plan)
    extra = {"kept_for_backward_bytes": sum(on_plan.values()),
             "kept_for_backward": len(on_plan),
             "peak": backward_peak(graph, result.plan)}
    return TrainingReport(
        batch=batch, weight_bytes=wbytes, gradient_bytes=gbytes,
        optimizer_bytes=OPTIMIZER_STATE[optimizer] * (master or wbytes),
        saved_activation_bytes=sum(saved.values()), saved_activations=len(saved),
        arena_bytes=result.plan.arena_bytes,
        constant_bytes=sum(graph.tensors[c].bytes for c in graph.constants
                           if c not in graph.weights),
        forward_macs=macs["forward"],
        backward_macs=macs["backward"], recompute_macs=macs["recompute"],
        nodes=len(graph.nodes), order=order_name, extra=extra, optimizer=optimizer,
        precision=tg.precision, master_weight_bytes=master,
        frozen_weight_bytes=sum(graph.tensors[w].bytes for w in tg.frozen
                                if w in graph.tensors))


@record
class PlannedStep:
    """One training step, planned and accounted: the (rewritten) step ``tg``, its graph
    as planned, the plan (``result``), the name of the order it was planned in and its
    figures (``report``). What :mod:`.selective`, :mod:`.recompute` and the ``train``
    command hand each other."""

    tg: TrainingGraph
    graph: Graph
    result: Result
    order: str
    report: TrainingReport

    @property
    def total(self) -> int:
        """The step total: :attr:`TrainingReport.step_bytes`, the one place it is
        added up."""
        return self.report.step_bytes


def plan_step(tg: TrainingGraph, optimizer: str, batch: int) -> PlannedStep:
    """``tg`` loaded (:func:`load_training`), planned (:func:`plan_training`) and
    accounted (:func:`account`)."""
    graph = load_training(tg)
    result, order = plan_training(graph)
    return PlannedStep(tg, graph, result, order,
                       account(tg, graph, result, order, batch, optimizer))
