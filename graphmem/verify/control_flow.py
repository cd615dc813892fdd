"""Running If, Loop and Scan nodes inside the arena, their bodies at their planned places.

The verifier runs a control-flow node itself: it evaluates the condition or the trip
count, and for each iteration runs the body's nodes one at a time (one-node ONNX
Runtime sessions, as for the top-level nodes) with every body tensor bound at the
workspace's offset plus its offset in the body's plan, poisoning the workspace bytes
that no live body tensor owns before each step. Between iterations it copies as
docs/plan-format.md ("Nested scopes") says: every formal output is read before any
formal input is written (loop-carried values), a scan output goes to its slice of the
node's output, and after the last iteration the carried values to the node's outputs.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from graphmem.core.ir import Graph, Node
from graphmem.errors import GraphmemError
from graphmem.plan.format import Plan
from graphmem.core.scopes import graph_for_plan, is_workspace
from graphmem.verify.node_sessions import NodeSessions, numpy_dtype, runtime_message


class Env:
    """Where the tensors of one scope are: at ``base`` + their planned offset in the
    arena, or a constant value here, or (read from an enclosing scope) in ``parent``."""

    def __init__(self, plan: Plan, graph: Graph, base: int, values: Mapping[str, np.ndarray],
                 proto: onnx.GraphProto, model: onnx.ModelProto, provider: str,
                 parent: "Env | None" = None, cache: dict | None = None):
        self.plan, self.graph, self.base, self.values = plan, graph, base, values
        self.proto, self.parent, self.model = proto, parent, model
        self.provider = provider
        # one NodeSessions per body, shared by every Env of that body (a Loop inside a
        # Loop makes a new Env of its body each outer iteration)
        self.cache = cache if cache is not None else {}

    def sessions(self) -> NodeSessions:
        """One-node sessions for this scope's nodes (the top level's are ArenaRun's)."""
        found = self.cache.get(id(self.proto))
        if found is None:
            m = onnx.ModelProto()
            m.ir_version = self.model.ir_version
            m.opset_import.extend(self.model.opset_import)
            m.graph.CopyFrom(self.proto)
            tensors = dict(self.graph.tensors)
            env = self.parent
            while env is not None:  # outer reads are typed by their own scope
                for k, v in env.graph.tensors.items():
                    tensors.setdefault(k, v)
                env = env.parent
            # the proto is kept with its sessions, so that its id is not reused
            found = self.cache[id(self.proto)] = (NodeSessions(m, tensors, self.provider),
                                                  self.proto)
        return found[0]

    def locate(self, name: str):
        """(scope that owns ``name``, absolute offset or None, constant value or None)."""
        env = self
        while env is not None:
            if name in env.plan.tensors:
                return env, env.base + env.plan.tensors[name].offset, None
            if name in env.values:
                return env, None, env.values[name]
            env = env.parent
        raise GraphmemError(f"the verifier cannot find tensor {name!r} in any scope")

    def read(self, arena, name: str) -> np.ndarray:
        env, at, value = self.locate(name)
        if at is None:
            return np.asarray(value)
        t = env.graph.tensors[name]
        return arena.read(at, numpy_dtype(t), t.shape)

    def write(self, arena, name: str, value: np.ndarray) -> None:
        env, at, _ = self.locate(name)
        t = env.graph.tensors[name]
        value = np.asarray(value, dtype=numpy_dtype(t)).reshape(t.shape)
        if at is None:
            raise GraphmemError(f"the verifier cannot write constant {name!r}")
        if value.nbytes:
            arena.write(at, value)

    def write_slice(self, arena, name: str, axis: int, index: int, value: np.ndarray) -> None:
        """Slice ``index`` along ``axis`` of ``name``: its own bytes (contiguous on axis 0)."""
        env, at, _ = self.locate(name)
        t = env.graph.tensors[name]
        value = np.asarray(value, dtype=numpy_dtype(t))
        axis = axis + len(t.shape) if axis < 0 else axis
        if axis == 0:
            if value.nbytes:
                arena.write(at + index * value.nbytes, value)
            return
        full = arena.read(at, numpy_dtype(t), t.shape)
        np.moveaxis(full, axis, 0)[index] = value
        arena.write(at, full)


def body_values(proto: onnx.GraphProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in proto.initializer}


