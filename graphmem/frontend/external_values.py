"""Small initializers kept in an external file, read into the model's bytes before the
loader's stages: the values shape inference and the constant folding read (a Reshape's
shape, a ReduceSum's axes, a Slice's starts, a TopK's k, a Resize's scales) are then in
the model they work on, as an initializer stored inside the file is.

onnx's ``save_model(..., save_as_external_data=True, size_threshold=0)`` writes every
tensor to the external file, a two-element shape included; onnx's C++ inference, its
data propagation, the shape walk and ONNX Runtime's symbolic inference read no external
file. The loader reads here, under the external-data rule
(:mod:`graphmem.frontend.external_data`), each external initializer (of the main graph and
of the control-flow bodies) that it would have kept with its data had it been stored inside the file
(:func:`graphmem.frontend.splice.stripped_weights`' rule: up to SHAPE_DATA_BYTES, or up
to SMALL_CONSTANT_BYTES where its value may size a tensor), and writes it back as an
initializer with its data. The others stay external (their data is read only by the
commands that run the model). One that cannot be read (a missing or short file) stays
external too, and the loader's refusal of a shape it then cannot infer says why.

A node's tensor attribute kept external (a Constant's value, saved with onnx's
``convert_attribute=True``) is read in by the same rule, its node's outputs standing
for its name. Bodies and attributes are looked at only in a model whose main graph has
an external initializer.
"""
from __future__ import annotations

from math import prod

from graphmem import wire
from graphmem.errors import GraphmemError
from graphmem.frontend.protos import DROPPED, to_proto
from graphmem.frontend.protowire import NUMPY_TYPES
from graphmem.frontend.splice import (INITIALIZER, SHAPE_DATA_BYTES, SMALL_CONSTANT_BYTES,
                                      entry, entry_message, splice)
from graphmem.frontend.structure import EXTERNAL, external_locations, subgraphs


def _info(init) -> dict[str, str]:
    """The external_data entries of a wire Initializer ((key, value) pairs) or a
    TensorProto (StringStringEntryProtos), as a dict."""
    return {e.key: e.value for e in init.external_data} if hasattr(init, "ListFields") \
        else dict(init.external_data)


def _element_bytes(init) -> int | None:
    """The bytes ``init``'s dims and element type hold (None: not known here)."""
    np_type = NUMPY_TYPES.get(init.data_type)
    if np_type is None:
        return None
    import numpy as np
    return prod(init.dims) * np.dtype(np_type).itemsize


def stored_bytes(init) -> int | None:
    """The bytes the external data of ``init`` (a wire Initializer or a TensorProto)
    holds: its ``length``, else its dims times its element's size (None: not known)."""
    info = _info(init)
    length = info.get("length")
    if length:
        try:
            return int(length)
        except ValueError:
            return None
    return _element_bytes(init)


def _wanted(init, values, names=None) -> bool:
    """Is the external tensor ``init`` (a wire Initializer or a TensorProto) one to
    read in: up to SHAPE_DATA_BYTES, or up to SMALL_CONSTANT_BYTES where one of
    ``names`` (default: its own name) is among ``values``?"""
    if init.data_location != EXTERNAL:
        return False
    if _info(init).get("location") in (None, DROPPED):
        return False  # its data left out on purpose
    size = stored_bytes(init)
    return size is not None and (size <= SHAPE_DATA_BYTES or (
        size <= SMALL_CONSTANT_BYTES and any(n in values for n in names or (init.name,))))


def wanted(g: wire.Graph, values) -> list[int]:
    """The indices of the external initializers of ``g``'s main graph to read in: up to
    SHAPE_DATA_BYTES, or up to SMALL_CONSTANT_BYTES among ``values`` (the names of the
    tensors whose values may size another: ``constant_nodes.shape_values``)."""
    return [i for i, init in enumerate(g.initializers) if _wanted(init, values)]


