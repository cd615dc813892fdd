"""Run a model inside its planned arena on ONNX Runtime and compare with a plain run.

One arena of ``arena_bytes`` is allocated (host memory, or one device allocation for
CUDA). The nodes run one at a time in the plan's order, each in a one-node session
whose inputs and outputs are bound by IOBinding to ``arena + offset``; an output
bound at its input's address is how an in-place op runs. Before each node every byte
that no live tensor owns is filled with 0xFF (NaN for floats), so reading a dead
tensor or a clobbered one shows up as a wrong answer instead of passing by luck.

The graph outputs are compared with a whole-model ``InferenceSession`` run on the
same seeded inputs. When they differ (or with ``check_all``) the run is repeated
checking every node's outputs against the reference's intermediates, which names the
first node whose output differs and the tensors whose bytes overlap there. When the
outputs do not depend on the inputs at all (constant weights feeding a softmax, as in
the zoo graphs), comparing them proves little, so every tensor is compared then too.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import onnx

from .arena import HostArena, OrtArena, free_ranges, intersect, merged
from .constants import evaluate_constants
from .errors import GraphmemError
from .ir import Graph, Node
from .load import read_model
from .node_sessions import NodeSessions, numpy_dtype, session_options
from .plan import Plan, TensorPlan, problems
from .schedule import check_order

PROVIDERS = {"cpu": ("CPUExecutionProvider", "cpu"), "cuda": ("CUDAExecutionProvider", "cuda")}

# (rtol, atol) per dtype; the one-node kernels are the whole-model kernels, so the
# differences are rounding only. Integer and bool tensors must match exactly.
TOLERANCES = {"float16": (1e-2, 1e-3), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12),
              "complex64": (1e-4, 1e-5), "complex128": (1e-9, 1e-12)}
# cuDNN may pick other algorithms for a lone node than inside the whole model.
CUDA_TOLERANCES = {"float16": (2e-2, 1e-2), "float32": (1e-3, 1e-4)}


@dataclass(frozen=True)
class OutputCheck:
    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs_diff: float
    ok: bool


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


@dataclass(frozen=True)
class VerifyReport:
    model: str
    provider: str
    arena_bytes: int
    nodes_total: int
    nodes_run: int = 0
    nodes_skipped: int = 0  # Concats whose inputs were all written into their slices
    sessions_built: int = 0
    outputs: tuple[OutputCheck, ...] = ()
    problems: tuple[str, ...] = ()  # broken plan-format rules
    mismatch: Mismatch | None = None
    intermediates_checked: int = 0
    # True when the reference outputs came out bit-identical for two different input
    # seeds: then only NaN from poisoned bytes could reach them, so every tensor was
    # compared as with check_all (the zoo graphs' constant weights do this).
    outputs_ignore_inputs: bool = False
    runtime_only: bool = False
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems and self.mismatch is None and all(o.ok for o in self.outputs)


def verify(plan: Plan, graph: Graph, *, provider: str = "cpu", runtime_only: bool = False,
           check_all: bool = False, seed: int = 0,
           on_step: Callable[[int, int], None] | None = None,
           arena: str | None = None) -> VerifyReport:
    """Verify ``plan`` for ``graph`` (loaded from ``graph.model_path``) on ONNX Runtime.

    ``runtime_only`` skips the plan-format rules and trusts the plan; ``check_all``
    compares every tensor as it is produced. ``on_step(done, total)`` reports progress.
    ``arena`` picks the arena kind: "host" (CPU default) or "ortvalue" (CUDA's kind,
    also usable on CPU). Raises GraphmemError when ``plan`` is not for ``graph``.
    """
    start = time.perf_counter()
    ort_provider, device = _provider(provider)
    check_compatible(plan, graph)
    base = VerifyReport(model=plan.model, provider=ort_provider, arena_bytes=plan.arena_bytes,
                        nodes_total=len(plan.order), runtime_only=runtime_only)
    found = [] if runtime_only else problems(plan, graph)
    found = found or runtime_problems(plan, graph)
    if found:
        return _replace(base, problems=tuple(found), seconds=time.perf_counter() - start)

    t0 = time.perf_counter()
    model = _model_with_weights(graph)
    constants = constant_values(model, graph)
    feeds = random_inputs(graph, seed)
    t_setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    reference = reference_run(model, graph, feeds, ort_provider,
                              everything=check_all)
    t_ref = time.perf_counter() - t0
    runner = _ArenaRun(plan, graph, model, constants, ort_provider, device, arena)
    t0 = time.perf_counter()
    final, mismatch, checked = runner.run(feeds, reference if check_all else None, on_step)
    t_arena = time.perf_counter() - t0
    # A check_all run stops at its first mismatch, before any output is read back.
    outputs = compare_outputs(graph, final, reference, provider) if mismatch is None else []
    nodes_run, nodes_skipped = runner.nodes_run, runner.nodes_skipped
    insensitive = False
    if not check_all and graph.inputs and mismatch is None and all(o.ok for o in outputs):
        # Would this comparison have seen a finite wrong value at all?
        other = reference_run(model, graph, random_inputs(graph, seed + 1), ort_provider)
        insensitive = all(_identical(other[o], reference[o]) for o in graph.outputs)
        if insensitive:
            # No: only NaN could have shown. Compare every tensor instead, so that a
            # PASS means what it says.
            reference = reference_run(model, graph, feeds, ort_provider, everything=True)
            _, mismatch, checked = runner.run(feeds, reference, None)
    if mismatch is None and not all(o.ok for o in outputs):
        # Find the first node whose output differs: rerun, checking every tensor.
        if not check_all:
            reference = reference_run(model, graph, feeds, ort_provider, everything=True)
            _, mismatch, checked = runner.run(feeds, reference, None)
        if mismatch is None:
            mismatch = runner.explain_output(final, reference, outputs)
    return _replace(base, nodes_run=nodes_run, nodes_skipped=nodes_skipped,
                    sessions_built=runner.sessions.built, outputs=tuple(outputs),
                    mismatch=mismatch, intermediates_checked=checked,
                    outputs_ignore_inputs=insensitive,
                    seconds=time.perf_counter() - start,
                    timings={"setup": t_setup, "reference": t_ref, "arena": t_arena})


def _replace(report: VerifyReport, **changes) -> VerifyReport:
    from dataclasses import replace
    return replace(report, **changes)


def _provider(name: str) -> tuple[str, str]:
    import onnxruntime as ort
    if name not in PROVIDERS:
        raise GraphmemError(f"unknown provider {name!r}; choose cpu or cuda")
    ort_name, device = PROVIDERS[name]
    available = ort.get_available_providers()
    if ort_name not in available:
        if name == "cuda":
            raise GraphmemError(
                "--provider cuda needs onnxruntime-gpu and a CUDA device, but this "
                f"onnxruntime ({ort.__version__}) offers only {', '.join(available)}; "
                "install onnxruntime-gpu (pip install onnxruntime-gpu) on a machine with "
                "an NVIDIA GPU and CUDA/cuDNN")
        raise GraphmemError(f"{ort_name} is not available in this onnxruntime")
    return ort_name, device


# --------------------------------------------------------------------- plan checks

def check_compatible(plan: Plan, graph: Graph) -> None:
    """Raise GraphmemError when ``plan`` was made for another model than ``graph``."""
    model = graph.model_path or graph.name
    arena = graph.arena_tensors()
    extra = [t for t in plan.tensors if t not in graph.tensors]
    if extra:
        raise GraphmemError(f"the plan was made for another model: its tensor {extra[0]!r} "
                            f"is not in {model}")
    missing = [t for t in arena if t not in plan.tensors]
    if missing:
        raise GraphmemError(f"the plan was made for another model: {model} has tensor "
                            f"{missing[0]!r}, which the plan does not place")
    if sorted(plan.order) != sorted(n.index for n in graph.nodes):
        raise GraphmemError(f"the plan was made for another model: its order lists "
                            f"{len(plan.order)} nodes, {model} runs {len(graph.nodes)} "
                            "other nodes")
    for name, t in plan.tensors.items():
        if name not in arena:
            raise GraphmemError(f"the plan was made for another model: {name!r} is a weight "
                                f"or constant in {model}, not an arena tensor")


def runtime_problems(plan: Plan, graph: Graph) -> list[str]:
    """What stops the plan from running at all: a bad order, a tensor past the arena."""
    out = check_order(graph, plan.order)
    for name, t in plan.tensors.items():
        need = graph.tensors[name].bytes
        if t.offset < 0 or t.offset + need > plan.arena_bytes:
            out.append(f"tensor {name!r}: its {need} bytes at offset {t.offset} do not fit "
                       f"in the arena ({plan.arena_bytes} bytes)")
    if any(n.implicit_inputs for n in graph.nodes):
        node = next(n for n in graph.nodes if n.implicit_inputs)
        raise GraphmemError(f"{node.label} has a subgraph; the verifier runs only models "
                            "without control flow")
    return out


# --------------------------------------------------------------------- inputs, reference

def _model_with_weights(graph: Graph) -> onnx.ModelProto:
    if not graph.model_path:
        raise GraphmemError("the graph has no model path; the verifier needs the ONNX file")
    return read_model(graph.model_path, load_weights=True)


def constant_values(model: onnx.ModelProto, graph: Graph) -> dict[str, np.ndarray]:
    """Every initializer and folded constant a running node reads, evaluated once."""
    from pathlib import Path
    rank = {name: i for i, name in enumerate(graph.constants)}
    folded = [model.graph.node[i] for i in graph.folded_nodes]
    # production order (graph.constants is in it), so each node's inputs come first
    folded.sort(key=lambda n: min((rank.get(o, len(rank)) for o in n.output if o),
                                  default=len(rank)))
    values = evaluate_constants(model, folded, graph.tensors,
                                base_dir=str(Path(graph.model_path).parent))
    static = graph.weights | set(graph.constants)
    for node in graph.nodes:
        for t in node.inputs:
            if t in static and t not in values:
                raise GraphmemError(f"cannot evaluate constant {t!r}, read by {node.label}")
    return values


def random_inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs: floats uniform in [-1, 1), integers in a range valid as indices."""
    rng = np.random.default_rng(seed)
    consumers = graph.consumers()
    feeds = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        dtype = numpy_dtype(t)
        if dtype.kind == "f":
            feeds[name] = rng.uniform(-1.0, 1.0, t.shape).astype(dtype)
        elif dtype.kind == "c":
            feeds[name] = (rng.uniform(-1, 1, t.shape) + 1j * rng.uniform(-1, 1, t.shape)
                           ).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.random(t.shape) < 0.5
        else:
            high = _index_bound(graph, name, consumers.get(name, []))
            feeds[name] = rng.integers(0, high, t.shape).astype(dtype)
    return feeds


