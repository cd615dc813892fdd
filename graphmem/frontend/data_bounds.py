"""Upper bounds for the tensors whose size depends on the data (issue 53).

NonZero, NonMaxSuppression, Compress, Unique and a TopK whose k is computed at run
time make an output whose size the values decide. For each, the graph proves an upper
bound (:data:`RULES`): NonZero's count is at most the elements of its input,
NonMaxSuppression's at most batch x classes x min(boxes, max_output_boxes_per_class)
(the last where that input is a constant), Compress's and Unique's at most their
input's, TopK's k at most its input's dim on the axis. Each bound is a named symbol
(``NonZero_3``: the op and the node's index) that ``--bound NAME=N`` may tighten; an op
the graph cannot bound (a Range whose limit is data) needs one, and the refusal names it.
Nodes whose counts are always equal (two NonZero of one tensor, two Compress on one
condition, two Slices with the same starts, ends, axes and steps of inputs of one fixed
shape) are one symbol, the first's; the others' names are its aliases
(``DataBounds.aliases``), and a ``--bound`` of any of them tightens it.

The loader sizes those outputs at their bounds, and every later tensor follows from
onnx's inference at the bounds, with the shape arithmetic (``Min(300, n)`` as
torchvision writes it for TopK) evaluated at them: planned there, every tensor holds
what the data gives, where its size grows with the counts; one that falls as a count
grows (a pad of 50 - n rows) is sized again by its value rule
(:mod:`graphmem.frontend.falling_sizes`). What the bounds govern is every tensor
computed from a bounded one (its bytes or its shape): a Shape of a bounded tensor runs
instead of folding, as does the arithmetic after it, since its value is known only at
run time.
"""
from __future__ import annotations

import sys
from math import prod
from typing import Mapping, NamedTuple

from graphmem.core.ir import standard_domain
from graphmem.frontend.rule_inputs import attr_of as _attr
from graphmem.frontend.rule_inputs import constant_int, symbol_name  # noqa: F401
from graphmem.frontend.rule_inputs import elem_of as _elem
from graphmem.frontend.rule_inputs import shape_of as _shape
from graphmem.frontend.structure import nearest_upstream
from graphmem.frontend.value_sizes import VALUE_RULES

_INT64 = 7  # TensorProto.INT64


class Symbol(NamedTuple):
    """A bounded symbol: the count a data-dependent node's output holds at run time."""
    name: str  # "NonZero_3": the op and the node's index
    bound: int  # planned at this value
    proven: int | None  # what the graph proves (None: nothing; ``--bound`` gave it)
    op: str
    node: int
    tensor: str  # the node's first output
    why: str  # the bound in words
    axis: int = 0  # the dim of ``tensor`` that holds the count
    scope: str = ""  # a body's symbol: "<node>_<attr>", the body it is in (node, tensor: its own)


