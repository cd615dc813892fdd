"""Run a model inside its planned arena on ONNX Runtime and compare with a run where every
tensor has bytes of its own.

One arena of ``arena_bytes`` is allocated (host memory, or one device allocation for
CUDA). The nodes run one at a time in the plan's order, each in a one-node session
whose inputs and outputs are bound by IOBinding to ``arena + offset``; an output
bound at its input's address is how an in-place op runs. Before each node every byte
that no live tensor owns is filled with 0xFF (NaN for floats), so reading a dead
tensor or a clobbered one shows up as a wrong answer instead of passing by luck.

An If, Loop or Scan node is run by the verifier itself (:mod:`.control_flow`): its
bodies' nodes one at a time, their tensors at the node's workspace plus their offsets
in the body's plan, dead body bytes poisoned the same way (CPU provider only).

The reference (:mod:`.reference`) runs the same nodes on the same sessions, in the same
order, on the same inputs, every tensor in bytes of its own: the two runs differ only
in where tensors live. On the CPU it runs in step with the plan's run, each node just
before the plan's run reads that node's inputs, and drops a tensor once its last reader
has been compared; the weights are mapped once (:mod:`.weights`) and shared by both
runs and the whole-model session. Every tensor a node reads in the arena is compared
with the reference's before the node runs, and every graph output at the end, bit for
bit (or, on a provider that is not deterministic, within the spread of two reference
runs).
A plan is wrong exactly when they differ. With ``check_all`` every output is compared
as soon as it is written too; a failure found at a read is rerun that way, to name
the node that first wrote a wrong value. The whole-model session is a second line of
the report (``whole_model``): it can warn, never decide the verdict.
"""
from __future__ import annotations

import time
from dataclasses import field, replace
from typing import Callable, Mapping

import numpy as np

from graphmem.core.records import record
from graphmem.verify.arena import check_fits
from graphmem.verify.arena_run import ArenaRun, Mismatch
from graphmem.verify.compare import OutputCheck, max_abs_diff, same
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph
from graphmem.plan.format import Plan
from graphmem.plan.graph_digest import check_graph
from graphmem.plan.validate import problems
from graphmem.verify.execute import NodeFailed, ShapeRefused, typed
from graphmem.verify.inputs import checked_inputs, random_inputs, read_inputs
from graphmem.verify.reference import (LiveReference, ReferenceFailed, ReferenceRun,
                                       WholeModel, constant_values,
                                       load_weights, refused_inputs_message,
                                       separate_layout)
from graphmem.verify.runtime import usable_ir_version
from graphmem.core.order import check_order
from graphmem.core.scopes import graph_for_plan

__all__ = ["verify", "VerifyReport", "Mismatch", "OutputCheck", "PROVIDERS", "random_inputs", "read_inputs",
           "check_compatible"]

PROVIDERS = {"cpu": ("CPUExecutionProvider", "cpu"), "cuda": ("CUDAExecutionProvider", "cuda")}


@record
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
    reads_checked: int = 0  # tensors compared with the reference as a node read them
    intermediates_checked: int = 0  # outputs compared as they were written (check_all)
    runtime_only: bool = False
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)
    # the op whose output differs first, when the plan wrote it over its input
    in_place_op: str | None = None
    # the reference run twice (a provider that is not deterministic): the tensors
    # whose two runs differed, compared within that spread
    spread_tensors: int = 0
    # the second line: the whole-model session against the reference (warns only)
    whole_model: tuple[OutputCheck, ...] = ()
    whole_model_problem: str | None = None
    # issue 53 (graphmem/verify/bounded.py): each bounded tensor's elements at run time,
    # and the first one past its planned slot
    bounded: tuple = ()
    symbol_counts: tuple[str, ...] = ()  # each symbol's value at run time, in words
    overflow: str | None = None
    # the most bytes the reference held at once (it drops a tensor once its last
    # reader is compared; a provider that is not deterministic keeps two whole runs)
    reference_bytes: int = 0

    @property
    def passed(self) -> bool:
        return not self.problems and self.mismatch is None and \
            all(o.ok for o in self.outputs) and self.overflow is None

    @property
    def whole_model_warns(self) -> bool:
        """The second line differs, or could not be made (a skip is not a warning)."""
        skipped = (self.whole_model_problem or "").startswith("skipped")
        return (self.whole_model_problem is not None and not skipped) or \
            not all(o.ok for o in self.whole_model)


