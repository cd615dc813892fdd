"""Shape inference as an ordered list of named strategies.

The loader sizes every tensor with onnx's shape inference first; what that leaves
unknown, each later strategy tries in turn, until nothing is unknown or the list ends
(then the first unknown tensor is named in one line). A strategy is a function over the
shared :class:`LoadState`: it asks the model (a
:class:`~graphmem.frontend.working_model.WorkingModel`) for the form it needs (bytes,
proto, wire view, tensors) and tells it what changed, reads the tensors sized so far,
and leaves the state consistent -- ``tensors``, and for a strategy that runs only while
something is unknown, ``folding`` and ``missing`` too. The loader records which
strategy newly sized which tensors (:class:`graphmem.core.ir.Sizing`, on
``Graph.sizing``).

A new strategy is one function and one :class:`Strategy` in :data:`STRATEGIES`, at the
place in the order where it should run: cheap and exact ones before broad ones.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, NamedTuple

from graphmem import wire
from graphmem.core.ir import CONTROL_FLOW, Sizing, Tensor, standard_domain
from graphmem.errors import GraphmemError, UnknownShape
from graphmem.frontend import annotations, inference
from graphmem.frontend.constant_nodes import (NOTHING_FOLDS, Folding, constant_nodes, fold,
                                              without_dim_data)
from graphmem.frontend.constant_values import failure_note, infer_with_constant_values
from graphmem.frontend.lazy import onnx as _onnx
from graphmem.frontend.protos import one_line
from graphmem.frontend.splice import (OUTPUT, SMALL_CONSTANT_BYTES, VALUE_INFO, entry,
                                      tensor_value_info)
from graphmem.frontend.working_model import WorkingModel
from graphmem.frontend.structure import nearest_upstream

if TYPE_CHECKING:
    import onnx
else:
    onnx = _onnx


class LoadState:
    """What the strategies share: the model (:class:`WorkingModel`: as read, and as the
    strategies infer on it, with the types found so far), the wire graph as read with
    its order, reads and bindings, every tensor sized so far, what folds
    (:class:`Folding`), and the outputs of running nodes still unknown (``missing``:
    None until computed). (A plain class, not a dataclass: the loader imports it on
    every run.)"""

    def __init__(self, *, model: WorkingModel, order: list[int],
                 reads: list[tuple[str, ...]], bindings: dict[str, int], opset: int,
                 notes: list[str] | None = None, shape_values: set[str] | None = None):
        self.model = model
        self.g = model.source_view.graph  # the wire graph as read
        self.order, self.reads, self.bindings = order, reads, bindings
        self.opset = opset
        self.tensors: dict[str, Tensor] = {}
        self.folding: Folding = NOTHING_FOLDS
        self.missing: list[tuple[str, OpenNode]] | None = None
        self.open_nodes: dict[int, OpenNode] = {}  # unknown()'s, each made once per load
        self.scopes: dict = {}
        self.notes: list[str] = notes if notes is not None else []  # what was caught, and why
        # the tensors whose values may size another (constant_nodes.shape_values): the
        # only weights the working model carries data for, beside the tiny ones; None:
        # every value
        self.shape_values = shape_values
        # small external initializers the loader could not read in, and why
        # (:mod:`graphmem.frontend.external_values`): said first where a shape stays unknown
        self.unread: list[str] = []

    def settle(self) -> None:
        """Decide folding on the tensors sized so far, and what is still unknown."""
        self.folding = fold(self.g, self.order, self.tensors, self.reads, self.bindings)
        self.missing = unknown(self.g, self.order, self.tensors, self.folding.nodes,
                               self.open_nodes)


def _always(state: LoadState) -> bool:
    return True


class Strategy(NamedTuple):
    """``run`` sizes what it can on the state. ``always``: runs whenever ``applies``
    (not only while something is unknown) and leaves ``missing`` to the loader."""
    name: str
    run: Callable[[LoadState], None]
    summary: str
    always: bool = False
    applies: Callable[[LoadState], bool] = _always


# --------------------------------------------------------------------------- the strategies

def onnx_inference(state: LoadState) -> None:
    """onnx's inference on the model without its value_info annotations, but for the
    static ones of contrib ops' outputs, which it has no schema to check; those that
    disagree with what it computes are named in a note, and those of tensors it left
    unsized given back for a second round (:mod:`graphmem.frontend.annotations`)."""
    opaque = {o for n in state.g.nodes if not standard_domain(n.domain) for o in n.outputs}
    work, said = annotations.without_annotations(state.model.bytes, opaque)
    state.model.set_bytes(inference.infer(work, data_prop(state)))
    state.tensors = state.model.tensors()
    # an annotation of a name no node makes (what an optimizer removed: ORT's
    # transformer optimizer leaves 71 on Whisper's dynamo encoder) sizes nothing
    produced = {o for n in state.g.nodes for o in n.outputs}
    said = {name: t for name, t in said.items() if name in produced}
    if said:
        notes, back = annotations.check(said, state.tensors)
        state.notes.extend(notes)
        add_types(state, back)


def data_prop(state: LoadState) -> bool:
    """Does onnx's inference propagate data on this model (not with UNBOUNDED_DATA_PROP)?"""
    return not any(n.op_type in inference.UNBOUNDED_DATA_PROP for n in state.g.nodes)


