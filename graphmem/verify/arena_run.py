"""Running a model node by node inside one planned arena, and explaining a difference."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx

from graphmem.core.records import record
from graphmem.verify.arena import HostArena, OrtArena
from graphmem.verify.compare import OutputCheck, max_abs_diff, same
from graphmem.core.ir import Graph, Node
from graphmem.core.ops import is_concat
from graphmem.verify.execute import NodeRunner, raw, typed
from graphmem.verify.node_sessions import NodeSessions
from graphmem.verify.poison import PoisonSchedule
from graphmem.plan.format import Plan, TensorPlan


@record
class Mismatch:
    """Where the arena run first disagrees with the reference, and why it might."""

    position: int  # in the plan's order; len(order) for "after the last node"
    node: str  # the node's label, or "" for a graph output changed after its producer
    tensor: str  # the output that differs
    max_abs_diff: float
    overlapping: tuple[str, ...]  # tensors whose bytes overlap the culprit's there
    reasons: tuple[str, ...]
    read: bool = False  # True: ``tensor`` is an input of the node, wrong when it was read

    def describe(self) -> str:
        where = (f"{self.node} at position {self.position}" if self.node
                 else f"graph output {self.tensor!r} at the end of the run")
        diff = ("NaN" if np.isnan(self.max_abs_diff) else "0: the values are equal, "
                "their bits are not" if self.max_abs_diff == 0 else f"{self.max_abs_diff:.3g}")
        what = (f"its input {self.tensor!r} is not the reference's when read" if self.read
                else f"output {self.tensor!r} differs")
        head = f"first difference at {where}: {what} (max abs diff {diff})"
        return "; ".join([head, *self.reasons])


class ArenaRun:
    """Runs the nodes of ``graph`` in ``plan.order`` inside one arena."""

    def __init__(self, plan: Plan, graph: Graph, model: onnx.ModelProto,
                 constants: Mapping[str, np.ndarray], provider: str, device: str,
                 arena: str | None):
        self.plan, self.graph, self.constants = plan, graph, constants
        self.provider, self.device = provider, device
        self.arena_kind = arena or ("host" if device == "cpu" else "ortvalue")
        self.by_index = {n.index: n for n in graph.nodes}
        from pathlib import Path
        folder = str(Path(graph.model_path).parent) if graph.model_path else None
        self.sessions = NodeSessions(model, dict(graph.tensors), provider, constants, folder)
        self.after_node = None  # called with each node once it has run (both runs)
        self.runner = NodeRunner(graph, self.sessions, constants, device)
        self.offsets = {name: t.offset for name, t in plan.tensors.items()}
        self.nodes_run = self.nodes_skipped = 0
        self.model = model
        self.control_flow = None
        if graph.scopes:
            from graphmem.verify.control_flow import ControlFlow, Env
            self.control_flow = ControlFlow(self)
            self.top_env = Env(plan, graph, 0, constants, model.graph, model, provider)

    def close(self) -> None:
        """Drop the cached one-node sessions (a later run builds them again)."""
        self.sessions.clear()

    def new_arena(self, nbytes: int):
        if self.arena_kind == "host":
            return HostArena(nbytes)
        return OrtArena(nbytes, self.device, self.provider)

    def _poison_schedule(self) -> PoisonSchedule:
        """Ownership over the order: a tensor owns its bytes from the position after
        its producer to its last read (everything else is free and gets poisoned)."""
        spans = {name: self._span(name) for name in self.plan.tensors}
        owned = {name: (t.live[0] + 1, t.live[1]) for name, t in self.plan.tensors.items()
                 if t.bytes and t.live[1] > t.live[0]}
        return PoisonSchedule(self.plan.arena_bytes, spans, owned)

    def run(self, feeds, reference, check_outputs: bool = False, on_step=None):
        """(graph outputs read back as raw bytes, first Mismatch or None, reads
        compared, outputs compared as produced).

        Every tensor a node reads is compared with the ``reference`` (a
        :class:`~graphmem.verify.reference.RefValues`) before the node runs; with
        ``check_outputs``, every output also as soon as it is written. The graph outputs
        are read back after the last node."""
        plan, graph = self.plan, self.graph
        arena = self.new_arena(plan.arena_bytes)
        arena.poison([(0, plan.arena_bytes)])
        for name, value in feeds.items():
            if name in plan.tensors and value.nbytes:
                arena.write(plan.tensors[name].offset, value)
        self.nodes_run = self.nodes_skipped = 0
        reads = outputs = 0
        total = len(plan.order)
        # Only bytes written since they were last poisoned need filling again: the
        # cost follows the bytes the nodes write, not the arena size times the nodes.
        schedule = self._poison_schedule()
        schedule.written(n for n in feeds if n in plan.tensors)
        spaces = set(graph.workspaces.values())
        reference.start(feeds)  # a reference in step with this run starts over
        for pos, idx in enumerate(plan.order):
            arena.poison(schedule.step(pos))
            node = self.by_index[idx]
            reference.step(pos)  # (a LiveReference runs the node first)
            if self._all_slices(node):
                self.nodes_skipped += 1  # nothing read: the Concat's bytes are its inputs'
            else:
                for t in dict.fromkeys(x for x in node.reads if x in plan.tensors):
                    reads += 1
                    if not self._same(arena, t, reference):
                        return {}, self._explain(pos, node, t, arena, reference, read=True), \
                            reads, outputs
                if node.index in graph.scopes:
                    self.control_flow.run(arena, self.top_env, node)
                else:
                    self.runner.run(arena, node, self.offsets)
                self.nodes_run += 1
            schedule.written(o for o in node.outputs if o)
            if check_outputs:
                for t in (o for o in node.outputs if o and o not in spaces and o in reference):
                    outputs += 1
                    if not self._same(arena, t, reference):
                        return {}, self._explain(pos, node, t, arena, reference), reads, outputs
            reference.done(pos)  # what no later comparison needs is dropped
            self.sessions.evict(node.index)  # a session of its own (baked weights)
            if self.after_node is not None:
                self.after_node(node)
            if on_step:
                on_step(pos + 1, total)
        final = {name: self._raw(arena, name).copy() for name in dict.fromkeys(graph.outputs)}
        return final, None, reads, outputs

    def _raw(self, arena, name: str) -> np.ndarray:
        return raw(arena, self.plan.tensors[name].offset, self.graph.tensors[name].bytes)

    def _same(self, arena, name: str, reference) -> bool:
        got, want = self._raw(arena, name), reference.raw(name)
        spread = reference.spread.get(name, 0.0)
        values = ((typed(got, self.graph, name), typed(want, self.graph, name))
                  if spread else None)
        return same(got, want, spread, values)

    def _diff(self, arena, name: str, reference) -> float:
        got, want = self._raw(arena, name), reference.raw(name)
        try:
            return max_abs_diff(typed(got, self.graph, name), typed(want, self.graph, name))
        except Exception:  # a type numpy cannot hold: count differing bytes as the diff
            return float(np.count_nonzero(got != want))

    def _all_slices(self, node: Node) -> bool:
        if not is_concat(node):
            return False
        out = node.outputs[0]
        ins = [t for t in node.inputs if t]
        return bool(ins) and all(t in self.plan.tensors and self.plan.tensors[t].slice_of == out
                                 for t in ins)

    # ----------------------------------------------------------------- explanations

    def _span(self, name: str) -> tuple[int, int]:
        t = self.plan.tensors[name]
        return t.offset, t.offset + self.graph.tensors[name].bytes

    def _overlaps(self, name: str, after: int, upto: int) -> list[str]:
        """Tensors sharing bytes with ``name`` and written at a position in (after, upto]."""
        a, b = self._span(name)
        out = []
        for other, t in self.plan.tensors.items():
            if other == name or not (after < t.live[0] <= upto):
                continue
            c, d = self._span(other)
            if c < b and a < d:
                out.append(other)
        return out

    def _describe(self, name: str) -> str:
        t: TensorPlan = self.plan.tensors[name]
        a, b = self._span(name)
        return f"{name!r} (bytes [{a}, {b}), live {list(t.live)})"

    def _explain(self, pos: int, node: Node, tensor: str, arena, reference, *,
                 read: bool = False) -> Mismatch:
        diff = self._diff(arena, tensor, reference)
        reasons, names = [], []
        if read:
            t = self.plan.tensors[tensor]
            why = []
            if t.live[1] < pos:
                why.append(f"the plan ends its live range at position {t.live[1]}, so its "
                           "bytes were free (poisoned) before this read")
            # written before this node ran: its own outputs come after its reads
            over = self._overlaps(tensor, t.live[0], pos - 1)
            if over:
                why.append("written over by " + ", ".join(self._describe(o) for o in over))
            names += over
            reasons.append(f"{self._describe(tensor)} changed after it was written"
                           + (": " + "; ".join(why) if why else ""))
        else:
            # The inputs were intact, so the node's own outputs overlap its inputs or
            # each other in a way the kernel does not support.
            a, b = self._span(tensor)
            for other in dict.fromkeys([*node.reads, *node.outputs]):
                if not other or other == tensor or other not in self.plan.tensors:
                    continue
                c, d = self._span(other)
                if c < b and a < d:
                    names.append(other)
            if names:
                reasons.append(f"its inputs were intact; output {self._describe(tensor)} "
                               "shares bytes with " + ", ".join(self._describe(o) for o in names)
                               + " at this step")
            else:
                reasons.append("its inputs were intact and its output overlaps no other "
                               "tensor of this node")
        return Mismatch(pos, node.label, tensor, diff, tuple(dict.fromkeys(names)),
                        tuple(reasons), read)

    def explain_output(self, outputs: list[OutputCheck]) -> Mismatch:
        """A graph output changed after its producer ran (every node's output matched)."""
        bad = next(o for o in outputs if not o.ok)
        t = self.plan.tensors[bad.name]
        end = len(self.plan.order)
        over = self._overlaps(bad.name, t.live[0], end)
        reasons = [f"it matched when written at position {t.live[0]} but was later "
                   + ("written over by " + ", ".join(self._describe(o) for o in over)
                      if over else "changed")]
        return Mismatch(end, "", bad.name, bad.max_abs_diff, tuple(over), tuple(reasons))
