"""The verifier's reference: the same one-node sessions as the plan's run, every tensor in
a buffer of its own; and the whole-model session, a second opinion.

The plan's run and the reference run the same nodes on the same sessions (the same
kernels, provider and options), in the same order, on the same inputs; they differ only
in where tensors live. The reference gives every tensor bytes no other tensor shares,
each at an address congruent modulo 64 to the one the plan gives it (so a kernel that
picks its code path by alignment picks the same one). A deterministic kernel then gives
the same bits in both runs, and any difference is the plan's doing. A provider that
is not deterministic (CUDA's atomics) runs the reference twice: the spread of the two
is the tolerance. On the CPU (deterministic) the reference is a :class:`LiveReference`,
run in step with the plan's run: it holds a tensor only until its last reader has been
compared, where :class:`ReferenceRun` (the two runs of a provider that is not
deterministic) holds every tensor of the run.

The whole-model ``InferenceSession`` (graph outputs only) is compared with the
reference at per-dtype tolerances: a line of the report that can warn (the one-node
kernels differ from the whole model's), never decide the plan's verdict.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx

from graphmem.frontend.folding import evaluate_constants
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph
from graphmem.frontend.reader import read_model
from graphmem.verify.compare import OutputCheck, close, max_abs_diff, tolerance_dtypes
from graphmem.verify.arena import POISON
from graphmem.verify.execute import NodeFailed, NodeRunner, ShapeRefused, raw, typed
from graphmem.verify.inputs import feeding, random_inputs  # noqa: F401 (re-exported)
from graphmem.verify.node_sessions import bind_at, runtime_message, session_options


def model_with_weights(graph: Graph) -> onnx.ModelProto:
    if not graph.model_path:
        raise GraphmemError("the graph has no model path; the verifier needs the ONNX file")
    return read_model(graph.model_path, load_weights=True)


def load_weights(graph: Graph):
    """The model of ``graph`` with its external weights mapped, not read
    (:class:`~graphmem.verify.weights.Weights`)."""
    from graphmem.verify.weights import Weights
    if not graph.model_path:
        raise GraphmemError("the graph has no model path; the verifier needs the ONNX file")
    return Weights(graph.model_path)


def constant_values(model: onnx.ModelProto, graph: Graph,
                    weights: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every initializer and folded constant a running node reads, evaluated once;
    ``weights``: initializers already at hand (mapped: :func:`load_weights`), not read
    again."""
    from pathlib import Path
    rank = {name: i for i, name in enumerate(graph.constants)}
    folded = [model.graph.node[i] for i in graph.folded_nodes]
    # production order (graph.constants is in it), so each node's inputs come first
    folded.sort(key=lambda n: min((rank.get(o, len(rank)) for o in n.output if o),
                                  default=len(rank)))
    failures: dict[str, str] = {}
    values = evaluate_constants(model, folded, graph.tensors,
                                base_dir=str(Path(graph.model_path).parent),
                                initializer_values=weights, failures=failures)
    static = graph.weights | set(graph.constants)
    for node in graph.nodes:
        for t in node.inputs:
            if t in static and t not in values:
                why = f": {failures[t]}" if t in failures else ""
                raise GraphmemError(f"cannot evaluate constant {t!r}, read by "
                                    f"{node.label}{why}")
    return values


# Each tensor of the reference sits at an address congruent to its planned one modulo
# this (a cache line, the widest vector a CPU kernel loads).
CONGRUENCE = 64


def separate_layout(sizes: Mapping[str, int], planned: Mapping[str, int]) -> tuple[dict[str, int], int]:
    """(offset of every tensor, bytes in all): each tensor after the previous one, no two
    sharing a byte, each offset congruent to its ``planned`` one modulo CONGRUENCE."""
    out, end = {}, 0
    for name, nbytes in sizes.items():
        want = planned.get(name, 0) % CONGRUENCE
        at = end + (want - end) % CONGRUENCE
        out[name] = at
        end = at + nbytes
    return out, end