def verify(plan: Plan, graph: Graph, *, provider: str = "cpu", runtime_only: bool = False,
           check_all: bool = False, seed: int = 0,
           on_step: Callable[[int, int], None] | None = None,
           arena: str | None = None,
           inputs: Mapping[str, np.ndarray] | None = None,
           force: bool = False, whole_model: bool = True) -> VerifyReport:
    """Verify ``plan`` for ``graph`` (loaded from ``graph.model_path``) on ONNX Runtime.

    ``runtime_only`` skips the plan-format rules and trusts the plan; ``check_all``
    also compares every output as it is written. ``on_step(done, total)`` reports
    progress. ``arena`` picks the arena kind: "host" (CPU default) or "ortvalue"
    (CUDA's kind, also usable on CPU). ``inputs`` replaces the seeded random inputs
    (see :func:`read_inputs`). ``whole_model``: add the whole-model line. Raises
    GraphmemError when ``plan`` is not for ``graph``, or ONNX Runtime refuses the
    model or its inputs.
    """
    start = time.perf_counter()
    ort_provider, device = _provider(provider)
    plain, graph = graph, graph_for_plan(graph, plan)  # with the bodies' workspaces
    check_compatible(plan, graph)
    check_graph(plan, plain)  # even with runtime_only: a plan of another graph is not run
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
    bounds = graph.data_bounds
    if bounds is not None and (bounds.symbols or bounds.body_symbols):
        # issue 53: run with the sizes the data gives (a body's too: its If/Loop whole)
        if device != "cpu":
            raise GraphmemError("the verifier runs a model with data-dependent sizes on the "
                                "CPU provider only; verify it with --provider cpu")
        from graphmem.verify.bounded import verify_bounded
        return verify_bounded(plan, graph, plain, base, seed=seed, inputs=inputs,
                              on_step=on_step, start=start)
    deterministic = device == "cpu"
    offsets = {name: t.offset for name, t in plan.tensors.items()}
    if deterministic:
        # in step with the plan's run: it holds only what a comparison still needs
        reference = LiveReference(graph, plan.order, offsets)
        ref_bytes = reference.planned_peak_bytes(graph.inputs)
    else:  # run twice whole first, for the spread between the two runs
        spaces = set(graph.workspaces.values())
        _, ref_bytes = separate_layout({t: graph.tensors[t].bytes for t in plan.tensors
                                        if t not in spaces}, {})
        ref_bytes *= 2
    # and the folded constants are computed (the weights are mapped, not copied)
    check_fits(plan.arena_bytes, ref_bytes + sum(
        graph.tensors[t].bytes for t in graph.constants
        if t in graph.tensors and t not in graph.weights))

    t0 = time.perf_counter()
    weights = load_weights(graph)  # external weights mapped, shared by every run
    model = weights.model
    usable_ir_version(model, say=True)  # one note where it runs at a lower IR version
    constants = constant_values(model, graph, weights.values)
    feeds = checked_inputs(graph, inputs) if inputs is not None else random_inputs(graph, seed)
    runner = ArenaRun(plan, graph, model, constants, ort_provider, device, arena)
    # a weight's pages leave the process once its node has run in both runs (the next
    # touch reads them again from the page cache)
    runner.after_node = lambda node: weights.release_for(node.reads)
    t_setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    if deterministic:
        reference.runner = runner.runner
    else:
        ref = ReferenceRun(graph, plan.order, runner.offsets, runner.runner,
                           runner.new_arena, deterministic)
        try:
            reference = ref.run(feeds)
        except ShapeRefused as exc:
            return _replace(base, overflow=_refused_shape(plan, graph, exc),
                            seconds=time.perf_counter() - start)
        except NodeFailed as exc:
            raise GraphmemError(refused_inputs_message(plain, exc.node, exc.error,
                                                       inputs is not None)) from None
    t_ref = time.perf_counter() - t0  # (in step with the plan's run on the CPU: in t_arena)
    t0 = time.perf_counter()
    try:
        final, mismatch, reads, written = runner.run(feeds, reference, check_all, on_step)
        if mismatch is not None and mismatch.read and not check_all:
            # Found where it was read: was it wrong when written (the node that wrote it
            # over its input), or overwritten after? Rerun comparing every output as written.
            _, mismatch, reads, written = runner.run(feeds, reference, True, None)
        outputs = _compare_outputs(plain, final, reference) if mismatch is None else []
        if mismatch is None and not all(o.ok for o in outputs):
            # every read matched, so a graph output changed after its producer (or its
            # producer wrote it wrong): rerun comparing every output as written
            _, mismatch, reads, written = runner.run(feeds, reference, True, None)
            if mismatch is None:
                mismatch = runner.explain_output(outputs)
        reference.complete()  # past where the plan's run stopped at a difference
    except ShapeRefused as exc:
        return _replace(base, overflow=_refused_shape(plan, graph, exc),
                        seconds=time.perf_counter() - start)
    except ReferenceFailed as exc:  # (the reference in step with the plan's run)
        raise GraphmemError(refused_inputs_message(plain, exc.node, exc.error,
                                                   inputs is not None)) from None
    t_arena = time.perf_counter() - t0
    runner.close()  # the one-node sessions' memory, before the whole model's session
    weights.release()
    nodes_run, nodes_skipped = runner.nodes_run, runner.nodes_skipped
    in_place_op = None
    if mismatch is not None and not mismatch.read and mismatch.tensor in plan.tensors \
            and plan.tensors[mismatch.tensor].alias == "inplace":
        writer = next((n for n in graph.nodes if mismatch.tensor in n.outputs), None)
        in_place_op = writer.op_type if writer is not None else None
    t0 = time.perf_counter()
    whole, whole_problem = (), None
    widest = _widest_fan_out(plain)
    if whole_model and widest[1] > WHOLE_MODEL_FAN_OUT:
        whole_problem = (f"skipped: tensor {widest[0]!r} has {widest[1]:,} readers, and ONNX "
                         "Runtime opens a model in time quadratic in the readers of one tensor")
    elif whole_model:
        try:
            whole = tuple(WholeModel(model, plain, ort_provider, weights.folder,
                                     weights.in_memory)
                          .compare(feeds, reference, provider))
        except GraphmemError as exc:
            whole_problem = str(exc)
    t_whole = time.perf_counter() - t0
    return _replace(base, nodes_run=nodes_run, nodes_skipped=nodes_skipped,
                    in_place_op=in_place_op,
                    sessions_built=runner.sessions.built, outputs=tuple(outputs),
                    mismatch=mismatch, reads_checked=reads, intermediates_checked=written,
                    spread_tensors=len(reference.spread),
                    reference_bytes=(reference.peak_bytes if deterministic else ref_bytes),
                    whole_model=whole, whole_model_problem=whole_problem,
                    seconds=time.perf_counter() - start,
                    timings={"setup": t_setup, "reference": t_ref, "arena": t_arena,
                             "whole_model": t_whole})


