"""Sizes read from the data's values (issue 53): a Resize to ``sizes`` computed from a
box, a ConstantOfShape of a box's offset, a Slice from a box's corner, an Expand, Tile,
Pad or Reshape to a computed shape, a Range to a computed limit.

The rules of :data:`VALUE_RULES` (part of :data:`graphmem.frontend.data_bounds.RULES`)
size such an output from the :mod:`graphmem.frontend.value_ranges` spans of the inputs
its size comes from: a dim whose value is exact is that value (at the bounds), a dim
whose value lies in [lo, hi] is a bounded symbol planned at hi (``Resize_55`` where one
dim of the node's output is so bounded, ``Resize_55_axis2`` and ``Resize_55_axis3``
where several are), which ``--bound`` may tighten. A dim whose value has no upper bound
leaves the output open, and the refusal names the ``--bound`` to pass.
"""
from __future__ import annotations

import math

import numpy as np

from graphmem.core.dtypes import dtype_of
from graphmem.frontend.value_ranges import Analysis, Span, node_of, onnx_slice

_INT64 = 7
_INTEGERS = {2, 3, 4, 5, 6, 7, 12, 13}  # (u)int8/16/32/64 of TensorProto
# the most bytes a bound is believed for: past it, a --bound is asked for
MAX_BOUND_BYTES = 2 ** 40
# a float result rounds to nearest: a count computed in float32 may round up past an
# integer the float64 product stays under
_ROUNDING = 1 + 2.0 ** -20


# --------------------------------------------------------------------------- the spans

def ranges(state) -> Analysis:
    """The spans of ``state``'s graph (a body's, set by body_bounds; else the top-level
    graph's, made again when more is sized)."""
    found = getattr(state, "ranges", None)
    if found is not None:
        return found() if callable(found) else found
    return top_level(state)


