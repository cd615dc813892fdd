"""A node attribute's value from its serialized ``AttributeProto``, without protobuf.

The loader keeps each attribute's bytes as :mod:`graphmem.wire` found them. For the
kinds a memory plan reads (ints, floats, strings and their lists, a tensor's dims),
:func:`decode` reads those bytes directly, as ``onnx.helper.get_attribute_value`` would
on the parsed message (the last value of a singular field wins; repeated numbers may
be packed or not). Anything else, and any bytes it cannot read, it leaves to
``onnx.helper`` (see :func:`graphmem.frontend.building.attribute_value`): ``None`` from
here means "not decoded here".
"""
from __future__ import annotations

from struct import unpack_from

from graphmem import wire
from graphmem.frontend.protowire import Malformed, add_int64s, fields, int64

# AttributeProto.AttributeType
UNDEFINED, FLOAT, INT, STRING, TENSOR, FLOATS, INTS, STRINGS = 0, 1, 2, 3, 4, 6, 7, 8
# AttributeProto field numbers
_F, _I, _S, _T, _FLOATS, _INTS, _STRINGS, _REF = 2, 3, 4, 5, 7, 8, 9, 21
_DIMS = 1  # TensorProto.dims
# the wire types protobuf accepts for each field of AttributeProto (0 varint, 2 bytes,
# 5 fixed32), from the schema graphmem.wire parses by (written from onnx's descriptors)
_WIRE = wire.wire_types("AttributeProto")

NOT_DECODED = object()


def decode(kind: int, raw: bytes, *, tensor_label: bool = True):
    """The value of an attribute of type ``kind`` serialized as ``raw``, or NOT_DECODED.
    A tensor is its label (``"<tensor [dims]>"``), or with ``tensor_label=False`` its
    serialized TensorProto (:func:`graphmem.frontend.protowire.tensor_array` reads it)."""
    if kind not in (UNDEFINED, FLOAT, INT, STRING, TENSOR, FLOATS, INTS, STRINGS):
        return NOT_DECODED
    try:
        f, i, s, t = 0.0, 0, b"", None
        floats: list[float] = []
        ints: list[int] = []
        strings: list[bytes] = []
        for field, wire, value in fields(raw):
            if wire not in _WIRE.get(field, (wire,)):
                raise Malformed
            if field == _REF and wire == 2 and value:
                return NOT_DECODED  # a reference attribute: onnx.helper refuses it
            if field == _F and wire == 5:
                f = unpack_from("<f", value)[0]
            elif field == _I and wire == 0:
                i = int64(value)
            elif field == _S and wire == 2:
                s = bytes(value)
            elif field == _T and wire == 2:
                t = bytes(value) if t is None else t + bytes(value)  # messages merge
            elif field == _FLOATS and wire == 5:
                floats.append(unpack_from("<f", value)[0])
            elif field == _FLOATS and wire == 2:
                if len(value) % 4:
                    raise Malformed
                floats.extend(unpack_from(f"<{len(value) // 4}f", value))
            elif field == _INTS:
                add_int64s(ints, wire, value)
            elif field == _STRINGS and wire == 2:
                strings.append(bytes(value))
        if kind == TENSOR:
            return _tensor_label(t or b"") if tensor_label else (t or b"")
        return {UNDEFINED: None, FLOAT: f, INT: i, STRING: s, FLOATS: floats, INTS: ints,
                STRINGS: strings}[kind]
    except Malformed:
        return NOT_DECODED


def _tensor_label(data: bytes) -> str:
    """How the IR shows a tensor attribute: its dims."""
    dims: list[int] = []
    for field, wire, value in fields(data):
        if field == _DIMS:
            add_int64s(dims, wire, value)
    return f"<tensor {dims}>"
