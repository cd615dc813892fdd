"""onnx's shape inference again, with the values of small folded constants (the shape
arithmetic exporters write: Shape -> Gather -> Concat -> Reshape) as initializers: the
loader's ``constant-values`` strategy (:mod:`graphmem.frontend.shape_strategies`).

It works on the model's bytes. The values are computed by
:mod:`graphmem.frontend.shape_arithmetic` on the wire records; when a node is not
computed there (an op it does not know, an initializer in an external file, a sparse
initializer), all of them are computed as before by
:func:`graphmem.frontend.folding.evaluate_constants` on the model's proto (ONNX
Runtime or onnx's reference evaluator). The model for inference is spliced
(:mod:`graphmem.frontend.splice`): onnx's Python package is not imported on the common
path, which costs as long as planning a small decode step does.
"""
from __future__ import annotations

from graphmem import wire
from graphmem.core.ir import Tensor
from graphmem.frontend import bounds, inference
from graphmem.frontend.constant_nodes import Folding
from graphmem.frontend.protos import DROPPED, to_proto
from graphmem.frontend.protowire import ELEM_TYPES, EXTERNAL, NotDecoded, tensor_array, \
    tensor_bytes
from graphmem.frontend.shape_arithmetic import Unsupported, evaluate
from graphmem.frontend.splice import (INITIALIZER, NODE, OUTPUT, SMALL_CONSTANT_BYTES,
                                      VALUE_INFO, entry, entry_message, splice,
                                      tensor_value_info)


def failure_note(failures: dict[str, str]) -> str:
    """One line for the constants that could not be computed (the first named)."""
    name, reason = next(iter(failures.items()))
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    return f"constant {name!r}{more} not computed: {reason}"


def infer_with_constant_values(model: bytes, order, tensors: dict[str, Tensor],
                               folding: Folding, base_dir, notes: list[str] | None = None,
                               *, needed=None, stored=None, cache: dict | None = None,
                               view: wire.Model | None = None) -> bytes:
    """``model`` (serialized; ``view``: its wire view, when at hand) with the types
    onnx's inference gives once the values of the folded constants (``folding``, up to
    SMALL_CONSTANT_BYTES each) are initializers; ``notes`` gains a line for the
    constants that could not be computed.

    ``needed`` (the tensors whose values may size another) limits the computation to
    the folded nodes upstream of those and of the constants that have no type yet: a
    weight-sized constant that only feeds data (a DequantizeLinear of a weight) is
    never computed. ``stored`` gives the values of the weights ``model`` carries
    without data that those nodes read (name list -> {name: array}). ``cache`` holds
    the values an earlier round computed (a folded node's value does not change) and
    gains this round's: their nodes are not run again."""
    parsed = view if view is not None else wire.parse_model(model)
    g = parsed.graph
    nodes = g.nodes
    folded, constants = folding.nodes, folding.constants
    failures: dict[str, str] = {}
    run = [i for i in order if i in folded]
    given = dict(cache or {})
    if cache:
        run = [i for i in run if not all(o in cache for o in nodes[i].outputs if o)]
    if needed is not None:
        run = upstream(nodes, run, set(needed) | {c for c in constants if c not in tensors})
        if stored is not None:
            given.update(stored({t for i in run for t in nodes[i].inputs if t} - given.keys()))
    values = computed_here(model, g, run, tensors, given, failures)
    if values is None:  # a node not computed here: every one the way folding does
        failures.clear()
        from graphmem.frontend.folding import evaluate_constants
        proto = to_proto(model)
        values = evaluate_constants(proto, [proto.graph.node[i] for i in run], tensors,
                                    max_bytes=SMALL_CONSTANT_BYTES, base_dir=base_dir,
                                    initializer_values=given or None, prefer="reference",
                                    failures=failures)
    if cache is not None:
        cache.update(values)
    if failures and notes is not None:
        notes.append(failure_note(failures))
    if not values:
        return model
    # the values may size an output past anything plannable (a Reshape's target of
    # 2.3e18 made onnx's inference grow without bound): named here, before inference
    bounds.check(((i, nodes[i]) for i in order), values, tensors.get,
                 lambda i, n: f"node {i} ({n.op_type}{' ' + repr(n.name) if n.name else ''})")
    inits = {t.name for t in g.initializers}
    gone = {i for i in folded if all(o in values for o in nodes[i].outputs if o)}
    kept = [i for i in order if i not in gone]
    if list(order) == list(range(len(nodes))):  # the file's nodes in order: the computed dropped
        changes = [(NODE, i, None) for i in sorted(gone)]
    else:  # each kept node's entry written in the place of the k-th in order
        changes = [(NODE, k, _entry_at(model, g, NODE, i)) for k, i in enumerate(kept)]
        changes += [(NODE, k, None) for k in range(len(kept), len(nodes))]
    changes += [(INITIALIZER, -1, entry(INITIALIZER, _tensor_message(value, name)))
                for name, value in values.items() if name not in inits]
    # an entry inferred before the value was known ([?, 1] for a ConstantOfShape of a
    # computed size) would stand for the initializer in inference
    changes += [(VALUE_INFO, k, None) for k, vi in enumerate(g.value_info)
                if vi.name in values]
    data_prop = not any(nodes[i].op_type in inference.UNBOUNDED_DATA_PROP for i in kept)
    inferred = inference.infer(splice(model, parsed, changes), data_prop)
    # Carry the new knowledge back onto the original graph (nodes untouched): the value
    # infos, and the graph outputs (inference writes what it found for an output over
    # its declared type: an output whose declared dims are names only this round fixes).
    # A computed constant's type is its value's: an entry inferred before it was known
    # (a ConstantOfShape of computed dims, [?, ?]) is replaced, not kept.
    valued = {name for name in constants if name in values}
    found = wire.parse_values(inferred).graph
    changes = [(VALUE_INFO, k, None) for k in range(len(g.value_info))]
    if [o.name for o in found.outputs] == [o.name for o in g.outputs]:
        changes += [(OUTPUT, k, _entry_at(inferred, found, OUTPUT, k))
                    for k in range(len(g.outputs))]
    changes += [(VALUE_INFO, -1, _entry_at(inferred, found, VALUE_INFO, k))
                for k, vi in enumerate(found.value_info) if vi.name not in valued]
    changes += [(VALUE_INFO, -1, entry(VALUE_INFO, tensor_value_info(
        name, _elem_type(values[name]), values[name].shape))) for name in constants
        if name in valued]
    return splice(model, parsed, changes)


