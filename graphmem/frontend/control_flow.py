"""The bodies of If, Loop and Scan nodes, loaded as nested scopes with static shapes.

Each body is shape-inferred on its own (onnx's inference, with its formal inputs typed
from the node's inputs and the names it reads from enclosing scopes typed from there),
then built into a :class:`~graphmem.core.ir.Graph` the planner plans like any other
(:class:`~graphmem.core.ir.Scope`). The node's outputs get their sizes from the body:
a Loop's scan outputs are as long as its trip count, which must then be a constant
with a condition that cannot stop the loop early; a Scan's are as long as its scanned
axis; an If's two branches must agree on every output's type. Whatever cannot be sized
statically is refused in one line naming the tensor.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphmem.core.dtypes import ENUM_BY_NAME, dtype_of
from graphmem.core.ir import CONTROL_FLOW, Graph, Node, Scope, Tensor, standard_domain
from graphmem.errors import GraphmemError, UnknownShape
from graphmem.frontend.body_reads import outer_reads
BODIES = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",)}


def is_control_flow(node) -> bool:
    """An If, Loop or Scan of the standard domain (a proto node or an IR node)."""
    return node.op_type in CONTROL_FLOW and standard_domain(node.domain)


Values = Callable[[str], "np.ndarray | None"]


def settle(model: onnx.ModelProto, order: list[int], tensors: dict[str, Tensor],
           infer: Callable[[onnx.ModelProto], onnx.ModelProto], values: Values,
           where: str = "", bounds=None, scope: str = ""
           ) -> tuple[onnx.ModelProto, dict[str, Tensor], dict[int, tuple[Scope, ...]]]:
    """Size every control-flow node of ``model.graph`` (nodes in ``order``) whose inputs
    are known: its bodies become scopes, its outputs' types are added to the model's
    value_info and inference runs again for what follows them, until no more change.
    Returns the model, every tensor's type (``tensors`` updated) and the scopes.
    ``bounds`` (issue 53: graphmem.frontend.data_bounds.ControlFlowBounds): sizes the
    data-dependent nodes of a body at their bounds (``size_body``) and bounds an If's
    output whose branches differ in size by the larger (``merge``, None: refused).
    ``scope``: where ``model`` is a body, ``"<node>_<attr>"`` (the node whose body it
    is), the suffix of the symbols of its own nodes."""
    scopes: dict[int, tuple[Scope, ...]] = {}
    while True:
        added = []
        for idx in order:
            n = model.graph.node[idx]
            if idx in scopes or not is_control_flow(n):
                continue
            if not all(t in tensors for t in n.input if t):
                continue
            try:
                made, outs = _node_scopes(n, idx, tensors, values, model, where, bounds,
                                          scope)
            except UnknownShape:
                if bounds is None:
                    raise
                continue  # issue 53: a body reads what the bounds size later

            scopes[idx] = made
            for name, t in outs.items():
                tensors[name] = t
                added.append(helper.make_tensor_value_info(name, ENUM_BY_NAME[t.dtype],
                                                           list(t.shape)))
        if not added:
            return model, tensors, scopes
        names = {vi.name for vi in added}
        kept = [vi for vi in model.graph.value_info if vi.name not in names]
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept + added)
        for o in model.graph.output:  # a declared output type gives way to the sized one
            if o.name in names:
                o.type.CopyFrom(next(vi.type for vi in added if vi.name == o.name))
        model = infer(model)
        tensors.update({k: v for k, v in types_of(model).items() if k not in tensors})


def types_of(model: onnx.ModelProto) -> dict[str, Tensor]:
    """Every value of ``model.graph`` with a fully known dense tensor type."""
    out: dict[str, Tensor] = {}
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.elem_type or not tt.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if any(d < 0 for d in dims):
            continue
        out[vi.name] = _tensor(vi.name, tt.elem_type, dims)
    for init in g.initializer:
        out[init.name] = _tensor(init.name, init.data_type, list(init.dims))
    return out


def _tensor(name: str, elem: int, dims) -> Tensor:
    dtype, bits = dtype_of(elem, name)
    return Tensor(name, dtype, tuple(int(d) for d in dims), bits)


def _node_scopes(n: onnx.NodeProto, idx: int, known: Mapping[str, Tensor], values: Values,
                 model: onnx.ModelProto, where: str, bounds=None, scope: str = ""
                 ) -> tuple[tuple[Scope, ...], dict[str, Tensor]]:
    label = f"node {idx} ({n.op_type}{' ' + repr(n.name) if n.name else ''}){where}"
    bodies = {a.name: a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH}
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute
             if a.type != onnx.AttributeProto.GRAPH}
    opsets = list(model.opset_import)
    _check_structure(n, bodies, attrs, label)
    if n.op_type == "If":
        scopes, outs = [], []
        for attr in BODIES["If"]:
            s = _scope(bodies[attr], idx, attr, [], known, opsets, values, label, bounds)
            scopes.append(s)
            outs.append([s.graph.tensors[o] for o in s.formal_outputs])
        made = {}
        for k, name in enumerate(o for o in n.output):
            a, b = outs[0][k], outs[1][k]
            merged = bounds.merge(idx, name, a, b) if bounds is not None and name and \
                (a.dtype, a.shape) != (b.dtype, b.shape) else None
            if merged is not None:  # issue 53: the branches' sizes bound the output
                made[name] = merged
                continue
            if (a.dtype, a.shape) != (b.dtype, b.shape):
                raise GraphmemError(
                    f"{label}: output {name!r} is {a.dtype}{list(a.shape)} in then_branch and "
                    f"{b.dtype}{list(b.shape)} in else_branch; graphmem needs one static shape")
            if name:
                made[name] = Tensor(name, a.dtype, a.shape, a.bits)
        return tuple(scopes), made
    body = bodies["body"]
    if n.op_type == "Loop":
        return _loop(n, idx, body, known, opsets, values, label, where, bounds, scope)
    # Scan (opset 9 on; opset 8's has a batch axis and a sequence_lens input)
    opset = max((o.version for o in opsets if standard_domain(o.domain)), default=0)
    if opset < 9:
        raise GraphmemError(f"{label}: a Scan of opset {opset} (batched, with sequence_lens) "
                            "is not planned; graphmem plans the Scan of opset 9 and later")
    _named(n, 0, label)
    m = int(attrs["num_scan_inputs"])
    states = [known[t] for t in n.input[:len(n.input) - m]]
    scanned = [known[t] for t in n.input[len(n.input) - m:]]
    in_axes = list(attrs.get("scan_input_axes", [0] * m))
    lengths, slices = set(), []
    for t, ax in zip(scanned, in_axes):
        ax = ax + len(t.shape) if ax < 0 else ax
        lengths.add(t.shape[ax])
        slices.append(Tensor("", t.dtype, t.shape[:ax] + t.shape[ax + 1:], t.bits))
    if len(lengths) != 1:
        raise GraphmemError(f"{label}: its scan inputs have different lengths {sorted(lengths)}")
    length = lengths.pop()
    s = _scope(body, idx, "body", states + slices, known, opsets, values, label, bounds)
    outs = [s.graph.tensors.get(o) for o in s.formal_outputs]
    k = len(states)
    _same_state(label, s.formal_outputs[:k], states, outs[:k])
    made = _finals(n.output[:k], states)
    out_axes = list(attrs.get("scan_output_axes", [0] * (len(outs) - k)))
    for j, (name, t) in enumerate(zip(n.output[k:], outs[k:])):
        if name:
            ax = out_axes[j] if j < len(out_axes) else 0
            ax = ax + len(t.shape) + 1 if ax < 0 else ax
            made[name] = Tensor(name, t.dtype, t.shape[:ax] + (length,) + t.shape[ax:], t.bits)
    return (s,), made


def _loop(n: onnx.NodeProto, idx: int, body: onnx.GraphProto, known: Mapping[str, Tensor],
          opsets, values: Values, label: str, where: str, bounds, scope: str
          ) -> tuple[tuple[Scope, ...], dict[str, Tensor]]:
    """A Loop's body as a scope, and its outputs' types: the carried values' finals as
    their initial values (or, issue 53, at the bound of a value that grows by a Concat
    onto it each iteration: graphmem/frontend/loop_growth.py), the scan outputs one
    slice an iteration."""
    carried = [known[t] for t in n.input[2:]]
    formal = [Tensor("", "int64", (), 64), Tensor("", "bool", (), 8)] + carried
    s = _scope(body, idx, "body", formal, known, opsets, values, label, bounds)
    outs = [s.graph.tensors.get(o) for o in s.formal_outputs]
    k = len(carried)
    grown = {}
    if any(o is None or (o.dtype, o.shape) != (t.dtype, t.shape)
           for t, o in zip(carried, outs[1:1 + k])):
        # issue 53: a carried value that grows each iteration (else refused in words)
        from graphmem.frontend.loop_growth import changed, growth
        grown = growth(label, body, s, carried, outs[1:1 + k], changed(carried, outs[1:1 + k]))
        if bounds is None:
            grown = {}  # (the data bounds apply where a Concat reads a carried value)
    keep = [j for j in range(k) if j not in grown]
    _same_state(label, [s.formal_outputs[1 + j] for j in keep], [carried[j] for j in keep],
                [outs[1 + j] for j in keep])
    made = _finals(n.output[:k], carried)
    scan_named = [name for name in n.output[k:] if name]
    trips, exact = None, True
    if scan_named or grown:
        first = scan_named[0] if scan_named else next(
            (n.output[j] for j in grown if n.output[j]), "")
        what = "a scan output" if scan_named else "a loop-carried value"
        from graphmem.frontend.loop_trips import condition_count, condition_holds
        counted = condition_count(n, body, values)
        try:
            # (a constant true body condition counts as passed through where the
            # values are constants; with data bounds M may be a value at the bounds,
            # and the Loop gets its symbol Loop_N below, as for any other condition)
            trips = _trip_count(n, s, values, label, first, what, counted,
                                bounds is None and condition_holds(body, values))
        except GraphmemError as exc:
            if bounds is None:
                raise
            # issue 53: a trip count the data decides, at its bound (body_bounds.py; in
            # a body, a symbol of the body's scope)
            trips = bounds.trip_count(n, idx, values, exc, first, counted, scope)
            exact = False
    if grown:
        from graphmem.frontend.loop_growth import check_again, without_types
        sizes = bounds.carried(n, idx, grown, trips, exact, scope)
        # the body's formal input at the bound (it holds every value, the last one
        # too: docs/plan-format.md's copies), its formal output one step more
        at = {j: max(sizes[j], 0) for j in grown}
        if any(at[j] != g.initial for j, g in grown.items()):
            again = [_resized(t, grown[j].axis, at[j]) if j in grown else t
                     for j, t in enumerate(carried)]
            s2 = _scope(without_types(body, grown), idx, "body", formal[:2] + again, known,
                        opsets, values, label, bounds)
            check_again(label, body, s, s2, grown, at)
            s = s2
            outs = [s.graph.tensors.get(o) for o in s.formal_outputs]
            _same_state(label, [s.formal_outputs[1 + j] for j in keep],
                        [carried[j] for j in keep], [outs[1 + j] for j in keep])
        s = bounds.body_record(s, idx, grown, scope)
        for j, g in grown.items():
            if n.output[j]:
                made[n.output[j]] = _resized(carried[j], g.axis, sizes[j], n.output[j])
    for name, t in zip(n.output[k:], outs[1 + k:]):
        if name:
            made[name] = Tensor(name, t.dtype, (trips,) + t.shape, t.bits)
    return (s,), made


def _resized(t: Tensor, axis: int, size: int, name: str = "") -> Tensor:
    return Tensor(name, t.dtype, tuple(size if a == axis else d for a, d in enumerate(t.shape)),
                  t.bits)


def _check_structure(n: onnx.NodeProto, bodies, attrs, label: str) -> None:
    """The counts the ONNX spec ties together (its checker does not look into a node's
    attributes): each body there, as many outputs as the node's."""
    missing = [a for a in BODIES[n.op_type] if a not in bodies]
    if missing:
        raise GraphmemError(f"{label} has no {missing[0]} attribute")
    outs = len(n.output)
    if n.op_type == "If":
        for attr in BODIES["If"]:
            if len(bodies[attr].output) != outs:
                raise GraphmemError(f"{label}: its {attr} has {len(bodies[attr].output)} "
                                    f"outputs, the node {outs}")
        return
    body = bodies["body"]
    if n.op_type == "Loop":
        _named(n, 2, label)  # (M and cond may be left out)
        carried = max(len(n.input) - 2, 0)
        if len(n.input) < 2 or len(body.output) < 1 + carried or \
                outs != len(body.output) - 1:
            raise GraphmemError(
                f"{label}: a Loop with {len(n.input)} inputs and {outs} outputs cannot have a "
                f"body of {len(body.output)} outputs (condition, {carried} carried values, "
                "then the scan outputs)")
        return
    m = attrs.get("num_scan_inputs")
    if m is None or not 1 <= int(m) <= len(n.input):
        raise GraphmemError(f"{label}: num_scan_inputs is {m}, for {len(n.input)} inputs")
    if len(body.output) != outs:
        raise GraphmemError(f"{label}: its body has {len(body.output)} outputs, the node {outs}")