# The whole-model line is skipped past this many readers of one tensor: ONNX Runtime's
# session takes time quadratic in them, where a chain of as many nodes opens in linear time.
WHOLE_MODEL_FAN_OUT = 4000


def _widest_fan_out(graph: Graph) -> tuple[str, int]:
    """(the tensor with the most reading nodes, how many)."""
    counts: dict[str, int] = {}
    for n in graph.nodes:
        for t in set(n.reads):
            counts[t] = counts.get(t, 0) + 1
    return max(counts.items(), key=lambda kv: kv[1], default=("", 0))


def _compare_outputs(graph: Graph, final: Mapping[str, np.ndarray], reference) -> list[OutputCheck]:
    """One OutputCheck per graph output: bit for bit (or within the reference's spread)."""
    out = []
    for name in graph.outputs:
        t = graph.tensors[name]
        got, want = final[name], reference.raw(name)
        spread = reference.spread.get(name, 0.0)
        if np.array_equal(got, want):
            out.append(OutputCheck(name, t.dtype, t.shape, 0.0, True))
            continue
        try:
            values = typed(got, graph, name), typed(want, graph, name)
            diff = max_abs_diff(*values)
        except GraphmemError:
            values, diff = None, float(np.count_nonzero(got != want))
        out.append(OutputCheck(name, t.dtype, t.shape, diff, same(got, want, spread, values)))
    return out


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


def _refused_shape(plan: Plan, graph: Graph, exc) -> str:
    """A FAIL's words for an output ONNX Runtime computed at another shape than the one
    planned (the plan sized it wrong: a static shape the run does not give)."""
    t = plan.tensors.get(exc.tensor)
    slot = f", its slot of {t.bytes:,} bytes" if t is not None else ""
    return (f"tensor {exc.tensor!r} ({exc.node.label}) is [{exc.actual}] at run time, "
            f"planned [{exc.planned}]{slot}: ONNX Runtime refused to write it there")