class RefValues:
    """The reference run's tensors, on the host: raw bytes and values by name; with
    ``spread``, the largest difference between two runs per tensor (0: deterministic)."""

    def __init__(self, graph: Graph, data: np.ndarray, offsets: Mapping[str, int],
                 spread: Mapping[str, float] | None = None):
        self.graph, self.data, self.offsets = graph, data, offsets
        self.spread = spread or {}

    def start(self, feeds) -> None:
        """(The run is done: nothing to do as the plan's run goes; see LiveReference.)"""

    def step(self, pos: int) -> None:
        pass

    def complete(self) -> None:
        pass

    def done(self, pos: int) -> None:
        pass

    def __contains__(self, name: str) -> bool:
        return name in self.offsets

    def raw(self, name: str) -> np.ndarray:
        o = self.offsets[name]
        return self.data[o:o + self.graph.tensors[name].bytes]

    def value(self, name: str) -> np.ndarray:
        return typed(self.raw(name), self.graph, name)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.value(name)


class ReferenceRun:
    """The plan's nodes, in its order, on ``runner``'s sessions, every tensor (of
    ``graph``, the plan's graph) in bytes of its own. A control-flow node runs whole on
    ONNX Runtime (its If/Loop/Scan kernel runs the body), the tensors its bodies read
    from outside bound as inputs of its session; its workspace is not needed."""

    def __init__(self, graph: Graph, order: list[int], planned: Mapping[str, int],
                 runner: NodeRunner, new_arena, deterministic: bool):
        self.graph, self.order, self.runner = graph, order, runner
        self.by_index = {n.index: n for n in graph.nodes}
        spaces = set(graph.workspaces.values())
        sizes = {name: graph.tensors[name].bytes for name in planned if name not in spaces}
        self.offsets, self.nbytes = separate_layout(sizes, planned)
        self.new_arena, self.deterministic = new_arena, deterministic

    def run(self, feeds: Mapping[str, np.ndarray]) -> RefValues:
        first = self._once(feeds)
        if self.deterministic:
            return first
        second = self._once(feeds)
        spread = {}
        for name in self.offsets:
            a, b = first.raw(name), second.raw(name)
            if not np.array_equal(a, b):
                spread[name] = max_abs_diff(first.value(name), second.value(name))
        return RefValues(self.graph, first.data, self.offsets, spread)

    def _once(self, feeds: Mapping[str, np.ndarray]) -> RefValues:
        arena = self.new_arena(self.nbytes)
        arena.poison([(0, self.nbytes)])  # bytes a kernel leaves unwritten: as in the plan's run
        for name, value in feeds.items():
            if name in self.offsets and value.nbytes:
                arena.write(self.offsets[name], value)
        scopes = self.graph.scopes
        for idx in self.order:
            node = self.by_index[idx]
            self.runner.run(arena, node, self.offsets, implicit=idx in scopes,
                            what=" in the reference run (every tensor in its own buffer)")
            self.runner.sessions.evict(idx)  # a session of its own (baked weights)
        data = raw(arena, 0, self.nbytes)
        return RefValues(self.graph, data, self.offsets)


class ReferenceFailed(GraphmemError):
    """ONNX Runtime failed on a node of the reference run (the inputs' fault, as a rule:
    the reference shares no bytes)."""

    def __init__(self, failed: NodeFailed):
        super().__init__(str(failed))
        self.node, self.error = failed.node, failed.error


class _Addresses:
    """An "arena" at address 0, so that offsets are addresses (each tensor's own buffer)."""

    ptr = 0
    device = "cpu"


