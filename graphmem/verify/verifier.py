"""Run a model inside its planned arena on ONNX Runtime and compare with a plain run.

One arena of ``arena_bytes`` is allocated (host memory, or one device allocation for
CUDA). The nodes run one at a time in the plan's order, each in a one-node session
whose inputs and outputs are bound by IOBinding to ``arena + offset``; an output
bound at its input's address is how an in-place op runs. Before each node every byte
that no live tensor owns is filled with 0xFF (NaN for floats), so reading a dead
tensor or a clobbered one shows up as a wrong answer instead of passing by luck.

An If, Loop or Scan node is run by the verifier itself (:mod:`.control_flow`): its
bodies' nodes one at a time, their tensors at the node's workspace plus their offsets
in the body's plan, dead body bytes poisoned the same way (CPU provider only).

The graph outputs are compared with a whole-model ``InferenceSession`` run on the
same seeded inputs (every tensor an output of it, so each exists at its declared
type). When they differ (or with ``check_all``) the run is repeated checking every
node's outputs against the reference's intermediates, which names the
first node whose output differs and the tensors whose bytes overlap there. When the
outputs do not depend on the inputs at all (constant weights feeding a softmax, as in
the zoo graphs), comparing them proves little, so every tensor is compared then too.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from graphmem.verify.arena import check_fits
from graphmem.verify.arena_run import ArenaRun, Mismatch
from graphmem.verify.compare import OutputCheck, compare_outputs, identical
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph
from graphmem.plan.format import Plan
from graphmem.plan.validate import problems
from graphmem.verify.reference import Reference, constant_values, model_with_weights, random_inputs
from graphmem.core.order import check_order
from graphmem.core.scopes import graph_for_plan

__all__ = ["verify", "VerifyReport", "Mismatch", "OutputCheck", "PROVIDERS", "random_inputs", "read_inputs",
           "check_compatible"]

PROVIDERS = {"cpu": ("CPUExecutionProvider", "cpu"), "cuda": ("CUDAExecutionProvider", "cuda")}


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
    # the op whose output differs first, when the plan wrote it over its input
    in_place_op: str | None = None

    @property
    def passed(self) -> bool:
        return not self.problems and self.mismatch is None and all(o.ok for o in self.outputs)


def verify(plan: Plan, graph: Graph, *, provider: str = "cpu", runtime_only: bool = False,
           check_all: bool = False, seed: int = 0,
           on_step: Callable[[int, int], None] | None = None,
           arena: str | None = None,
           inputs: Mapping[str, np.ndarray] | None = None,
           force: bool = False) -> VerifyReport:
    """Verify ``plan`` for ``graph`` (loaded from ``graph.model_path``) on ONNX Runtime.

    ``runtime_only`` skips the plan-format rules and trusts the plan; ``check_all``
    compares every tensor as it is produced. ``on_step(done, total)`` reports progress.
    ``arena`` picks the arena kind: "host" (CPU default) or "ortvalue" (CUDA's kind,
    also usable on CPU). ``inputs`` replaces the seeded random inputs (see
    :func:`read_inputs`); every tensor is then compared, since no second input set is
    at hand to tell whether the outputs depend on the inputs. Raises GraphmemError
    when ``plan`` is not for ``graph``.
    """
    start = time.perf_counter()
    ort_provider, device = _provider(provider)
    plain, graph = graph, graph_for_plan(graph, plan)  # with the bodies' workspaces
    check_compatible(plan, graph)
    check_target(plan, ort_provider, force)
    base = VerifyReport(model=plan.model, provider=ort_provider, arena_bytes=plan.arena_bytes,
                        nodes_total=len(plan.order), runtime_only=runtime_only)
    found = [] if runtime_only else problems(plan, plain)
    if graph.scopes and device != "cpu":
        raise GraphmemError("the verifier runs the bodies of If/Loop/Scan nodes on the CPU "
                            "provider only; verify this model with --provider cpu")
    found = found or runtime_problems(plan, graph)
    if found:
        return _replace(base, problems=tuple(found), seconds=time.perf_counter() - start)
    # the reference run keeps every tensor, and the folded constants are computed
    check_fits(plan.arena_bytes, sum(graph.tensors[t].bytes for t in plan.tensors)
               + sum(graph.tensors[t].bytes for t in graph.constants if t in graph.tensors))

    t0 = time.perf_counter()
    model = model_with_weights(graph)
    constants = constant_values(model, graph)
    if inputs is not None:
        feeds = _checked_inputs(graph, inputs)
        check_all = True
    else:
        feeds = random_inputs(graph, seed)
    t_setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    # Every tensor an output of the reference run, always: each then exists at its
    # declared type, as in the arena run. With the graph outputs alone, ONNX Runtime
    # may skip a declared rounding (it removes the Cast pair around the float32
    # fallback of a float16 Sigmoid when a Cast to float32 follows), and the reference
    # would be more precise than the model.
    whole = Reference(model, plain, ort_provider, everything=True)
    reference = whole.run(feeds)
    t_ref = time.perf_counter() - t0
    runner = ArenaRun(plan, graph, model, constants, ort_provider, device, arena)
    t0 = time.perf_counter()
    final, mismatch, checked = runner.run(feeds, reference if check_all else None, on_step)
    t_arena = time.perf_counter() - t0
    # A check_all run stops at its first mismatch, before any output is read back.
    outputs = compare_outputs(graph, final, reference, provider,
                              runner.tolerance) if mismatch is None else []
    nodes_run, nodes_skipped = runner.nodes_run, runner.nodes_skipped
    insensitive = False
    if not check_all and graph.inputs and mismatch is None and all(o.ok for o in outputs):
        # Would this comparison have seen a finite wrong value at all?
        other = whole.run(random_inputs(graph, seed + 1))
        insensitive = all(identical(other[o], reference[o]) for o in graph.outputs)
        if insensitive:
            # No: only NaN could have shown. Compare every tensor instead, so that a
            # PASS means what it says.
            _, mismatch, checked = runner.run(feeds, reference, None)
    if mismatch is None and not all(o.ok for o in outputs):
        # Find the first node whose output differs: rerun, checking every tensor.
        if not check_all:
            _, mismatch, checked = runner.run(feeds, reference, None)
        if mismatch is None:
            mismatch = runner.explain_output(final, reference, outputs)
    in_place_op = None
    if mismatch is not None and mismatch.tensor in plan.tensors \
            and plan.tensors[mismatch.tensor].alias == "inplace":
        writer = next((n for n in graph.nodes if mismatch.tensor in n.outputs), None)
        in_place_op = writer.op_type if writer is not None else None
    return _replace(base, nodes_run=nodes_run, nodes_skipped=nodes_skipped,
                    in_place_op=in_place_op,
                    sessions_built=runner.sessions.built, outputs=tuple(outputs),
                    mismatch=mismatch, intermediates_checked=checked,
                    outputs_ignore_inputs=insensitive,
                    seconds=time.perf_counter() - start,
                    timings={"setup": t_setup, "reference": t_ref, "arena": t_arena})


def read_inputs(folder: str | os.PathLike, graph: Graph) -> dict[str, np.ndarray]:
    """Inputs from an ONNX test-data folder (``input_0.pb``, ``input_1.pb``, ...).

    Each file is a TensorProto; its name picks the graph input, or, unnamed, its
    position among the graph's inputs.
    """
    from onnx import TensorProto, numpy_helper
    # input_2.pb before input_10.pb
    files = sorted(Path(folder).glob("input_*.pb"), key=lambda p: (len(p.name), p.name))
    if not files:
        raise GraphmemError(f"{folder}: no input_*.pb files (an ONNX test-data folder)")
    feeds = {}
    for i, path in enumerate(files):
        t = TensorProto()
        try:
            t.ParseFromString(path.read_bytes())
            value = numpy_helper.to_array(t)
        except Exception as exc:
            raise GraphmemError(f"{path}: not a TensorProto ({exc})") from None
        name = t.name if t.name in graph.inputs else (graph.inputs[i] if i < len(graph.inputs) else None)
        if name is None:
            raise GraphmemError(f"{path}: the model has only {len(graph.inputs)} inputs")
        feeds[name] = value
    return feeds


def _checked_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    feeds = {}
    for name in graph.inputs:
        if name not in inputs:
            raise GraphmemError(f"no value given for graph input {name!r}")
        value = np.asarray(inputs[name])
        want = graph.tensors[name]
        if tuple(value.shape) != tuple(want.shape):
            raise GraphmemError(f"input {name!r} has shape {list(value.shape)}, the plan "
                                f"was made for {list(want.shape)}")
        feeds[name] = value
    return feeds


def _replace(report: VerifyReport, **changes) -> VerifyReport:
    return replace(report, **changes)


def _provider(name: str) -> tuple[str, str]:
    import onnxruntime as ort
    if name not in PROVIDERS:
        raise GraphmemError(f"unknown provider {name!r}; choose cpu or cuda")
    ort_name, device = PROVIDERS[name]
    if name == "cuda":
        from graphmem.verify.cuda import cuda_problem
        problem = cuda_problem()
        if problem:
            raise GraphmemError(problem)
    elif ort_name not in ort.get_available_providers():
        raise GraphmemError(f"{ort_name} is not available in this onnxruntime")
    return ort_name, device


# --------------------------------------------------------------------- plan checks

def check_compatible(plan: Plan, graph: Graph) -> None:
    """Raise GraphmemError when ``plan`` was made for another model than ``graph``."""
    model = graph.model_path or graph.name
    in_arena = graph.arena_tensors()
    arena = set(in_arena)
    extra = [t for t in plan.tensors if t not in graph.tensors]
    if extra:
        raise GraphmemError(f"the plan was made for another model: its tensor {extra[0]!r} "
                            f"is not in {model}")
    missing = [t for t in in_arena if t not in plan.tensors]
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


def check_target(plan: Plan, ort_provider: str, force: bool = False) -> None:
    """Refuse to run a plan made for another provider's in-place table (its in-place
    writes were judged for other kernels) unless ``force``."""
    made_for = (plan.target or {}).get("provider")
    if made_for and made_for != ort_provider and not force:
        short = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda"}.get(made_for,
                                                                                   made_for)
        raise GraphmemError(
            f"the plan was made for {made_for} ({plan.target.get('inplace_table', '?')}), not "
            f"{ort_provider}: plan for it (--provider), verify with --provider {short}, or "
            "pass --force")


def runtime_problems(plan: Plan, graph: Graph) -> list[str]:
    """What stops the plan from running at all: a bad order, a tensor past the arena."""
    out = check_order(graph, plan.order)
    for name, t in plan.tensors.items():
        if name not in graph.tensors:  # (a body's plan: check_compatible saw the main one)
            raise GraphmemError(f"the plan was made for another model: it places tensor "
                                f"{name!r}, which {graph.name or 'its graph'!r} does not have")
        need = graph.tensors[name].bytes
        if t.offset < 0 or t.offset + need > plan.arena_bytes:
            out.append(f"tensor {name!r}: its {need} bytes at offset {t.offset} do not fit "
                       f"in the arena ({plan.arena_bytes} bytes)")
    opaque = [n for n in graph.nodes if n.implicit_inputs and n.index not in graph.scopes]
    if opaque:
        raise GraphmemError(f"{opaque[0].label} has a subgraph; the verifier runs only the "
                            "control flow of If, Loop and Scan")
    # the bodies too (--runtime-only skips the plan rules, not these): a body tensor
    # past its sub-arena would be bound outside the arena
    plans = {(sp.node, sp.attr): sp.plan for sp in plan.scopes}
    for idx, scopes in graph.scopes.items():
        for scope in scopes:
            sub = plans.get((idx, scope.attr))
            if sub is None:
                out.append(f"scopes: the {scope.attr} of node {idx} has no plan")
                continue
            out += [f"scope {scope.attr} of node {idx}: {p}"
                    for p in runtime_problems(sub, graph_for_plan(scope.graph, sub))]
    return out
