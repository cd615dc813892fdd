"""Element types: names and sizes in bits for every ONNX tensor type."""
from __future__ import annotations

from graphmem.errors import GraphmemError

# TensorProto.DataType value -> (ONNX enum name, our name, bits per element). The
# values are fixed by onnx.proto (tests/test_model_features.py checks them against the
# installed onnx); written out so that naming a type needs no onnx import. Sub-byte
# types pack densely.
_TYPES = {
    1: ("FLOAT", "float32", 32), 11: ("DOUBLE", "float64", 64),
    10: ("FLOAT16", "float16", 16), 16: ("BFLOAT16", "bfloat16", 16),
    3: ("INT8", "int8", 8), 2: ("UINT8", "uint8", 8), 5: ("INT16", "int16", 16),
    4: ("UINT16", "uint16", 16), 6: ("INT32", "int32", 32), 12: ("UINT32", "uint32", 32),
    7: ("INT64", "int64", 64), 13: ("UINT64", "uint64", 64), 9: ("BOOL", "bool", 8),
    14: ("COMPLEX64", "complex64", 64), 15: ("COMPLEX128", "complex128", 128),
    17: ("FLOAT8E4M3FN", "float8e4m3fn", 8), 18: ("FLOAT8E4M3FNUZ", "float8e4m3fnuz", 8),
    19: ("FLOAT8E5M2", "float8e5m2", 8), 20: ("FLOAT8E5M2FNUZ", "float8e5m2fnuz", 8),
    24: ("FLOAT8E8M0", "float8e8m0", 8), 21: ("UINT4", "uint4", 4), 22: ("INT4", "int4", 4),
    23: ("FLOAT4E2M1", "float4e2m1", 4), 25: ("UINT2", "uint2", 2), 26: ("INT2", "int2", 2),
    27: ("FLOAT6E2M3", "float6e2m3", 6), 28: ("FLOAT6E3M2", "float6e3m2", 6),
}
STRING = 8  # TensorProto.STRING

_BY_ENUM: dict[int, tuple[str, int]] = {enum: (name, bits) for enum, (_, name, bits)
                                        in _TYPES.items()}

BITS_BY_NAME = {name: bits for _, name, bits in _TYPES.values()}
ENUM_BY_NAME = {info[0]: enum for enum, info in _BY_ENUM.items()}


def dtype_of(elem_type: int, tensor_name: str) -> tuple[str, int]:
    """(name, bits) of an ONNX element type; string and unknown types are refused."""
    if elem_type in _BY_ENUM:
        return _BY_ENUM[elem_type]
    if elem_type == STRING:
        raise GraphmemError(
            f"tensor {tensor_name!r} holds strings, which have no fixed size; "
            "graphmem plans only fixed-size tensors")
    raise GraphmemError(f"tensor {tensor_name!r} has an unknown element type ({elem_type})")
