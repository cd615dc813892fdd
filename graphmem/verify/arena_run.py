"""Running a model node by node inside one planned arena, and explaining a difference."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import onnx

from graphmem.verify.arena import HostArena, OrtArena
from graphmem.verify.compare import OutputCheck, close, max_abs_diff, tolerance_dtypes
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph, Node
from graphmem.core.ops import is_concat
from graphmem.verify.node_sessions import NodeSessions, numpy_dtype, runtime_message
from graphmem.verify.poison import PoisonSchedule
from graphmem.plan.format import Plan, TensorPlan


@dataclass(frozen=True)
class Mismatch:
    """Where the arena run first disagrees with the reference, and why it might."""

    position: int  # in the plan's order; len(order) for "after the last node"
    node: str  # the node's label, or "" for a graph output changed after its producer
    tensor: str  # the output that differs
    max_abs_diff: float
    overlapping: tuple[str, ...]  # tensors whose bytes overlap the culprit's there
    reasons: tuple[str, ...]

    def describe(self) -> str:
        where = (f"{self.node} at position {self.position}" if self.node
                 else f"graph output {self.tensor!r} at the end of the run")
        diff = "NaN" if np.isnan(self.max_abs_diff) else f"{self.max_abs_diff:.3g}"
        head = f"first difference at {where}: output {self.tensor!r} differs (max abs diff {diff})"
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
        self.sessions = NodeSessions(model, dict(graph.tensors), provider)
        self.tolerance = tolerance_dtypes(graph)
        self.nodes_run = self.nodes_skipped = 0
        self._device_constants: dict[str, object] = {}
        self.model = model
        self.control_flow = None
        if graph.scopes:
            from graphmem.verify.control_flow import ControlFlow, Env
            self.control_flow = ControlFlow(self)
            self.top_env = Env(plan, graph, 0, constants, model.graph, model, provider)

    def _new_arena(self):
        if self.arena_kind == "host":
            return HostArena(self.plan.arena_bytes)
        return OrtArena(self.plan.arena_bytes, self.device, self.provider)

    def _poison_schedule(self) -> PoisonSchedule:
        """Ownership over the order: a tensor owns its bytes from the position after
        its producer to its last read (everything else is free and gets poisoned)."""
        spans = {name: self._span(name) for name in self.plan.tensors}
        owned = {name: (t.live[0] + 1, t.live[1]) for name, t in self.plan.tensors.items()
                 if t.bytes and t.live[1] > t.live[0]}
        return PoisonSchedule(self.plan.arena_bytes, spans, owned)

    def run(self, feeds, reference, on_step):
        """(graph outputs read back, first Mismatch or None, tensors checked)."""
        plan, graph = self.plan, self.graph
        arena = self._new_arena()
        arena.poison([(0, plan.arena_bytes)])
        for name, value in feeds.items():
            if name in plan.tensors and value.nbytes:
                arena.write(plan.tensors[name].offset, value)
        self.nodes_run = self.nodes_skipped = 0
        checked = 0
        total = len(plan.order)
        # Only bytes written since they were last poisoned need filling again: the
        # cost follows the bytes the nodes write, not the arena size times the nodes.
        schedule = self._poison_schedule()
        schedule.written(n for n in feeds if n in plan.tensors)
        for pos, idx in enumerate(plan.order):
            arena.poison(schedule.step(pos))
            node = self.by_index[idx]
            bad_inputs = []
            if reference is not None:
                for t in dict.fromkeys(x for x in node.inputs if x in plan.tensors):
                    if not close(self._read(arena, t), reference[t], self._dtype(t),
                                 self.provider):
                        bad_inputs.append(t)
            if self._all_slices(node):
                self.nodes_skipped += 1
            elif node.index in graph.scopes:
                self.control_flow.run(arena, self.top_env, node)
                self.nodes_run += 1
            else:
                self._run_node(arena, node)
                self.nodes_run += 1
            schedule.written(o for o in node.outputs if o)
            if reference is not None:
                for t in (o for o in node.outputs if o and o in reference):
                    got = self._read(arena, t)
                    checked += 1
                    if not close(got, reference[t], self._dtype(t), self.provider):
                        diff = max_abs_diff(got, np.asarray(reference[t]))
                        return {}, self._explain(pos, node, t, diff, bad_inputs), checked
            if on_step:
                on_step(pos + 1, total)
        final = {name: self._read(arena, name) for name in graph.outputs}
        return final, None, checked

    def _dtype(self, name: str) -> str:
        """The dtype whose tolerance compares ``name`` (see ``tolerance_dtypes``)."""
        return self.tolerance.get(name) or self.graph.tensors[name].dtype

    def _read(self, arena, name: str) -> np.ndarray:
        t = self.graph.tensors[name]
        return arena.read(self.plan.tensors[name].offset, numpy_dtype(t), t.shape)

    def _all_slices(self, node: Node) -> bool:
        if not is_concat(node):
            return False
        out = node.outputs[0]
        ins = [t for t in node.inputs if t]
        return bool(ins) and all(t in self.plan.tensors and self.plan.tensors[t].slice_of == out
                                 for t in ins)

    def _run_node(self, arena, node: Node) -> None:
        sess, ins, outs = self.sessions.session(node.index)
        io = sess.io_binding()
        for local, name in zip(ins, node.inputs):
            if not local:
                continue
            if name in self.plan.tensors:
                t = self.graph.tensors[name]
                io.bind_input(local, self.device, 0, numpy_dtype(t), list(t.shape),
                              arena.ptr + self.plan.tensors[name].offset)
            else:
                self._bind_constant(io, local, name)
        for local, name in zip(outs, node.outputs):
            if not local:
                continue
            t = self.graph.tensors[name]
            io.bind_output(local, self.device, 0, numpy_dtype(t), list(t.shape),
                           arena.ptr + self.plan.tensors[name].offset)
        try:
            sess.run_with_iobinding(io)
        except Exception as exc:
            raise GraphmemError(f"ONNX Runtime failed on {node.label}: "
                                f"{runtime_message(exc, 1000)}") from None

    def _bind_constant(self, io, local: str, name: str) -> None:
        # np.ascontiguousarray makes a 0-d value 1-d: a scalar Gather index then gives
        # an output of one more dimension than planned
        value = np.asarray(self.constants[name], order="C")
        # Integer constants are shapes, axes, pads: kernels read them on the host.
        if self.device == "cpu" or value.dtype.kind in "iub":
            io.bind_cpu_input(local, value)
            return
        import onnxruntime as ort
        ov = self._device_constants.get(name)
        if ov is None:  # weights go to the device once, not once per node run
            ov = ort.OrtValue.ortvalue_from_numpy(value, self.device, 0)
            self._device_constants[name] = ov
        io.bind_ortvalue_input(local, ov)

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

    def _explain(self, pos: int, node: Node, output: str, diff: float,
                 bad_inputs: list[str]) -> Mismatch:
        reasons, names = [], []
        for x in bad_inputs:
            t = self.plan.tensors[x]
            why = []
            if t.live[1] < pos:
                why.append(f"the plan ends its live range at position {t.live[1]}, so its "
                           "bytes were free (poisoned) before this read")
            # written before this node ran: its own outputs come after its reads
            over = self._overlaps(x, t.live[0], pos - 1)
            if over:
                why.append("written over by " + ", ".join(self._describe(o) for o in over))
            names += over
            reasons.append(f"its input {self._describe(x)} changed after it was written"
                           + (": " + "; ".join(why) if why else ""))
        if not bad_inputs:
            # The inputs were intact, so the node's own outputs overlap its inputs or
            # each other in a way the kernel does not support.
            a, b = self._span(output)
            for other in dict.fromkeys([*node.inputs, *node.outputs]):
                if not other or other == output or other not in self.plan.tensors:
                    continue
                c, d = self._span(other)
                if c < b and a < d:
                    names.append(other)
            if names:
                reasons.append(f"its inputs were intact; output {self._describe(output)} "
                               "shares bytes with " + ", ".join(self._describe(o) for o in names)
                               + " at this step")
            else:
                reasons.append("its inputs were intact and its output overlaps no other "
                               "tensor of this node")
        return Mismatch(pos, node.label, output, diff, tuple(dict.fromkeys(names)),
                        tuple(reasons))

    def explain_output(self, final, reference, outputs: list[OutputCheck]) -> Mismatch:
        """A graph output changed after its producer ran (every node's output matched)."""
        bad = next(o for o in outputs if not o.ok)
        t = self.plan.tensors[bad.name]
        end = len(self.plan.order)
        over = self._overlaps(bad.name, t.live[0], end)
        reasons = [f"it matched when written at position {t.live[0]} but was later "
                   + ("written over by " + ", ".join(self._describe(o) for o in over)
                      if over else "changed")]
        return Mismatch(end, "", bad.name, bad.max_abs_diff, tuple(over), tuple(reasons))
