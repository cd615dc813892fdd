"""A Loop's trip count from its condition (issue 53): where the body's condition is a
comparison of a counter with a constant, the count it stops at.

A Loop runs iteration ``i`` (from 0) while ``i < M`` and its condition holds: the
node's ``cond`` before the first, the body's condition output of iteration ``i - 1``
after. Exporters write a ``while`` loop with ``M`` left out (or INT64_MAX) and the
condition computed in the body: ``Less(iter + 1, 10)``, or ``Less(k, 10)`` with ``k`` a
carried counter the body adds a constant to. Such a condition is ``p + q*i < 0``
after iteration ``i`` (``q > 0``, exact integers), false from the first ``i >= -p/q``
on: the loop runs at most ``max(0, ceil(-p/q)) + 1`` iterations. ``<=`` is ``< 1``;
``Greater``/``GreaterOrEqual`` swap the sides; an ``And`` of conditions stops at the
first that does (the least of their counts); ``Identity``, ``Cast`` between integer
types, ``Squeeze``/``Unsqueeze``/``Reshape`` of one element pass values through;
``Add``, ``Sub``, ``Neg`` and ``Mul`` by a constant keep them affine in ``i``. A
counter is a carried value whose initial value is a constant and whose body output is
its input plus a constant. Anything else proves nothing (None).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import onnx
from onnx import numpy_helper

# an M at least this large is no bound (exporters write INT64_MAX for a while-loop)
NO_TRIP_COUNT = 1 << 62
_PASS = ("Identity", "Squeeze", "Unsqueeze", "Reshape", "Cast")
_COMPARE = {"Less": (False, False), "LessOrEqual": (False, True),
            "Greater": (True, False), "GreaterOrEqual": (True, True)}


class ConditionCount(NamedTuple):
    trips: int  # the most iterations the condition lets run
    exact: bool  # it runs exactly that many where the node's cond starts true
    why: str  # in words


def condition_count(n: onnx.NodeProto, body: onnx.GraphProto,
                    values: Callable[[str], object]) -> ConditionCount | None:
    """The count the body's condition stops Loop ``n`` at, or None where it proves none
    (``values``: the enclosing scope's constants)."""
    consts = {i.name: numpy_helper.to_array(i) for i in body.initializer}
    producers = {}
    for nd in body.node:
        if nd.op_type == "Constant":
            for a in nd.attribute:
                if a.name == "value" and a.HasField("t"):
                    consts[nd.output[0]] = numpy_helper.to_array(a.t)
                elif a.name == "value_int":
                    consts[nd.output[0]] = np.array(a.i, np.int64)
        for o in nd.output:
            if o:
                producers[o] = nd
    formal = [vi.name for vi in body.input]
    outs = [o.name for o in body.output]
    if len(formal) < 2 or not outs:
        return None

    def constant(name):
        if name in consts:
            return consts[name]
        if name in producers or name in formal:
            return None
        try:
            return values(name)
        except Exception:  # an outer value not computable here: no constant
            return None

    env = _Affine(formal, producers, constant)
    counters = {}
    for j, name in enumerate(formal[2:]):
        init = constant(n.input[2 + j]) if 2 + j < len(n.input) else None
        step = env.expr(outs[1 + j]) if 1 + j < len(outs) else None
        if init is None or step is None or _scalar(init) is None:
            continue
        rest = dict(step)
        if rest.pop(name, 0) != 1 or any(k != 1 for k in rest):
            continue  # not "its input plus a constant"
        counters[name] = {1: _scalar(init), "i": rest.get(1, 0)}
    return _count(outs[0], producers, env, counters, top=True)


def condition_holds(body: onnx.GraphProto, values: Callable[[str], object]) -> bool:
    """Is the body's condition output, through Identity nodes, a constant true (torch
    writes ``Identity`` of the node's own true condition)?"""
    if not body.output:
        return False
    producers = {o: nd for nd in body.node for o in nd.output if o}
    name = body.output[0].name
    while name in producers and producers[name].op_type == "Identity":
        name = producers[name].input[0]
    nd = producers.get(name)
    if nd is not None:
        if nd.op_type != "Constant":
            return False
        v = next((numpy_helper.to_array(a.t) for a in nd.attribute if a.name == "value"), None)
    else:
        inits = {i.name: i for i in body.initializer}
        if name in inits:
            v = numpy_helper.to_array(inits[name])
        elif name in {vi.name for vi in body.input}:
            return False
        else:
            try:
                v = values(name)
            except Exception:  # not computable here: not a constant
                return False
    v = None if v is None else np.asarray(v)
    return v is not None and v.size == 1 and v.dtype == np.bool_ and bool(v.reshape(-1)[0])


def _count(name, producers, env, counters, top: bool) -> ConditionCount | None:
    nd = producers.get(name)
    while nd is not None and nd.op_type == "Identity":
        nd = producers.get(nd.input[0])
    if nd is None:
        return None
    if nd.op_type == "And":
        found = [c for c in (_count(x, producers, env, counters, False) for x in nd.input)
                 if c is not None]
        if not found:
            return None
        best = min(found, key=lambda c: c.trips)
        return ConditionCount(best.trips, False, best.why)
    if nd.op_type not in _COMPARE or len(nd.input) != 2:
        return None
    swap, inclusive = _COMPARE[nd.op_type]
    left, right = (nd.input[1], nd.input[0]) if swap else (nd.input[0], nd.input[1])
    a, b = env.expr(left), env.expr(right)
    if a is None or b is None:
        return None
    diff = _substitute(_sub(a, b), counters)  # runs on while diff < 0 (<= 0: < 1)
    if diff is None or any(k not in (1, "i") for k in diff):
        return None
    p, q = diff.get(1, 0) - (1 if inclusive else 0), diff.get("i", 0)
    if q <= 0:
        return None
    # (both under 2**52: the count exact in a float, and q x trips within int64)
    trips = max(0, math.ceil(-p / q)) + 1 if abs(p) < (1 << 52) and q < (1 << 52) else None
    if trips is None:
        return None
    why = (f"its condition (a {nd.op_type} of a count going up by {q} an iteration) "
           f"stops it after at most {trips:,} iterations")
    return ConditionCount(trips, top, why)


def _scalar(v):
    """A constant's one value, where counting with it cannot wrap: a bool, or a 64-bit
    integer (int32 arithmetic wraps past 2**31 and the condition holds longer than the
    count says)."""
    a = np.asarray(v)
    if a.size != 1 or not (a.dtype.kind == "b" or (a.dtype.kind in "iu" and
                                                   a.dtype.itemsize == 8)):
        return None
    return int(a.reshape(-1)[0])


def _sub(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return {k: v for k, v in out.items() if v}


def _substitute(expr: dict, counters: dict) -> dict | None:
    out: dict = {}
    for k, v in expr.items():
        if k in (1, "i"):
            out[k] = out.get(k, 0) + v
        elif k in counters:
            for kk, vv in counters[k].items():
                out[kk] = out.get(kk, 0) + v * vv
        else:
            return None
    return out


class _Affine:
    """Body values as affine forms {1: constant, "i": iteration, <carried input>: ...}."""

    def __init__(self, formal, producers, constant):
        self.formal, self.producers, self.constant = formal, producers, constant
        self.seen: dict = {}

    def expr(self, name: str, depth: int = 0):
        if name in self.seen:
            return self.seen[name]
        found = self._expr(name, depth)
        self.seen[name] = found
        return found

    def _expr(self, name, depth):
        if depth > 64:
            return None
        if name == self.formal[0]:
            return {"i": 1}
        if name in self.formal[2:]:
            return {name: 1}
        v = self.constant(name)
        if v is not None:
            s = _scalar(v)
            return None if s is None else ({1: s} if s else {})
        nd = self.producers.get(name)
        if nd is None:
            return None
        ins = [self.expr(x, depth + 1) if x else None for x in nd.input]
        op = nd.op_type
        if op in _PASS and ins and ins[0] is not None:
            if op == "Cast" and next((a.i for a in nd.attribute if a.name == "to"), 0) \
                    not in (7, 13):  # int64, uint64: a narrower integer wraps
                return None
            return ins[0]
        if op == "Neg" and ins[0] is not None:
            return {k: -v for k, v in ins[0].items()}
        if op in ("Add", "Sub") and len(ins) == 2 and None not in ins:
            b = ins[1] if op == "Add" else {k: -v for k, v in ins[1].items()}
            return _sub(ins[0], {k: -v for k, v in b.items()})
        if op == "Mul" and len(ins) == 2 and None not in ins:
            a, b = ins
            if set(b) <= {1}:
                a, b = b, a
            if set(a) <= {1}:
                c = a.get(1, 0)
                return {k: c * v for k, v in b.items() if c * v}
        return None