def has_control_flow(state: LoadState) -> bool:
    return any(n.op_type in CONTROL_FLOW and standard_domain(n.domain)
               for n in state.g.nodes)


def control_flow_bodies(state: LoadState) -> None:
    """The bodies of the If/Loop/Scan nodes as scopes, and the types of those nodes'
    outputs (:mod:`graphmem.frontend.control_flow`).

    A value the sizing needs (a Loop's trip count) is an initializer's or a Constant's,
    or else computed from the constants folded so far (the exporters' Shape -> Gather
    of a bound dim), at most SMALL_CONSTANT_BYTES each."""
    from graphmem.frontend.control_flow import graph_values, settle  # imports onnx
    g, order, tensors, reads = state.g, state.order, state.tensors, state.reads
    plain: list = []  # the values of the model as read, read when first asked
    computed: dict[str, object] = {}

    def values(name: str):
        if not plain:
            plain.append(graph_values(state.model.source_proto))
        found = plain[0](name)
        if found is not None:
            return found
        if not computed:
            from graphmem.frontend.folding import evaluate_constants
            source = state.model.source_proto
            folded = constant_nodes(g, order, tensors, reads).nodes
            failures: dict[str, str] = {}
            computed.update(evaluate_constants(
                source, [source.graph.node[i] for i in order if i in folded], tensors,
                max_bytes=SMALL_CONSTANT_BYTES, base_dir=state.model.base_dir,
                prefer="reference", failures=failures))
            if failures:
                state.notes.append(failure_note(failures))
            computed[""] = None  # evaluated once, whatever it found
        return computed.get(name)
    bounds = None
    if _data_bounds().has_data_dependent_ops(state):  # issue 53: sizes at their bounds
        from graphmem.frontend.body_bounds import ControlFlowBounds
        bounds = ControlFlowBounds(_data_bounds().record_of(state), state)
    try:
        # settle adds the types it finds to the proto it is given, in place
        model, _, state.scopes = settle(state.model.proto, order, dict(tensors),
                                        inference.infer_proto, values, bounds=bounds)
    except UnknownShape as exc:  # an outer tensor a body reads
        why = data_dependence(g, exc.tensor, tensors)
        if why and bounds is not None and not getattr(state, "deferred_control_flow", None):
            state.deferred_control_flow = True  # issue 53: data-bounds settles it later
            return
        raise GraphmemError(f"{exc}{why}") from None
    except GraphmemError as exc:
        if bounds is not None or not _data_bounds().sized_from_values_in_body(str(exc)):
            raise
        # issue 53: a body's size read from the data's values, with no data-dependent op
        # in the model: settled again with the bounds (only where it was refused)
        from graphmem.frontend.body_bounds import ControlFlowBounds
        bounds = ControlFlowBounds(_data_bounds().record_of(state), state)
        try:
            model, _, state.scopes = settle(state.model.proto, order, dict(tensors),
                                            inference.infer_proto, values, bounds=bounds)
        except (GraphmemError, UnknownShape):
            raise exc from None
    state.model.set_proto(model)
    state.tensors = state.model.tensors()
    if bounds is not None and len(state.scopes) < sum(
            n.op_type in CONTROL_FLOW and standard_domain(n.domain) for n in g.nodes):
        state.deferred_control_flow = True  # issue 53: data-bounds settles the rest later


