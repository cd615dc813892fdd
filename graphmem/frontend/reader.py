"""ONNX model -> graphmem IR: read, bind symbolic dims, infer shapes, fold constants.

The loader's public surface (:func:`load`, :func:`from_model`, :func:`read_model`, ...)
and its stages in order (:func:`_load`). A model is read once from its bytes into named
records (:mod:`graphmem.wire`, compiled): names checked and nodes ordered
(:mod:`~graphmem.frontend.structure`), dims bound (:mod:`~graphmem.frontend.binding`),
the few entries that change before shape inference spliced into the bytes
(:mod:`~graphmem.frontend.splice`), which onnx's C++ checker
(:mod:`~graphmem.frontend.checking`) and shape inference read directly. Shapes come
from an ordered list of named strategies (:mod:`~graphmem.frontend.shape_strategies`:
onnx's inference first, fallbacks for what it leaves open); folding is decided on types
(:mod:`~graphmem.frontend.constant_nodes`) and the IR built on those
(:mod:`~graphmem.frontend.building`). Only the fallbacks work on onnx protos.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from graphmem import wire
from graphmem.core.ir import Graph, standard_domain
from graphmem.core.nogc import gc_paused
from graphmem.errors import GraphmemError
from graphmem.frontend import external_data
from graphmem.frontend.external_values import attribute_tensors, read_in
from graphmem.frontend.binding import bind, bind_dims
from graphmem.frontend.building import build
from graphmem.frontend.checking import check as run_check
from graphmem.frontend.constant_nodes import shape_values
from graphmem.frontend.function_budget import check_functions
from graphmem.frontend.lazy import onnx as _onnx
from graphmem.frontend.protos import drop_tensor_data, one_line
from graphmem.frontend.shape_strategies import LoadState, run_strategies
from graphmem.frontend.splice import SMALL_CONSTANT_BYTES, splice, stripped_weights
from graphmem.frontend.zoo import resolve
from graphmem.frontend.structure import (EXTERNAL, all_reads, check_names, external_locations,
                                         invalid_name, topological_order)
from graphmem.frontend.working_model import WorkingModel

if TYPE_CHECKING:
    import onnx
else:
    onnx = _onnx

__all__ = ["SMALL_CONSTANT_BYTES", "bind_dims", "check_external_data", "check_model", "copy_without_weights",
           "from_model", "load", "onnx_opset", "plan_size_bound", "read_model"]


def read_model(path: str | os.PathLike, *, load_weights: bool = False,
               check: bool = False) -> onnx.ModelProto:
    """Read an ONNX file, turning every failure into a one-line GraphmemError. With
    ``check``, the file is first checked as ``plan`` checks it (:func:`check_file`):
    a command that hands the model to onnx's C++ passes, or copies it, reads only what
    plan would read."""
    p = model_file(path)
    if check:
        check_file(p)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise GraphmemError(f"{p}: not an ONNX model ({one_line(exc)})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise GraphmemError(f"{p}: not an ONNX model (no graph in the file)")
    check_external_data(model, p)
    if load_weights:
        for t in _all_initializers(model.graph):
            if t.data_location == EXTERNAL:
                external_data.load_tensor(t, p.parent, p)
        load_attribute_data(model, p)
    return model


def load_attribute_data(model: onnx.ModelProto, path: Path) -> None:
    """Read into ``model`` (read from the file ``path``) the data of its tensor
    attributes kept in an external file (a Constant's value, saved with onnx's
    ``convert_attribute=True``), under the external-data rule."""
    for _, t in attribute_tensors(model.graph):
        if t.data_location == EXTERNAL:
            external_data.load_tensor(t, path.parent, path)


def plan_size_bound(model: onnx.ModelProto) -> int:
    """The most bytes a plan for ``model`` can take as JSON: every tensor name written
    escaped (up to 6 characters each) with its fields, and every node in the order."""
    g = model.graph
    names = {t for n in g.node for t in n.output} | {i.name for i in g.input}
    return (1 << 20) + sum(6 * len(t) + 256 for t in names) + 24 * len(g.node)


def model_file(path: str | os.PathLike) -> Path:
    """``path``, refused in one line unless it is a non-empty file."""
    p = Path(path)
    if not p.exists():
        raise GraphmemError(f"{p}: no such file")
    if p.is_dir():
        raise GraphmemError(f"{p}: is a directory, not an ONNX file")
    if p.stat().st_size == 0:
        raise GraphmemError(f"{p}: empty file, not an ONNX model")
    return p


def check_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Refuse, without opening it, external data that is not a file inside the model's
    folder as named or its real file's folder (an absolute path, one that climbs out
    with ``..``, a link out of them, a FIFO, a file with several hard links): a model
    must not make graphmem read elsewhere on the machine."""
    for t in _all_initializers(model.graph):
        if t.data_location == EXTERNAL:
            location = next((e.value for e in t.external_data if e.key == "location"), "")
            _check_location(t.name, location, path)


def _check_location(name: str, location: str, path: Path) -> None:
    """The external-data rule (:mod:`graphmem.frontend.external_data`): the model's
    folder as named or its real file's folder, no FIFO, no hard link."""
    external_data.check(path, name, location)


