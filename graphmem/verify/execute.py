"""Running one node of the model on its one-node session, its tensors bound at given
addresses in an arena: the step both the plan's run and the reference run take."""
from __future__ import annotations

import re
from typing import Mapping

import numpy as np

from graphmem.core.ir import Graph, Node
from graphmem.errors import GraphmemError
from graphmem.verify.node_sessions import (NodeSessions, bind_at, element_type, numpy_dtype,
                                           runtime_message)


class NodeFailed(GraphmemError):
    """ONNX Runtime failed to run a node (``node``): on these inputs, as a rule."""

    def __init__(self, message: str, node: Node, error: str):
        super().__init__(message)
        self.node, self.error = node, error


class ShapeRefused(NodeFailed):
    """ONNX Runtime refused to write a node's output into its planned slot: the run
    computed another shape for it than the plan's (``tensor``, ``planned``, ``actual``:
    its name and the two shapes in words): the plan is wrong, not the inputs."""

    def __init__(self, message: str, node: Node, error: str, tensor: str, planned: str,
                 actual: str):
        super().__init__(message, node, error)
        self.tensor, self.planned, self.actual = tensor, planned, actual


# ONNX Runtime's words for an output bound at one shape that the run computes at another
_REFUSED = re.compile(r"output OrtValue provided for output '([^']*)'(?: of node '[^']*' "
                      r"\([^)]*\))? has shape \{([^}]*)\} but the computed output shape "
                      r"for this run is \{([^}]*)\}")


def raw(arena, offset: int, nbytes: int) -> np.ndarray:
    """``nbytes`` of ``arena`` from ``offset`` as uint8: a view of a host arena (no copy),
    a copy of a device one."""
    buf = getattr(arena, "buf", None)
    if buf is not None:
        return buf[offset:offset + nbytes]
    return arena.read(offset, np.uint8, (nbytes,))


class NodeRunner:
    """Runs nodes of ``graph`` with ``sessions``; weights and folded constants come from
    ``constants`` (uploaded once to a device)."""

    def __init__(self, graph: Graph, sessions: NodeSessions, constants: Mapping[str, np.ndarray],
                 device: str):
        self.graph, self.sessions, self.constants, self.device = graph, sessions, constants, device
        self._device_constants: dict[str, object] = {}
        self._outer: dict[int, tuple[str, ...]] = {}

    def run(self, arena, node: Node, offsets: Mapping[str, int], *, implicit: bool = False,
            what: str = "") -> None:
        """Run ``node`` with every tensor of ``offsets`` bound at ``arena.ptr`` plus its
        offset. With ``implicit`` (a control-flow node run whole by ONNX Runtime) the
        tensors its bodies read from this scope are inputs of the session too."""
        extra = self._outer_reads(node) if implicit else ()
        sess, ins, outs = self.sessions.session(node.index, extra)
        io = sess.io_binding()
        tensors = self.graph.tensors
        for local, name in zip(ins, (*node.inputs, *extra)):
            if not local:
                continue
            if name in offsets:
                bind_at(io, local, tensors[name], self.device, arena.ptr + offsets[name])
            else:
                self._bind_constant(io, local, name)
        for local, name in zip(outs, node.outputs):
            if local:
                bind_at(io, local, tensors[name], self.device, arena.ptr + offsets[name],
                        output=True)
        try:
            sess.run_with_iobinding(io)
        except Exception as exc:
            error = runtime_message(exc, 1000)
            m = _REFUSED.search(str(exc))
            if m and m[1] in outs:
                tensor = node.outputs[list(outs).index(m[1])]
                raise ShapeRefused(f"ONNX Runtime failed on {node.label}{what}: {error}", node,
                                   error, tensor, m[2], m[3]) from None
            raise NodeFailed(f"ONNX Runtime failed on {node.label}{what}: {error}", node,
                             f"ONNX Runtime failed on {node.label}: {error}") from None

    def _outer_reads(self, node: Node) -> tuple[str, ...]:
        """What the bodies of a control-flow node read from this scope, constants too."""
        import onnx
        from graphmem.frontend.control_flow import outer_reads
        found = self._outer.get(node.index)
        if found is None:
            proto = self.sessions.model.graph.node[node.index]
            names = set()
            for a in proto.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    names |= outer_reads(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        names |= outer_reads(g)
            found = self._outer[node.index] = tuple(sorted(names))
        return found

    def _bind_constant(self, io, local: str, name: str) -> None:
        # np.ascontiguousarray makes a 0-d value 1-d: a scalar Gather index then gives
        # an output of one more dimension than planned
        value = np.asarray(self.constants[name], order="C")
        t = self.graph.tensors.get(name)
        # Integer constants are shapes, axes, pads: kernels read them on the host.
        if self.device == "cpu" or value.dtype.kind in "iub":
            if t is not None and value.dtype.kind not in "biufc":
                # bfloat16, float8 (ml_dtypes): bound by address and ONNX type
                io.bind_input(local, "cpu", 0, element_type(t), list(value.shape),
                              value.ctypes.data)
            else:
                io.bind_cpu_input(local, value)
            return
        import onnxruntime as ort
        ov = self._device_constants.get(name)
        if ov is None:  # weights go to the device once, not once per node run
            ov = ort.OrtValue.ortvalue_from_numpy(value, self.device, 0)
            self._device_constants[name] = ov
        io.bind_ortvalue_input(local, ov)


def typed(data: np.ndarray, graph: Graph, name: str) -> np.ndarray:
    """Raw bytes of tensor ``name`` as its values (numpy's dtype for it, its shape)."""
    t = graph.tensors[name]
    return data.view(numpy_dtype(t)).reshape(t.shape)