def dropout_mask(state: LoadState) -> None:
    """Dropout's mask, which opsets 7 to 9 leave untyped: it has the data's shape; its
    element type is bool from opset 10 on, the data's type before."""
    from graphmem.core.dtypes import ENUM_BY_NAME
    found = {}
    for name, node in state.missing:
        if node.op_type != "Dropout" or not standard_domain(node.domain):
            continue
        if len(node.outputs) < 2 or name != node.outputs[1]:
            continue
        data_in = state.tensors.get(node.inputs[0])
        if data_in is None:
            continue
        found[name] = (ENUM_BY_NAME["bool" if state.opset >= 10 else data_in.dtype],
                       data_in.shape)
    add_types(state, found, infer=False)  # a mask is read by nothing, as a rule


def add_types(state: LoadState, found: dict[str, tuple[int, tuple[int, ...]]], *,
              infer: bool = True) -> None:
    """Add tensor types (name -> (TensorProto elem_type, shape)) that a rule found to the
    model as value infos, and size them and (``infer``) what onnx's inference then sizes
    downstream of them: the tool of a strategy that knows an op's outputs from its
    inputs. Folding is not decided again (such outputs are data). A graph output's
    type is written over its declared one (which has a dim that is a name, or none: the
    declared type would stand for it)."""
    if not found:
        return
    outputs = state.model.output_index()
    state.model.splice([
        (OUTPUT, outputs[name], entry(OUTPUT, tensor_value_info(name, elem, shape)))
        if name in outputs else
        (VALUE_INFO, -1, entry(VALUE_INFO, tensor_value_info(name, elem, shape)))
        for name, (elem, shape) in found.items()])
    if infer:
        infer_again(state)
    else:
        _read_types(state)


def infer_again(state: LoadState) -> None:
    """onnx's inference on the model as it stands (the types added so far in it)."""
    state.model.set_bytes(inference.infer(state.model.bytes, data_prop(state)))
    _read_types(state)


def _read_types(state: LoadState) -> None:
    """The tensors the model's types size, and what is still open."""
    state.tensors = state.model.tensors()
    state.missing = unknown(state.g, state.order, state.tensors, state.folding.nodes,
                            state.open_nodes)


def has_contrib_ops(state: LoadState) -> bool:
    """Ops of ONNX Runtime's domains, or ORT's own ONNX-domain ops at an opset where
    ONNX defines none of their name (SimplifiedLayerNormalization, LayerNormalization
    before opset 17: what its optimizers write for T5's and Llama's RMSNorm, which
    onnx's inference leaves open; the rules know them)."""
    from graphmem.frontend.checking import ort_own_ops
    nodes = state.g.nodes
    return any(not standard_domain(n.domain) for n in nodes) or bool(
        ort_own_ops(nodes, state.opset))


def shape_walk(state: LoadState) -> None:
    """One walk over the nodes (:func:`graphmem.frontend.shape_walk.propagate`): the
    contrib rules for the ops ONNX Runtime's optimizers write (FusedConv, the NCHWc ops,
    QLinear*, SkipLayerNormalization, ...: :mod:`graphmem.frontend.contrib_rules`),
    onnx's per-node inference for the standard ones, and the shape arithmetic a Reshape
    reads computed as the walk goes; then onnx's inference with data propagation
    downstream of what it sized, round after round while a round sizes more.

    On a graph ORT saved, nothing else is left open after it. On a graph without
    contrib ops, the arithmetic after a tensor only the walk sized (a TorchScript
    export's, where a Range turns onnx's data propagation off) is sized in one pass
    where the constant values took a round per step (T5-small's encoder: three rounds,
    each a whole-model inference). Its values stay shape-sized
    (``shape_walk.WalkValues.LIMIT``), and onnx's per-node inference propagates no
    data: nothing is filled the way onnx's data propagation fills a Range."""
    from graphmem.frontend.shape_walk import propagate
    while True:
        known = propagate(state.model.bytes, state.model.view)
        found = {name: v for name, v in known.items() if name not in state.tensors}
        if not found:
            return
        before = len(state.tensors)
        # the walk ran onnx's per-node inference on every node after what the rules
        # sized: the whole-model inference (its data propagation) only where it left
        # some open
        add_types(state, found, infer=False)
        if state.missing:
            infer_again(state)
        if len(state.tensors) == before:  # what the rules found sized nothing: done
            return
        # folding decided again: a Shape of what the rules sized computes a constant
        state.settle()
        if not state.missing:
            return