def _named(n: onnx.NodeProto, first: int, label: str) -> None:
    """Refuse an input from ``first`` on that is left out (an empty name): a Loop's
    carried values and a Scan's states and scanned inputs are not optional."""
    for i, name in enumerate(n.input[first:], first):
        if not name:
            raise GraphmemError(f"{label}: its input {i} has no name; a {n.op_type}'s "
                                f"{'loop-carried values' if n.op_type == 'Loop' else 'inputs'} "
                                "cannot be left out")


def _finals(names, states) -> dict[str, Tensor]:
    return {name: Tensor(name, t.dtype, t.shape, t.bits) for name, t in zip(names, states) if name}


def _same_state(label: str, names, initial, outs) -> None:
    """A loop-carried value keeps its type from step to step (its bytes are planned once)."""
    for name, t, o in zip(names, initial, outs):
        if o is None or (o.dtype, o.shape) != (t.dtype, t.shape):
            got = f"{o.dtype}{list(o.shape)}" if o is not None else "of no static shape"
            raise GraphmemError(
                f"{label}: loop-carried value {name!r} is {got}, its initial value "
                f"{t.dtype}{list(t.shape)}; graphmem plans a loop-carried value that keeps "
                "its shape, or grows on one axis by a Concat onto it")


def _trip_count(n: onnx.NodeProto, s: Scope, values: Values, label: str, output: str,
                what: str = "a scan output", counted=None, holds: bool = False) -> int:
    """A Loop's number of iterations, when it is fixed: a constant trip count ``M``, a
    condition that is absent or a constant true, and a body condition that passes its
    input through or is a constant true (``holds``); or (issue 53) a body condition that
    counts (``counted``: graphmem/frontend/loop_trips.py, a counter compared with a
    constant) with ``M`` absent, INT64_MAX or a constant."""
    from graphmem.frontend.loop_trips import NO_TRIP_COUNT
    why = None
    trips = values(n.input[0]) if n.input[0] else None
    m = None
    if trips is not None:
        trips = np.asarray(trips)
        if trips.size != 1:
            raise GraphmemError(f"{label}: its trip count holds {trips.size} values, not one")
        if trips.dtype.kind not in "iu":  # the spec's M is int64; a float has no count
            raise GraphmemError(f"{label}: its trip count is of type {trips.dtype}, not an "
                                "integer")
        m = max(int(trips.reshape(-1)[0]), 0)
        if m >= NO_TRIP_COUNT:
            m = None  # INT64_MAX: a while-loop's, no count
    cond = values(n.input[1]) if len(n.input) > 1 and n.input[1] else np.array(True)
    starts = cond is not None and np.asarray(cond).size == 1 and \
        bool(np.asarray(cond).reshape(-1)[0])
    if starts and (holds or _passes_condition(s)):
        if m is not None:
            return m
        why = ("its trip count is not a constant" if trips is None and n.input[0] else
               "nothing stops it (its trip count is absent or INT64_MAX, its condition "
               "constant)")
    elif starts and counted is not None and counted.exact and (trips is not None or
                                                              not n.input[0]):
        return counted.trips if m is None else min(m, counted.trips)
    elif trips is None and n.input[0]:
        why = "its trip count is not a constant"
    else:
        why = "its condition can stop it before the trip count"
    raise GraphmemError(f"cannot size tensor {output!r}, {what} of {label}: {why}; "
                        "graphmem needs a static shape for every tensor")