def top_level(state) -> Analysis:
    """The spans of the top-level graph's tensors as sized so far."""
    from graphmem.frontend.rule_inputs import graph_constants
    symbols = getattr(getattr(state, "data_bounds", None), "symbols", {})
    key = (len(state.tensors), len(symbols))
    cached = getattr(state, "_value_ranges", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    proto = state.model.source_proto
    tensors = state.tensors
    consts = graph_constants(state)
    varying = symbol_axes(symbols.values(), lambda i: proto.graph.node[i].output,
                          tensors)
    analysis = Analysis(lambda t: tensors[t].shape if t in tensors else None,
                        lambda t: tensors[t].dtype if t in tensors else "",
                        consts.get, varying)
    analysis.run(node_of(proto.graph.node[i], state.opset) for i in state.order)
    state._value_ranges = (key, analysis)
    return analysis


def symbol_axes(symbols, outputs_of, tensors) -> dict[str, set]:
    """tensor -> the axes the bounded ``symbols`` decide in their nodes' outputs: the
    symbol's axis of its own tensor, and every dim at the symbol's bound (a coincidence
    only makes a fixed dim count as decided)."""
    found: dict[str, set] = {}
    for s in symbols:
        for o in outputs_of(s.node):
            t = tensors.get(o) if o else None
            if t is None:
                continue
            axes = found.setdefault(o, set())
            axes.update(i for i, d in enumerate(t.shape) if d == s.bound)
            if o == s.tensor and s.axis < len(t.shape):
                axes.add(s.axis)
    return found


def element_spans(s: Span | None, n: int) -> list[Span] | None:
    """``s`` of a vector of ``n`` elements, one span each (the whole one for each where
    it has one for all)."""
    if s is None:
        return None
    if s.lo.shape and s.lo.size == n:
        return [Span(s.lo.reshape(-1)[k], s.hi.reshape(-1)[k]) for k in range(n)]
    w = s.whole()
    return [w] * n


class Dim:
    """A dim of a rule's output: ``value`` (its size at the bounds) where ``exact``, else
    at most ``value`` (None: no upper bound), and why."""

    def __init__(self, value, exact: bool, why: str = ""):
        self.value, self.exact, self.why = value, exact, why


def _hi(s: Span) -> int | None:
    h = float(s.hi)
    return None if not math.isfinite(h) else max(int(math.floor(h)), 0)


def _count(s: Span, what: str) -> Dim:
    """A dim that is the value ``s`` (a count: below 0 is 0)."""
    v = s.exact()
    if v is not None:
        return Dim(max(int(v), 0), True)
    hi = _hi(s)
    return Dim(hi, False, f"{what} is at most {hi:,}" if hi is not None else
               f"{what} has no upper bound the graph proves")


# --------------------------------------------------------------------------- the rules

def _ready(state, node, inputs) -> Analysis | None:
    """The spans, where those of ``node``'s ``inputs`` (positions) are final."""
    a = ranges(state)
    names = [node.inputs[k] for k in inputs if k < len(node.inputs)]
    return a if a.settled(names) else None


def _shape(state, name):
    t = state.tensors.get(name) if name else None
    return None if t is None else tuple(t.shape)


def _sized(state, record, node, index: int, op: str, elem: int, dims: list[Dim],
           same: tuple[int, ...] = ()):
    """The output's type from ``dims``, each inexact dim a bounded symbol; None where
    one has no bound (it is noted in ``record.wanted`` for the refusal). ``same``: the
    nodes of ``op`` whose output's dims are always this one's (their symbols one)."""
    from graphmem.frontend.rule_inputs import symbol_name
    open_dims = [k for k, d in enumerate(dims) if not d.exact]
    if not open_dims:
        return {node.outputs[0]: (elem, tuple(d.value for d in dims))}
    base = symbol_name(op, index)
    names = {k: base if len(open_dims) == 1 else f"{base}_axis{k}" for k in open_dims}
    shape = [d.value if d.exact else 0 for d in dims]
    size = dtype_of(elem, node.outputs[0])[1] / 8  # bytes an element
    for k in open_dims:
        d = dims[k]
        proven = d.value
        if proven is not None:
            rest = math.prod(max(v.value or 1, 1) for j, v in enumerate(dims) if j != k)
            if proven * rest * size > MAX_BOUND_BYTES:
                proven = None  # no use planning at it: a --bound is asked for
        name = names[k]
        if proven is None and name not in record.given:
            record.wanted[index] = [names[j] for j in open_dims]
            return None
        why = d.why if proven is not None else "given by --bound"
        suffix = name[len(base):]
        shape[k] = record.add(name, proven, op, index, node.outputs[0], why, axis=k,
                              same=tuple(symbol_name(op, i) + suffix for i in same))
    return {node.outputs[0]: (elem, tuple(shape))}


def _attr(node, name, default=None):
    from graphmem.frontend.rule_inputs import attr_of as attr
    return attr(node, name, default)


def _elem(state, name):
    from graphmem.frontend.rule_inputs import elem_of as elem
    return elem(state, name)


def _value_elem(state, node, index: int) -> int:
    """The element type of a ConstantOfShape's ``value`` (float32 without one)."""
    proto = node if hasattr(node, "attribute") else state.model.source_proto.graph.node[index]
    return next((a.t.data_type for a in proto.attribute if a.name == "value"), 1)


def _constant_of_shape(state, record, node, index):
    s = _shape(state, node.inputs[0])
    if s is None or len(s) != 1:
        return None
    a = _ready(state, node, (0,))
    spans = element_spans(a.get(node.inputs[0]), s[0]) if a is not None else None
    if spans is None:
        return None
    dims = [_count(e, f"element {k} of its shape") for k, e in enumerate(spans)]
    return _sized(state, record, node, index, "ConstantOfShape",
                  _value_elem(state, node, index), dims)


def _target_spans(state, node):
    """(the data's shape, its target shape's element spans) of an Expand or Reshape
    whose target is a 1-D tensor whose spans are ready, or None."""
    x, s = _shape(state, node.inputs[0]), _shape(state, node.inputs[1])
    if x is None or s is None or len(s) != 1:
        return None
    a = _ready(state, node, (1,))
    spans = element_spans(a.get(node.inputs[1]), s[0]) if a is not None else None
    return None if spans is None else (x, spans)


def _expand(state, record, node, index):
    found = _target_spans(state, node)
    if found is None:
        return None
    x, spans = found
    rank = max(len(x), len(spans))
    xs = (1,) * (rank - len(x)) + tuple(x)
    vs = [None] * (rank - len(spans)) + list(spans)
    dims = []
    for k in range(rank):
        if vs[k] is None:
            dims.append(Dim(xs[k], True))
            continue
        d = _count(vs[k], f"element {k} of its shape")
        if d.exact:
            dims.append(Dim(xs[k] if d.value == 1 else max(d.value, xs[k]), True))
        else:
            dims.append(Dim(None if d.value is None else max(d.value, xs[k]), False, d.why))
    return _sized(state, record, node, index, "Expand", _elem(state, node.inputs[0]), dims)


def _tile(state, record, node, index):
    x = _shape(state, node.inputs[0])
    if x is None:
        return None
    a = _ready(state, node, (1,))
    spans = element_spans(a.get(node.inputs[1]), len(x)) if a is not None else None
    if spans is None:
        return None
    dims = []
    for k, e in enumerate(spans):
        d = _count(e, f"repeat {k}")
        dims.append(Dim(None if d.value is None else d.value * x[k], d.exact,
                        f"its input's {x[k]} times {d.why}" if not d.exact else ""))
    return _sized(state, record, node, index, "Tile", _elem(state, node.inputs[0]), dims)


def _pad(state, record, node, index):
    x = _shape(state, node.inputs[0])
    if x is None or len(node.inputs) < 2 or not node.inputs[1]:
        return None
    a = _ready(state, node, (1, 3))
    if a is None:
        return None
    axes = list(range(len(x)))
    if len(node.inputs) > 3 and node.inputs[3]:
        v = a.exact(node.inputs[3])
        if v is None:
            return None
        axes = [int(k) % len(x) for k in v.reshape(-1)]
    spans = element_spans(a.get(node.inputs[1]), 2 * len(axes))
    if spans is None:
        return None
    dims = [Dim(d, True) for d in x]
    for j, k in enumerate(axes):
        b, e = spans[j], spans[len(axes) + j]
        if b.exact() is not None and e.exact() is not None:
            dims[k] = Dim(max(x[k] + int(b.exact()) + int(e.exact()), 0), True)
            continue
        hi = float(b.hi) + float(e.hi)
        dims[k] = Dim(max(int(x[k] + hi), 0) if math.isfinite(hi) else None, False,
                      f"its input's {x[k]} and pads of at most {hi:,.0f}")
    return _sized(state, record, node, index, "Pad", _elem(state, node.inputs[0]), dims)


def _reshape(state, record, node, index):
    found = _target_spans(state, node)
    if found is None:
        return None
    x, spans = found
    numel = math.prod(x)
    allowzero = _attr(node, "allowzero", 0)
    dims, infer = [], None
    for k, e in enumerate(spans):
        v = e.exact()
        if v is not None and int(v) == -1:
            infer = k
            dims.append(None)
        elif v is not None and int(v) == 0 and not allowzero:
            dims.append(Dim(x[k] if k < len(x) else 0, True))
        elif v is not None:
            dims.append(Dim(max(int(v), 0), True))
        else:  # any value: itself, a copied dim (0) or the inferred one (-1): <= numel
            hi = _hi(e)
            bound = None if hi is None else max(hi, numel, max(x, default=0))
            dims.append(Dim(bound, False, f"element {k} of its shape, at most {bound}"
                            if bound is not None else f"element {k} of its shape has no "
                            "upper bound the graph proves"))
    if infer is not None:
        known = [d for d in dims if d is not None]
        rest = math.prod(d.value for d in known if d.exact)
        if all(d.exact for d in known) and rest and numel % rest == 0:
            dims[infer] = Dim(numel // rest, True)
        else:
            dims[infer] = Dim(numel, False, f"the {numel:,} elements of its input")
    return _sized(state, record, node, index, "Reshape", _elem(state, node.inputs[0]), dims)


def _resize(state, record, node, index):
    x = _shape(state, node.inputs[0])
    if x is None:
        return None
    a = _ready(state, node, (2, 3))
    if a is None:
        return None
    axes = _attr(node, "axes")
    axes = list(range(len(x))) if axes is None else [int(k) % len(x) for k in axes]
    dims = [Dim(d, True) for d in x]
    sizes = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else ""
    scales = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    if sizes:
        spans = element_spans(a.get(sizes), len(axes))
        if spans is None:
            return None
        for j, k in enumerate(axes):
            dims[k] = _count(spans[j], f"sizes[{j}]")
    elif scales:
        spans = element_spans(a.get(scales), len(axes))
        if spans is None:
            return None
        for j, k in enumerate(axes):
            v = spans[j].exact()
            if v is not None:
                dims[k] = Dim(int(np.floor(np.float32(x[k]) * np.float32(v))), True)
                continue
            hi = float(spans[j].hi)
            bound = int(math.floor(x[k] * hi * _ROUNDING)) if math.isfinite(hi) else None
            dims[k] = Dim(None if bound is None else max(bound, 0), False,
                          f"its input's {x[k]} times scales[{j}] of at most {hi:g}")
    else:
        return None
    return _sized(state, record, node, index, "Resize", _elem(state, node.inputs[0]), dims)


def _slice(state, record, node, index):
    """A Slice from data: each sliced dim at most the input's (and at most ends - starts
    where both are known not to count from the end)."""
    x = _shape(state, node.inputs[0])
    if x is None or len(node.inputs) < 3:
        return None
    a = _ready(state, node, (1, 2, 3, 4))
    if a is None:
        return None
    n = _shape(state, node.inputs[1])
    if n is None or len(n) != 1:
        return None
    axes = list(range(n[0]))
    if len(node.inputs) > 3 and node.inputs[3]:
        v = a.exact(node.inputs[3])
        axes = None if v is None else [int(k) % len(x) for k in v.reshape(-1)]
    starts = element_spans(a.get(node.inputs[1]), n[0])
    ends = element_spans(a.get(node.inputs[2]), n[0])
    steps = element_spans(a.get(node.inputs[4]), n[0]) if len(node.inputs) > 4 and \
        node.inputs[4] else [Span(np.array(1.0), np.array(1.0))] * n[0]
    if starts is None or ends is None or steps is None:
        return None
    dims = [Dim(d, True) for d in x]
    same = _same_slices(state, node, x)
    if axes is None:  # which axes is data: any may be cut
        dims = [Dim(d, False, f"its input's {d} on axis {k}") for k, d in enumerate(x)]
        return _sized(state, record, node, index, "Slice", _elem(state, node.inputs[0]), dims,
                      same)
    for j, k in enumerate(axes):
        d = x[k]
        s, e, st = starts[j].exact(), ends[j].exact(), steps[j].exact()
        if s is not None and e is not None and st is not None and int(st) != 0:
            dims[k] = Dim(len(range(*onnx_slice(s, e, st).indices(d))), True)
            continue
        bound, why = d, f"its input's {d} on axis {k}"
        if st is not None and int(st) > 0 and float(starts[j].lo) >= 0 and \
                float(ends[j].lo) >= 0:
            span_hi = min(float(ends[j].hi), d) - float(starts[j].lo)
            tight = max(int(math.ceil(span_hi / int(st))), 0)
            if tight < bound:
                bound, why = tight, (f"ends of at most {float(ends[j].hi):,.0f} less starts "
                                     f"of at least {float(starts[j].lo):,.0f}")
        dims[k] = Dim(bound, False, why)
    return _sized(state, record, node, index, "Slice", _elem(state, node.inputs[0]), dims,
                  same)


def _same_slices(state, node, x) -> tuple[int, ...]:
    """The Slice nodes (top-level) with ``node``'s starts, ends, axes and steps, of
    inputs of its shape ``x`` on which no symbol decides a dim: their outputs' dims are
    always equal (one symbol)."""
    from graphmem.core.ir import standard_domain
    if not hasattr(state, "g"):  # a body's node (body_bounds): its own symbols
        return ()
    a = ranges(state)
    if a.axes(node.inputs[0]):
        return ()
    key = tuple(node.inputs[1:])
    found = tuple(i for i in state.order if state.g.nodes[i].op_type == "Slice" and
                  standard_domain(state.g.nodes[i].domain) and
                  tuple(state.g.nodes[i].inputs[1:]) == key and
                  _shape(state, state.g.nodes[i].inputs[0]) == tuple(x) and
                  not a.axes(state.g.nodes[i].inputs[0]))
    return found if len(found) > 1 else ()


def _range(state, record, node, index):
    """A Range of computed bounds: at most (limit - start) / delta over their spans."""
    a = _ready(state, node, (0, 1, 2))
    if a is None:
        return None
    s, lim, d = (a.get(t) if t else None for t in node.inputs[:3])
    elem = next((_elem(state, t) for t in node.inputs if t and t in state.tensors), _INT64)
    if s is None or lim is None or d is None:
        return None
    s, lim, d = s.whole(), lim.whole(), d.whole()
    exact = [v.exact() for v in (s, lim, d)]
    if all(v is not None for v in exact) and float(exact[2]) != 0:
        n = max(int(math.ceil((float(exact[1]) - float(exact[0])) / float(exact[2]))), 0)
        return {node.outputs[0]: (elem, (n,))}
    bound = None
    ends = (s.lo, lim.hi, d.lo) if float(d.lo) > 0 else (lim.lo, s.hi, -d.hi)
    if elem in _INTEGERS and all(math.isfinite(float(v)) for v in ends) and \
            float(ends[2]) > 0:
        # integers: the count exactly, -(-(hi - lo) // step) (no float rounding margin)
        lo, hi, step = (int(v) for v in ends)
        bound = max(-(-(hi - lo) // step), 0)
    else:
        with np.errstate(all="ignore"):
            if float(d.lo) > 0:
                bound = (float(lim.hi) - float(s.lo)) / float(d.lo)
            elif float(d.hi) < 0:
                bound = (float(s.hi) - float(lim.lo)) / -float(d.hi)
        if bound is not None and math.isfinite(bound):
            bound = max(int(math.ceil(bound * _ROUNDING)), 0)
    if bound is not None and math.isfinite(bound):
        dim = Dim(bound, False, f"limit - start over delta, at most {bound:,}")
    else:
        dim = Dim(None, False, "")
    return _sized(state, record, node, index, "Range", elem, [dim])


VALUE_RULES = {"ConstantOfShape": _constant_of_shape, "Expand": _expand, "Tile": _tile,
               "Pad": _pad, "Reshape": _reshape, "Resize": _resize, "Slice": _slice,
               "Range": _range}