def upstream(nodes, run: list[int], wanted: set[str]) -> list[int]:
    """The nodes of ``run`` (indices into the wire ``nodes``, a topological order, no
    subgraphs) that ``wanted`` tensors are computed from, in order."""
    wanted = set(wanted)
    kept = []
    for i in reversed(run):
        n = nodes[i]
        if any(o in wanted for o in n.outputs if o):
            kept.append(i)
            wanted.update(t for t in n.inputs if t)
    kept.reverse()
    return kept


def computed_here(data: bytes, g: wire.Graph, run: list[int], tensors: dict[str, Tensor],
                  given: dict, failures: dict[str, str]) -> dict | None:
    """The values of the outputs of the folded nodes ``run`` (and the initializers they
    read, and ``given``), as :func:`graphmem.frontend.folding.evaluate_constants` gives
    them with ``max_bytes=SMALL_CONSTANT_BYTES``, computed by
    :mod:`graphmem.frontend.shape_arithmetic` on the wire records; None when one of them
    is not computed there."""
    if g.sparse_initializers:
        return None
    nodes = g.nodes
    values = dict(given)
    index = {t.name: i for i, t in enumerate(g.initializers)}
    absent: set[str] = set()  # initializers whose data the loader left out

    def read(name: str) -> bool:
        """Whether ``name`` has a value, an initializer's read on first use."""
        if name in values:
            return True
        i = index.get(name)
        if i is None or name in absent:
            return False
        init = g.initializers[i]
        if init.data_location == EXTERNAL:
            if dict(init.external_data).get("location") in (None, DROPPED):
                absent.add(name)
                return False
            raise NotDecoded("data in an external file")
        values[name] = tensor_array(entry_message(data, g, INITIALIZER, i))
        return True

    def shape_of(name: str):
        t = tensors.get(name)
        return t.shape if t is not None else None

    try:
        for i in run:
            n = nodes[i]
            outs = [o for o in n.outputs if o]
            if any((t := tensors.get(o)) is not None and t.bytes > SMALL_CONSTANT_BYTES
                   for o in outs):
                continue
            ready = all([read(t) for t in n.inputs if t])
            elements = bounds.output_elements(n.op_type, tuple(n.inputs), values, shape_of)
            if elements is not None and elements > SMALL_CONSTANT_BYTES:
                # never allocated: too large to compute here, and no failure (its type
                # follows from the values that size it, in onnx's inference; a
                # detector's RoIAlign zeros at the bounds printed a note on every plan)
                continue
            if n.op_type in ("Shape", "Size") and n.inputs and n.inputs[0] in tensors:
                ins = {n.inputs[0]: _shaped(tensors[n.inputs[0]].shape)}
            elif ready:
                ins = {t: values[t] for t in n.inputs if t}
            else:
                continue
            values.update(evaluate([n], ins))
    except (Unsupported, NotDecoded):
        return None
    return values


def _shaped(shape):
    """An array of ``shape`` that holds no bytes (one zero, strided 0): what a Shape or
    Size reads."""
    import numpy as np
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.bool_), shape, (0,) * len(shape))


def _entry_at(data: bytes, g: wire.Graph, field: int, index: int) -> bytes:
    off, size = g.spans[field][index]
    return bytes(data[off:off + size])


def _tensor_message(value, name: str) -> bytes:
    try:
        return tensor_bytes(value, name)
    except NotDecoded:  # an element type the reference evaluator computed (bfloat16, ...)
        from onnx import numpy_helper
        return numpy_helper.from_array(value, name).SerializeToString()


def _elem_type(value) -> int:
    elem = ELEM_TYPES.get(value.dtype.type)
    if elem is None:
        from onnx import helper
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    return elem
