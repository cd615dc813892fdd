"""Memory per device under data parallelism with ZeRO (Rajbhandari et al. 2020), from a
planned training step at the per-device batch.

Every device runs the step on its own batch; what ZeRO shards among the ``devices``:

- stage 0: nothing (plain data parallelism: every device holds everything);
- stage 1: the optimizer state (and, under mixed precision, the float32 master weights,
  which ZeRO counts with it);
- stage 2: those and the gradients: each gradient is reduce-scattered as backward makes
  it, so a device keeps only its shard to the end of the step. The arena is planned
  again with only that shard's gradients as outputs: the others die right after they
  are made, as the reduction frees them;
- stage 3: those and the parameters: a device stores its shard of every weight and
  gathers a layer's full weight just before it runs (the largest weight gathered is
  counted once, as DeepSpeed's estimator counts its largest layer).

``offload_optimizer`` (ZeRO-Offload) moves the optimizer state and the master weights to
the host: they leave the device total and are reported as host bytes. A shard is the
ceiling of an even split; gradients are assigned to the shard whole, in the order of
the weights, until it holds its share (the tensor that crosses the boundary counted
whole: the shard is never under-counted).
"""
from __future__ import annotations

import dataclasses

from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.training.report import PlannedStep, backward_peak, plan_training

STAGES = (0, 1, 2, 3)


@record
class Sharding:
    """``devices`` data-parallel devices, ZeRO ``stage``, optimizer offloaded or not."""

    devices: int = 1
    stage: int = 0
    offload_optimizer: bool = False

    def __post_init__(self):
        if self.devices < 1:
            raise GraphmemError(f"--devices must be at least 1, not {self.devices}")
        if self.stage not in STAGES:
            raise GraphmemError(f"--zero must be one of 0, 1, 2, 3, not {self.stage}")

    @property
    def plain(self) -> bool:
        return self.devices == 1 and self.stage == 0 and not self.offload_optimizer


def _share(nbytes: int, devices: int) -> int:
    return -(-nbytes // devices)


def gradient_shard(step: PlannedStep, devices: int) -> list[str]:
    """The gradient outputs one device keeps under ZeRO-2 and 3: whole gradients in the
    order of the weights until they hold a ``devices``-th of all gradient bytes."""
    graph, tg = step.graph, step.tg
    grads = [tg.gradients[w] for w in tg.weights if w in tg.gradients]
    want = _share(sum(graph.tensors[g].bytes for g in grads), devices)
    kept, held = [], 0
    for g in grads:
        if held >= want:
            break
        kept.append(g)
        held += graph.tensors[g].bytes
    return kept


def per_device(step: PlannedStep, sharding: Sharding) -> dict:
    """What one device holds (``*_bytes``, ``total_bytes``) and what the host holds
    (``host_bytes``) for ``step`` (planned at the per-device batch) under
    ``sharding``; ``arena_bytes`` is planned again where gradients are sharded, and
    ``peak`` is that arena's (:func:`~graphmem.training.report.backward_peak`)."""
    r, n, stage = step.report, sharding.devices, sharding.stage
    weights = r.weight_bytes if stage < 3 else _share(r.weight_bytes, n)
    frozen = r.frozen_weight_bytes if stage < 3 else _share(r.frozen_weight_bytes, n)
    master = r.master_weight_bytes if stage < 1 else _share(r.master_weight_bytes, n)
    optimizer = r.optimizer_bytes if stage < 1 else _share(r.optimizer_bytes, n)
    host = 0
    if sharding.offload_optimizer:
        host, master, optimizer = master + optimizer, 0, 0
    gradients, arena, peak = r.gradient_bytes, r.arena_bytes, r.extra.get("peak")
    if stage >= 2 and n > 1:
        shard = gradient_shard(step, n)
        drop = set(step.tg.gradients.values()) - set(shard)
        graph = dataclasses.replace(step.graph, outputs=tuple(
            o for o in step.graph.outputs if o not in drop))
        result, _ = plan_training(graph)
        arena = result.plan.arena_bytes
        peak = backward_peak(graph, result.plan)
        gradients = sum(step.graph.tensors[g].bytes for g in shard)
    gathered = 0
    if stage == 3 and n > 1:
        sizes = [step.graph.tensors[w].bytes for w in (*step.tg.weights, *step.tg.frozen)
                 if w in step.graph.tensors]
        gathered = max(sizes, default=0)
    total = weights + frozen + master + optimizer + r.constant_bytes + arena + gathered
    return {"devices": n, "zero": stage, "offload_optimizer": sharding.offload_optimizer,
            "weight_bytes": weights, "frozen_weight_bytes": frozen,
            "master_weight_bytes": master, "optimizer_bytes": optimizer,
            "gradient_bytes": gradients, "constant_bytes": r.constant_bytes,
            "arena_bytes": arena, "gathered_weight_bytes": gathered,
            "total_bytes": total, "host_bytes": host, "peak": peak}
