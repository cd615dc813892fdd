"""The few onnx messages the loader reads and writes itself, on the protobuf wire format:
a TensorProto's value as a numpy array and an array as a TensorProto, a tensor's
TypeProto, and the primitives under them (also used by :mod:`.attributes`).

Importing onnx's Python package costs 55-65 ms (protobuf's Python runtime, the
generated classes), as long as planning a small model takes. The loader's fallbacks
that compute shape arithmetic (the constant values, the contrib rules' walk) read and
write only these messages, so they run without it. Each function gives what onnx's own
gives (``numpy_helper.to_array``/``from_array``, ``helper.make_tensor_type_proto``):
``tests/test_protowire.py`` compares them on every element type here. What a function
does not handle (an element type outside :data:`NUMPY_TYPES`, external data, strings,
bytes protobuf would refuse) raises :class:`NotDecoded`, and the caller takes onnx's way.
"""
from __future__ import annotations

import sys
from struct import unpack_from

import numpy as np


class Malformed(Exception):
    """Bytes protobuf's parser would refuse (or read otherwise than this module)."""


class NotDecoded(Exception):
    """A message this module does not read: onnx's Python package reads it."""


# TensorProto element types -> numpy dtypes, the plain numeric ones only
NUMPY_TYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16,
               6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64,
               12: np.uint32, 13: np.uint64}
# numpy scalar type -> TensorProto element type
ELEM_TYPES = {numpy_type: elem for elem, numpy_type in NUMPY_TYPES.items()}

EXTERNAL = 1  # TensorProto.DataLocation


# --------------------------------------------------------------------------- reading

