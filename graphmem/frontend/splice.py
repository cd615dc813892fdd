"""The model's bytes with a few graph entries changed, spliced without re-serializing
the model (a million-node model is hundreds of megabytes): the bound dims, the weights
too large to carry through shape inference, the types a fallback adds.

A change is ``(field, index, entry bytes or None)``: the GraphProto field number
(:data:`INITIALIZER`, :data:`INPUT`, :data:`OUTPUT`, :data:`VALUE_INFO`), the index of
the entry among that field's entries (-1: append), and the new serialized entry (None:
drop it). The entries' byte spans come from :func:`graphmem.wire.parse_model`.
"""
from __future__ import annotations

from graphmem import wire
from graphmem.frontend.lazy import onnx
from graphmem.frontend.protos import drop_tensor_data, to_proto
from graphmem.frontend.structure import EXTERNAL

INITIALIZER, INPUT, OUTPUT, VALUE_INFO = 5, 11, 12, 13  # GraphProto field numbers
_FIELD_TAG = {5: b"\x2a", 11: b"\x5a", 12: b"\x62", 13: b"\x6a"}

# Constants up to this size are evaluated when shape inference needs their values;
# initializers larger than this are carried through inference without their data.
SMALL_CONSTANT_BYTES = 1 << 20


def entry(field: int, message: bytes) -> bytes:
    """A GraphProto entry: the field's tag, the length, the serialized message."""
    return _FIELD_TAG[field] + varint(len(message)) + message


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def splice(data: bytes, parsed: dict, changes: list[tuple[int, int, bytes | None]]
           ) -> bytes:
    """The model's bytes with graph entries changed (see the module's doc)."""
    if not changes:
        return data
    g = parsed["graph"]
    span = parsed["graph_span"]
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
            off, size = g["spans"][field][index]
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


def stripped_weights(g: dict) -> list[tuple[int, int, bytes | None]]:
    """Initializers with more than SMALL_CONSTANT_BYTES of raw data, written again with
    dims and type and no data (cheap to infer on): marked external, so nothing mistakes
    the empty tensor for real data."""
    changes = []
    for i, init in enumerate(g["initializers"]):
        if init.raw_bytes > SMALL_CONSTANT_BYTES:
            t = onnx.TensorProto(name=init.name, data_type=init.data_type, dims=init.dims,
                                 data_location=EXTERNAL)
            drop_tensor_data(t)
            changes.append((INITIALIZER, i, entry(INITIALIZER, t.SerializeToString())))
    return changes


def tensor_value_info(name: str, elem_type: int, shape) -> bytes:
    """A serialized ValueInfoProto of a tensor (the bytes onnx.helper's
    make_tensor_value_info gives)."""
    def msg(field: int, body: bytes) -> bytes:
        return varint(field << 3 | 2) + varint(len(body)) + body
    dims = b"".join(msg(1, b"\x08" + varint(d & (1 << 64) - 1)) for d in shape)
    tensor = b"\x08" + varint(elem_type) + msg(2, dims)
    return msg(1, name.encode()) + msg(2, msg(1, tensor))
