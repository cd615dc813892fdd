"""Sizes that fall as a count grows (issue 53): planned by the value rules, not at the
bounds.

The loader sizes every tensor after a bounded symbol by onnx's inference at the bounds,
the shape arithmetic evaluated there. That is the most the tensor holds where its size
grows with the symbols (a Reshape to [n, 4], a TopK of Min(300, n)); where it falls
(detections padded to 50 rows: a ConstantOfShape of [50 - n, 5], a Slice of rows n to
50) it is the least, and a smaller count at run time overflows the slot.

:func:`resize_falling` finds, after the sizing at the bounds, a node of an op that
sizes its output from an input's values (:data:`graphmem.frontend.value_sizes.
VALUE_RULES`, and a TopK's k) whose size input is computed from a dim a symbol decides
and whose value at the bounds is not where the size is largest over the input's value
range (:mod:`graphmem.frontend.value_ranges`): for a shape, sizes, scales, pads,
repeats or k, each element at its range's hi; for a Slice with a positive step, its
starts at their lo and its ends at their hi (the reverse for a negative step); for a
Range, its start at its lo and its limit at its hi (the reverse for a negative delta).
It sizes that node again by its value rule (a symbol at the range's hi, as a size read
from the data is), and what follows it again from that. Where each value at the bounds
is where the size is largest (the usual case), nothing changes.
"""
from __future__ import annotations

import math

import numpy as np

from graphmem.core.ir import CONTROL_FLOW, standard_domain
from graphmem.frontend.value_ranges import Analysis, Span, node_of
from graphmem.frontend.value_sizes import element_spans, ranges

# the inputs whose values size each op's output
SIZE_INPUTS = {"ConstantOfShape": (0,), "Expand": (1,), "Tile": (1,), "Pad": (1, 3),
               "Reshape": (1,), "Resize": (2, 3), "Slice": (1, 2, 3, 4), "Range": (0, 1, 2),
               "TopK": (1,)}
# a float value at the bounds this close under its range's hi is at the hi (the range
# is rounded outward to the float grid at each step)
_FLOAT_SLACK = 2.0 ** -16


def at_the_bounds(state) -> Analysis:
    """The values of the top-level graph's tensors with every dim at its bound (no dim
    varies): the shape arithmetic as the sizing at the bounds computed it."""
    from graphmem.frontend.rule_inputs import graph_constants
    proto, tensors = state.model.source_proto, state.tensors
    analysis = Analysis(lambda t: tensors[t].shape if t in tensors else None,
                        lambda t: tensors[t].dtype if t in tensors else "",
                        graph_constants(state).get, {})
    return analysis.run(node_of(proto.graph.node[i], state.opset) for i in state.order)


class _Values:
    """A node's size inputs: their spans (``ranges``) and values at the bounds
    (``points``, computed when first asked)."""

    def __init__(self, state, spans: Analysis):
        self.state, self.spans, self._points = state, spans, None

    def span(self, name: str) -> Span | None:
        return self.spans.get(name) if name else None

    def point(self, name: str):
        if self._points is None:
            self._points = at_the_bounds(self.state)
        v = self._points.exact(name)
        return None if v is None else np.asarray(v, np.float64).reshape(-1)


def _at(point: float, want: float, lo: float, hi: float) -> bool:
    """Is ``point`` at ``want`` (lo or hi of a range [lo, hi]), up to the float grid?"""
    if point == want:
        return True
    slack = _FLOAT_SLACK * max(abs(lo), abs(hi), 1.0)
    return math.isfinite(want) and abs(point - want) <= slack and \
        (point != int(point) or want != int(want))


def _largest_at_hi(values: _Values, name: str) -> bool | None:
    """Is every element of ``name``'s value at the bounds its range's hi (None: its
    value at the bounds is not known)?"""
    s = values.span(name)
    if s is None or s.exact() is not None:
        return True
    p = values.point(name)
    if p is None:
        return None
    spans = element_spans(s, p.size)
    return all(_at(float(v), float(e.hi), float(e.lo), float(e.hi))
               for v, e in zip(p, spans))


def _slice_largest(values: _Values, node) -> bool | None:
    ins = list(node.inputs) + [""] * (5 - len(node.inputs))
    starts, ends, axes, steps = ins[1], ins[2], ins[3], ins[4]
    parts = {}
    for name in (starts, ends, steps):
        if not name:
            continue
        s = values.span(name)
        p = values.point(name)
        if s is None or p is None:
            return None
        parts[name] = (p, element_spans(s, p.size))
    if axes and values.span(axes) is not None and values.span(axes).exact() is None:
        return False  # which axes is data: any may be cut
    if starts not in parts or ends not in parts:
        return None
    count = parts[starts][0].size
    for j in range(count):
        st = parts[steps][1][j].exact() if steps else 1.0
        if st is None or float(st) == 0:
            return False
        for name, grows in ((starts, False), (ends, True)):
            p, spans = parts[name]
            e = spans[j]
            if e.exact() is not None:
                continue
            lo, hi = float(e.lo), float(e.hi)
            if lo < 0 <= hi:  # from the start or from the end: not monotone
                return False
            want = hi if grows == (float(st) > 0) else lo
            if not _at(float(p[j]), want, lo, hi):
                return False
    return True