def read_varint(data, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Malformed
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def fields(data):
    """(field number, wire type, value) of each field: an int for varints, the raw bytes
    of fixed widths, a slice for length-delimited fields."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise Malformed
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise Malformed
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = read_varint(data, pos)
            if pos + size > end:
                raise Malformed
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            if pos + 4 > end:
                raise Malformed
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise Malformed
        yield field, wire, value


def int64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def packed_varints(data) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        v, pos = read_varint(data, pos)
        out.append(v)
    return out


def add_int64s(out: list[int], wire: int, value) -> None:
    """A repeated int64 field's entry: one varint, or a packed run of them."""
    if wire == 0:
        out.append(int64(value))
    elif wire == 2:
        out.extend(int64(v) for v in packed_varints(value))
    else:
        raise Malformed


def message_of(entry) -> bytes:
    """The message of a length-delimited field's whole entry (tag, length, message),
    as :func:`graphmem.wire.parse_model`'s spans delimit them."""
    _, at = read_varint(entry, 0)
    _, at = read_varint(entry, at)
    return bytes(entry[at:])


# --------------------------------------------------------------------------- writing

_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def varint(n: int) -> bytes:
    """``n`` (at least 0) as a protobuf varint. The loader writes thousands of them per
    model (value infos: lengths, tags and dims), nearly all under 2**14."""
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    if 0x80 <= n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0:
        raise ValueError(f"varint of a negative number ({n}): write it as 2**64 + n")
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def message(field: int, body: bytes) -> bytes:
    """A length-delimited field: its tag, the length, the bytes."""
    return ((_LD_TAGS[field] if 0 < field < 16 else varint(field << 3 | 2))
            + varint(len(body)) + body)


_LD_TAGS = tuple(bytes((f << 3 | 2,)) for f in range(16))  # one byte: field numbers < 16


# --------------------------------------------------------------------------- TensorProto

_DIMS, _DATA_TYPE, _SEGMENT, _FLOAT_DATA, _INT32_DATA, _STRING_DATA, _INT64_DATA = range(1, 8)
_NAME, _RAW_DATA, _DOUBLE_DATA, _UINT64_DATA, _LOCATION = 8, 9, 10, 11, 14
# the wire types protobuf accepts for each field of TensorProto
_TENSOR_WIRE = {1: (0, 2), 2: (0,), 3: (2,), 4: (5, 2), 5: (0, 2), 6: (2,), 7: (0, 2),
                8: (2,), 9: (2,), 10: (1, 2), 11: (0, 2), 12: (2,), 13: (2,), 14: (0,),
                16: (2,)}
# the fixed-width typed fields: struct code and bytes of a value
_FIXED = {_FLOAT_DATA: ("f", 4), _DOUBLE_DATA: ("d", 8)}
# the typed field each element type keeps its values in, without raw_data
_FIELD_OF = {1: _FLOAT_DATA, 11: _DOUBLE_DATA, 7: _INT64_DATA, 12: _UINT64_DATA,
             13: _UINT64_DATA}


def tensor_array(data) -> np.ndarray:
    """A serialized TensorProto's value, as ``onnx.numpy_helper.to_array`` gives it."""
    if sys.byteorder != "little":
        raise NotDecoded("a big-endian machine")
    dims: list[int] = []
    data_type = location = 0
    raw = None
    typed: dict[int, list] = {}
    try:
        for field, wire, value in fields(data):
            if wire not in _TENSOR_WIRE.get(field, (wire,)):
                raise Malformed
            if field == _DIMS:
                add_int64s(dims, wire, value)
            elif field == _DATA_TYPE:
                data_type = int64(value) & 0xFFFFFFFF
                data_type = data_type - (1 << 32) if data_type >> 31 else data_type
            elif field in (_SEGMENT, _STRING_DATA):
                raise NotDecoded("a segment or strings")
            elif field == _RAW_DATA:
                raw = bytes(value)
            elif field == _LOCATION:
                location = value
            elif field in _FIXED:  # float_data, double_data: one value, or packed
                code, size = _FIXED[field]
                if wire == 2 and len(value) % size:
                    raise Malformed
                typed.setdefault(field, []).extend(
                    unpack_from(f"<{len(value) // size}{code}", value))
            elif field in (_INT32_DATA, _INT64_DATA, _UINT64_DATA):
                got = packed_varints(value) if wire == 2 else [value]
                typed.setdefault(field, []).extend(got)
    except Malformed:
        raise NotDecoded("bytes protobuf would refuse") from None
    if location == EXTERNAL:
        raise NotDecoded("external data")
    np_type = NUMPY_TYPES.get(data_type)
    if np_type is None:
        raise NotDecoded(f"element type {data_type}")
    try:
        if raw is not None:
            return np.frombuffer(raw, dtype=np_type).reshape(dims)
        field = _FIELD_OF.get(data_type, _INT32_DATA)
        got = typed.get(field, [])
        if field == _INT32_DATA:  # int32 values, written as int64 varints
            words = np.array([int64(v) & 0xFFFFFFFF for v in got], dtype=np.uint32)
            if data_type in (10, 4, 5):  # float16, uint16, int16: the low 16 bits
                return words.astype(np.uint16).reshape(dims).view(np_type)
            if data_type in (9, 2):  # bool, uint8: the low 8 bits
                return words.astype(np.uint8).view(np_type).reshape(dims)
            return words.view(np.int32).astype(np_type).reshape(dims)
        if field == _INT64_DATA:
            return np.array([int64(v) for v in got], dtype=np.int64).reshape(dims)
        if field == _UINT64_DATA:
            return np.array([v & (1 << 64) - 1 for v in got], dtype=np.uint64) \
                .astype(np_type).reshape(dims)
        return np.asarray(got, dtype=np_type).reshape(dims)
    except ValueError as exc:  # data that does not fill its dims: onnx says it
        raise NotDecoded(str(exc)) from None


def tensor_header(data) -> tuple[list[int], int]:
    """A serialized TensorProto's dims and element type, its data not read."""
    dims: list[int] = []
    data_type = 0
    try:
        for field, wire, value in fields(data):
            if field == _DIMS:
                add_int64s(dims, wire, value)
            elif field == _DATA_TYPE and wire == 0:
                data_type = int64(value)
    except Malformed:
        raise NotDecoded("bytes protobuf would refuse") from None
    return dims, data_type


def tensor_bytes(array: np.ndarray, name: str = "") -> bytes:
    """``array`` as a serialized TensorProto (the bytes of
    ``onnx.numpy_helper.from_array(array, name).SerializeToString()``)."""
    array = np.asarray(array)
    elem = ELEM_TYPES.get(array.dtype.type)
    if elem is None:
        raise NotDecoded(f"dtype {array.dtype}")
    return b"".join((*(b"\x08" + varint(d) for d in array.shape),
                     b"\x10" + varint(elem),
                     message(_NAME, name.encode()) if name else b"",
                     message(_RAW_DATA, np.ascontiguousarray(array).tobytes())))


# --------------------------------------------------------------------------- TypeProto

def type_bytes(elem_type: int, shape) -> bytes:
    """A tensor's serialized TypeProto (the bytes of ``onnx.helper.
    make_tensor_type_proto(elem_type, shape)``): each dim an int, a str (a dim_param) or
    None (neither); ``shape`` None: no shape. A model's tensors share few types: those
    of a tuple shape are made once (:data:`_TYPES`)."""
    key = (elem_type, shape) if shape is None or shape.__class__ is tuple else None
    if key is not None:
        found = _TYPES.get(key)
        if found is not None:
            return found
    dims = b"".join(message(1, b"" if d is None else
                            message(2, d.encode()) if d.__class__ is str else
                            b"\x08" + varint(d & (1 << 64) - 1)) for d in shape or ())
    made = message(1, b"\x08" + varint(elem_type & (1 << 64) - 1)
                   + (message(2, dims) if shape is not None else b""))
    if key is not None and len(_TYPES) < _TYPES_KEPT:
        _TYPES[key] = made
    return made


_TYPES: dict[tuple, bytes] = {}  # (elem_type, shape) -> type_bytes, for all models
_TYPES_KEPT = 1 << 16  # entries at most: a few MB in a process that loads many models


def static_type(data) -> tuple[int, tuple[int, ...]] | None:
    """(elem_type, shape) of a serialized TypeProto of a tensor whose every dim is a
    number (at least 0); None for any other type, or an unknown dim."""
    try:
        tensor = None
        for field, wire, value in fields(data):
            if field in (1, 4, 5, 7, 8, 9) and wire == 2:  # the oneof: the last one set
                # (a message field given twice is merged: its entries concatenated)
                tensor = (tensor or b"") + bytes(value) if field == 1 else None
        if tensor is None:
            return None
        elem, shape = 0, None
        for field, wire, value in fields(tensor):
            if field == 1 and wire == 0:
                elem = int64(value)
            elif field == 2 and wire == 2:
                shape = bytes(value) if shape is None else shape + bytes(value)
        if not elem or shape is None:
            return None
        dims = []
        for field, wire, value in fields(shape):
            if field != 1 or wire != 2:
                continue
            dim = None
            for f, w, v in fields(value):
                if f == 1 and w == 0:
                    dim = int64(v)
                elif f == 2 and w == 2:
                    dim = None
            if dim is None or dim < 0:
                return None
            dims.append(dim)
        return elem, tuple(dims)
    except Malformed:
        return None