def _index_bound(graph: Graph, name: str, readers: list[Node]) -> int:
    """An exclusive upper bound for integer inputs: within every indexed axis."""
    high = 4
    for n in readers:
        if n.op_type in ("Gather", "GatherElements") and n.inputs[1:2] == (name,):
            data = graph.tensors[n.inputs[0]].shape
            axis = n.attrs.get("axis", 0)
            if data:
                high = min(high, data[axis])
        elif n.op_type == "OneHot" and n.inputs[:1] == (name,):
            high = min(high, 2)
    return max(high, 1)


def reference_run(model: onnx.ModelProto, graph: Graph, feeds: Mapping[str, np.ndarray],
                  provider: str, *, everything: bool = False) -> dict[str, np.ndarray]:
    """A whole-model run; with ``everything`` every arena tensor is an output too."""
    import onnxruntime as ort
    from onnx import helper
    from .dtypes import ENUM_BY_NAME
    names = list(graph.outputs)
    m = model
    if everything:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        existing = {o.name for o in m.graph.output}
        for t in graph.arena_tensors():
            if t not in existing and t not in graph.inputs:
                info = graph.tensors[t]
                m.graph.output.append(helper.make_tensor_value_info(
                    t, ENUM_BY_NAME[info.dtype], list(info.shape)))
                names.append(t)
    try:
        sess = ort.InferenceSession(m.SerializeToString(), session_options(),
                                    providers=[provider])
        values = sess.run(names, dict(feeds))
    except Exception as exc:
        raise GraphmemError(f"ONNX Runtime cannot run the whole model: "
                            f"{' '.join(str(exc).split())[:300]}") from None
    out = dict(zip(names, values))
    out.update(feeds)
    return out