def _all_initializers(graph: onnx.GraphProto):
    """The initializers of ``graph`` and of every subgraph (If/Loop/Scan bodies)."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_initializers(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _all_initializers(g)


@gc_paused
def load(path: str | os.PathLike, dims: Mapping[str, int] | None = None, *,
         check: bool = True, dim_default: int | None = None,
         bounds: Mapping[str, int] | None = None) -> Graph:
    """Load an ONNX model into a :class:`Graph` with every shape static.

    ``path`` names a file, or a Model Zoo graph onnx ships (``"resnet50"``) where no
    such file exists, as the commands take it. ``dims`` binds symbolic dimensions by name (``{"N": 8}``); ``dim_default``, when
    given, binds every symbolic dimension of a graph input that ``dims`` leaves open
    (``Graph.bindings`` then says which). ``bounds`` gives or tightens the upper bound of
    a data-dependent size by its symbol (``{"NonZero_3": 100}``:
    :mod:`graphmem.frontend.data_bounds`). Weights are not read into memory unless a
    small constant's value is needed for shape inference.
    """
    p = model_file(resolve(os.fspath(path), quiet=True))
    return _load(file_contents(p), dims, check=check, base_dir=str(p.parent),
                 model_path=str(path), dim_default=dim_default, source=p, bounds=bounds)


# A file at least this large is mapped, not read: the loader reads its graph and the
# few weights shape inference needs, and the pages of the other weights are never read
# (a 1.5 GB GPT-2 medium took a second to read whole; a 9 MiB int4 Whisper encoder,
# 7 ms of a 0.12 s load, more where the page cache had dropped the file).
MAP_BYTES = 1 << 20


def file_contents(p: Path):
    """The file's bytes, or for a large file a read-only map of it (a buffer the wire
    reader parses in place, whose slices are bytes); read whole where it cannot be
    mapped."""
    if p.stat().st_size >= MAP_BYTES:
        import mmap
        try:
            with open(p, "rb") as fh:
                return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            pass
    return p.read_bytes()


def onnx_opset(model: onnx.ModelProto) -> int:
    """The model's standard-domain opset version (0 when it imports none)."""
    return max((o.version for o in model.opset_import if standard_domain(o.domain)), default=0)


def from_model(model: onnx.ModelProto, dims: Mapping[str, int] | None = None, *,
               check: bool = True, base_dir: str | None = None,
               model_path: str | None = None, dim_default: int | None = None,
               bounds: Mapping[str, int] | None = None) -> Graph:
    """Like :func:`load`, for a ModelProto already in memory. Its external data is read
    from ``base_dir``: by default the folder of ``model_path`` (the file it was read
    from), else the working folder."""
    if base_dir is None:
        base_dir = str(Path(model_path).parent) if model_path else "."
    return _load(model.SerializeToString(), dims, check=check, base_dir=base_dir,
                 model_path=model_path, dim_default=dim_default, bounds=bounds)


def _load(data: bytes, dims: Mapping[str, int] | None, *, check: bool, base_dir: str,
          model_path: str | None, dim_default: int | None,
          source: Path | None = None, bounds: Mapping[str, int] | None = None) -> Graph:
    """The stages of loading, on the model's bytes (``source``: the file they came from)."""
    parsed = _parsed(data, source)
    g = parsed.graph
    stored: dict[str, tuple[str, ...]] = {}
    if g is not None and g.sparse_initializers:
        from graphmem.frontend.sparse import densify
        data, parsed, stored = densify(data, parsed)
        g = parsed.graph
    if source is not None:
        if g is None or (not g.nodes and not g.outputs):
            raise GraphmemError(f"{source}: not an ONNX model (no graph in the file)")
        for name, location in external_locations(g):
            _check_location(name, location, source)
    if g is None:
        g = wire.parse_model(b"\x3a\x00").graph  # an empty graph
    reads, order, values, stripped = _checked(data, parsed, g, False)
    # small initializers in an external file (saved with size_threshold=0: a Reshape's
    # shape) read in, as if stored inside it: every stage after sees their values
    unread: list[str] = []
    read = read_in(data, parsed, base_dir, source, values, unread)
    if read[1] is not parsed:
        data, parsed = read
        g = parsed.graph
    if check:
        run_check(data, parsed, stripped, order)
    notes: list[str] = []
    bindings, rebound = bind(data, g, dict(dims or {}), dim_default, notes)
    model = WorkingModel(data, parsed, splice(data, parsed, rebound + stripped), base_dir)
    state = LoadState(
        model=model, order=order, reads=reads, bindings=bindings, notes=notes,
        shape_values=values,
        opset=max((v for d, v in parsed.opsets if standard_domain(d)), default=0))
    state.unread = unread
    if bounds:  # issue 53: --bound values, read by the data-bounds strategy
        from graphmem.frontend.data_bounds import DataBounds
        state.data_bounds = DataBounds(bounds)
    try:
        sizing = run_strategies(state)
    except GraphmemError as exc:
        zero = sorted(name for name, value in bindings.items() if value == 0)
        if not zero:
            raise
        # a dimension bound to 0 empties every tensor that has it, and shape arithmetic
        # the exporter wrote (a Reshape's -1, a Gather of a shape) fails on it: say so
        # (what the fallbacks' own failures said, an ORT IndexError, is left out)
        why = str(exc).split(" (on the way:")[0][:300]
        raise GraphmemError(
            f"{', '.join(f'{name}=0' for name in zero)}: with a dimension bound to 0 the "
            f"model's shapes cannot be worked out ({why}); bind it to 1 or more") from None
    graph = build(parsed, g, order, state.tensors, reads, state.folding, model_path,
                  bindings, state.scopes, sizing, state.notes, stored)
    record = getattr(state, "data_bounds", None)
    if record is not None:  # issue 53: the bounded symbols and what they govern
        from graphmem.frontend.data_bounds import attach
        graph = attach(graph, record)
    if graph.load_notes:
        from graphmem.notes import note
        for line in graph.load_notes:
            note(line)
    return graph