def constant_values(state: LoadState) -> None:
    """onnx's inference again with the values of small constants (shape arithmetic)
    as initializers, round after round while a round sizes more: a constant computed
    from the Shape of a tensor that only this round sized (a Swin block's window
    padding after the previous block's) needs another round. Data computed from bound
    dims (which runs, see ``dim_data_nodes``) is evaluated here too: its values are
    fixed by the bindings, and a Reshape may read it."""
    g, order, reads = state.g, state.order, state.reads
    computable = constant_nodes(g, order, state.tensors, reads)
    computed: dict = {}  # the values computed so far: a later round computes only new ones
    while True:
        state.model.set_bytes(infer_with_constant_values(
            state.model.bytes, order, state.tensors, computable, state.model.base_dir,
            state.notes, needed=state.shape_values, stored=state.model.stored_values,
            cache=computed, view=state.model.view))
        state.tensors = state.model.tensors()
        computable = constant_nodes(g, order, state.tensors, reads)
        state.folding = without_dim_data(g, order, reads, state.bindings, computable)
        before, state.missing = len(state.missing), unknown(g, order, state.tensors,
                                                            state.folding.nodes,
                                                            state.open_nodes)
        if not state.missing or len(state.missing) >= before:
            break


def walk_and_values(state: LoadState) -> None:
    """The shape walk, then the constant values, in turn while a turn sizes more: on a
    graph of contrib ops, past the shapes the constant values sized. The walk computes
    the shape arithmetic as it goes, so a contrib op in every layer whose output the
    next layer's shape arithmetic reads (the transformer optimizer's ViT-B/16: a
    BiasGelu before each Reshape to a computed shape) is sized in one turn, not one turn
    per layer."""
    while True:
        shape_walk(state)  # it walks the shape arithmetic too: one turn usually sizes all
        if not state.missing:
            return
        before = len(state.missing)
        constant_values(state)
        if not state.missing or len(state.missing) >= before:
            return


# ONNX Runtime's symbolic inference fills the output of an int64 ConstantOfShape whose
# shape it knows (np.ones of it, then times the value): above this many bytes it is not
# run (issue 38's Reshape target of 2**40 sized one of 8 TiB; at 2**31 elements, 16 GiB,
# the allocation can succeed and the fill take the machine's memory)
ORT_FILL_BYTES = 1 << 26


def filled_by_ort(state: LoadState) -> str | None:
    """The first int64 ConstantOfShape output sized past ORT_FILL_BYTES, in words."""
    for i in state.order:
        n = state.g.nodes[i]
        if n.op_type != "ConstantOfShape" or not standard_domain(n.domain) or not n.outputs:
            continue
        t = state.tensors.get(n.outputs[0])
        if t is not None and t.dtype == "int64" and t.bytes > ORT_FILL_BYTES:
            return (f"ConstantOfShape node {i} ({n.name!r}) would hold {t.bytes:,} bytes of "
                    f"int64, which ONNX Runtime's symbolic inference fills")
    return None


