"""Which nodes fold at plan time, decided on types alone: a standard, deterministic node
whose inputs are all constants (initializers, folded outputs), or a Shape or Size of a
statically shaped tensor. Their values are computed only when needed
(:mod:`graphmem.frontend.folding`). Data computed from a bound dim runs instead of
folding (:func:`dim_data_nodes`). Works on the wire records."""
from __future__ import annotations

from graphmem import wire
from graphmem.core.ir import standard_domain
from graphmem.core.ops import RANDOM_OPS
from graphmem.core.records import record
from graphmem.frontend.structure import GRAPH_ATTRS


# Inputs that a node reads for their values as shapes, axes or counts (a few numbers),
# not as data: a constant computed from bound dims may stay folded when only these read it.
SHAPE_ARGUMENTS = {
    "Reshape": {1}, "Expand": {1}, "ConstantOfShape": {0}, "Tile": {1},
    "Slice": {1, 2, 3, 4}, "Range": {0, 1, 2}, "Unsqueeze": {1}, "Squeeze": {1},
    "Resize": {1, 2, 3}, "Upsample": {1}, "Pad": {1, 2, 3}, "TopK": {1}, "OneHot": {1},
    "Split": {1}, "CumSum": {1}, "Trilu": {1}, "CenterCropPad": {1}, "Col2Im": {1, 2},
    "NonMaxSuppression": {2, 3, 4}, "Shape": {0}, "Size": {0}, "Loop": {0},
    **{op: {1} for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                          "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                          "ReduceSumSquare")},
}


# Inputs whose values onnx's shape inference (or ONNX Runtime's) may read to size an
# output: SHAPE_ARGUMENTS less Shape and Size (which read only their input's shape), and
# the signal ops' lengths, AffineGrid's size, MaxUnpool's output shape, If's condition.
VALUE_ARGUMENTS = {
    **{op: args for op, args in SHAPE_ARGUMENTS.items() if op not in ("Shape", "Size")},
    "STFT": {1, 3}, "DFT": {1, 2}, "AffineGrid": {1}, "MaxUnpool": {2}, "If": {0},
    "Loop": {0, 1}, "HannWindow": {0}, "HammingWindow": {0}, "BlackmanWindow": {0},
    "MelWeightMatrix": {0, 1, 2, 3, 4},
}


def shape_values(g: wire.Graph, reads) -> set[str]:
    """The tensors whose values may size a tensor: those a node reads at a
    VALUE_ARGUMENTS input, every outer value a control-flow body reads, and, upstream
    of those, every input of the nodes that could fold (standard and deterministic;
    not through a Shape or Size, which read only a shape). Decided on the graph's
    structure alone, before any type is known, so it holds whatever folds later; the
    loader carries the data of no other weight into shape inference."""
    nodes = g.nodes
    producer = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    stack: list[str] = []
    for idx, n in enumerate(nodes):
        if not standard_domain(n.domain):
            continue
        if n.op_type in ("If", "Loop", "Scan"):
            stack.extend(reads[idx])
        args = VALUE_ARGUMENTS.get(n.op_type)
        if args:
            stack.extend(t for i, t in enumerate(n.inputs) if t and i in args)
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        idx = producer.get(t)
        if idx is None:
            continue
        n = nodes[idx]
        if (n.op_type in ("Shape", "Size") and standard_domain(n.domain)) or not foldable(n):
            continue
        stack.extend(reads[idx])
    return seen


def dim_data_nodes(g: wire.Graph, order, folded, reads) -> set[int]:
    """Folded nodes that must run instead: those whose outputs are data computed from a
    bound dimension (a Shape or Size of a tensor that is not a constant), read as data
    by a running node or a graph output. The exporters write such subgraphs for
    defaulted token-type ids, position ids and masks: folded, an [batch, seq, hidden]
    lookup would count as a weight that grows with batch and sequence (issue 21).
    Shape arithmetic (read only as shapes, axes or counts) stays folded."""
    nodes = g.nodes
    const = {t.name for t in g.initializers}
    tainted: set[str] = set()
    for idx in order:
        if idx not in folded:
            continue
        n, ins = nodes[idx], reads[idx]
        if (n.op_type in ("Shape", "Size") and any(t not in const for t in ins)) or \
                any(t in tainted for t in ins):
            tainted.update(o for o in n.outputs if o)
        const.update(o for o in n.outputs if o)
    if not tainted:
        return set()

    def data_reads(idx: int) -> list[str]:
        n = nodes[idx]
        shape_args = SHAPE_ARGUMENTS.get(n.op_type, ()) if standard_domain(n.domain) else ()
        found = [t for i, t in enumerate(n.inputs) if t and i not in shape_args]
        found.extend(t for t in reads[idx] if t not in n.inputs)  # subgraphs' outer reads
        return [t for t in found if t in tainted]

    data = {o.name for o in g.outputs if o.name in tainted}
    for idx in order:
        if idx not in folded:
            data.update(data_reads(idx))
    kept: set[int] = set()
    for idx in reversed(order):
        if idx in folded and any(o in data for o in nodes[idx].outputs if o):
            kept.add(idx)
            data.update(data_reads(idx))
    if kept:
        # closed forward: a folded node that reads what a kept node makes runs too, or
        # its value would wait for a tensor that exists only at run time (GPT-2's
        # decode step: a Range's bounds from Shape(past) arithmetic)
        running = {o for i in kept for o in nodes[i].outputs if o}
        for idx in order:
            if idx in folded and idx not in kept and any(t in running for t in reads[idx]):
                kept.add(idx)
                running.update(o for o in nodes[idx].outputs if o)
    return kept


# ONNX Runtime's own quantization pair (what quantize_static writes for 16-bit
# activations, or with UseQDQContribOps): the standard ops' semantics, folded alike (a
# weight's DequantizeLinear above all: else every dequantized weight is an arena tensor)
FOLDABLE_CONTRIB = frozenset((("com.microsoft", "DequantizeLinear"),
                              ("com.microsoft", "QuantizeLinear")))


def foldable(node) -> bool:
    """A standard-domain, deterministic node without subgraphs, or ORT's own
    DequantizeLinear and QuantizeLinear."""
    if (node.domain, node.op_type) in FOLDABLE_CONTRIB:
        return True
    if not standard_domain(node.domain) or node.op_type in RANDOM_OPS:
        return False
    return not any(a.type in GRAPH_ATTRS for a in node.attrs)


@record
class Folding:
    """What folds, decided on the types known so far: the indices of the nodes that
    compute only constants (``nodes``), and the constants they make (``constants``, in
    order). The loader runs the other nodes; a constant's value is computed only where
    something needs it (:mod:`graphmem.frontend.folding`)."""
    nodes: frozenset
    constants: tuple


NOTHING_FOLDS = Folding(frozenset(), ())


def fold(g: wire.Graph, order, tensors, reads, bindings=None) -> Folding:
    """Which nodes compute only constants (initializers, Constant, static Shape), and
    the constants they make; with ``bindings``, less the data computed from bound dims
    (:func:`dim_data_nodes`), which runs."""
    return without_dim_data(g, order, reads, bindings, constant_nodes(g, order, tensors, reads))


def without_dim_data(g: wire.Graph, order, reads, bindings, folding: Folding) -> Folding:
    """:func:`constant_nodes`' answer less the data computed from bound dims."""
    if bindings:
        kept = dim_data_nodes(g, order, folding.nodes, reads)
        if kept:
            nodes = g.nodes
            made = {o for i in kept for o in nodes[i].outputs}
            return Folding(folding.nodes - kept,
                           tuple(c for c in folding.constants if c not in made))
    return folding


def constant_nodes(g: wire.Graph, order, tensors, reads, run_time=frozenset()) -> Folding:
    """The nodes whose inputs are all constants, given the types known (``tensors``: a
    Shape or Size of a sized tensor folds), with bound dims' data folding too; a node
    that reads a tensor of ``run_time`` (one whose size the data decides) never folds."""
    nodes = g.nodes
    const = {t.name for t in g.initializers}
    folded: set[int] = set()
    constants: list[str] = []
    for idx in order:
        n = nodes[idx]
        if run_time and any(t in run_time for t in reads[idx]):
            continue
        if n.op_type in ("Shape", "Size"):
            ok = all(t in tensors for t in reads[idx])
        else:
            ok = all(t in const for t in reads[idx])
        if ok and foldable(n):
            folded.add(idx)
            outs = [o for o in n.outputs if o]
            const.update(outs)
            constants.extend(outs)
    return Folding(frozenset(folded), tuple(constants))
