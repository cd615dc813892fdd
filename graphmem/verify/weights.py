"""The model's weights for the verifier, read once and shared by every run.

A weight kept as external data is not read into the model proto (but a small one, of
at most SHAPE_DATA_BYTES, which the loader reads in too): its file is mapped
read-only once and the weight is a numpy view of the map (:func:`mapped_weights`), so
its bytes are never copied. The one-node sessions of the reference and the plan's run
bind those views as inputs, and the whole-model session is given them with
``add_external_initializers`` (ORT uses the buffer, it does not copy it). Pages of the
map are read from the file as a kernel touches them and belong to the page cache, which
the kernel can drop and read again; after each run :meth:`Weights.release` drops them
from the process (``madvise(MADV_DONTNEED)`` on the map: the next touch reads them
again from the cache). The rule on where external data may lie
(:mod:`graphmem.frontend.external_data`) is applied before a file is mapped, and again
on the open descriptor.

A weight kept inside the model file is taken out of the proto into an array
(``in_memory``; the proto keeps a reference to :data:`IN_MEMORY`), so that it is held
once, not in the proto and again as an array; the whole-model session is given those
arrays too. A weight whose raw bytes are not its elements one for one (4-bit types,
strings, a big-endian host), whose offset is not a multiple of its element size, or
that lies in a subgraph (an If/Loop/Scan body reads its initializers from its own
graph) stays in the proto (read into it from external data) as before.
"""
from __future__ import annotations

import mmap
import os
import stat
import sys
from pathlib import Path

import numpy as np
import onnx

from graphmem.errors import GraphmemError
from graphmem.frontend import external_data
from graphmem.frontend.reader import load_attribute_data, model_file, read_model
from graphmem.frontend.splice import SHAPE_DATA_BYTES

EXTERNAL = onnx.TensorProto.EXTERNAL