def onnxruntime_symbolic(state: LoadState) -> None:
    """ONNX Runtime's symbolic shape inference (it knows the contrib ops and attention
    blocks that onnx's own inference leaves open), kept only where it knows more: it
    may give symbolic dims to tensors the strategies before sized. Not run where it
    would fill a large int64 ConstantOfShape (:func:`filled_by_ort`): a note says so."""
    too_large = filled_by_ort(state)
    if too_large:
        state.notes.append(f"ONNX Runtime's symbolic shape inference not run: {too_large}")
        return
    g, order, reads = state.g, state.order, state.reads
    sym = symbolic_infer(state.model.with_small_weights(), state.notes)
    sym_bytes = sym.SerializeToString()
    sym_tensors = inference.tensors(sym_bytes)
    sym_folding = fold(g, order, sym_tensors, reads, state.bindings)
    record = getattr(state, "data_bounds", None)
    if record:  # issue 53: what reads a tensor the bounds govern never folds (a Shape
        # of one is known at run time only: folded at the bounds, it is wrong below them)
        run_time = _data_bounds().governed(g, order, reads, record)[1]
        sym_folding = without_dim_data(g, order, reads, state.bindings,
                                       constant_nodes(g, order, sym_tensors, reads, run_time))
    sym_missing = unknown(g, order, sym_tensors, sym_folding.nodes, state.open_nodes)
    if len(sym_missing) < len(state.missing):
        state.model.set_proto(sym, sym_bytes)
        state.tensors, state.missing, state.folding = sym_tensors, sym_missing, sym_folding


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("onnx", onnx_inference, always=True,
             summary="onnx's shape inference with data propagation (none with a Range)"),
    Strategy("control-flow", control_flow_bodies, always=True, applies=has_control_flow,
             summary="If/Loop/Scan bodies inferred on their own; their outputs sized"),
    Strategy("dropout-mask", dropout_mask,
             summary="Dropout's mask, which opsets 7-9 leave untyped (cheap, first)"),
    Strategy("shape-walk", shape_walk,
             summary="one walk over the nodes: the shape rules of the ops ONNX Runtime's "
                     "optimizers write, onnx's per-node inference, the shape arithmetic "
                     "computed on the way (in one pass where the constant values would "
                     "take a round per step)"),
    Strategy("constant-values", constant_values,
             summary="inference again with small computed constants as initializers"),
    Strategy("dropout-mask", dropout_mask,
             summary="the masks of Dropouts whose data the constant values sized"),
    Strategy("walk-and-values", walk_and_values, applies=has_contrib_ops,
             summary="on a graph of contrib ops, the walk again past the shapes the "
                     "constant values sized, and the constant values after it, in turn "
                     "while a turn sizes more"),
    # issue 53 (graphmem/frontend/data_bounds.py): data-dependent sizes at their bounds
    Strategy("data-bounds",
             lambda state: _data_bounds().bounded_sizes(state, sys.modules[__name__]),
             applies=lambda state: _data_bounds().has_data_dependent_ops(state) or
             _data_bounds().sizes_from_values(state),
             summary="NonZero, NonMaxSuppression, Compress, Unique, TopK with a computed k, "
                     "and sizes read from the data's values (Resize, ConstantOfShape, "
                     "Slice, ...): their outputs at the upper bounds the graph proves (or "
                     "--bound)"),
    Strategy("onnxruntime-symbolic", onnxruntime_symbolic,
             summary="ONNX Runtime's SymbolicShapeInference (contrib ops, attention), "
                     "with the contrib rules in front of its handlers"),
)


def _data_bounds():  # issue 53's hook: the module is imported only where it applies
    from graphmem.frontend import data_bounds
    return data_bounds


def run_strategies(state: LoadState, strategies: tuple[Strategy, ...] | None = None
                   ) -> tuple[Sizing, ...]:
    """Run ``strategies`` (default :data:`STRATEGIES`) in order until nothing is
    unknown; refuse, naming the first unknown tensor, when they all ran and some are.
    Returns what each that ran sized: the first strategy's tensors by count only (on a
    million-node graph that is all of them), the names of those each later one newly
    sized."""
    sizing = []
    for strategy in STRATEGIES if strategies is None else strategies:
        if strategy.always:
            if not strategy.applies(state):
                continue
        else:
            if state.missing is None:
                state.settle()
            if not state.missing:
                break
            if not strategy.applies(state):
                continue
        before = state.tensors
        strategy.run(state)
        if not before:
            sizing.append(Sizing(strategy.name, len(state.tensors), ()))
        else:
            new = tuple(t for t in state.tensors.keys() - before.keys())
            sizing.append(Sizing(strategy.name, len(new), tuple(sorted(new))))
        if strategy.always:
            state.missing = None
    record = getattr(state, "data_bounds", None)
    if record is not None and record.symbols and not record.governed:
        # issue 53: symbols of control flow where nothing was left open for the
        # data-bounds strategy (a Loop whose carried value grows): what they govern
        _data_bounds().govern(state, record, unknown)
    if state.missing is None:
        state.settle()
    if state.missing:
        raise GraphmemError(unknown_shape_message(state))
    return tuple(sizing)


