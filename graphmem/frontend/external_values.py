"""Small initializers kept in an external file, read into the model's bytes before the
loader's stages: the values shape inference and the constant folding read (a Reshape's
shape, a ReduceSum's axes, a Slice's starts, a TopK's k, a Resize's scales) are then in
the model they work on, as an initializer stored inside the file is.

onnx's ``save_model(..., save_as_external_data=True, size_threshold=0)`` writes every
tensor to the external file, a two-element shape included; onnx's C++ inference, its
data propagation, the shape walk and ONNX Runtime's symbolic inference read no external
file. The loader reads here, under the external-data rule
(:mod:`graphmem.frontend.external_data`), each external initializer of the main graph
that it would have kept with its data had it been stored inside the file
(:func:`graphmem.frontend.splice.stripped_weights`' rule: up to SHAPE_DATA_BYTES, or up
to SMALL_CONSTANT_BYTES where its value may size a tensor), and writes it back as an
initializer with its data. The others stay external (their data is read only by the
commands that run the model). One that cannot be read (a missing or short file) stays
external too, and the loader's refusal of a shape it then cannot infer says why.
"""
from __future__ import annotations

from math import prod

from graphmem import wire
from graphmem.errors import GraphmemError
from graphmem.frontend.protos import DROPPED
from graphmem.frontend.protowire import NUMPY_TYPES
from graphmem.frontend.splice import (INITIALIZER, SHAPE_DATA_BYTES, SMALL_CONSTANT_BYTES,
                                      entry, entry_message, splice)
from graphmem.frontend.structure import EXTERNAL


def stored_bytes(init) -> int | None:
    """The bytes the external data of the wire initializer ``init`` holds: its
    ``length``, else its dims times its element's size (None: not known)."""
    info = dict(init.external_data)
    length = info.get("length")
    if length:
        try:
            return int(length)
        except ValueError:
            return None
    np_type = NUMPY_TYPES.get(init.data_type)
    if np_type is None:
        return None
    import numpy as np
    return prod(init.dims) * np.dtype(np_type).itemsize


def wanted(g: wire.Graph, values) -> list[int]:
    """The indices of the external initializers of ``g`` to read in: up to
    SHAPE_DATA_BYTES, or up to SMALL_CONSTANT_BYTES among ``values`` (the names of the
    tensors whose values may size another: ``constant_nodes.shape_values``)."""
    found, larger = [], []
    for i, init in enumerate(g.initializers):
        if init.data_location != EXTERNAL:
            continue
        if dict(init.external_data).get("location") in (None, DROPPED):
            continue  # its data left out on purpose
        size = stored_bytes(init)
        if size is None or size > SMALL_CONSTANT_BYTES:
            continue
        (found if size <= SHAPE_DATA_BYTES else larger).append(i)
    if larger:
        found.extend(i for i in larger if g.initializers[i].name in values)
        found.sort()
    return found


def read_in(data: bytes, parsed: wire.Model, base_dir: str, model=None, values=frozenset(),
            unread: list[str] | None = None) -> tuple[bytes, wire.Model]:
    """``data`` (the model's bytes, ``parsed`` their wire view) with the small external
    initializers of its main graph (:func:`wanted`) holding their data, read from the
    model's folder ``base_dir`` (``model``: the model file, where known); the same bytes
    and view where there is none to read; ``values``: as :func:`wanted` takes it.
    ``unread`` gains a line for each one that could not be read (why; those among
    ``values`` first), which stays external."""
    g = parsed.graph
    if g is None or not any(t.data_location == EXTERNAL for t in g.initializers):
        return data, parsed
    indices = wanted(g, values)
    if not indices:
        return data, parsed
    from onnx import TensorProto

    from graphmem.frontend.external_data import load_tensor
    changes, failed = [], []
    for i in indices:
        t = TensorProto.FromString(entry_message(data, g, INITIALIZER, i))
        try:
            load_tensor(t, base_dir, model)
        except GraphmemError as exc:  # missing, short or refused: left external
            failed.append((t.name not in values, f"initializer {t.name!r} not read: {exc}"))
            continue
        changes.append((INITIALIZER, i, entry(INITIALIZER, t.SerializeToString())))
    if unread is not None:  # those whose value may size a tensor first
        unread.extend(line for _, line in sorted(failed, key=lambda f: f[0]))
    if not changes:
        return data, parsed
    data = splice(data, parsed, changes)
    return data, wire.parse_model(data)
