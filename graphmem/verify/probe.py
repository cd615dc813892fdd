"""Does a kernel run correctly in place, here? Each (op, input) pair of an overwrite table
is run on ONNX Runtime with its output bound to its input's bytes, and compared with a
plain run, at sizes that reach vector tails and blocks.

Whether an op may write its output over an input is a property of the runtime's
kernel on this machine and provider, not of the op: ``graphmem probe`` asks the
runtime, and the test suite asks it for every default entry of the CPU table.

For each case a tiny model ``x_k -> Identity -> p_k; y = op(p_0, ...)``
(:func:`case_model`), planned with one buffer per tensor by the caller
(:func:`graphmem.commands.probe.probe`: verify never imports the planner whose plans it
checks), has ``y`` moved onto ``p_i`` exactly as the in-place pass would place it, and
:func:`~graphmem.verify.verifier.verify` runs it with every tensor checked as it is
produced and poison in every free byte (the plan rules, which ask the table under
trial, are skipped: ``runtime_only``).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphmem.core.records import record
from graphmem.errors import GraphmemError

if TYPE_CHECKING:
    from graphmem.core.ir import Graph
    from graphmem.plan.format import Plan

# Element counts and shapes a case runs at: below, at and past a vector width, and a
# tensor of several blocks.
SHAPES: tuple[tuple[int, ...], ...] = ((1,), (7,), (63,), (64,), (1000,), (4, 64, 1000))
BOOL_OPS = frozenset(("Not", "And", "Or", "Xor"))
VARIADIC = frozenset(("Max", "Min", "Mean", "Sum"))
# The fused convolutions of ONNX Runtime's optimizers whose output may be written over
# their sum (input 3): probed at these NCHW shapes (channels a multiple of every NCHWc
# block). Fused ops with no one-node probe model here (the attention kernels' past ->
# present pairs) are left out of :func:`cases`; their tables rest on the kernels' own
# declarations alone.
FUSED_CONV = frozenset(("com.microsoft:FusedConv", "com.microsoft.nchwc:Conv"))
CONV_SHAPES: tuple[tuple[int, ...], ...] = ((1, 16, 5, 5), (2, 32, 9, 7))


@record
class Case:
    """One probe: ``op`` writing its output over input ``index``; with ``small`` set,
    that input is broadcast (its shape is the others' without the first axis)."""

    op: str
    arity: int
    index: int
    shape: tuple[int, ...]
    small: int | None = None

    @property
    def label(self) -> str:
        form = f", input {self.small} broadcast" if self.small is not None else ""
        return f"{self.op} input {self.index} -> output 0, shape {list(self.shape)}{form}"


@record
class Outcome:
    case: Case
    passed: bool
    detail: str = ""  # the first difference, or why the case could not run


def cases(table: Mapping[str, Sequence[tuple[int, int]]],
          shapes: Sequence[tuple[int, ...]] = SHAPES) -> list[Case]:
    """Every pair of ``table`` (op -> [(input, output)]) at every shape, and for binary
    ops also with the other input broadcast."""
    out = []
    for op in sorted(table):
        pairs = table[op]
        if op in FUSED_CONV:
            out += [Case(op, 4, i, s) for s in CONV_SHAPES for i, _ in pairs]
            continue
        if not has_probe_model(op):
            continue
        arity = 3 if op in VARIADIC else 2 if len(pairs) > 1 else 1
        for shape in shapes:
            for i in range(arity):
                out.append(Case(op, arity, i, tuple(shape)))
            if arity == 2 and op not in BOOL_OPS:
                out.append(Case(op, arity, 1, tuple(shape), small=0))
    return out


def has_probe_model(op: str) -> bool:
    """Whether :func:`case_model` can build ``op`` (a table key): every standard op, the
    fused convolutions and QuickGelu; the other contrib entries rest on the kernels'
    declarations alone (see FUSED_CONV)."""
    return ":" not in op or op in FUSED_CONV or op.endswith(":QuickGelu")


def check_case(case: Case, graph: Graph, plan: Plan, provider: str = "cpu") -> Outcome:
    """Run one case: ``graph`` is its model (:func:`case_model`) as loaded, ``plan`` that
    graph planned with one buffer per tensor (no passes); ``y`` is moved onto its input
    (:func:`in_place`) and the arena run checks every tensor."""
    from graphmem.verify.verifier import verify
    plan = in_place(plan, "y", f"p{case.index}")
    # the kernel is on trial, not the table: the plan rules (which ask the table) are
    # skipped, the arena run is not
    try:
        report = verify(plan, graph, check_all=True, provider=provider, runtime_only=True)
    except GraphmemError as exc:  # the runtime refused the model or the binding
        return Outcome(case, False, str(exc))
    if report.passed:
        return Outcome(case, True)
    return Outcome(case, False, report.mismatch.describe() if report.mismatch
                   else "an output differs")


def in_place(plan: Plan, out: str, src: str) -> Plan:
    """``plan`` with ``out`` written over ``src`` as the in-place pass would place it:
    same offset, ``alias_of``/``alias``, the arena ending at its last tensor."""
    from graphmem.plan.stats import plan_stats
    tensors = dict(plan.tensors)
    tensors[out] = dataclasses.replace(tensors[out], offset=tensors[src].offset,
                                       alias_of=src, alias="inplace")
    end = max((t.offset + t.bytes for t in tensors.values()), default=0)
    new = dataclasses.replace(plan, tensors=tensors,
                              arena_bytes=-(-end // plan.alignment) * plan.alignment)
    return dataclasses.replace(new, stats=plan_stats(new))


def case_model(case: Case) -> onnx.ModelProto:
    """``x_k -> Identity -> p_k; y = op(p_0 .. p_{arity-1}, extras)`` at opset 20 (a fused
    convolution: ``y = conv(p_0, w, b, sum=p_3)``, 3 x 3 with the same spatial size)."""
    if case.op in FUSED_CONV:
        return _fused_conv_model(case)
    domain, _, op = case.op.rpartition(":")
    shape = list(case.shape)
    if op == "BatchNormalization" and len(shape) < 2:
        shape = [1, *shape]  # N x C x ...: the elements as channels
    elem = (TensorProto.BOOL if op in BOOL_OPS else TensorProto.UINT8 if op == "BitShift"
            else TensorProto.FLOAT)
    shapes = [shape] * case.arity
    if case.small is not None:
        shapes[case.small] = shape[1:] or [1]
    nodes = [helper.make_node("Identity", [f"x{k}"], [f"p{k}"]) for k in range(case.arity)]
    inits, extra, attrs = _extras(op, shape)
    if op == "BatchNormalization":
        shapes = [shape]
    nodes.append(helper.make_node(op, [f"p{k}" for k in range(case.arity)] + extra, ["y"],
                                  domain=domain or None, **attrs))
    graph = helper.make_graph(
        nodes, "probe",
        [helper.make_tensor_value_info(f"x{k}", elem, s) for k, s in enumerate(shapes)],
        [helper.make_tensor_value_info("y", elem, shape)], inits)
    return _model(graph, domain)


def _model(graph, domain: str = "") -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", 20)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9  # opset 20's IR: every ONNX Runtime since 1.16 reads it (onnx's
    return model          # newest may be newer than the installed runtime's)


def _fused_conv_model(case: Case) -> onnx.ModelProto:
    domain, _, op = case.op.rpartition(":")
    shape = list(case.shape)
    channels = shape[1]
    rng = np.random.default_rng(0)
    w = rng.uniform(-0.5, 0.5, (channels, channels, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.linspace(-1, 1, channels).astype(np.float32), "b")]
    nodes = [helper.make_node("Identity", ["x0"], ["p0"]),
             helper.make_node("Identity", ["x3"], ["p3"]),
             helper.make_node(op, ["p0", "w", "b", "p3"], ["y"], domain=domain,
                              pads=[1, 1, 1, 1], activation="Relu")]
    graph = helper.make_graph(
        nodes, "probe", [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)
                         for x in ("x0", "x3")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return _model(graph, domain)


def _extras(op: str, shape: list[int]) -> tuple[list, list[str], dict]:
    """The initializers, extra inputs and attributes an op needs beyond its data."""
    channels = shape[1] if len(shape) > 1 else 1
    if op == "BatchNormalization":
        inits = [numpy_helper.from_array(np.full([channels], v, np.float32), name)
                 for name, v in (("s", 1.5), ("b", 0.25), ("m", 0.1), ("v", 2.0))]
        return inits, ["s", "b", "m", "v"], {}
    if op == "Clip":
        return [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
                numpy_helper.from_array(np.array(0.5, np.float32), "hi")], ["lo", "hi"], {}
    if op == "PRelu":
        slope = np.linspace(0.1, 0.9, shape[-1]).astype(np.float32)
        return [numpy_helper.from_array(slope, "slope")], ["slope"], {}
    if op == "ScatterND":  # rows 0 and the last of axis 0 replaced (one row at size 1)
        rows = sorted({shape[0] - 1, 0})
        idx = np.array(rows, np.int64).reshape(-1, 1)
        upd = np.linspace(-3, 3, len(rows) * int(np.prod(shape[1:]))).astype(np.float32)
        return [numpy_helper.from_array(idx, "idx"),
                numpy_helper.from_array(upd.reshape([len(rows), *shape[1:]]), "upd")], \
            ["idx", "upd"], {}
    if op == "ScatterElements":  # one element of each column of axis 0 replaced
        rest = int(np.prod(shape[1:]))
        idx = (np.arange(rest, dtype=np.int64) * 7 % shape[0]).reshape([1, *shape[1:]])
        upd = np.linspace(-3, 3, rest).astype(np.float32).reshape([1, *shape[1:]])
        return [numpy_helper.from_array(idx, "idx"), numpy_helper.from_array(upd, "upd")], \
            ["idx", "upd"], {"axis": 0}
    if op == "BitShift":
        return [], [], {"direction": "LEFT"}
    if op == "Mod":
        return [], [], {"fmod": 1}
    return [], [], {}


def summary(outcomes: Iterable[Outcome]) -> dict[str, dict]:
    """Per op: cases run, cases passed, and the first failure."""
    out: dict[str, dict] = {}
    for o in outcomes:
        s = out.setdefault(o.case.op, {"cases": 0, "passed": 0, "first_failure": None})
        s["cases"] += 1
        s["passed"] += o.passed
        if not o.passed and s["first_failure"] is None:
            s["first_failure"] = f"{o.case.label}: {o.detail}"
    return out


def declared_by_runtime(provider: str, op: str,
                        pairs: Sequence[tuple[int, int]]) -> list[dict]:
    """Per pair of ``op``: does ONNX Runtime's ``provider`` kernel say it may run in
    place? ``declared`` is "yes" (its ``MayInplace``/``Alias``), "source" (a reviewed
    reading of its source backs it) or "no"; ``where`` is the file:line of the evidence
    (see :func:`graphmem.core.ops.evidence`)."""
    from graphmem.core.ops import evidence
    found = {tuple(e["pair"]): e for e in evidence(provider, op)}
    out = []
    for pair in pairs:
        e = found.get(tuple(pair))
        out.append({"pair": list(pair),
                    "declared": "no" if e is None else
                    "yes" if e["kind"] == "declared" else "source",
                    "where": None if e is None else f"{e['file']}:{e['line']}"})
    return out


def declared_text(rows: Sequence[dict]) -> str:
    """:func:`declared_by_runtime`'s rows in one short line, pairs with the same answer
    and place together: "yes activations.cc:34", "source element_wise_ops.cc:581 (inputs
    0, 1); no (inputs 2-7)"."""
    groups: dict[tuple, list[int]] = {}
    for r in rows:
        groups.setdefault((r["declared"], r["where"]), []).append(r["pair"][0])
    parts = []
    for (kind, where), inputs in groups.items():
        text = kind if where is None else f"{kind} {where.rsplit('/', 1)[-1]}"
        if len(groups) > 1 or len(rows) > 1 and len(inputs) != len(rows):
            span = (f"{inputs[0]}-{inputs[-1]}" if len(inputs) > 2
                    and inputs == list(range(inputs[0], inputs[-1] + 1))
                    else ", ".join(map(str, inputs)))
            text += f" (input{'s' if len(inputs) > 1 else ''} {span})"
        parts.append(text)
    return "; ".join(parts)
