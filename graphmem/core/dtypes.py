"""Element types: names and sizes in bits for every ONNX tensor type."""
from __future__ import annotations

from onnx import TensorProto

from graphmem.errors import GraphmemError

# ONNX enum name -> (our name, bits per element). Sub-byte types pack densely.
_TYPES = {
    "FLOAT": ("float32", 32), "DOUBLE": ("float64", 64), "FLOAT16": ("float16", 16),
    "BFLOAT16": ("bfloat16", 16), "INT8": ("int8", 8), "UINT8": ("uint8", 8),
    "INT16": ("int16", 16), "UINT16": ("uint16", 16), "INT32": ("int32", 32),
    "UINT32": ("uint32", 32), "INT64": ("int64", 64), "UINT64": ("uint64", 64),
    "BOOL": ("bool", 8), "COMPLEX64": ("complex64", 64), "COMPLEX128": ("complex128", 128),
    "FLOAT8E4M3FN": ("float8e4m3fn", 8), "FLOAT8E4M3FNUZ": ("float8e4m3fnuz", 8),
    "FLOAT8E5M2": ("float8e5m2", 8), "FLOAT8E5M2FNUZ": ("float8e5m2fnuz", 8),
    "FLOAT8E8M0": ("float8e8m0", 8), "UINT4": ("uint4", 4), "INT4": ("int4", 4),
    "FLOAT4E2M1": ("float4e2m1", 4), "UINT2": ("uint2", 2), "INT2": ("int2", 2),
    "FLOAT6E2M3": ("float6e2m3", 6), "FLOAT6E3M2": ("float6e3m2", 6),
}

_BY_ENUM: dict[int, tuple[str, int]] = {}
for _name, _info in _TYPES.items():
    if hasattr(TensorProto, _name):
        _BY_ENUM[getattr(TensorProto, _name)] = _info

BITS_BY_NAME = {name: bits for name, bits in _TYPES.values()}
ENUM_BY_NAME = {info[0]: enum for enum, info in _BY_ENUM.items()}


def dtype_of(elem_type: int, tensor_name: str) -> tuple[str, int]:
    """(name, bits) of an ONNX element type; string and unknown types are refused."""
    if elem_type in _BY_ENUM:
        return _BY_ENUM[elem_type]
    if elem_type == TensorProto.STRING:
        raise GraphmemError(
            f"tensor {tensor_name!r} holds strings, which have no fixed size; "
            "graphmem plans only fixed-size tensors")
    raise GraphmemError(f"tensor {tensor_name!r} has an unknown element type ({elem_type})")