class LiveReference:
    """The reference run in step with the plan's run (host memory, a deterministic
    provider): node ``pos`` of the order runs here just before the plan's run reads its
    inputs, every tensor in a buffer of its own (poisoned when made, at an address
    congruent modulo CONGRUENCE to its planned one), and a tensor's buffer is dropped
    once the last node that reads it has been compared (the graph outputs are kept for
    the end). It holds what a comparison still needs, not every tensor of the run.

    :class:`ArenaRun` calls :meth:`start` before its first node, :meth:`step` before
    each node and :meth:`done` after it; ``raw``/``value``/``spread`` answer as
    :class:`RefValues` does, for the tensors still held.
    """

    spread: Mapping[str, float] = {}

    def __init__(self, graph: Graph, order: list[int], planned: Mapping[str, int],
                 runner: NodeRunner | None = None):
        self.graph, self.order, self.runner = graph, list(order), runner
        self.by_index = {n.index: n for n in graph.nodes}
        spaces = set(graph.workspaces.values())
        self.planned = {name: off for name, off in planned.items() if name not in spaces}
        kept = set(graph.outputs)
        # position after which each held tensor is dropped: its last reader's, else
        # its producer's (an output nobody reads is compared when written, if at all)
        last: dict[str, int] = {}
        for pos, idx in enumerate(self.order):
            node = self.by_index[idx]
            for t in (*node.reads, *node.outputs):
                if t in self.planned and t not in kept:
                    last[t] = pos
        self.drop_at: dict[int, list[str]] = {}
        for t, pos in last.items():
            self.drop_at.setdefault(pos, []).append(t)
        self.buffers: dict[str, np.ndarray] = {}
        self.offsets: dict[str, int] = {}
        self.live_bytes = self.peak_bytes = self.peak_buffers = self.next = 0

    def planned_peak_bytes(self, feeds_names) -> int:
        """The most bytes the reference will hold at once over the order, fed
        ``feeds_names`` (known before anything runs)."""
        tensors = self.graph.tensors
        held = {t for t in feeds_names if t in self.planned}
        now = peak = sum(tensors[t].bytes for t in held)
        for pos, idx in enumerate(self.order):
            for o in self.by_index[idx].outputs:
                if o in self.planned and o not in held:
                    held.add(o)
                    now += tensors[o].bytes
            peak = max(peak, now)
            for t in self.drop_at.get(pos, ()):
                if t in held:
                    held.discard(t)
                    now -= tensors[t].bytes
        return peak

    # --------------------------------------------------------------- the run

    def start(self, feeds: Mapping[str, np.ndarray]) -> None:
        self.next = 0
        self.buffers.clear()
        self.offsets.clear()
        self.live_bytes = 0  # the peaks: the largest over every run (a rerun included)
        for name, value in feeds.items():
            if name in self.planned:
                buf = self._new(name)
                data = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
                buf[:data.size] = data

    def complete(self) -> None:
        """Run the nodes the plan's run did not reach (it stopped at a difference):
        the graph outputs, for the whole-model line."""
        for pos in range(self.next, len(self.order)):
            self.step(pos)
            self.done(pos)

    def step(self, pos: int) -> None:
        self.next = pos + 1
        node = self.by_index[self.order[pos]]
        for o in node.outputs:
            if o in self.planned and o not in self.buffers:
                self._new(o)
        try:
            self.runner.run(_Addresses, node, self.offsets,
                            implicit=node.index in self.graph.scopes,
                            what=" in the reference run (every tensor in its own buffer)")
        except ShapeRefused:  # the plan's size, not the inputs: a FAIL of the plan
            raise
        except NodeFailed as exc:
            raise ReferenceFailed(exc) from None

    def done(self, pos: int) -> None:
        for t in self.drop_at.get(pos, ()):
            buf = self.buffers.pop(t, None)
            if buf is not None:
                self.offsets.pop(t)
                self.live_bytes -= buf.nbytes

    def _new(self, name: str) -> np.ndarray:
        nbytes = self.graph.tensors[name].bytes
        raw_buf = np.empty(nbytes + CONGRUENCE, np.uint8)
        base = int(raw_buf.ctypes.data)
        shift = (self.planned[name] % CONGRUENCE - base) % CONGRUENCE
        buf = raw_buf[shift:shift + nbytes]
        buf[:] = POISON  # bytes a kernel leaves unwritten: as in the plan's run
        self.buffers[name] = buf
        self.offsets[name] = base + shift
        self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self.peak_buffers = max(self.peak_buffers, len(self.buffers))
        return buf

    # ----------------------------------------------------- RefValues' answers

    def __contains__(self, name: str) -> bool:
        return name in self.buffers

    def raw(self, name: str) -> np.ndarray:
        return self.buffers[name]

    def value(self, name: str) -> np.ndarray:
        return typed(self.raw(name), self.graph, name)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.value(name)


