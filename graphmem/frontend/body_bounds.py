"""Sizes that depend on the data inside If/Loop/Scan bodies (issue 53): what the
control-flow settling (graphmem/frontend/control_flow.py) asks of the bounds.

torchvision's ``batched_nms`` is ``if boxes.numel() == 0: empty else: nms(...)``: an If
whose else_branch holds the NonMaxSuppression and reads the bounded boxes from the
graph. :class:`ControlFlowBounds` sizes a body's data-dependent nodes at their bounds
(the rules of :mod:`graphmem.frontend.data_bounds`), folds a body's small constants so
onnx's inference can read a Slice's axes from them, and bounds an If's output whose
branches differ in size by the larger (a symbol ``If_N``).
"""
from __future__ import annotations

from typing import NamedTuple

from graphmem.frontend.data_bounds import (RULES, DataBounds, rule_order, symbol_name,
                                          wanted_hint)


class ControlFlowBounds:
    """What the control-flow settling asks of the bounds (graphmem/frontend/
    control_flow.py): a body's data-dependent nodes at their bounds, and an If's output
    whose branches differ in size bounded by the larger (a symbol ``If_N``)."""

    def __init__(self, record: DataBounds, state=None):
        self.record = record
        self.state = state  # the loader's: the top-level graph's value ranges
        # (body, tensor) -> the hint naming the --bound a body's size read from the
        # data needs (graphmem/frontend/value_sizes.py)
        self.wanted: dict[tuple[str, str], str] = {}

    def hint(self, where: str, tensor: str) -> str:
        """The refusal's hint for ``tensor`` of the body ``where`` left open."""
        return self.wanted.get((where, tensor), "")

    def _ranges(self, model, tensors, values, where: str):
        """The value ranges of a body's tensors (value_ranges.Analysis), those it reads
        from the graph's as the graph's analysis has them."""
        from graphmem.core.ir import standard_domain
        from graphmem.frontend.value_ranges import Analysis, node_of
        from graphmem.frontend.value_sizes import symbol_axes, top_level
        outer = top_level(self.state) if self.state is not None else None
        syms = [s for s in self.record.body_symbols.values() if s.scope == where]
        varying = symbol_axes(syms, lambda i: model.graph.node[i].output, tensors)
        opset = max((o.version for o in model.opset_import if standard_domain(o.domain)),
                    default=21)
        analysis = Analysis(lambda t: tensors[t].shape if t in tensors else None,
                            lambda t: tensors[t].dtype if t in tensors else "",
                            _Lookup(values).get, varying, outer)
        return analysis.run(node_of(nd, opset) for nd in model.graph.node)

    def merge(self, idx: int, name: str, a, b):
        from graphmem.core.ir import Tensor
        if a.dtype != b.dtype or len(a.shape) != len(b.shape):
            return None
        shape = tuple(max(x, y) for x, y in zip(a.shape, b.shape))
        axis = next(i for i, (x, y) in enumerate(zip(a.shape, b.shape)) if x != y)
        sym = symbol_name("If", idx)
        bound = self.record.symbols[sym].bound if sym in self.record.symbols else \
            self.record.add(sym, shape[axis], "If", idx, name,
                            f"the larger of its branches' {a.shape[axis]} and "
                            f"{b.shape[axis]}", axis=axis)
        return Tensor(name, a.dtype, tuple(bound if i == axis else d
                                           for i, d in enumerate(shape)), a.bits)

    def trip_count(self, n, idx: int, values, refused: Exception, output: str,
                   counted=None, scope: str = "") -> int:
        """A Loop's iterations where control_flow cannot fix them (``refused``: its
        refusal): at most its trip count ``M``, a constant where the condition may stop
        it sooner, or ``M`` evaluated at the bounds; at most the count its condition
        stops it at (``counted``: graphmem/frontend/loop_trips.py), the least of the
        two; ``--bound Loop_N=K`` gives it where neither bounds it (``M`` a value of the
        data, or INT64_MAX) and tightens it elsewhere. The count is a symbol ``Loop_N``
        (in a body, ``Loop_i_N_attr``) governing the Loop's outputs (its scan outputs
        hold one slice an iteration)."""
        import numpy as np
        from graphmem.errors import GraphmemError
        from graphmem.frontend.loop_trips import NO_TRIP_COUNT
        sym = symbol_name("Loop", idx)
        full = sym + (f"_{scope}" if scope else "")
        known = self.record.body_symbols if scope else self.record.symbols
        if full in known:
            return known[full].bound
        m = values(n.input[0]) if n.input[0] else None
        m = np.asarray(m) if m is not None else None
        if m is not None and (m.size != 1 or m.dtype.kind not in "iu"):
            raise refused
        proven = None if m is None else max(int(m.reshape(-1)[0]), 0)
        if proven is not None and proven >= NO_TRIP_COUNT:
            proven = None  # INT64_MAX: a while-loop's, no count
        why = None if proven is None else f"its trip count M at the bounds, {proven:,}"
        if counted is not None and (proven is None or counted.trips < proven):
            proven, why = counted.trips, counted.why
        if proven is None and full not in self.record.given:
            raise GraphmemError(f"{refused}; pass --bound {full}=N (at most N iterations)") \
                from None
        return self._add(sym, proven, "Loop", idx, output, why or "given by --bound", 0,
                         scope)

    def kept_inside(self, model, tensors, formal_out, scope: str, where: str, infer) -> None:
        """Refuse a Loop of a body (``model``, inferred; the body ``scope``) bounded by a
        symbol of that body (its trip count or a growing carried value) where the size
        of a formal output of the body depends on it: the enclosing node's outputs
        would then have sizes the data decides that no symbol of the enclosing graph
        bounds. The body is inferred again with each such Loop's bounded outputs one
        larger on their axis (``infer``: a model -> its types); a formal output whose
        shape changes depends on it."""
        from onnx import helper
        from graphmem.core.dtypes import ENUM_BY_NAME
        nodes = model.graph.node
        mine = [s for s in self.record.body_symbols.values()  # (a name's scope is the
                if s.scope == scope and s.op == "Loop"  # body's index and attribute)
                and s.node < len(nodes) and nodes[s.node].op_type == "Loop"]
        if not mine:
            return
        grown = {}
        for s in mine:
            nd = model.graph.node[s.node]
            k = max(len(nd.input) - 2, 0)
            if "_carried_" in s.name:
                j = int(s.name[:-len(scope) - 1].rsplit("_", 1)[1])
                outs = [(nd.output[j], s.axis)] if j < len(nd.output) else []
            else:
                outs = [(o, 0) for o in nd.output[k:]]
            for o, axis in outs:
                t = tensors.get(o) if o else None
                if t is not None and axis < len(t.shape):
                    shape = list(grown.get(o, t.shape))
                    shape[axis] += 1
                    grown[o] = (t, tuple(shape), s.name, s.node)
        if not grown:
            return
        from graphmem.frontend.loop_growth import computed_from
        out = type(model)()
        out.CopyFrom(model)
        # what follows those outputs inferred afresh (its types as inferred now dropped)
        stale = computed_from(out.graph, set(grown))
        for o in out.graph.output:
            if o.name in stale:
                o.type.tensor_type.ClearField("shape")
        kept = [vi for vi in out.graph.value_info if vi.name not in stale]
        del out.graph.value_info[:]
        out.graph.value_info.extend(kept + [
            helper.make_tensor_value_info(o, ENUM_BY_NAME[t.dtype], list(shape))
            for o, (t, shape, _, _) in grown.items()])
        again = infer(out)
        for o in formal_out:
            a, b = tensors.get(o), again.get(o)
            if a is not None and (b is None or a.shape != b.shape):
                from graphmem.errors import GraphmemError
                _, _, name, node = next(iter(grown.values()))
                raise GraphmemError(
                    f"cannot size tensor {o!r}, an output{where}: its size depends on Loop "
                    f"node {node} of that body, bounded by {name} (a size the data "
                    "decides); graphmem plans such a Loop inside a body only where the "
                    "sizes of the body's outputs do not depend on it")

    def carried(self, n, idx: int, grown, trips: int, exact: bool, scope: str = ""
                ) -> dict[int, int]:
        """The bound of each loop-carried value that grows (``grown``: position ->
        graphmem.frontend.loop_growth.Growth) of Loop ``n`` (node ``idx``): its initial
        size plus ``trips`` (the trip count, or its bound ``Loop_N``) times its step, a
        symbol ``Loop_N_carried_J`` (J: its position among the carried values) that
        ``--bound`` may tighten. Returns position -> the size it is planned at."""
        out = {}
        trip = symbol_name("Loop", idx) + (f"_{scope}" if scope else "")
        count = (f"{trips:,} iterations (its trip count M)" if exact else
                 f"at most {trips:,} iterations ({trip})")
        known = self.record.body_symbols if scope else self.record.symbols
        for j, g in grown.items():
            name = f"Loop_{idx}_carried_{j}" + (f"_{scope}" if scope else "")
            if name in known:  # settled before (a deferred round settles again)
                out[j] = known[name].bound
                continue
            why = (f"its initial {g.initial:,} + {count} x at most {g.step:,} (the Concat "
                   f"onto it, body node {g.concat})")
            tensor = n.output[j] if j < len(n.output) else ""
            out[j] = self._add(f"Loop_{idx}_carried_{j}", g.initial + trips * g.step, "Loop",
                               idx, tensor, why, g.axis, scope)
        return out

    def _add(self, name: str, proven, op: str, node: int, tensor: str, why: str, axis: int,
             scope: str) -> int:
        """Record a symbol of the graph (``scope`` empty) or of a body (its name then
        suffixed ``_<node>_<attr>``, in ``body_symbols``); its planned value."""
        if not scope:
            return self.record.add(name, proven, op, node, tensor, why, axis)
        full = f"{name}_{scope}"
        one = DataBounds({full: self.record.given[full]} if full in self.record.given else {})
        bound = one.add(full, proven, op, node, tensor, why, axis)
        self.record.body_symbols[full] = one.symbols[full]._replace(scope=scope)
        self.record.notes.extend(one.notes)
        return bound

    def body_record(self, s, idx: int, grown, scope: str = ""):
        """``s`` (a Loop's body Scope) with the growing carried values marked in its
        graph's ``data_bounds``: the tensors of each value's chain (formal input to
        formal output) governed by its symbol, whose ``node`` and ``tensor`` there are
        the body's Concat and formal output (the body's plan marks them ``bounded_by``,
        and the concat pass leaves that Concat a copy)."""
        from dataclasses import replace
        body = DataBounds()
        for j, g in grown.items():
            name = f"Loop_{idx}_carried_{j}" + (f"_{scope}" if scope else "")
            sym = (self.record.body_symbols if scope else self.record.symbols)[name]
            body.symbols[name] = sym._replace(node=g.concat, tensor=g.formal_out, scope="")
            for t in g.chain:
                body.governed[t] = body.governed.get(t, ()) + (name,)
        return replace(s, graph=replace(s.graph, data_bounds=body))

    def size_body(self, model, tensors, values, where: str):
        """``model`` (a body, inferred) with the types of its open data-dependent
        nodes' outputs at their bounds added, or None where none could be sized. Their
        symbols are ``Op_<node>_<body>_<i>`` (bounds of the body's own plan)."""
        from onnx import helper
        body = _BodyState(tensors, values)
        made = []

        def ranges():  # made once a rule asks
            if not made:
                made.append(self._ranges(model, tensors, values, where))
            return made[0]
        body.ranges = ranges
        found = {}
        for late in (0, 1, 2):
            for i, nd in enumerate(model.graph.node):
                if nd.op_type not in RULES or rule_order(nd.op_type) != late or \
                        all(o in tensors for o in nd.output if o):
                    continue
                node = ProtoNode(tuple(nd.input), tuple(nd.output), nd.attribute)
                rule = RULES[nd.op_type]
                suffix = f"_{where}"
                record = DataBounds({k[:-len(suffix)]: v for k, v in self.record.given.items()
                                     if k.endswith(suffix)})
                sized = rule(body, record, node, i)
                for k, names in record.wanted.items():
                    for o in nd.output:
                        self.wanted[(where, o)] = wanted_hint(
                            nd.op_type, nd.name, f"node {k} of the body",
                            [n + suffix for n in names])
                if sized:
                    for sym in record.symbols.values():
                        name = sym.name + suffix
                        self.record.body_symbols[name] = sym._replace(name=name,
                                                                      scope=where)
                    self.record.notes.extend(record.notes)
                    found.update(sized)
            if found:
                break
        if not found:
            return _fold_body(model, tensors, values)
        out = type(model)()
        out.CopyFrom(model)
        names = set(found)
        kept = [vi for vi in out.graph.value_info if vi.name not in names]
        del out.graph.value_info[:]
        out.graph.value_info.extend(kept + [helper.make_tensor_value_info(n, e, list(sh))
                                            for n, (e, sh) in found.items()])
        return out


