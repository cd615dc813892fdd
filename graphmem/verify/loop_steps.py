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
    sess, outer = _session(model, body, values, scope, ir_version)
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
        for j, v in enumerate(carried):
            where = f"the body of {node.label}, iteration {i}"
            past = (_past(body_plan, scope, fout[1 + j], v, f"{where}, its formal output")
                    or _past(body_plan, scope, fin[2 + j], v,
                             f"{where}, copied to its formal input"))
            if past:
                return LoopRun(i + 1, (), past)
        i += 1
    return LoopRun(i, tuple(tuple(v.shape) for v in carried), None)


def _past(body_plan, scope, name: str, value: np.ndarray, where: str) -> str | None:
    """Words for ``value`` past the slot of body tensor ``name``, or None where it fits."""
    t = body_plan.tensors.get(name)
    if t is None or value.nbytes <= t.bytes:
        return None
    planned = list(scope.graph.tensors[name].shape)
    bound = ", ".join(f"{s} <= {b:,}" for s, b in (t.bounded_by or {}).items()) or "no bound"
    return (f"tensor {name!r} ({where}) holds {value.size:,} elements {list(value.shape)} "
            f"({value.nbytes:,} bytes), past its planned slot of {t.bytes:,} bytes "
            f"({planned} at the bound: {bound})")


def _session(model, body: onnx.GraphProto, values: dict, scope, ir_version: int):
    """One ONNX Runtime session of the whole body: its formal inputs and outputs with
    their element types only, the names it reads from the graph as inputs."""
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
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = ir_version
    try:
        sess = ort.InferenceSession(m.SerializeToString(), session_options(),
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise GraphmemError(f"ONNX Runtime cannot run the body of Loop node {scope.node} "
                            f"alone: {runtime_message(exc)}") from None
    return sess, outer