def read_in(data: bytes, parsed: wire.Model, base_dir: str, model=None, values=frozenset(),
            unread: list[str] | None = None) -> tuple[bytes, wire.Model]:
    """``data`` (the model's bytes, ``parsed`` their wire view) with the small external
    initializers of its graphs (:func:`wanted`; a control-flow body's too, and the
    nodes' tensor attributes, where the main graph has one) holding their data, read from the model's folder ``base_dir`` (``model``: the model file, where
    known); the same bytes and view where there is none to read; ``values``: as
    :func:`wanted` takes it. ``unread`` gains a line for each one that could not be
    read (why; those among ``values`` first), which stays external."""
    g = parsed.graph
    # a model without an external initializer in its main graph is not walked (a walk
    # over the nodes for the bodies' is as long as a small model's load on a large one)
    if g is None or not any(t.data_location == EXTERNAL for t in g.initializers):
        return data, parsed
    from onnx import TensorProto

    from graphmem.frontend.external_data import load_tensor
    failed = []

    def loaded(t, what: str = "initializer", names=None) -> bool:
        copy = TensorProto()
        copy.CopyFrom(t)
        first = not any(n in values for n in names or (t.name,))
        try:
            load_tensor(copy, base_dir, model)
        except GraphmemError as exc:  # missing, short or refused: left external
            failed.append((first, f"{what} {t.name!r} not read: {exc}"))
            return False
        size = _element_bytes(t)
        if size is not None and size != len(copy.raw_data):
            # left external: a command that reads the weights says so in its words
            failed.append((first, (
                f"{what} {t.name!r} not read: its data does not fill its shape "
                f"{list(t.dims)} ({len(copy.raw_data)} bytes, not {size})")))
            return False
        t.CopyFrom(copy)
        return True

    changes = []
    for i in wanted(g, values):
        t = TensorProto.FromString(entry_message(data, g, INITIALIZER, i))
        if loaded(t):
            changes.append((INITIALIZER, i, entry(INITIALIZER, t.SerializeToString())))
    if changes:
        data = splice(data, parsed, changes)
        parsed = wire.parse_model(data)
    if any(_external_in_bodies(parsed.graph)) or _external_attributes(parsed.graph):
        # a body's initializers, a Constant's value (onnx's convert_attribute=True) are
        # not graph entries the splice reaches: the proto
        proto = to_proto(data)
        read = [loaded(t) for t in _body_initializers(proto.graph) if _wanted(t, values)]
        read += [loaded(t, f"{node.op_type} attribute", node.output)
                 for node, t in attribute_tensors(proto.graph)
                 if _wanted(t, values, node.output)]
        if any(read):
            data = proto.SerializeToString()
            parsed = wire.parse_model(data)
    if unread is not None:  # those whose value may size a tensor first
        unread.extend(line for _, line in sorted(failed, key=lambda f: f[0]))
    return data, parsed


def _external_in_bodies(g: wire.Graph):
    for node in g.nodes:
        if node.attrs:
            for sub in subgraphs(node):
                yield from external_locations(sub)


# the bytes an external tensor's entry holds in a serialized TensorProto: its
# external_data key "location" (a tensor attribute without them is not read as a proto)
_LOCATION_KEY = b"\n\x08location"


def _external_attributes(g: wire.Graph) -> bool:
    """Might a tensor attribute of a node (bodies' included) keep its data external?"""
    for node in g.nodes:
        for a in node.attrs:
            if a.type in (4, 9) and _LOCATION_KEY in a.raw:  # TENSOR, TENSORS
                return True
            if a.type in (5, 10) and any(_external_attributes(sub) for sub in a.subgraphs):
                return True
    return False


def attribute_tensors(graph):
    """(node, tensor) of every tensor attribute of the onnx GraphProto ``graph``'s
    nodes, bodies' included."""
    from onnx import AttributeProto
    for node in graph.node:
        for a in node.attribute:
            if a.type == AttributeProto.TENSOR:
                yield node, a.t
            elif a.type == AttributeProto.TENSORS:
                yield from ((node, t) for t in a.tensors)
            elif a.type == AttributeProto.GRAPH:
                yield from attribute_tensors(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for body in a.graphs:
                    yield from attribute_tensors(body)


def _body_initializers(graph):
    """The initializers of the control-flow bodies of the onnx GraphProto ``graph``
    (nested ones too)."""
    from onnx import AttributeProto
    for node in graph.node:
        for a in node.attribute:
            bodies = [a.g] if a.type == AttributeProto.GRAPH else \
                list(a.graphs) if a.type == AttributeProto.GRAPHS else []
            for body in bodies:
                yield from body.initializer
                yield from _body_initializers(body)
