"""A Loop whose carried values grow (issue 53), run one iteration at a time by the
verifier of bounded plans (graphmem/verify/bounded.py).

Such a value is planned at a bound: the Loop's output at the bound, the body's formal
input for it and its formal output each a slot of the body's plan. The Loop runs whole
on ONNX Runtime for its outputs; this runs its body again (one session of the whole
body, its reads of the graph given as inputs) iteration by iteration, with the sizes
the data gives, and checks each carried value against the slots it passes through:
the initial value and each iteration's value in the formal input's slot, each
iteration's value in the formal output's. It counts the iterations, for the report.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx
from onnx import helper

from graphmem.errors import GraphmemError
from graphmem.verify.node_sessions import runtime_message, session_options


class LoopRun(NamedTuple):
    iterations: int
    finals: tuple[tuple[int, ...], ...]  # each carried value's final shape
    overflow: str | None  # the first value past its slot, in words
    # the body's own symbols (a Resize to a box's size): the most each counted in an
    # iteration
    body_counts: dict = {}


def grows(graph, index: int) -> bool:
    """Does Loop node ``index`` have a carried value planned at a bound?"""
    record = graph.data_bounds
    return record is not None and any(
        s.op == "Loop" and s.node == index and "_carried_" in s.name
        for s in record.symbols.values())


def run_loop(model: onnx.ModelProto, graph, plan, node, values: dict, ir_version: int
             ) -> LoopRun:
    """Run Loop ``node`` of ``graph`` (planned by ``plan``) iteration by iteration on
    ``values`` (every name it reads: its inputs and its bodies' reads); stop at the
    first carried value past its slot."""
    proto = model.graph.node[node.index]
    body = next(a.g for a in proto.attribute if a.name == "body")
    scope = graph.scopes[node.index][0]
    body_plan = next(s.plan for s in plan.scopes if s.node == node.index and s.attr == "body")
    fin, fout = scope.formal_inputs, scope.formal_outputs
    # every tensor the body's nodes make, returned too: each iteration's checked against
    # its slot in the body's plan (the body's own symbols' tensors among them, counted)
    from graphmem.core.dtypes import ENUM_BY_NAME
    formal = set(scope.formal_outputs)
    made = [o for nd in body.node for o in nd.output
            if o and o not in formal and o in body_plan.tensors and o in scope.graph.tensors]
    mine = [sy for sy in graph.data_bounds.body_symbols.values()
            if sy.scope == f"{node.index}_body" and sy.tensor in made]
    more = [(t, ENUM_BY_NAME[scope.graph.tensors[t].dtype]) for t in made]
    sess, outer = _session(model, body, values, scope, ir_version, more)
    counts: dict[str, int] = {sy.name: 0 for sy in mine}
    by_tensor = {sy.tensor: sy for sy in mine}
    first = len(body.output)
    ins = list(proto.input)
    trips = values.get(ins[0]) if ins[0] else None
    trips = None if trips is None else int(np.asarray(trips).reshape(-1)[0])
    cond = bool(np.asarray(values[ins[1]]).reshape(-1)[0]) if len(ins) > 1 and ins[1] else True
    carried = [np.asarray(values[t]) for t in ins[2:]]
    k = len(carried)
    for j, v in enumerate(carried):
        past = _past(body_plan, scope, fin[2 + j], v, f"the body of {node.label}: the "
                     "initial value of its formal input")
        if past:
            return LoopRun(0, (), past)
    feeds = {name: np.asarray(values[name]) for name in outer}
    i = 0
    while cond and (trips is None or i < trips):
        feeds[fin[0]] = np.array(i, np.int64)
        feeds[fin[1]] = np.array(cond)
        for name, v in zip(fin[2:], carried):
            feeds[name] = v
        try:
            outs = sess.run(None, feeds)
        except Exception as exc:
            raise GraphmemError(f"ONNX Runtime failed on the body of {node.label}, iteration "
                                f"{i}: {runtime_message(exc, 1000)}") from None
        cond = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = [np.asarray(v) for v in outs[1:1 + k]]
        where = f"the body of {node.label}, iteration {i}"
        got = dict(zip(made, outs[first:]))
        for sy in mine:
            v = np.asarray(got[sy.tensor])
            counts[sy.name] = max(counts[sy.name],
                                  int(v.shape[sy.axis]) if sy.axis < v.ndim else int(v.size))
            past = past_bound(sy.tensor, where, v, (sy,))
            if past:
                return LoopRun(i + 1, (), past, counts)
        for t, v in got.items():
            past = _past(body_plan, scope, t, np.asarray(v), where, by_tensor.get(t))
            if past:
                return LoopRun(i + 1, (), past, counts)
        for j, v in enumerate(carried):
            past = (_past(body_plan, scope, fout[1 + j], v, f"{where}, its formal output")
                    or _past(body_plan, scope, fin[2 + j], v,
                             f"{where}, copied to its formal input"))
            if past:
                return LoopRun(i + 1, (), past, counts)
        i += 1
    return LoopRun(i, tuple(tuple(v.shape) for v in carried), None, counts)


def past_bound(tensor: str, where: str, value: np.ndarray, symbols) -> str | None:
    """Words for ``value`` (of ``tensor``, made at ``where``) holding more than one of
    ``symbols`` (those whose count it holds) allows on its axis, or None. A value can fit
    its slot's bytes and still break the plan's bound: a Resize's height past its bound
    where its width is under its own."""
    for sym in symbols:
        n = int(value.shape[sym.axis]) if sym.axis < value.ndim else int(value.size)
        if n > sym.bound:
            return (f"tensor {tensor!r} ({where}) holds {value.size:,} elements "
                    f"{list(value.shape)}: {n:,} on axis {sym.axis}, past the bound "
                    f"{sym.name} <= {sym.bound:,} its plan is made at")
    return None


def _past(body_plan, scope, name: str, value: np.ndarray, where: str, symbol=None
          ) -> str | None:
    """Words for ``value`` past the slot of body tensor ``name``, or None where it fits
    (``symbol``: the one that bounds it, where the body's plan does not mark it)."""
    t = body_plan.tensors.get(name)
    if t is None or value.nbytes <= t.bytes:
        return None
    planned = list(scope.graph.tensors[name].shape)
    marks = dict(t.bounded_by or {})
    if symbol is not None:
        marks.setdefault(symbol.name, symbol.bound)
    bound = ", ".join(f"{s} <= {b:,}" for s, b in marks.items()) or "no bound"
    return (f"tensor {name!r} ({where}) holds {value.size:,} elements {list(value.shape)} "
            f"({value.nbytes:,} bytes), past its planned slot of {t.bytes:,} bytes "
            f"({planned} at the bound: {bound})")


def _session(model, body: onnx.GraphProto, values: dict, scope, ir_version: int,
             more=()):
    """One ONNX Runtime session of the whole body: its formal inputs and outputs with
    their element types only, the names it reads from the graph as inputs; ``more``:
    (name, element type) of body tensors to return after the formal outputs."""
    import onnxruntime as ort
    from graphmem.frontend.control_flow import outer_reads
    g = onnx.GraphProto()
    g.CopyFrom(body)
    del g.value_info[:]  # the enclosing graph's inference wrote them at one size
    for vi in list(g.input) + list(g.output):
        vi.type.tensor_type.ClearField("shape")
    outer = sorted(outer_reads(body))
    for name in outer:
        g.input.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.asarray(values[name]).dtype), None))
    for name, elem in more:
        g.output.append(helper.make_tensor_value_info(name, elem, None))
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = ir_version
    try:
        sess = ort.InferenceSession(m.SerializeToString(), session_options(),
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise GraphmemError(f"ONNX Runtime cannot run the {scope.attr} of node {scope.node} "
                            f"alone: {runtime_message(exc)}") from None
    return sess, outer


def branch_loops(graph, index: int) -> bool:
    """Does a branch of If node ``index`` hold a Loop bounded by a symbol of its own?"""
    record = graph.data_bounds
    return record is not None and any(
        s.op == "Loop" and s.scope.partition("_")[0] == str(index)
        for s in record.body_symbols.values())


def run_branch(model: onnx.ModelProto, graph, plan, node, values: dict, ir_version: int
               ) -> tuple[dict[str, int], str | None]:
    """The branch If ``node`` takes on ``values`` run again (one session), the outputs
    of its Loops bounded by symbols of that branch returned too: each checked against
    its slot in the branch's plan. Returns (symbol -> its count, the first output past
    its slot in words or None)."""
    from graphmem.core.dtypes import ENUM_BY_NAME
    proto = model.graph.node[node.index]
    cond = bool(np.asarray(values[proto.input[0]]).reshape(-1)[0])
    attr = "then_branch" if cond else "else_branch"
    mine = [s for s in graph.data_bounds.body_symbols.values()
            if s.op == "Loop" and s.scope == f"{node.index}_{attr}"]
    if not mine:
        return {}, None
    body = next(a.g for a in proto.attribute if a.name == attr)
    scope = next(s for s in graph.scopes[node.index] if s.attr == attr)
    body_plan = next(s.plan for s in plan.scopes if s.node == node.index and s.attr == attr)
    wanted = {}  # symbol -> (its tensor, the axis of its count)
    by_name = {s.name: s for s in mine}
    for s in mine:
        loop = body.node[s.node]
        if "_carried_" in s.name:
            j = int(s.name[:-len(s.scope) - 1].rsplit("_", 1)[1])
            wanted[s.name] = (loop.output[j], s.axis)
        else:
            k = len(loop.input) - 2
            scans = [o for o in loop.output[k:] if o]
            if scans:
                wanted[s.name] = (scans[0], 0)
    names = sorted({t for t, _ in wanted.values() if t})
    more = [(t, ENUM_BY_NAME[scope.graph.tensors[t].dtype]) for t in names]
    sess, outer = _session(model, body, values, scope, ir_version, more)
    try:
        outs = sess.run(None, {name: np.asarray(values[name]) for name in outer})
    except Exception as exc:
        raise GraphmemError(f"ONNX Runtime failed on the {attr} of {node.label}: "
                            f"{runtime_message(exc, 1000)}") from None
    got = dict(zip(names, outs[len(body.output):]))
    counts = {}
    for sym, (t, axis) in wanted.items():
        v = np.asarray(got[t])
        past = _past(body_plan, scope, t, v, f"the {attr} of {node.label}", by_name[sym])
        counts[sym] = int(v.shape[axis]) if axis < v.ndim else int(v.size)
        if past:
            return counts, past
    return counts, None