def _passes_condition(s: Scope) -> bool:
    """Does the body's condition output always equal its condition input (true)?"""
    cond_in, cond_out = s.formal_inputs[1], s.formal_outputs[0]
    seen = cond_out
    nodes = {o: nd for nd in s.graph.nodes for o in nd.outputs}
    while seen != cond_in:
        nd = nodes.get(seen)
        if nd is None or nd.op_type != "Identity":
            return False
        seen = nd.inputs[0]
    return True


def _scope(body: onnx.GraphProto, idx: int, attr: str, formal: list[Tensor],
           known: Mapping[str, Tensor], opsets, values: Values, label: str,
           bounds=None) -> Scope:
    """One body as a Scope: typed, inferred, its own control flow settled."""
    where = f" in the {attr} of {label}"
    outer = sorted(outer_reads(body))
    missing = [t for t in outer if t not in known]
    if missing:
        raise UnknownShape(f"cannot infer the shape of tensor {missing[0]!r}, read{where}",
                           missing[0])
    g = onnx.GraphProto()
    g.CopyFrom(body)
    if len(g.input) != len(formal):
        raise GraphmemError(f"the {attr} of {label} has {len(g.input)} inputs, the node "
                            f"gives {len(formal)}")
    for vi, t in zip(g.input, formal):
        vi.type.CopyFrom(helper.make_tensor_type_proto(ENUM_BY_NAME[t.dtype], list(t.shape)))
    inits = {i.name for i in g.initializer}
    for name in outer:
        t = known[name]
        value = values(name) if bounds is not None and t.bytes <= 4096 else None
        if value is not None:  # issue 53: an outer constant's value, for the body's shapes
            g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
            continue
        g.input.append(helper.make_tensor_value_info(name, ENUM_BY_NAME[t.dtype], list(t.shape)))
    for o in g.output:  # declared output shapes may be symbolic or stale: inference decides
        o.type.tensor_type.ClearField("shape")
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = max(m.ir_version, 8)
    m = _infer(m, where)
    tensors = types_of(m)
    for name in outer:
        tensors[name] = known[name]
    local = {i.name: numpy_helper.to_array(i) for i in g.initializer
             if len(i.raw_data) <= (1 << 20) and i.data_location != onnx.TensorProto.EXTERNAL}
    local.update(_constant_nodes(g))

    def body_values(name: str):
        return local[name] if name in local else values(name)
    order = list(range(len(g.node)))
    m, tensors, nested = settle(m, order, tensors, lambda x: _infer(x, where), body_values,
                                where=where, bounds=bounds, scope=f"{idx}_{attr}")
    while bounds is not None and any(o and o not in tensors for nd in m.graph.node
                                     for o in nd.output):
        # issue 53: a body's data-dependent nodes at their bounds, then what follows
        sized = bounds.size_body(m, tensors, body_values, f"{idx}_{attr}")
        if sized is None:
            break
        m = _infer(sized, where)
        tensors.update({k: v for k, v in types_of(m).items() if k not in tensors})
        m, tensors, nested = settle(m, order, tensors, lambda x: _infer(x, where),
                                    body_values, where=where, bounds=bounds,
                                    scope=f"{idx}_{attr}")
    for nd in m.graph.node:
        for o in nd.output:
            if o and o not in tensors:
                hint = bounds.hint(f"{idx}_{attr}", o) if bounds is not None else ""
                raise GraphmemError(f"cannot infer the shape of tensor {o!r}, output of a "
                                    f"{nd.op_type} node{where}{hint}")
    formal_in = tuple(vi.name for vi in body.input)
    formal_out = tuple(o.name for o in body.output)
    if bounds is not None:  # issue 53: a bounded Loop of this body stays in it
        bounds.kept_inside(m, tensors, formal_out, f"{idx}_{attr}", where,
                           lambda x: types_of(_infer(x, where)))
    for o in formal_out:
        if o not in tensors:
            raise GraphmemError(f"cannot infer the shape of tensor {o!r}, an output{where}")
    nodes = []
    for i, nd in enumerate(body.node):
        implicit = ()
        subs = [a.g for a in nd.attribute if a.type == onnx.AttributeProto.GRAPH]
        if subs:
            ins = {t for t in nd.input if t}
            implicit = tuple(sorted({t for sub in subs for t in outer_reads(sub)} - ins))
        attrs = {a.name: ("<subgraph>" if a.type == onnx.AttributeProto.GRAPH
                          else _attr(a)) for a in nd.attribute}
        nodes.append(Node(i, nd.name, nd.op_type, nd.domain, tuple(nd.input),
                          tuple(nd.output), attrs, implicit))
    outputs = tuple(dict.fromkeys(formal_out + formal_in))
    graph = Graph(name=body.name or attr, nodes=tuple(nodes), tensors=tensors,
                  inputs=formal_in, outputs=outputs,
                  weights=frozenset(inits) | frozenset(outer), constants=(),
                  opset=max((o.version for o in opsets if standard_domain(o.domain)), default=0),
                  node_count=len(nodes), scopes=nested)
    return Scope(idx, attr, graph, formal_in, formal_out, tuple(outer))