def _parsed(data, source: Path | None):
    """The compiled reader's records of the model's bytes, its failures (and a name that
    is not UTF-8 text) in one line."""
    try:
        parsed = wire.parse_model(data)
    except ValueError as exc:
        raise GraphmemError(f"{source or 'the model'}: not an ONNX model "
                            f"({one_line(exc)})") from None
    except MemoryError:
        raise GraphmemError(f"{source or 'the model'}: reading its {len(data):,} bytes "
                            "ran out of memory (the records of its entries need more "
                            "than this process may use)") from None
    bad = parsed.not_utf8 and parsed.graph is not None and invalid_name(parsed.graph)
    if bad:
        raise GraphmemError(f"the model is corrupt: {bad} is not valid UTF-8 text")
    return parsed


def check_file(p: Path) -> None:
    """Refuse in one line a file ``plan`` refuses before its shape inference (its
    records, names, order, local functions' budget, a node without an op type), on the
    file's bytes by the compiled reader, before any onnx proto of it is made (a flood of
    millions of empty records takes protobuf past a memory limit, and a copy of it
    twice that)."""
    data = file_contents(p)
    parsed = _parsed(data, p)
    g = parsed.graph
    if g is None or (not g.nodes and not g.outputs):
        raise GraphmemError(f"{p}: not an ONNX model (no graph in the file)")
    if g.sparse_initializers:
        from graphmem.frontend.sparse import densify
        data, parsed, _ = densify(data, parsed)
        g = parsed.graph
    # onnx's checker refuses a node without an op type; the rest of it (value infos
    # without shapes, which ONNX Runtime runs and train builds from) is left to plan
    blank = next((i for i, n in enumerate(g.nodes) if not n.op_type), None)
    if blank is not None:
        raise GraphmemError(f"{p}: node {blank} ({g.nodes[blank].name or 'unnamed'}) has "
                            "no op type: not a valid ONNX model")
    _checked(data, parsed, g, False)


def _checked(data, parsed, g, check: bool):
    """The structural checks, the function budget and (``check``) onnx's checker on the
    model's bytes: (reads, order, shape values, stripped weights) for the stages after."""
    # Our own structural checks first: they name the node and tensor, where the
    # checker only says "not topologically sorted" for a cycle or a missing producer.
    producer = check_names(g)
    check_functions(data, g.nodes)  # before onnx's C++ inlines them
    reads = all_reads(g)
    order = topological_order(g, reads, producer)
    values = shape_values(g, reads)
    stripped = stripped_weights(g, values)
    if check:
        run_check(data, parsed, stripped, order)
    return reads, order, values, stripped


def check_model(model: onnx.ModelProto) -> None:
    """Refuse in one line a model ``plan`` would refuse before its shape inference (its
    names, its order, its local functions' budget, onnx's checker): what a command checks
    before handing the model to one of onnx's C++ passes (the version converter, whose
    crashes on a wrong-typed attribute take the process down)."""
    # its large weights checked by dims and type, as the loader checks them (the
    # serialized copy stays small, a model past protobuf's 2 GiB included)
    kept = []
    for t in model.graph.initializer:
        if len(t.raw_data) > SMALL_CONSTANT_BYTES and t.data_location != EXTERNAL:
            kept.append((t, t.raw_data))
            drop_tensor_data(t)
    try:
        data = model.SerializeToString()
    finally:
        for t, raw in kept:
            t.raw_data = raw
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
    try:
        parsed = wire.parse_model(data)
    except ValueError as exc:
        raise GraphmemError(f"the model is corrupt ({one_line(exc)})") from None
    g = parsed.graph
    if g is None:
        raise GraphmemError("not an ONNX model (no graph in the file)")
    if g.sparse_initializers:
        from graphmem.frontend.sparse import densify
        data, parsed, _ = densify(data, parsed)
        g = parsed.graph
    _checked(data, parsed, g, True)


def copy_without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose initializers carry dims and type but no data (cheap to infer on)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for init in copy.graph.initializer:
        if init.HasField("raw_data") and len(init.raw_data) > SMALL_CONSTANT_BYTES:
            drop_tensor_data(init)
    return copy
