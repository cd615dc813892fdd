"""Plan a training graph and account for its memory: weights, gradients, optimizer
state, activations kept for backward, the planned arena, MACs."""
from __future__ import annotations

from dataclasses import dataclass, field

from graphmem.core.ir import Graph
from graphmem.frontend.reader import from_model
from graphmem.pipeline import DEFAULT_PASSES, Result, plan_graph
from graphmem.training.build import TrainingGraph
from graphmem.training.macs import macs_by_phase, phase
from graphmem.training.schedule import sink_floating

# Optimizer state in multiples of the trainable weights.
OPTIMIZER_STATE = {"sgd": 0, "momentum": 1, "adam": 2}


@dataclass
class TrainingReport:
    batch: int
    weight_bytes: int  # trainable parameters
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

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        extra = d.pop("extra")
        d.update(extra)
        return d


def load_training(tg: TrainingGraph) -> Graph:
    """The training model as graphmem IR (weights are not copied)."""
    return from_model(tg.model, check=False)


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


def plan_training(graph: Graph, passes=DEFAULT_PASSES) -> tuple[Result, str]:
    """Plan under file order and with floating nodes sunk (see schedule.py); keep the smaller."""
    best = None
    for name, order in (("sunk helpers", sink_floating(graph)), ("file", None)):
        r = plan_graph(graph, passes, order=order)
        if best is None or r.plan.arena_bytes < best[0].plan.arena_bytes:
            best = (r, name)
    return best


def account(tg: TrainingGraph, graph: Graph, result: Result, order_name: str, batch: int,
            optimizer: str) -> TrainingReport:
    """The memory and compute figures of one planned training step."""
    wbytes = sum(graph.tensors[w].bytes for w in tg.weights)
    gbytes = sum(graph.tensors[g].bytes for g in tg.gradients.values())
    saved = saved_activations(graph)
    macs = macs_by_phase(graph)
    return TrainingReport(
        batch=batch, weight_bytes=wbytes, gradient_bytes=gbytes,
        optimizer_bytes=OPTIMIZER_STATE[optimizer] * wbytes,
        saved_activation_bytes=sum(saved.values()), saved_activations=len(saved),
        arena_bytes=result.plan.arena_bytes,
        constant_bytes=sum(graph.tensors[c].bytes for c in graph.constants
                           if c not in graph.weights),
        forward_macs=macs["forward"],
        backward_macs=macs["backward"], recompute_macs=macs["recompute"],
        nodes=len(graph.nodes), order=order_name)