def _attr(a: onnx.AttributeProto):
    try:
        v = helper.get_attribute_value(a)
    except ValueError as exc:  # onnx's "Unsupported ONNX attribute": an unknown type
        from graphmem.notes import note
        note(f"attribute {a.name!r} of a control-flow body could not be decoded "
             f"({' '.join(str(exc).split())[:200]}); its value is left out")
        return None
    if isinstance(v, onnx.TensorProto):
        return f"<tensor {list(v.dims)}>"
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _array(t: onnx.TensorProto, what: str) -> np.ndarray:
    """A tensor's value; one line when its data does not fill its dims."""
    try:
        return numpy_helper.to_array(t)
    except (ValueError, TypeError) as exc:
        raise GraphmemError(f"{what}: its data does not fill its shape {list(t.dims)} "
                            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                            ) from None


def _constant_nodes(g: onnx.GraphProto) -> dict[str, np.ndarray]:
    out = {}
    for nd in g.node:
        if nd.op_type == "Constant" and standard_domain(nd.domain) and nd.output:
            for a in nd.attribute:
                if a.name == "value":
                    out[nd.output[0]] = _array(a.t, f"Constant {nd.output[0]!r}")
    return out


def graph_values(model: onnx.ModelProto) -> Values:
    """The values of the top-level graph's small initializers and Constant nodes."""
    local = {i.name: i for i in model.graph.initializer}
    consts = _constant_nodes(model.graph)

    def value(name: str):
        if name in consts:
            return consts[name]
        init = local.get(name)
        if init is None or init.data_location == onnx.TensorProto.EXTERNAL:
            return None
        return _array(init, f"initializer {name!r}")
    return value


def _infer(m: onnx.ModelProto, where: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        raise GraphmemError(f"ONNX shape inference failed{where}: {text}") from None
