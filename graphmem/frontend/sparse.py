"""Sparse initializers, read as dense ones for the shapes and counted as stored.

A GraphProto's ``sparse_initializer`` holds a SparseTensorProto: a dense shape, the
non-zero values and their indices (linear, or one coordinate row per value). Nodes read
it by name like an initializer. :func:`densify` writes each as a dense initializer of
its shape and type (with its values when that is small, else without data, as the
loader's other large weights) and keeps the stored values and indices as initializers
of their own, which no node reads: the weights then count them, not the dense size
(``Graph.stored_as``).
"""
from __future__ import annotations

from math import prod

import numpy as np

from graphmem import wire
from graphmem.errors import GraphmemError
from graphmem.frontend.lazy import onnx
from graphmem.frontend.protos import drop_tensor_data
from graphmem.frontend.splice import INITIALIZER, SMALL_CONSTANT_BYTES, entry, splice

SPARSE_INITIALIZER = 15  # GraphProto field number


def densify(data: bytes, parsed: wire.Model
            ) -> tuple[bytes, wire.Model, dict[str, tuple[str, ...]]]:
    """The model's bytes with its main graph's sparse initializers written as dense ones,
    the parse of those bytes, and ``{dense name: (values name, indices name)}``."""
    g = parsed.graph
    taken = ({t.name for t in g.initializers} | {v.name for v in g.inputs}
             | {o for n in g.nodes for o in n.outputs})
    changes: list[tuple[int, int, bytes | None]] = []
    stored: dict[str, tuple[str, ...]] = {}
    for i, (off, size) in enumerate(g.spans.get(SPARSE_INITIALIZER, ())):
        sp = onnx.SparseTensorProto.FromString(_payload(data[off:off + size]))
        name = sp.values.name
        if not name or name in taken:
            raise GraphmemError(f"sparse initializer {name!r}: its name is empty or "
                                "already taken")
        dims = [int(d) for d in sp.dims]
        if any(d < 0 for d in dims):
            raise GraphmemError(f"sparse initializer {name!r}: negative dims {dims}")
        dense = onnx.TensorProto(name=name, data_type=sp.values.data_type, dims=dims)
        itemsize = _itemsize(sp.values.data_type)
        if prod(dims) * itemsize <= SMALL_CONSTANT_BYTES and not _external(sp):
            dense.raw_data = dense_values(sp, name, dims).tobytes()
        else:
            drop_tensor_data(dense)
        parts = []
        for part, what in ((sp.values, "values"), (sp.indices, "indices")):
            copy = onnx.TensorProto()
            copy.CopyFrom(part)
            copy.name = _fresh(f"{name}.sparse_{what}", taken)
            taken.add(copy.name)
            parts.append(copy)
        changes.append((SPARSE_INITIALIZER, i, None))
        changes += [(INITIALIZER, -1, entry(INITIALIZER, t.SerializeToString()))
                    for t in (dense, *parts)]
        stored[name] = tuple(t.name for t in parts)
        taken.add(name)
    if not changes:
        return data, parsed, {}
    data = splice(data, parsed, changes)
    return data, wire.parse_model(data), stored


def dense_values(sp, name: str, dims: list[int]) -> np.ndarray:
    """The dense array of a SparseTensorProto; one line when its indices do not fit."""
    from onnx import numpy_helper
    try:
        values = numpy_helper.to_array(sp.values).reshape(-1)
        indices = numpy_helper.to_array(sp.indices).astype(np.int64)
    except (ValueError, TypeError) as exc:
        raise GraphmemError(f"sparse initializer {name!r}: {str(exc).splitlines()[0]}") from None
    if indices.ndim == 2 and dims:  # a row of coordinates per value
        if indices.shape[1] != len(dims) or (indices < 0).any() or \
                (indices >= np.array(dims)).any():
            raise GraphmemError(f"sparse initializer {name!r}: an index is out of its shape "
                                f"{dims}")
        indices = np.ravel_multi_index(indices.T, dims) if indices.size else indices[:, 0]
    indices = indices.reshape(-1)
    if indices.size != values.size or (indices < 0).any() or (indices >= prod(dims)).any():
        raise GraphmemError(f"sparse initializer {name!r}: {values.size} values and "
                            f"{indices.size} indices, or an index out of its shape {dims}")
    dense = np.zeros(prod(dims), dtype=values.dtype)
    dense[indices] = values
    return dense.reshape(dims)


def _payload(entry_bytes: bytes) -> bytes:
    """The message inside a length-delimited entry (its tag, then its length)."""
    pos = 0
    for _ in range(2):  # the tag, then the length
        while entry_bytes[pos] & 0x80:
            pos += 1
        pos += 1
    return entry_bytes[pos:]


def _external(sp) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in (sp.values, sp.indices))


def _itemsize(data_type: int) -> int:
    try:
        from onnx import helper
        return np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize
    except (KeyError, ValueError, TypeError):
        return 1


def _fresh(name: str, taken: set[str]) -> str:
    k, out = 1, name
    while out in taken:
        k += 1
        out = f"{name}{k}"
    return out