def _range_largest(values: _Values, node) -> bool | None:
    start, limit, delta = (values.span(t) for t in node.inputs[:3])
    if start is None or limit is None or delta is None:
        return None
    if start.exact() is not None and limit.exact() is not None and delta.exact() is not None:
        return True
    d = delta.whole().exact()
    if d is None or float(d) == 0:
        return False
    for name, s, grows in ((node.inputs[0], start, False), (node.inputs[1], limit, True)):
        if s.exact() is not None:
            continue
        p = values.point(name)
        if p is None:
            return None
        w = s.whole()
        lo, hi = float(w.lo), float(w.hi)
        want = hi if grows == (float(d) > 0) else lo
        if not _at(float(p.reshape(-1)[0]), want, lo, hi):
            return False
    return True


def falls(values: _Values, node) -> bool:
    """May ``node``'s output be larger at run time than at the bounds?"""
    op = node.op_type
    if op == "Slice":
        found = _slice_largest(values, node)
    elif op == "Range":
        found = _range_largest(values, node)
    else:
        found = True
        for k in SIZE_INPUTS[op]:
            if k < len(node.inputs) and node.inputs[k]:
                at_hi = _largest_at_hi(values, node.inputs[k])
                if at_hi is None:
                    return False  # its value at the bounds is not known: not ours to size
                found = found and at_hi
    return found is False


def falling_node(state, record, skip: set[int]) -> int | None:
    """The first node (in order) of :data:`SIZE_INPUTS`'s ops sized at the bounds whose
    size may be larger at run time (see :func:`falls`), not one of ``skip``."""
    if not record.symbols:  # no dim a symbol decides: every value at the bounds is exact
        return None
    g = state.g
    symbol_nodes = set(record.nodes())
    values = None
    for idx in state.order:
        n = g.nodes[idx]
        if n.op_type not in SIZE_INPUTS or not standard_domain(n.domain) or \
                idx in symbol_nodes or idx in skip:
            continue
        if idx in state.folding.nodes or not n.outputs:
            continue
        sized = [o in state.tensors for o in n.outputs if o]
        if not all(sized) and any(sized):
            continue
        if values is None:
            spans = ranges(state)
            values = _Values(state, spans)
        names = [n.inputs[k] for k in SIZE_INPUTS[n.op_type] if k < len(n.inputs)]
        if not values.spans.settled(names):
            continue
        if all(values.span(t) is None or values.span(t).exact() is not None
               for t in names if t):
            continue
        if falls(values, node_of(state.model.source_proto.graph.node[idx], state.opset)):
            return idx
    return None


def resize_falling(state, record, strategies, bounds) -> bool:
    """Size again, by its value rule, the first node whose size may be larger at run
    time than at the bounds (:func:`falling_node`), and what follows it: did it?
    ``strategies``: :mod:`graphmem.frontend.shape_strategies`; ``bounds``:
    :mod:`graphmem.frontend.data_bounds` (passed in: it imports this one)."""
    tried = getattr(state, "resized_falling", None)
    if tried is None:
        tried = state.resized_falling = set()
    idx = falling_node(state, record, tried)
    if idx is None:
        return False
    tried.add(idx)
    node = state.g.nodes[idx]
    after = downstream(state, idx, bounds)
    unsize(state, after)
    for name in [s.name for s in record.symbols.values()
                 if s.node != idx and any(o in after for o in state.g.nodes[s.node].outputs)]:
        del record.symbols[name]  # sized again from what is sized again
    state._value_ranges = None
    if any(state.g.nodes[i].op_type in CONTROL_FLOW and
           any(o in after for o in state.g.nodes[i].outputs) for i in state.order):
        state.deferred_control_flow = True  # their bodies settled again
    sized = bounds.RULES[node.op_type](state, record, node, idx)
    strategies.add_types(state, sized or {})
    if not sized:
        strategies.infer_again(state)
    bounds.govern(state, record, strategies.unknown)
    return True


def downstream(state, idx: int, bounds) -> set[str]:
    """The tensors whose size may depend on node ``idx``'s outputs (its outputs too):
    those a symbol of that node would govern (``bounds.governed``)."""
    probe = bounds.DataBounds()
    n = state.g.nodes[idx]
    probe.symbols["probe"] = bounds.Symbol("probe", 0, 0, n.op_type, idx, n.outputs[0], "")
    return set(bounds.governed(state.g, state.order, state.reads, probe)[0])


def unsize(state, names: set[str]) -> None:
    """The working model without the types of ``names``: their value infos dropped,
    a graph output's declared type as read put back."""
    from graphmem.frontend.splice import OUTPUT, VALUE_INFO, entry, entry_message
    g = state.model.view.graph
    changes = [(VALUE_INFO, k, None) for k, vi in enumerate(g.value_info) if vi.name in names]
    src = state.model.source_view.graph
    declared = {o.name: k for k, o in enumerate(src.outputs)}
    for k, o in enumerate(g.outputs):
        if o.name in names and o.name in declared:
            changes.append((OUTPUT, k, entry(OUTPUT, entry_message(
                state.model.source, src, OUTPUT, declared[o.name]))))
    state.model.splice(changes)
    state.tensors = state.model.tensors()
