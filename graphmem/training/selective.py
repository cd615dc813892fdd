"""Selective recomputation: cheap forward values are recomputed in backward from the
values backward keeps anyway, instead of being kept themselves.

onnx_ad differentiates each primitive op, so an activation an exporter spells in
primitives keeps every intermediate for backward: SiLU ``x * sigmoid(x)`` keeps ``x``,
``sigmoid(x)`` and the product; GELU ``0.5 * x * (1 + erf(x / sqrt 2))`` keeps ``x``,
``x / sqrt 2`` and ``1 + erf(...)``. PyTorch's fused activations save their input and
recompute the rest in backward. This is Megatron's *selective activation
recomputation* (Korthikanti et al. 2022) and Checkmate's cheap-op case (Jain et al.
2020), decided by one rule over the forward graph, in order:

- *kept anyway*: forward values backward reads that no cheap op makes (the outputs of
  convolutions and matrix products that a later rule reads, the graph's inputs);
- a value made by a cheap op (:data:`ELEMENTWISE`, and in the second tier
  :data:`NORMALIZATION` too) whose inputs are constants, kept anyway, or recomputable
  themselves is *recomputable*: backward gets a copy made by cloned forward nodes just
  before its first reader (:func:`graphmem.training.recompute.rewrite`), so the value
  itself dies in forward;
- a cheap value with any other input that backward reads is kept, and counts as kept
  anyway for the values after it.

So recomputing never keeps a byte more for backward; what it costs is the copies'
lifetimes in backward and the element-wise work again (no matrix op is recomputed: the
recompute MACs stay 0). :func:`selective_planned` plans the step without it and with
each tier and keeps the smallest arena, judged by the plan as the checkpointing passes
are. Random ops (Dropout, Bernoulli, RandomNormalLike, ...) are in neither set.
"""
from __future__ import annotations

import dataclasses

from graphmem.training.build import TrainingGraph
from graphmem.training.cuts import forward_pass
from graphmem.training.recompute import rewrite
from graphmem.training.report import PlannedStep, plan_step

# One output element from the same elements of the inputs (broadcasting allowed), or
# data movement: recomputing them is one pass over memory.
ELEMENTWISE = frozenset({
    "Abs", "Add", "Cast", "Ceil", "Celu", "Clip", "Div", "Elu", "Erf", "Exp", "Expand",
    "Flatten", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Log",
    "Max", "Min", "Mish", "Mul", "Neg", "Pow", "PRelu", "Reciprocal", "Relu", "Reshape",
    "Selu", "Sigmoid", "Sign", "Softplus", "Softsign", "Sqrt", "Squeeze", "Sub", "Sum",
    "Tanh", "ThresholdedRelu", "Transpose", "Unsqueeze", "Where"})
# Normalisations and reductions: a few passes over memory, no matrix product.
NORMALIZATION = frozenset({
    "BatchNormalization", "GroupNormalization", "InstanceNormalization",
    "LayerNormalization", "LogSoftmax", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceSum", "ReduceSumSquare", "RMSNormalization", "Softmax"})
TIERS = {"elementwise": ELEMENTWISE, "elementwise+normalization": ELEMENTWISE | NORMALIZATION}


def recomputable(tg: TrainingGraph, cheap=ELEMENTWISE) -> frozenset[str]:
    """The forward values the rule of this module recomputes in backward (made by ops in
    ``cheap``); see the module docstring."""
    g = tg.model.graph
    fwd, produced = forward_pass(g)
    read_back = {t for n in g.node if not n.name.startswith("f:") for t in n.input
                 if t in produced}
    kept = {t for t in read_back if produced[t].op_type not in cheap}
    out: set[str] = set()
    for n in fwd:  # forward order is topological
        made = [t for t in n.output if t in produced]
        if n.op_type in cheap and all(t in out or t in kept or t not in produced
                                      for t in n.input if t):
            out.update(made)
        else:
            kept.update(t for t in made if t in read_back)
    return frozenset(out)


def selective(tg: TrainingGraph, cheap=ELEMENTWISE) -> TrainingGraph:
    """``tg`` with :func:`recomputable`'s values recomputed in backward and every other
    forward value kept; its ``recomputable`` says which, for the checkpointing passes
    (their last segment keeps all but those)."""
    rec = recomputable(tg, cheap)
    _, produced = forward_pass(tg.model.graph)
    marked = dataclasses.replace(tg, recomputable=rec)
    return rewrite(marked, [], [t for t in produced if t not in rec])


CHOICES = ("auto", "none", *TIERS)  # train --selective


def selective_planned(tg: TrainingGraph, optimizer: str, batch: int,
                      choice: str = "auto") -> tuple[TrainingGraph, PlannedStep, dict]:
    """The step without selective recomputation and with each of :data:`TIERS`, each
    planned; with ``choice`` ``auto`` the smallest arena wins (the first on a tie: none
    before the tiers); ``none`` or a tier's name plans that one alone (beside none).

    Returns ``(base, planned, info)``: ``base`` is ``tg`` with the winner's
    ``recomputable`` set (what the checkpointing passes build on), ``planned`` the
    winner's :class:`~graphmem.training.report.PlannedStep`, ``info`` the tier chosen
    (``selective``), how many values it recomputes, each tier's arena and the step with
    nothing recomputed (``unrecomputed``: its arena, step total and what it keeps for
    backward)."""
    if choice not in CHOICES:
        raise ValueError(f"selective choice {choice!r} is not one of {', '.join(CHOICES)}")
    plain = plan_step(tg, optimizer, batch)
    best, name, base = plain, "none", tg
    arenas = {"none": best.report.arena_bytes}
    tried: dict[frozenset, str] = {frozenset(): "none"}
    for tier, cheap in TIERS.items():
        if choice not in ("auto", tier):
            continue
        rec = recomputable(tg, cheap)
        if rec in tried:  # the same values as an earlier tier: the same graph
            arenas[tier] = arenas[tried[rec]]
            continue
        tried[rec] = tier
        got = plan_step(selective(tg, cheap), optimizer, batch)
        arenas[tier] = got.report.arena_bytes
        if choice == tier or got.report.arena_bytes < best.report.arena_bytes:
            best, name, base = got, tier, dataclasses.replace(tg, recomputable=rec)
    info = {"selective": name, "selective_recomputed": len(base.recomputable),
            "selective_arena_bytes": arenas,
            "unrecomputed": {"arena_bytes": plain.report.arena_bytes,
                             "step_bytes": plain.total,
                             "kept_for_backward_bytes":
                                 plain.report.extra["kept_for_backward_bytes"]}}
    return base, best, info