class DataBounds:
    """The symbols of one load: those given (``--bound``), those found, and which tensors
    each governs (tensor -> the symbols its size may depend on)."""

    def __init__(self, given: Mapping[str, int] | None = None):
        self.given = dict(given or {})
        self.symbols: dict[str, Symbol] = {}
        self.governed: dict[str, tuple[str, ...]] = {}
        self.notes: list[str] = []
        # the symbols of data-dependent nodes in If/Loop/Scan bodies: Op_<i>_<node>_<attr>
        # (i: the node's index in its body), planned at their bounds in the body's plan
        self.body_symbols: dict[str, Symbol] = {}
        # node -> the symbols a size read from the data needs and the graph does not
        # bound (graphmem/frontend/value_sizes.py): named in the refusal
        self.wanted: dict[int, list[str]] = {}
        # a node whose count is always another's (a Compress on the same condition, a
        # NonZero of the same tensor): its symbol's name -> the symbol it is, and its
        # node -> that symbol
        self.aliases: dict[str, str] = {}
        self.alias_nodes: dict[int, str] = {}

    def __bool__(self) -> bool:
        return bool(self.symbols)

    def add(self, name: str, proven: int | None, op: str, node: int, tensor: str,
            why: str, axis: int = 0, same: tuple[str, ...] = ()) -> int:
        """Record a symbol; return the value it is planned at. ``same``: the names of
        the symbols whose count is always this one's, the first of them the symbol
        they all are (the first made; the others its aliases: a ``--bound`` of any
        tightens it)."""
        first = next((self.symbols[n] for n in same if n != name and n in self.symbols),
                     None)
        if first is not None:
            self.aliases[name] = first.name
            self.alias_nodes[node] = first.name
            return first.bound
        given, said = self.given.get(name), name
        if same:
            givens = [(self.given[n], n) for n in same if n in self.given]
            given, said = min(givens) if givens else (None, name)
        bound = proven if given is None else given
        if given is not None and proven is not None and given > proven:
            self.notes.append(f"--bound {said}={given}: the graph proves at most {proven:,} "
                              f"({why}); planned at {proven:,}")
            bound = proven
        self.symbols[name] = Symbol(name, int(bound), proven, op, node, tensor, why, axis)
        return int(bound)

    def unused(self) -> list[str]:
        return [n for n in self.given if n not in self.symbols and n not in self.body_symbols
                and n not in self.aliases]

    def nodes(self) -> dict[int, list[str]]:
        """node -> the symbols its outputs hold the count of (an alias's node too)."""
        found: dict[int, list[str]] = {}
        for s in self.symbols.values():
            found.setdefault(s.node, []).append(s.name)
        for node, name in self.alias_nodes.items():
            if name in self.symbols:
                found.setdefault(node, []).append(name)
        return found

    def to_dict(self) -> dict:
        """The symbols as the plan file writes them (each with ``why``, its bound in
        words): the graph's, then those of If/Loop/Scan bodies, each with its ``scope`` (the node whose body it is in, and the
        attribute: ``{"node": 7, "attr": "else_branch"}``; ``node`` and ``tensor`` are
        then the body's own)."""
        out = {s.name: {"bound": s.bound, "proven": s.proven, "op": s.op, "node": s.node,
                        "tensor": s.tensor, "axis": s.axis, "why": s.why}
               for s in self.symbols.values()}
        for s in self.body_symbols.values():
            node, _, attr = s.scope.partition("_")
            out[s.name] = {"bound": s.bound, "proven": s.proven, "op": s.op, "node": s.node,
                           "tensor": s.tensor, "axis": s.axis, "why": s.why,
                           "scope": {"node": int(node), "attr": attr}}
        return out


# --------------------------------------------------------------------------- the rules

def _bounded(state, record: DataBounds, op: str, index: int, tensor: str, proven, why,
             axis: int = 0, same: tuple[str, ...] = ()):
    return record.add(symbol_name(op, index), proven, op, index, tensor, why, axis, same)


def same_count(state, op: str, index: int, key) -> tuple[str, ...]:
    """The symbols of the nodes of ``op`` whose ``key`` (node -> a key, None: none) is
    node ``index``'s, in order: their counts are always equal."""
    if not hasattr(state, "g"):  # a body's node (body_bounds): its own symbols
        return ()
    mine = key(state.g.nodes[index])
    if mine is None:
        return ()
    found = tuple(symbol_name(op, i) for i in state.order
                  if state.g.nodes[i].op_type == op and
                  standard_domain(state.g.nodes[i].domain) and key(state.g.nodes[i]) == mine)
    return found if len(found) > 1 else ()


def _nonzero(state, record, node, index):
    x = _shape(state, node.inputs[0])
    if x is None:
        return None
    same = same_count(state, "NonZero", index, lambda n: n.inputs[0] if n.inputs else None)
    k = _bounded(state, record, "NonZero", index, node.outputs[0], prod(x),
                 f"the {prod(x):,} elements of its input", axis=1, same=same)
    return {node.outputs[0]: (_INT64, (len(x), k))}


def _nms(state, record, node, index):
    boxes, scores = _shape(state, node.inputs[0]), _shape(state, node.inputs[1])
    if boxes is None or scores is None or len(boxes) != 3 or len(scores) != 3:
        return None
    batch, classes, count = scores[0], scores[1], boxes[1]
    per_class = constant_int(state, node.inputs[2]) if len(node.inputs) > 2 and \
        node.inputs[2] else 0
    if per_class is None:
        proven = batch * classes * count
        why = f"batch {batch} x classes {classes} x boxes {count}"
    else:
        proven = batch * classes * min(count, max(per_class, 0))
        why = (f"batch {batch} x classes {classes} x min(boxes {count}, "
               f"max_output_boxes_per_class {per_class})")
    k = _bounded(state, record, "NonMaxSuppression", index, node.outputs[0], proven, why)
    return {node.outputs[0]: (_INT64, (k, 3))}


