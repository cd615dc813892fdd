"""The model's bytes with a few graph entries changed, spliced without re-serializing
the model (a million-node model is hundreds of megabytes): the bound dims, the weights
too large to carry through shape inference, the types a fallback adds.

A change is ``(field, index, entry bytes or None)``: the GraphProto field number
(:data:`NODE`, :data:`INITIALIZER`, :data:`INPUT`, :data:`OUTPUT`, :data:`VALUE_INFO`;
an entry is appended only to the last four), the index of
the entry among that field's entries (-1: append), and the new serialized entry (None:
drop it). The entries' byte spans come from :func:`graphmem.wire.parse_model`.
"""
from __future__ import annotations

from typing import Collection

from graphmem import wire
from graphmem.frontend.lazy import onnx
from graphmem.frontend.protos import DROPPED, to_proto
from graphmem.frontend.protowire import message, message_of, type_bytes, varint
from graphmem.frontend.structure import EXTERNAL

NODE, INITIALIZER, INPUT, OUTPUT, VALUE_INFO = 1, 5, 11, 12, 13  # GraphProto field numbers
_FIELD_TAG = {5: b"\x2a", 11: b"\x5a", 12: b"\x62", 13: b"\x6a"}

# Constants up to this size are evaluated when shape inference needs their values;
# initializers larger than this are carried through inference without their data.
SMALL_CONSTANT_BYTES = 1 << 20
# Initializers up to this size keep their data in the model shape inference reads,
# whatever reads them (scales, zero points, axes: the contrib rules read values up to
# this size); a larger one only when its value may size a tensor.
SHAPE_DATA_BYTES = 4096


def entry(field: int, message: bytes) -> bytes:
    """A GraphProto entry: the field's tag, the length, the serialized message."""
    return _FIELD_TAG[field] + varint(len(message)) + message


def splice(data: bytes, parsed: wire.Model, changes: list[tuple[int, int, bytes | None]]
           ) -> bytes:
    """The model's bytes with graph entries changed (see the module's doc)."""
    if not changes:
        return data
    g = parsed.graph
    span = parsed.graph_span
    if g is None or span is None:
        return data
    start, length = span
    head = varint(length)
    begin = start - 1 - len(head)
    if begin < 0 or data[begin:start] != b"\x3a" + head:
        # the graph's length written in a longer form than needed: let protobuf re-write it
        data = to_proto(data).SerializeToString()
        parsed = wire.parse_model(data)
        return splice(data, parsed, changes)
    edits = []
    tail = []
    for field, index, new in changes:
        if index < 0:
            tail.append(new)
        else:
            off, size = g.spans[field][index]
            edits.append((off, off + size, new or b""))
    edits.sort()
    pieces, at = [], start
    for lo, hi, new in edits:
        pieces.append(data[at:lo])
        pieces.append(new)
        at = hi
    pieces.append(data[at:start + length])
    pieces.extend(tail)
    content = b"".join(pieces)
    return b"".join((data[:begin], b"\x3a", varint(len(content)), content,
                     data[start + length:]))


def stripped_weights(g: wire.Graph, values: Collection[str] = ()
                     ) -> list[tuple[int, int, bytes | None]]:
    """Initializers written again with dims and type and no data (cheap to infer on,
    whatever the model's size): every one with more than SMALL_CONSTANT_BYTES of raw
    data, and every one with more than SHAPE_DATA_BYTES that is not among ``values``
    (the tensors whose values may size another: ``constant_nodes.shape_values``).
    Marked external, so nothing mistakes the empty tensor for real data; the data stays
    in the model's bytes as read (:func:`initializer_from`)."""
    changes = []
    for i, init in enumerate(g.initializers):
        size = init.raw_bytes
        if size > SMALL_CONSTANT_BYTES or (size > SHAPE_DATA_BYTES and init.name not in values):
            changes.append((INITIALIZER, i, entry(INITIALIZER, stripped_tensor(
                init.name, init.data_type, init.dims))))
    return changes


def stripped_tensor(name: str, data_type: int, dims) -> bytes:
    """A serialized TensorProto with ``dims`` and ``data_type`` and no data, marked as
    :func:`graphmem.frontend.protos.drop_tensor_data` marks it (the bytes protobuf
    writes for it: written here, onnx's Python package is not imported for it)."""
    location = message(1, b"location") + message(2, DROPPED.encode())
    return b"".join((*(b"\x08" + varint(d & (1 << 64) - 1) for d in dims),
                     b"\x10" + varint(data_type), message(8, name.encode()),
                     message(13, location), b"\x70" + varint(EXTERNAL)))


def initializer_from(data: bytes, g: wire.Graph, index: int) -> onnx.TensorProto:
    """The ``index``-th initializer of the wire graph ``g`` as read from ``data`` (the
    model's bytes its spans index), data included."""
    return onnx.TensorProto.FromString(entry_message(data, g, INITIALIZER, index))


def entry_message(data: bytes, g: wire.Graph, field: int, index: int) -> bytes:
    """The serialized message of the ``index``-th entry of a GraphProto ``field`` of the
    wire graph ``g`` (its spans index ``data``)."""
    off, size = g.spans[field][index]
    return message_of(memoryview(data)[off:off + size])


def tensor_value_info(name: str, elem_type: int, shape) -> bytes:
    """A serialized ValueInfoProto of a tensor (the bytes onnx.helper's
    make_tensor_value_info gives): each dim an int, a str or None, ``shape`` None for
    none (:func:`graphmem.frontend.protowire.type_bytes`)."""
    return message(1, name.encode()) + message(2, type_bytes(elem_type, shape))