# --------------------------------------------------------------------------- the helpers

class OpenNode(NamedTuple):
    """A node with an output left unsized, as the strategies and the error read it: its
    attributes are not decoded (a graph ONNX Runtime saved starts with most of its nodes
    open, and this is asked after every round)."""
    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple
    outputs: tuple


def unknown(g: wire.Graph, order, tensors, folded, made: dict[int, OpenNode] | None = None
            ) -> list[tuple[str, OpenNode]]:
    """The outputs of running nodes without a static shape, with their nodes; a graph
    input without one is refused. ``made``: the OpenNodes made so far (each node's is
    made once per load, and this is asked after every round)."""
    nodes = g.nodes
    missing = []
    for vi in g.inputs:
        if vi.name not in tensors:
            raise GraphmemError(f"graph input {vi.name!r} has no static shape")
    if made is None:
        made = {}
    for idx in order:
        if idx in folded:
            continue
        for out in nodes[idx].outputs:
            if out and out not in tensors:
                node = made.get(idx)
                if node is None:
                    n = nodes[idx]
                    node = made[idx] = OpenNode(idx, n.name, n.op_type, n.domain,
                                                tuple(n.inputs), tuple(n.outputs))
                missing.append((out, node))
    return missing


def unknown_shape_message(state: LoadState) -> str:
    name, node = state.missing[0]
    where = (f"output of node {node.index} "
             f"({node.op_type}{' ' + repr(node.name) if node.name else ''})")
    more = (f"; {len(state.missing) - 1} more tensors are unknown too"
            if len(state.missing) > 1 else "")
    hint = ""
    if not standard_domain(node.domain):
        hint = (f"; {node.op_type!r} is from domain {node.domain!r} and graphmem has no "
                "shape rule for it: pass --infer-by-running to take the shapes from one "
                "ONNX Runtime run at the bound dims, or give the shapes of its outputs "
                "in the model's value_info")
    hint = hint or _data_bounds().refusal(state.g, name, state.tensors,
                                          getattr(state, "data_bounds", None)) or \
        data_dependence(state.g, name, state.tensors)
    said = state.unread or state.notes
    caught = f" (on the way: {said[0]})" if said else ""
    return f"cannot infer the shape of tensor {name!r}, {where}{more}{hint}{caught}"


# Ops whose output's size depends on the values of their inputs, not their shapes.
DATA_DEPENDENT = frozenset({"NonZero", "NonMaxSuppression", "Compress", "Unique"})


def data_dependence(g: wire.Graph, name: str, tensors) -> str:
    """Why ``name`` has no static shape when its size depends on the data: the nearest
    op of :data:`DATA_DEPENDENT` upstream of it through tensors without one ('' when
    there is none)."""
    found = nearest_upstream(g, name, tensors, lambda i, n: (
        n.op_type in DATA_DEPENDENT and standard_domain(n.domain)))
    if found is None:
        return ""
    i, n = found
    label = f" {n.name!r}" if n.name else ""
    return (f"; its size depends on the values computed at run time "
            f"({n.op_type}{label}, node {i}, upstream): graphmem plans static shapes only")


def symbolic_infer(model: onnx.ModelProto, notes: list[str] | None = None) -> onnx.ModelProto:
    """ONNX Runtime's symbolic shape inference on ``model``, with the contrib rules in
    front of its handlers (:func:`graphmem.frontend.ort_symbolic.infer`): what it sizes
    before it gives up is kept, and ``notes`` then says why it stopped."""
    from graphmem.frontend.ort_symbolic import infer
    try:
        return infer(model, notes=notes)
    except Exception as exc:  # it raises anything (asserts, KeyError) on ops it lacks
        if notes is not None:
            notes.append(f"ONNX Runtime's symbolic shape inference stopped: "
                         f"{type(exc).__name__}: {one_line(exc)}")
        return model  # the caller names the tensor that stays unknown
