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

# AttributeProto.AttributeType
UNDEFINED, FLOAT, INT, STRING, TENSOR, FLOATS, INTS, STRINGS = 0, 1, 2, 3, 4, 6, 7, 8
# AttributeProto field numbers
_F, _I, _S, _T, _FLOATS, _INTS, _STRINGS, _REF = 2, 3, 4, 5, 7, 8, 9, 21
_DIMS = 1  # TensorProto.dims
# wire types protobuf accepts for each field of AttributeProto (0 varint, 2 bytes,
# 5 fixed32); another one for a known field makes protobuf's parser refuse the bytes
_WIRE = {1: (2,), 2: (5,), 3: (0,), 4: (2,), 5: (2,), 6: (2,), 7: (5, 2), 8: (0, 2),
         9: (2,), 10: (2,), 11: (2,), 13: (2,), 14: (2,), 15: (2,), 20: (0,), 21: (2,),
         22: (2,), 23: (2,)}

NOT_DECODED = object()


class _Bad(Exception):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Bad
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes):
    """(field number, wire type, value) of each field: an int for varints and fixed
    widths' raw bytes, a memoryview slice for length-delimited fields."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _Bad
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise _Bad
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > end:
                raise _Bad
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            if pos + 4 > end:
                raise _Bad
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise _Bad
        yield field, wire, value


def _int64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def _packed_varints(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        v, pos = _varint(data, pos)
        out.append(_int64(v))
    return out


def decode(kind: int, raw: bytes):
    """The value of an attribute of type ``kind`` serialized as ``raw``, or NOT_DECODED."""
    if kind not in (UNDEFINED, FLOAT, INT, STRING, TENSOR, FLOATS, INTS, STRINGS):
        return NOT_DECODED
    try:
        f, i, s, t = 0.0, 0, b"", None
        floats: list[float] = []
        ints: list[int] = []
        strings: list[bytes] = []
        for field, wire, value in _fields(raw):
            if wire not in _WIRE.get(field, (wire,)):
                raise _Bad
            if field == _REF and wire == 2 and value:
                return NOT_DECODED  # a reference attribute: onnx.helper refuses it
            if field == _F and wire == 5:
                f = unpack_from("<f", value)[0]
            elif field == _I and wire == 0:
                i = _int64(value)
            elif field == _S and wire == 2:
                s = bytes(value)
            elif field == _T and wire == 2:
                t = bytes(value) if t is None else t + bytes(value)  # messages merge
            elif field == _FLOATS and wire == 5:
                floats.append(unpack_from("<f", value)[0])
            elif field == _FLOATS and wire == 2:
                if len(value) % 4:
                    raise _Bad
                floats.extend(unpack_from(f"<{len(value) // 4}f", value))
            elif field == _INTS:
                _add_int64s(ints, wire, value)
            elif field == _STRINGS and wire == 2:
                strings.append(bytes(value))
        if kind == TENSOR:
            return _tensor_label(t or b"")
        return {UNDEFINED: None, FLOAT: f, INT: i, STRING: s, FLOATS: floats, INTS: ints,
                STRINGS: strings}[kind]
    except _Bad:
        return NOT_DECODED


def _add_int64s(out: list[int], wire: int, value) -> None:
    """A repeated int64 field's entry: one varint, or a packed run of them."""
    if wire == 0:
        out.append(_int64(value))
    elif wire == 2:
        out.extend(_packed_varints(value))
    else:
        raise _Bad


def _tensor_label(data: bytes) -> str:
    """How the IR shows a tensor attribute: its dims."""
    dims: list[int] = []
    for field, wire, value in _fields(data):
        if field == _DIMS:
            _add_int64s(dims, wire, value)
    return f"<tensor {dims}>"