# --------------------------------------------------------------------- comparison

def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b|; NaN where exactly one side is NaN, 0 where both are."""
    if a.size == 0:
        return 0.0
    if a.dtype.kind in "fc":
        a64, b64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), \
            b.astype(np.complex128 if b.dtype.kind == "c" else np.float64)
        both = np.isnan(a64) & np.isnan(b64)
        one = np.isnan(a64) ^ np.isnan(b64)
        if one.any():
            return float("nan")
        d = np.abs(np.where(both, 0, a64 - b64))
        d = np.where(np.isinf(a64) & np.isinf(b64) & (a64 == b64), 0, d)
        return float(np.nanmax(d))
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _identical(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=np.asarray(a).dtype.kind in "fc"))


def close(a: np.ndarray, b: np.ndarray, dtype: str, provider: str = "cpu") -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    table = CUDA_TOLERANCES if provider == "cuda" else {}
    rtol, atol = table.get(dtype, TOLERANCES.get(dtype, (1e-4, 1e-5)))
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def compare_outputs(graph: Graph, got: Mapping[str, np.ndarray],
                    reference: Mapping[str, np.ndarray], provider: str = "cpu"
                    ) -> list[OutputCheck]:
    out = []
    for name in graph.outputs:
        t = graph.tensors[name]
        a, b = got[name], np.asarray(reference[name])
        ok = close(a, b, t.dtype, provider)
        diff = max_abs_diff(a, b) if a.shape == b.shape else float("inf")
        out.append(OutputCheck(name, t.dtype, t.shape, diff, ok))
    return out


# --------------------------------------------------------------------- the arena run

class _ArenaRun:
    """Runs the nodes of ``graph`` in ``plan.order`` inside one arena."""

    def __init__(self, plan: Plan, graph: Graph, model: onnx.ModelProto,
                 constants: Mapping[str, np.ndarray], provider: str, device: str,
                 arena: str | None):
        self.plan, self.graph, self.constants = plan, graph, constants
        self.provider, self.device = provider, device
        self.arena_kind = arena or ("host" if device == "cpu" else "ortvalue")
        self.by_index = {n.index: n for n in graph.nodes}
        self.sessions = NodeSessions(model, dict(graph.tensors), provider)
        self.nodes_run = self.nodes_skipped = 0
        self._device_constants: dict[str, object] = {}

    def _new_arena(self):
        if self.arena_kind == "host":
            return HostArena(self.plan.arena_bytes)
        return OrtArena(self.plan.arena_bytes, self.device, self.provider)

    def _owned_per_step(self):
        """For each position, the byte ranges of tensors written before it and read at
        or after it: everything else is free and gets poisoned."""
        steps = len(self.plan.order)
        starts: dict[int, list[str]] = {}
        for name, t in self.plan.tensors.items():
            if t.bytes and t.live[1] > t.live[0]:
                starts.setdefault(t.live[0] + 1, []).append(name)
        active: dict[str, tuple[int, int]] = {}
        for pos in range(steps):
            for name in starts.get(pos, []):
                t = self.plan.tensors[name]
                active[name] = (t.offset, t.offset + self.graph.tensors[name].bytes)
            for name in [n for n in active if self.plan.tensors[n].live[1] < pos]:
                del active[name]
            yield pos, list(active.values())

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
        owned = self._owned_per_step()
        # Bytes written since they were last poisoned. Free bytes nobody wrote are
        # still poison, so only these need filling again: the cost follows the bytes
        # the nodes write, not the arena size times the number of nodes.
        dirty = merged([self._span(n) for n in feeds if n in plan.tensors])
        for pos, idx in enumerate(plan.order):
            _, live = next(owned)
            live = merged(live)
            arena.poison(intersect(dirty, free_ranges(plan.arena_bytes, live)))
            dirty = intersect(dirty, live)
            node = self.by_index[idx]
            bad_inputs = []
            if reference is not None:
                for t in dict.fromkeys(x for x in node.inputs if x in plan.tensors):
                    if not close(self._read(arena, t), reference[t], graph.tensors[t].dtype,
                                 self.provider):
                        bad_inputs.append(t)
            if self._all_slices(node):
                self.nodes_skipped += 1
            else:
                self._run_node(arena, node)
                self.nodes_run += 1
            dirty = merged(dirty + [self._span(o) for o in node.outputs if o])
            if reference is not None:
                for t in (o for o in node.outputs if o):
                    got = self._read(arena, t)
                    checked += 1
                    if not close(got, reference[t], graph.tensors[t].dtype, self.provider):
                        diff = max_abs_diff(got, np.asarray(reference[t]))
                        return {}, self._explain(pos, node, t, diff, bad_inputs), checked
            if on_step:
                on_step(pos + 1, total)
        final = {name: self._read(arena, name) for name in graph.outputs}
        return final, None, checked

    def _read(self, arena, name: str) -> np.ndarray:
        t = self.graph.tensors[name]
        return arena.read(self.plan.tensors[name].offset, numpy_dtype(t), t.shape)

    def _all_slices(self, node: Node) -> bool:
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx"):
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
                                f"{' '.join(str(exc).split())[:300]}") from None

    def _bind_constant(self, io, local: str, name: str) -> None:
        value = np.ascontiguousarray(self.constants[name])
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