def refused_inputs_message(graph: Graph, node, error: str, given: bool) -> str:
    """One line for a node ONNX Runtime refuses on the verifier's inputs: which graph
    inputs reach it, and how to pass real ones."""
    names = feeding(graph, node)
    shown = ", ".join(f"{n!r} ({graph.tensors[n].dtype}{list(graph.tensors[n].shape)})"
                      for n in names[:4]) + (" ..." if len(names) > 4 else "")
    if given:
        return f"{error} (on the inputs given with --inputs)"
    return (f"{error}; on the random inputs (--seed) from graph input{'s' if len(names) > 1 else ''} "
            f"{shown}: pass values the model accepts with --inputs FILE.npz (one array "
            "per input name) or --inputs DIR (an ONNX test-data folder)")


class WholeModel:
    """The model as one ``InferenceSession`` (graph outputs only), the report's second
    line: compared with the reference at per-dtype tolerances, it warns, never decides."""

    def __init__(self, model: onnx.ModelProto, graph: Graph, provider: str,
                 folder: str | None = None, in_memory: Mapping[str, np.ndarray] | None = None):
        from graphmem.verify.runtime import open_session
        self.graph = graph
        options = session_options()
        if folder is not None:
            # the weights left as external data in ``model``: ONNX Runtime maps them from
            # the model's folder itself (under the rule graphmem checked when it mapped
            # them), not from a copy of the whole model in memory
            options.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", str(folder))
        if in_memory:  # the weights taken out of the proto: used where they are
            import onnxruntime as ort
            names = list(in_memory)
            self._values = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(in_memory[n]))
                            for n in names]
            options.add_external_initializers(names, self._values)
        try:
            self.session = open_session(model, options, [provider])
        except GraphmemError:
            raise
        except Exception as exc:
            raise GraphmemError(f"ONNX Runtime cannot open the whole model: "
                                f"{runtime_message(exc)}") from None

    def compare(self, feeds: Mapping[str, np.ndarray], reference: RefValues,
                provider: str) -> list[OutputCheck]:
        graph = self.graph
        names = list(dict.fromkeys(graph.outputs))
        try:
            if all(graph.tensors[n].dtype in PLAIN for n in (*graph.inputs, *names)):
                # (IOBinding finds each bound output by a linear search: quadratic for
                # the 40,000 outputs of a fan-out)
                got = dict(zip(names, self.session.run(names, dict(feeds))))
            else:
                got = self._run_bound(feeds, names)
        except Exception as exc:
            raise GraphmemError(f"ONNX Runtime cannot run the whole model: "
                                f"{runtime_message(exc)}") from None
        tolerance = tolerance_dtypes(graph)
        checks = []
        for name in graph.outputs:
            t = graph.tensors[name]
            value, want = np.asarray(got[name]), reference.value(name)
            if value.shape == want.shape and np.array_equal(
                    np.ascontiguousarray(value).view(np.uint8), reference.raw(name)):
                checks.append(OutputCheck(name, t.dtype, t.shape, 0.0, True))
                continue
            ok = close(value, want, tolerance.get(name, t.dtype), provider)
            diff = max_abs_diff(value, want) if value.shape == want.shape else float("inf")
            checks.append(OutputCheck(name, t.dtype, t.shape, diff, ok))
        return checks

    def _run_bound(self, feeds: Mapping[str, np.ndarray], names: list[str]) -> dict:
        """The run through IOBinding, by ONNX element type: for bfloat16 and the 8-bit
        floats, which ``session.run`` cannot take or give as numpy arrays."""
        graph = self.graph
        io = self.session.io_binding()
        keep = []
        for name in graph.inputs:
            value = np.ascontiguousarray(feeds[name])
            keep.append(value)
            bind_at(io, name, graph.tensors[name], "cpu", value.ctypes.data)
        outs = {}
        for name in names:
            buf = np.empty(graph.tensors[name].bytes, np.uint8)
            outs[name] = buf
            bind_at(io, name, graph.tensors[name], "cpu", buf.ctypes.data, output=True)
        self.session.run_with_iobinding(io)
        return {name: typed(buf, graph, name) for name, buf in outs.items()}


# dtypes session.run takes and gives as numpy arrays
PLAIN = frozenset(("float32", "float64", "float16", "int8", "uint8", "int16", "uint16",
                   "int32", "uint32", "int64", "uint64", "bool", "complex64", "complex128"))