class Weights:
    """The model proto of ``path`` without its external main-graph weights, and those
    weights as read-only numpy views of their mapped files (``values``)."""

    def __init__(self, path: str | os.PathLike):
        p = model_file(path)
        self.folder = str(p.parent)  # where the external data is read from, as named
        self.model = read_model(p)
        self.values: dict[str, np.ndarray] = {}
        self._maps: dict[str, mmap.mmap] = {}
        self._where: dict[str, tuple[mmap.mmap, int, int]] = {}  # name -> map, offset, bytes
        for t in self.model.graph.initializer:
            if t.data_location == EXTERNAL:
                # a small one is read into the proto, as one kept inside the file stays
                # there (ONNX Runtime reads a Reshape's shape, a ReduceSum's axes from
                # the proto, not from an array it is given)
                value = None if _small(t) else self._mapped(t, p)
                if value is None:
                    external_data.load_tensor(t, p.parent, p)
                else:
                    self.values[t.name] = value
        for g in _subgraphs(self.model.graph):
            for t in g.initializer:
                if t.data_location == EXTERNAL:
                    external_data.load_tensor(t, p.parent, p)
        load_attribute_data(self.model, p)  # a Constant's value kept external
        # weights kept inside the file: taken out of the proto (one copy, not two)
        # (not the small ones: ONNX Runtime's shape inference reads a shape, an axis
        # or a pad from the proto, and can read none from an array it is given)
        self.in_memory: dict[str, np.ndarray] = {}
        for t in self.model.graph.initializer:
            if t.data_location != EXTERNAL and len(t.raw_data) > TAKEN_OUT_BYTES:
                value = _taken_out(t)
                if value is not None:
                    self.values[t.name] = self.in_memory[t.name] = value
        if self.in_memory:  # protobuf frees a message's memory with the message alone
            fresh = onnx.ModelProto()
            fresh.CopyFrom(self.model)
            self.model = fresh

    def _mapped(self, t: onnx.TensorProto, model: Path) -> np.ndarray | None:
        info = {e.key: e.value for e in t.external_data}
        try:
            offset = int(info.get("offset") or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError:
            raise GraphmemError(f"tensor {t.name!r}: its external data's offset or length "
                                "is not a number") from None
        dtype = _raw_dtype(t.data_type)
        count = int(np.prod([int(d) for d in t.dims], dtype=np.int64))
        if dtype is None or offset % dtype.itemsize or offset < 0:
            return None
        nbytes = count * dtype.itemsize
        if length is not None and length != nbytes:
            return None  # read (and refused, if it must be) as before
        location = info.get("location", "")
        m = self._map(t.name, location, model)
        if m is None:
            return None
        if offset + nbytes > len(m):
            raise GraphmemError(f"{model}: tensor {t.name!r}: its external data {location!r} "
                                f"is {len(m):,} bytes, shorter than its offset {offset:,} "
                                f"plus length {nbytes:,}")
        if not nbytes:
            return np.zeros([int(d) for d in t.dims], dtype)
        self._where[t.name] = (m, offset, nbytes)
        return np.frombuffer(m, dtype, count, offset).reshape([int(d) for d in t.dims])

    def _map(self, name: str, location: str, model: Path) -> mmap.mmap | None:
        target = external_data.check(model, name, location)  # the rule, before opening
        found = self._maps.get(target)
        if found is not None:
            return found
        try:
            fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                         | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise GraphmemError(f"{model}: tensor {name!r}: cannot read its external data "
                                f"{location!r} ({exc.strerror})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                external_data.check(model, name, location)  # says why, in one line
                raise GraphmemError(f"{model}: tensor {name!r} keeps its data at "
                                    f"{location!r}, which changed into something other "
                                    "than a regular file; refused")
            try:
                m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if st.st_size else \
                    mmap.mmap(-1, 1)
            except (OSError, ValueError):  # (no maps left): read into the proto instead
                return None
        finally:
            os.close(fd)
        self._maps[target] = m
        return m

    def release(self) -> None:
        """Drop the mapped pages from this process (they stay in the page cache and are
        read again where touched): a run's weights do not stay counted as the next
        phase's memory."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None:
            return
        for m in self._maps.values():
            try:
                m.madvise(advice)
            except (OSError, ValueError):
                pass

    def release_for(self, names) -> None:
        """:meth:`release` for the pages of the weights ``names`` only (those a node
        read, once it has run in both runs)."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None:
            return
        page = mmap.PAGESIZE
        for name in names:
            where = self._where.get(name)
            if where is None:
                continue
            m, offset, nbytes = where
            start = offset - offset % page
            end = min(len(m), offset + nbytes)
            try:
                m.madvise(advice, start, end - start)
            except (OSError, ValueError):
                pass

    @property
    def mapped_bytes(self) -> int:
        return sum(v.nbytes for v in self.values.values())


# the smallest weight taken out of the proto, in bytes
TAKEN_OUT_BYTES = 64 << 10

# the location of a weight taken out of the proto into ``Weights.in_memory``: nothing
# reads it from a file (sessions are given the array)
IN_MEMORY = "graphmem-in-memory"


def _small(t: onnx.TensorProto) -> bool:
    """Does the external tensor ``t`` hold at most SHAPE_DATA_BYTES (by its ``length``,
    else its dims and element size): a shape, axes, pads, a scale, as the loader reads
    in (:mod:`graphmem.frontend.external_values`)?"""
    info = {e.key: e.value for e in t.external_data}
    if info.get("length"):
        try:
            return int(info["length"]) <= SHAPE_DATA_BYTES
        except ValueError:
            return False  # refused where it is mapped or read
    dtype = _raw_dtype(t.data_type)
    if dtype is None:
        return False
    return int(np.prod([int(d) for d in t.dims], dtype=np.int64)) * dtype.itemsize \
        <= SHAPE_DATA_BYTES


def _taken_out(t: onnx.TensorProto) -> np.ndarray | None:
    """The raw data of ``t`` as an array, ``t`` left as a reference to IN_MEMORY (None,
    ``t`` unchanged, where its bytes are not its elements one for one)."""
    dtype = _raw_dtype(t.data_type)
    dims = [int(d) for d in t.dims]
    count = int(np.prod(dims, dtype=np.int64))
    if dtype is None or len(t.raw_data) != count * dtype.itemsize:
        return None
    value = np.frombuffer(t.raw_data, dtype).reshape(dims)  # (a bytes object of its own)
    t.ClearField("raw_data")
    t.data_location = EXTERNAL
    for key, val in (("location", IN_MEMORY), ("offset", "0"), ("length", str(value.nbytes))):
        e = t.external_data.add()
        e.key, e.value = key, val
    return value


def _raw_dtype(data_type: int) -> np.dtype | None:
    """The numpy dtype whose bytes are the raw data of ``data_type`` one element for one
    (None: packed 4-bit types, strings, a big-endian host)."""
    if sys.byteorder != "little":
        return None
    name = onnx.TensorProto.DataType.Name(data_type) if data_type in \
        onnx.TensorProto.DataType.values() else None
    if name is None or name in _NOT_ONE_FOR_ONE:
        return None
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type))
    except Exception:  # a type this onnx has no numpy type for
        return None
    return None if dtype.kind == "O" else dtype


# element types whose raw bytes are not one element per item (packed), or no bytes
_NOT_ONE_FOR_ONE = frozenset(("UNDEFINED", "STRING", "INT4", "UINT4", "FLOAT4E2M1", "INT2",
                              "UINT2"))


def _subgraphs(graph: onnx.GraphProto):
    """Every If/Loop/Scan body inside ``graph``, nested ones too."""
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield a.g
                yield from _subgraphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield g
                    yield from _subgraphs(g)