def _compress(state, record, node, index):
    x, cond = _shape(state, node.inputs[0]), _shape(state, node.inputs[1])
    if x is None or cond is None:
        return None
    axis = _attr(node, "axis")
    if axis is None:
        proven = min(prod(x), prod(cond))
        same = () if prod(x) < prod(cond) else _same_condition(state, index)
        k = _bounded(state, record, "Compress", index, node.outputs[0], proven,
                     f"the {proven:,} elements of its input and condition", same=same)
        return {node.outputs[0]: (_elem(state, node.inputs[0]), (k,))}
    axis = axis % len(x)
    proven = min(x[axis], prod(cond))
    same = () if x[axis] < prod(cond) else _same_condition(state, index)
    k = _bounded(state, record, "Compress", index, node.outputs[0], proven,
                 f"its input's {x[axis]} on axis {axis}", axis=axis, same=same)
    shape = list(x)
    shape[axis] = k
    return {node.outputs[0]: (_elem(state, node.inputs[0]), tuple(shape))}


def _same_condition(state, index: int) -> tuple[str, ...]:
    """The Compress nodes on node ``index``'s condition: where the input is no shorter
    than the condition (on the axis, or flattened), the count is the condition's trues,
    whatever the axis."""
    return same_count(state, "Compress", index,
                      lambda n: n.inputs[1] if len(n.inputs) > 1 and n.inputs[1] else None)


def _unique(state, record, node, index):
    x = _shape(state, node.inputs[0])
    if x is None:
        return None
    axis = _attr(node, "axis")
    outs = list(node.outputs) + [""] * (4 - len(node.outputs))
    first = next(o for o in outs if o)
    if axis is None:
        proven, length = prod(x), prod(x)
        k = _bounded(state, record, "Unique", index, first, proven,
                     f"the {proven:,} elements of its input")
        y = (k,)
    else:
        axis = axis % len(x)
        proven, length = x[axis], x[axis]
        k = _bounded(state, record, "Unique", index, first, proven,
                     f"its input's {proven} on axis {axis}",
                     axis=axis if first == outs[0] else 0)
        y = tuple(k if i == axis else d for i, d in enumerate(x))
    found = {}
    for out, typed in zip(outs, ((_elem(state, node.inputs[0]), y), (_INT64, (k,)),
                                 (_INT64, (length,)), (_INT64, (k,)))):
        if out:
            found[out] = typed
    return found


def _topk(state, record, node, index):
    x = _shape(state, node.inputs[0])
    if x is None or not x:
        return None
    axis = _attr(node, "axis", -1) % len(x)
    k = _bounded(state, record, "TopK", index, node.outputs[0], x[axis],
                 f"its input's {x[axis]} on axis {axis} (k is computed at run time)",
                 axis=axis)
    shape = tuple(k if i == axis else d for i, d in enumerate(x))
    found = {node.outputs[0]: (_elem(state, node.inputs[0]), shape)}
    if len(node.outputs) > 1 and node.outputs[1]:
        found[node.outputs[1]] = (_INT64, shape)
    return found


RULES = {"NonZero": _nonzero, "NonMaxSuppression": _nms, "Compress": _compress,
         "Unique": _unique, "TopK": _topk}
# the ops whose presence makes a model's sizes depend on the data (and a Range, whose
# bounds usually are shapes: the loader sizes it on its own where they are)
DATA_DEPENDENT_OPS = frozenset(RULES) | {"Range"}
# the ops that size an output from an input's values, bounded by its value range
# (graphmem/frontend/value_sizes.py: the Range's rule among them)
RULES.update(VALUE_RULES)


# --------------------------------------------------------------------------- the strategy

def has_data_dependent_ops(state) -> bool:
    """A node of :data:`RULES` in the graph, or (by its name in the bytes of a body) in
    an If/Loop/Scan body; or a Loop that concatenates onto a carried value (its size
    grows each iteration: graphmem/frontend/loop_growth.py)."""
    from graphmem.frontend.structure import GRAPH_ATTRS
    names = [op.encode() for op in DATA_DEPENDENT_OPS]
    for n in state.g.nodes:
        if n.op_type in DATA_DEPENDENT_OPS and standard_domain(n.domain):
            return True
        for a in n.attrs:
            if a.type in GRAPH_ATTRS and any(op in bytes(a.raw) for op in names):
                return True
    from graphmem.frontend.loop_detect import loop_needs_bounds
    return loop_needs_bounds(state)