# the most bytes a body constant folded for the shapes may hold
BODY_CONSTANT_BYTES = 4096


def _fold_body(model, tensors, values):
    """``model`` (a body) with the values of its small constant nodes (of Constants,
    initializers and the outer constants ``values`` knows) as initializers, for onnx's
    inference to read shapes from (a Slice's axes from an Unsqueeze of a constant), or
    None where nothing new folds."""
    import numpy as np
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    known = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for vi in model.graph.input:
        v = _Lookup(values).get(vi.name)
        if v is not None:
            known[vi.name] = np.asarray(v)
    new = {}
    for nd in model.graph.node:
        if nd.op_type in RULES or any(a.type in (5, 10) for a in nd.attribute):  # GRAPH(S)
            continue
        if any(o in known for o in nd.output if o) or not all(
                not t or t in known for t in nd.input):
            continue
        if nd.op_type in ("RandomNormal", "RandomUniform", "RandomNormalLike",
                          "RandomUniformLike", "Multinomial"):
            continue
        try:
            from onnx import helper
            ins = [t for t in nd.input if t]
            g = helper.make_graph([nd], "fold", [], [helper.make_empty_tensor_value_info(o)
                                                     for o in nd.output if o],
                [numpy_helper.from_array(np.asarray(known[t]), t) for t in dict.fromkeys(ins)])
            m = helper.make_model(g, opset_imports=list(model.opset_import))
            outs = ReferenceEvaluator(m).run(None, {})
        except Exception:  # not evaluable here: left to the run
            continue
        for o, v in zip([o for o in nd.output if o], outs):
            v = np.asarray(v)
            if v.nbytes <= BODY_CONSTANT_BYTES:
                known[o] = v
                new[o] = v
    added = new
    # each folded node of one output a Constant of its value, in its place (the model
    # inferred only; the body's scope keeps its nodes, and settling indexes them)
    from onnx import helper
    out = type(model)()
    out.CopyFrom(model)
    done = False
    for k, nd in enumerate(out.graph.node):
        outs = [o for o in nd.output if o]
        if nd.op_type != "Constant" and len(outs) == 1 and outs[0] in added:
            out.graph.node[k].CopyFrom(helper.make_node(
                "Constant", [], outs, value=numpy_helper.from_array(added[outs[0]])))
            done = True
    return out if done else None


class ProtoNode(NamedTuple):
    inputs: tuple
    outputs: tuple
    attribute: object


class _BodyState:
    """What a rule reads of a body: its tensors, and its constants' values."""

    def __init__(self, tensors, values):
        self.tensors = tensors
        self._values = values

    @property
    def _data_bound_constants(self):
        return _Lookup(self._values)


class _Lookup:
    def __init__(self, values):
        self.values = values

    def get(self, name):
        try:
            return self.values(name)
        except Exception:  # a value the body cannot compute: not a constant
            return None