class ControlFlow:
    """Runs control-flow nodes of the scope ``env`` in ``arena``; ``run_node(env,
    node)`` runs an ordinary node of a scope (bound by its Env)."""

    def __init__(self, arena_run):
        self.ar = arena_run

    def run(self, arena, env: Env, node: Node) -> None:
        proto = env.proto.node[node.index]
        bodies = {a.name: a.g for a in proto.attribute if a.type == onnx.AttributeProto.GRAPH}
        plans = {s.attr: s for s in env.plan.scopes if s.node == node.index}
        scopes = {s.attr: s for s in env.graph.scopes[node.index]}
        ws = plans[next(iter(plans))].workspace
        _, base, _ = env.locate(ws)

        def body(attr: str) -> Env:
            plan = plans[attr].plan  # its graph with the workspaces of its own bodies
            graph = graph_for_plan(scopes[attr].graph, plan)
            return Env(plan, graph, base, body_values(bodies[attr]), bodies[attr], env.model,
                       env.provider, env, env.cache)
        ins = node.inputs
        if node.op_type == "If":
            cond = bool(np.asarray(env.read(arena, ins[0])).reshape(-1)[0])
            branch = "then_branch" if cond else "else_branch"
            b = body(branch)
            self._steps(arena, b)
            outs = [b.read(arena, o) for o in scopes[branch].formal_outputs]
            for name, v in zip(node.outputs, outs):
                if name and not is_workspace(env.graph, node, name):
                    env.write(arena, name, v)
            return
        b = body("body")
        s = scopes["body"]
        fin, fout = s.formal_inputs, s.formal_outputs
        real_outs = [o for o in node.outputs if not is_workspace(env.graph, node, o)]
        if node.op_type == "Loop":
            trips = env.read(arena, ins[0]) if ins[0] else None
            trips = None if trips is None else int(np.asarray(trips).reshape(-1)[0])
            cond = (bool(np.asarray(env.read(arena, ins[1])).reshape(-1)[0])
                    if len(ins) > 1 and ins[1] else True)
            carried = list(ins[2:])
            k = len(carried)
            self._clear(arena, b)
            for name, src in zip(fin[2:], carried):
                b.write(arena, name, env.read(arena, src))
            i = 0
            while cond and (trips is None or i < trips):
                b.write(arena, fin[0], np.array(i, np.int64))
                b.write(arena, fin[1], np.array(cond))
                self._steps(arena, b)
                outs = [b.read(arena, o) for o in fout]  # all read before any is written
                cond = bool(np.asarray(outs[0]).reshape(-1)[0])
                for name, v in zip(fin[2:], outs[1:1 + k]):
                    b.write(arena, name, v)
                for name, v in zip(real_outs[k:], outs[1 + k:]):
                    if name:
                        env.write_slice(arena, name, 0, i, v)
                i += 1
            for name, src in zip(real_outs[:k], fin[2:]):
                if name:
                    env.write(arena, name, b.read(arena, src))
            return
        # Scan
        attrs = node.attrs
        m = int(attrs["num_scan_inputs"])
        n_states = len(ins) - m
        in_axes = list(attrs.get("scan_input_axes") or [0] * m)
        in_dirs = list(attrs.get("scan_input_directions") or [0] * m)
        n_out = len(fout) - n_states
        out_axes = list(attrs.get("scan_output_axes") or [0] * n_out)
        out_dirs = list(attrs.get("scan_output_directions") or [0] * n_out)
        scanned = [env.read(arena, t) for t in ins[n_states:]]
        length = scanned[0].shape[in_axes[0]] if scanned else 0
        self._clear(arena, b)
        for name, src in zip(fin[:n_states], ins[:n_states]):
            b.write(arena, name, env.read(arena, src))
        for i in range(length):
            for j, x in enumerate(scanned):
                at = length - 1 - i if in_dirs[j] else i
                b.write(arena, fin[n_states + j], np.take(x, at, axis=in_axes[j]))
            self._steps(arena, b)
            outs = [b.read(arena, o) for o in fout]
            for name, v in zip(fin[:n_states], outs[:n_states]):
                b.write(arena, name, v)
            for j, (name, v) in enumerate(zip(real_outs[n_states:], outs[n_states:])):
                if name:
                    at = length - 1 - i if out_dirs[j] else i
                    env.write_slice(arena, name, out_axes[j], at, v)
        for name, src in zip(real_outs[:n_states], fin[:n_states]):
            if name:
                env.write(arena, name, b.read(arena, src))

    def _clear(self, arena, b: Env) -> None:
        """Poison the whole workspace before a node's first iteration."""
        if b.plan.arena_bytes:
            arena.poison([(b.base, b.base + b.plan.arena_bytes)])

    def _steps(self, arena, b: Env) -> None:
        """One pass of the body: its nodes in its plan's order, the workspace bytes no
        live body tensor owns poisoned before each."""
        plan, graph = b.plan, b.graph
        by_index = {n.index: n for n in graph.nodes}
        for pos, idx in enumerate(plan.order):
            live = _merged([(b.base + t.offset, b.base + t.offset + t.bytes)
                           for t in plan.tensors.values()
                           if t.bytes and t.live[0] + 1 <= pos <= t.live[1]])
            free = [(lo, hi) for lo, hi in _free_ranges(b.base + plan.arena_bytes, live)
                    if hi > b.base]
            arena.poison([(max(lo, b.base), hi) for lo, hi in free])
            node = by_index[idx]
            if node.index in graph.scopes:
                self.run(arena, b, node)
            else:
                self.run_node(arena, b, node)

    def run_node(self, arena, b: Env, node: Node) -> None:
        sess, ins, outs = b.sessions().session(node.index)
        io = sess.io_binding()
        device = self.ar.device
        for local, name in zip(ins, node.inputs):
            if not local:
                continue
            env, at, value = b.locate(name)
            if at is None:
                io.bind_cpu_input(local, np.asarray(value, order="C"))
            else:
                t = env.graph.tensors[name]
                io.bind_input(local, device, 0, numpy_dtype(t), list(t.shape), arena.ptr + at)
        for local, name in zip(outs, node.outputs):
            if not local:
                continue
            env, at, _ = b.locate(name)
            t = env.graph.tensors[name]
            io.bind_output(local, device, 0, numpy_dtype(t), list(t.shape), arena.ptr + at)
        try:
            sess.run_with_iobinding(io)
        except Exception as exc:
            raise GraphmemError(f"ONNX Runtime failed on {node.label} in a body: "
                                f"{runtime_message(exc, 1000)}") from None
        self.ar.nodes_run += 1


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-empty, non-touching ranges covering the same bytes as ``ranges``."""
    out: list[list[int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def _free_ranges(nbytes: int, owned: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The byte ranges of ``[0, nbytes)`` that no range of the merged ``owned`` covers.
    (A body's steps are few and its tensors fewer: the top level's segment schedule,
    graphmem/verify/poison.py, is not needed here.)"""
    out = []
    pos = 0
    for start, end in owned:
        if start > pos:
            out.append((pos, min(start, nbytes)))
        pos = max(pos, end)
        if pos >= nbytes:
            break
    if pos < nbytes:
        out.append((pos, nbytes))
    return [(s, e) for s, e in out if e > s]