def rule_order(op: str) -> int:
    """When a rule is tried in a round: the data-dependent ops first, a TopK next (its k
    may be shape arithmetic at their bounds), the sizes read from values last (their
    value ranges are those of what is sized before them)."""
    return 2 if op in VALUE_RULES else 1 if op == "TopK" else 0


def sizes_from_values(state) -> bool:
    """An open output of an op that sizes it from an input's values (VALUE_RULES): asked
    only while something is open, so a model that plans without it is not touched."""
    return any(node.op_type in VALUE_RULES and standard_domain(node.domain)
               for _, node in state.missing or ())


def sized_from_values_in_body(refusal: str) -> bool:
    """Is ``refusal`` the control-flow settling's for an output of a body's op that
    sizes it from an input's values (VALUE_RULES)?"""
    return " in the " in refusal and any(f"output of a {op} node in the " in refusal
                                         for op in VALUE_RULES)


def record_of(state) -> DataBounds:
    record = getattr(state, "data_bounds", None)
    if record is None:
        record = state.data_bounds = DataBounds()
    return record


def bounded_sizes(state, strategies) -> None:
    """Size each open output of a data-dependent node at its bound, then what onnx's
    inference and the constant values size downstream, round after round; then decide
    which tensors the bounds govern and fold none of them. ``strategies``: the module
    :mod:`graphmem.frontend.shape_strategies` (its ``add_types``, ``constant_values``
    and ``unknown``; passed in, it imports this one)."""
    from graphmem.frontend.falling_sizes import resize_falling
    record = record_of(state)
    while True:
        _sizes_at_the_bounds(state, record, strategies)
        if record:
            govern(state, record, strategies.unknown)
        # a size that falls as a count grows: sized again by its value rule
        if not resize_falling(state, record, strategies, sys.modules[__name__]):
            break


def _sizes_at_the_bounds(state, record: DataBounds, strategies) -> None:
    """The rounds of :func:`bounded_sizes` while something is open."""
    add_types, constant_values = strategies.add_types, strategies.constant_values
    nodes = state.g.nodes
    while state.missing:
        found: dict = {}
        # a TopK last: its k may be shape arithmetic the constant values compute at the
        # bounds once the others are sized (tighter than its input's dim)
        for late in (0, 1, 2):
            for name, node in state.missing:
                rule = RULES.get(node.op_type) if standard_domain(node.domain) else None
                if rule is None or name in found or rule_order(node.op_type) != late or \
                        symbol_name(node.op_type, node.index) in record.symbols:
                    continue
                if node.op_type in VALUE_RULES and _constant_sizes(state, nodes[node.index]):
                    continue  # a constant that did not compute: its failure is the refusal
                sized = rule(state, record, nodes[node.index], node.index)
                if sized:
                    found.update(sized)
            if found:
                break
        if not found:
            if getattr(state, "deferred_control_flow", False) and _control_flow(state, record,
                                                                                strategies):
                continue
            break
        add_types(state, found)
        state.settle()
        if state.missing:
            constant_values(state)


def _constant_sizes(state, node) -> bool:
    """Are the inputs ``node`` (of VALUE_RULES) sizes its output from all constants (the
    graph's, or folded nodes' outputs)? Then no data decides its size: a value that did
    not compute (a Gather past its data) is the model's fault, refused as such, not a
    size to bound."""
    from graphmem.frontend.rule_inputs import graph_constants
    constants = set(state.folding.constants) | set(graph_constants(state))
    sizing = node.inputs[:1] if node.op_type == "ConstantOfShape" else node.inputs[1:]
    sizing = [t for t in sizing if t]
    return bool(sizing) and all(t in constants for t in sizing)


def _control_flow(state, record: DataBounds, strategies) -> bool:
    """The If/Loop/Scan bodies the control-flow strategy left for later (an outer tensor
    a body reads was sized here), settled now: did it size more?"""
    before = len(state.tensors)
    state.deferred_control_flow = False
    strategies.control_flow_bodies(state)
    state.settle()
    if state.missing:
        strategies.constant_values(state)
    return len(state.tensors) > before


