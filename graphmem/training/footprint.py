"""The whole footprint of a training step (see :mod:`graphmem.analysis.footprint`).

Beside the arena: the weights (the step's own type; under mixed precision also the
float32 master weights), the optimizer state, the folded constants. The arena is split
at its peak, where it is fullest: the activations kept for backward live there, the
gradients made by then, backward's own tensors (adjoints, transposed weights, masks),
and the bytes the placement leaves between them. The parts add up to the step total.
"""
from __future__ import annotations

from graphmem.analysis.footprint import format_bytes, part, stack
from graphmem.training.report import TrainingReport


def training(r: TrainingReport, title: str = "training step") -> dict:
    """The footprint of a planned training step; with offload (``offload_arena_bytes``
    in the report) the arena is the one planned with the offloaded activations away;
    with ``--devices``/``--zero`` (``per_device`` in the report) what one device holds
    (:func:`graphmem.training.sharding.per_device`): its shards, its arena."""
    e = r.extra
    d = e.get("per_device")
    if d is not None:
        return _per_device(r, d, title)
    parts = [part("weights", "weights" + (" (float16 copy)" if r.precision == "mixed" else ""),
                  r.weight_bytes, "the trainable parameters the step reads"),
             part("frozen_weights", "frozen weights", r.frozen_weight_bytes,
                  "parameters the step reads and does not train"),
             part("master_weights", "master weights (float32)", r.master_weight_bytes,
                  "what the optimizer updates under mixed precision"),
             part("optimizer", f"optimizer state ({r.optimizer})", r.optimizer_bytes,
                  "per-parameter state the optimizer keeps"),
             part("constants", "folded constants", r.constant_bytes,
                  "computed from weights only (weight transposes, fills)")]
    if "offload_arena_bytes" in e:
        parts.append(part("arena", "arena with offload", e["offload_arena_bytes"],
                          f"{e.get('offloaded', 0)} storages of saved activations copied "
                          f"to the host and back"))
        return stack("training", title, parts)
    return _with_arena(parts, title, r.arena_bytes, e.get("peak") or {}, r.gradient_bytes)


def _with_arena(parts: list[dict], title: str, arena: int, peak: dict,
                gradient_bytes: int) -> dict:
    """``parts`` and the arena, split at its peak where the peak's kinds are known."""
    kinds = peak.get("bytes_by_kind")
    if not kinds or sum(kinds.values()) > arena:
        parts.append(part("arena", "activation arena", arena,
                          "activations, gradients and backward's tensors, planned"))
        return stack("training", title, parts)
    at = f"at the arena's peak (step {peak['position']})"
    grads = (f"weight gradients made by then, live {at}" if kinds["gradients"] else
             f"none made by the peak: all {format_bytes(gradient_bytes)} of them are "
             f"made later, in arena bytes freed by then")
    # named apart from the step's "kept for backward" and "gradients" (every storage
    # made before backward and read after it; every gradient), of which these are
    # the bytes live at the peak
    parts += [part("kept", "kept, live at the peak", kinds["saved"],
                   f"activations made before backward starts, live {at}"),
              part("gradients", "gradients at the peak", kinds["gradients"], grads),
              part("backward", "backward's tensors", kinds["backward"],
                   f"gradients of activations, transposed weights, masks live {at}"),
              part("arena_rest", "rest of the arena", arena - sum(kinds.values()),
                   "bytes the placement leaves free at the peak")]
    return stack("training", title, parts, keep=("gradients",))


def _per_device(r: TrainingReport, d: dict, title: str) -> dict:
    """What one of ``d['devices']`` devices holds under ZeRO-``d['zero']``: the parts
    add up to ``d['total_bytes']``."""
    n, stage = d["devices"], d["zero"]
    sharded = lambda on: f", a 1/{n} shard" if on and n > 1 else ""  # noqa: E731
    parts = [part("weights", "weights" + (" (float16 copy)" if r.precision == "mixed" else "")
                  + sharded(stage >= 3), d["weight_bytes"],
                  "the trainable parameters this device stores"),
             part("gathered_weights", "gathered weight", d["gathered_weight_bytes"],
                  "the largest weight, gathered whole while its layer runs (ZeRO-3)"),
             part("frozen_weights", "frozen weights" + sharded(stage >= 3),
                  d["frozen_weight_bytes"], "parameters the step reads and does not train"),
             part("master_weights", "master weights (float32)" + sharded(stage >= 1),
                  d["master_weight_bytes"], "what the optimizer updates under mixed precision"),
             part("optimizer", f"optimizer state ({r.optimizer})" + sharded(stage >= 1),
                  d["optimizer_bytes"], "per-parameter state the optimizer keeps"),
             part("constants", "folded constants", d["constant_bytes"],
                  "computed from weights only (weight transposes, fills)")]
    title = f"{title}, per device ({n} devices, ZeRO-{stage})"
    return _with_arena(parts, title, d["arena_bytes"], d.get("peak") or {},
                       d["gradient_bytes"])