def govern(state, record: DataBounds, unknown) -> None:
    """Which tensors each symbol governs (computed from its outputs, through data or
    shape), and the folding decided again without them: a Shape of a bounded tensor
    is known only at run time."""
    from graphmem.frontend.constant_nodes import constant_nodes, without_dim_data
    g, order, reads = state.g, state.order, state.reads
    record.governed, syms = governed(g, order, reads, record)
    # folding, as constant_nodes decides it, less what reads a governed tensor
    state.folding = without_dim_data(g, order, reads, state.bindings,
                                     constant_nodes(g, order, state.tensors, reads, syms))
    state.missing = unknown(g, order, state.tensors, state.folding.nodes, state.open_nodes)


def governed(g, order, reads, record: DataBounds
             ) -> tuple[dict[str, tuple[str, ...]], dict[str, set]]:
    """(tensor -> the symbols its size may depend on, tensor -> the symbols its size or
    its values may depend on). A symbol's outputs have sizes it decides; a node reading
    such a tensor makes outputs whose size it decides too, but for a Shape or Size (its
    value only); a value read where a node takes a shape, axes or a count
    (constant_nodes.VALUE_ARGUMENTS: TopK's k, Reshape's shape, ...) decides the sizes
    of its outputs, read elsewhere their values only."""
    from graphmem.frontend.constant_nodes import VALUE_ARGUMENTS
    nodes = g.nodes
    size: dict[str, set] = {}
    value: dict[str, set] = {}
    for s in record.symbols.values():
        # a growing loop-carried value's symbol: its own output (the trip count's,
        # Loop_N, governs them all)
        outs = (s.tensor,) if s.op == "Loop" and "_carried_" in s.name else \
            nodes[s.node].outputs
        for o in outs:
            if o:
                size.setdefault(o, set()).add(s.name)
    aliases = getattr(record, "alias_nodes", {})
    for node, name in aliases.items():
        for o in nodes[node].outputs:
            if o and name in record.symbols:
                size.setdefault(o, set()).add(name)
    own = {s.node for s in record.symbols.values()} | set(aliases)
    for idx in order:
        n = nodes[idx]
        if idx in own:
            continue
        args = VALUE_ARGUMENTS.get(n.op_type, ()) if standard_domain(n.domain) else ()
        shape_only = n.op_type in ("Shape", "Size") and standard_domain(n.domain)
        sized, valued = set(), set()
        for i, t in enumerate(n.inputs):
            if not t:
                continue
            if t in size:
                (valued if shape_only else sized).update(size[t])
            if t in value:
                (sized if i in args else valued).update(value[t])
        for t in reads[idx]:  # a body's outer reads: as data
            if t not in n.inputs:
                sized.update(size.get(t, ()))
                valued.update(value.get(t, ()))
        for o in n.outputs:
            if o and sized:
                size.setdefault(o, set()).update(sized)
            if o and (valued or sized):
                value.setdefault(o, set()).update(valued | sized)
    for t, found in size.items():
        value.setdefault(t, set()).update(found)
    return {t: tuple(sorted(s)) for t, s in size.items()}, value


def refusal(g, name: str, tensors, record: DataBounds | None = None) -> str:
    """The hint for an open tensor a size read from the data leaves open, where the
    graph proves no bound for it: the op, and the ``--bound`` to pass ('' when none is
    upstream)."""
    wanted = record.wanted if record is not None else {}
    found = nearest_upstream(g, name, tensors, lambda i, n: (
        i in wanted and n.outputs[0] not in tensors))
    if found is None:
        return ""
    i, n = found
    return wanted_hint(n.op_type, n.name, f"node {i}", wanted[i])


def wanted_hint(op: str, name: str, where: str, symbols: list[str]) -> str:
    label = f" {name!r}" if name else ""
    return (f"; its size depends on the values computed at run time ({op}{label}, "
            f"{where}), which the graph does not bound: pass "
            + " and ".join(f"--bound {s}=N" for s in symbols) + " (at most N)")


def attach(graph, record: DataBounds):
    """``graph`` with ``record`` (where it has symbols), and a note for each ``--bound``
    the model has no symbol of and each one past what the graph proves."""
    from dataclasses import replace
    notes = list(record.notes) + [
        f"--bound {name}: the model has no data-dependent size of that name; ignored"
        for name in record.unused()]
    changes = {}
    if notes:
        changes["load_notes"] = tuple(graph.load_notes) + tuple(notes)
    if record or record.body_symbols:
        record.governed = {t: s for t, s in record.governed.items() if t in graph.tensors}
        changes["data_bounds"] = record
    return replace(graph, **changes) if changes else graph
