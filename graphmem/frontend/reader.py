"""ONNX model -> graphmem IR: read, bind symbolic dims, infer shapes, fold constants.

The only module (with ``folding.py``) that looks inside onnx models; everything after
it works on :class:`graphmem.ir.Graph`. A model is read once from its bytes into plain
columns (:mod:`graphmem.wire`, compiled): names checked, nodes ordered, constants
folded and the IR built on those. The few entries that change before shape inference
(bound dims, weights too large to carry) are spliced into the bytes, which onnx's C++
shape inference reads directly; its answer is read the same way. Only the fallbacks
for shapes it leaves open work on onnx protos.
"""
from __future__ import annotations

import importlib
import os
from itertools import repeat
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from graphmem import wire
from graphmem.core.ops import RANDOM_OPS
from graphmem.frontend import attributes, onnx_c
from graphmem.core.dtypes import dtype_of
from graphmem.errors import GraphmemError, UnknownShape
from graphmem.core.memory import release_freed
from graphmem.core.nogc import gc_paused
from graphmem.core.ir import CONTROL_FLOW, Graph, Node, Tensor, from_columns, standard_domain

if TYPE_CHECKING:
    import onnx


class _Later:
    """A module imported on first use. The common path of :func:`load` (a model whose
    every shape onnx infers) needs none of onnx's Python package, only its compiled core
    (:mod:`graphmem.frontend.onnx_c`); the fallbacks and the proto-level helpers use it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        module = importlib.import_module(self._name)
        setattr(self, attr, getattr(module, attr))
        return getattr(module, attr)


if not TYPE_CHECKING:
    onnx = _Later("onnx")
helper = _Later("onnx.helper")

# Constants up to this size are evaluated when shape inference needs their values.
SMALL_CONSTANT_BYTES = 1 << 20


def read_model(path: str | os.PathLike, *, load_weights: bool = False) -> onnx.ModelProto:
    """Read an ONNX file, turning every failure into a one-line GraphmemError."""
    p = _model_file(path)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise GraphmemError(f"{p}: not an ONNX model ({_one_line(exc)})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise GraphmemError(f"{p}: not an ONNX model (no graph in the file)")
    check_external_data(model, p)
    if load_weights:
        try:
            onnx.load_external_data_for_model(model, str(p.parent))
        except Exception as exc:
            raise GraphmemError(f"{p}: cannot read its external data ({_one_line(exc)})") from None
    return model


def plan_size_bound(model: onnx.ModelProto) -> int:
    """The most bytes a plan for ``model`` can take as JSON: every tensor name written
    escaped (up to 6 characters each) with its fields, and every node in the order."""
    g = model.graph
    names = {t for n in g.node for t in n.output} | {i.name for i in g.input}
    return (1 << 20) + sum(6 * len(t) + 256 for t in names) + 24 * len(g.node)


def _model_file(path: str | os.PathLike) -> Path:
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
    folder (an absolute path, or one that climbs out with ``..``): a model must not make
    graphmem read elsewhere on the machine."""
    for t in _all_initializers(model.graph):
        if t.data_location == _EXTERNAL:
            location = next((e.value for e in t.external_data if e.key == "location"), "")
            _check_location(t.name, location, path)


def _check_location(name: str, location: str, path: Path) -> None:
    norm = os.path.normpath(location)
    if (not location or os.path.isabs(location) or norm == ".."
            or norm.startswith(".." + os.sep) or "\0" in location
            or not _inside(path, location)):
        raise GraphmemError(f"{path}: tensor {name!r} keeps its data at {location!r}, "
                            f"outside the model's folder; refused")


def _inside(model: Path, location: str) -> bool:
    """Does ``location``, with every symbolic link on the way followed (links are read,
    the file is not opened), stay inside the model's folder?"""
    folder = os.path.realpath(Path(model).parent)
    target = os.path.realpath(os.path.join(folder, location))
    return os.path.commonpath([folder, target]) == folder


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
         check: bool = True, dim_default: int | None = None) -> Graph:
    """Load an ONNX model into a :class:`Graph` with every shape static.

    ``dims`` binds symbolic dimensions by name (``{"N": 8}``); ``dim_default``, when
    given, binds every symbolic dimension of a graph input that ``dims`` leaves open
    (``Graph.bindings`` then says which). Weights are not read into memory unless a
    small constant's value is needed for shape inference.
    """
    p = _model_file(path)
    return _load(p.read_bytes(), dims, check=check, base_dir=str(p.parent),
                 model_path=str(path), dim_default=dim_default, source=p)


def onnx_opset(model: onnx.ModelProto) -> int:
    """The model's standard-domain opset version (0 when it imports none)."""
    return max((o.version for o in model.opset_import if standard_domain(o.domain)), default=0)


def from_model(model: onnx.ModelProto, dims: Mapping[str, int] | None = None, *,
               check: bool = True, base_dir: str = ".", model_path: str | None = None,
               dim_default: int | None = None) -> Graph:
    """Like :func:`load`, for a ModelProto already in memory."""
    return _load(model.SerializeToString(), dims, check=check, base_dir=base_dir,
                 model_path=model_path, dim_default=dim_default)


def _load(data: bytes, dims: Mapping[str, int] | None, *, check: bool, base_dir: str,
          model_path: str | None, dim_default: int | None,
          source: Path | None = None) -> Graph:
    """The stages of loading, on the model's bytes (``source``: the file they came from)."""
    try:
        parsed = wire.parse_model(data)
    except ValueError as exc:
        raise GraphmemError(f"{source or 'the model'}: not an ONNX model "
                            f"({_one_line(exc)})") from None
    g = parsed["graph"]
    if source is not None:
        if g is None or (not g["nodes"] and not g["outputs"]):
            raise GraphmemError(f"{source}: not an ONNX model (no graph in the file)")
        for name, location in _external_locations(g):
            _check_location(name, location, source)
    if g is None:
        g = wire.parse_model(b"\x3a\x00")["graph"]  # an empty graph
    bad = parsed["not_utf8"] and _invalid_name(g)
    if bad:
        raise GraphmemError(f"the model is corrupt: {bad} is not valid UTF-8 text")
    # Our own structural checks first: they name the node and tensor, where the
    # checker only says "not topologically sorted" for a cycle or a missing producer.
    producer = _check_names(g)
    reads = _all_reads(g)
    order = _topological_order(g, reads, producer)
    stripped = _stripped_weights(g)
    if check:
        _check(data, parsed, stripped, order)
    bindings, rebound = _bind(data, g, dict(dims or {}), dim_default)
    work = _splice(data, parsed, rebound + stripped)
    data_prop = not any(n[OP] in UNBOUNDED_DATA_PROP for n in g["nodes"])
    inferred = _infer(work, data_prop)
    tensors = _tensors(_types(inferred))
    scopes = {}
    if any(n[OP] in CONTROL_FLOW and standard_domain(n[DOMAIN]) for n in g["nodes"]):
        try:
            inferred, scopes = _control_flow(data, inferred, g, order, tensors, reads,
                                             base_dir)
        except UnknownShape as exc:  # an outer tensor a body reads
            raise GraphmemError(f"{exc}{_data_dependence(g, exc.tensor, tensors)}") from None
        tensors = _tensors(_types(inferred))
    folded_nodes, constants = _fold(g, order, tensors, reads, bindings)
    missing = _unknown(g, order, tensors, folded_nodes)
    opset = max((v for d, v in parsed["opsets"] if standard_domain(d)), default=0)
    if missing:
        # Dropout's mask, first: it is all a zoo graph lacks, and cheap
        inferred = _fill_known_gaps(inferred, opset, tensors, missing)
        tensors = _tensors(_types(inferred))
        missing = _unknown(g, order, tensors, folded_nodes)
    if missing and any(not standard_domain(n[DOMAIN]) for n in g["nodes"]):
        # The ops ONNX Runtime's optimizers write, before the rounds below: their rules
        # and onnx's per-node inference in one pass (contrib_shapes), then onnx's
        # inference again downstream of them, while a round sizes more
        inferred, tensors = _contrib_rounds(inferred, data_prop, g, order, reads, bindings)
        folded_nodes, constants = _fold(g, order, tensors, reads, bindings)
        missing = _unknown(g, order, tensors, folded_nodes)
    model = None  # the proto, made only for the fallbacks below
    if missing:
        # Values of small constants (shape arithmetic) let inference finish the job; a
        # constant computed from the Shape of a tensor that only this round sized (a
        # Swin block's window padding after the previous block's) needs another round.
        # Data computed from bound dims (which runs, see _dim_data_nodes) is evaluated
        # here too: its values are fixed by the bindings, and a Reshape may read it.
        model = _proto(inferred)
        computable = _constant_nodes(g, order, tensors, reads)
        while True:
            model = _infer_with_constant_values(model, order, tensors, *computable, base_dir)
            tensors = _tensors(_types(model.SerializeToString()))
            computable = _constant_nodes(g, order, tensors, reads)
            folded_nodes, constants = _without_dim_data(g, order, reads, bindings, *computable)
            before, missing = len(missing), _unknown(g, order, tensors, folded_nodes)
            if not missing or len(missing) >= before:
                break
    if missing:
        model = _proto(_fill_known_gaps(model.SerializeToString(), opset, tensors, missing))
        tensors = _tensors(_types(model.SerializeToString()))
        missing = _unknown(g, order, tensors, folded_nodes)
    if missing:
        # ONNX Runtime's symbolic inference, kept only where it knows more: it may give
        # symbolic dims to tensors the rounds above sized
        sym = _symbolic_infer(model)
        sym_tensors = _tensors(_types(sym.SerializeToString()))
        sym_folded, sym_constants = _fold(g, order, sym_tensors, reads, bindings)
        sym_missing = _unknown(g, order, sym_tensors, sym_folded)
        if len(sym_missing) < len(missing):
            model, tensors, missing = sym, sym_tensors, sym_missing
            folded_nodes, constants = sym_folded, sym_constants
    if missing:
        name, node = missing[0]
        where = f"output of node {node.index} ({node.op_type}{' ' + repr(node.name) if node.name else ''})"
        more = f"; {len(missing) - 1} more tensors are unknown too" if len(missing) > 1 else ""
        hint = ""
        if not standard_domain(node.domain):
            hint = (f"; {node.op_type!r} is from domain {node.domain!r} and graphmem has no "
                    "shape rule for it: pass --infer-by-running to take the shapes from one "
                    "ONNX Runtime run at the bound dims, or give the shapes of its outputs "
                    "in the model's value_info")
        hint = hint or _data_dependence(g, name, tensors)
        raise GraphmemError(f"cannot infer the shape of tensor {name!r}, {where}{more}{hint}")
    return _build(parsed, g, order, tensors, reads, folded_nodes, constants, model_path,
                  bindings, scopes)


# --------------------------------------------------------------------------- the columns
#
# wire.parse_model gives, per graph: nodes as (name, op_type, domain, inputs, outputs,
# attributes) with attributes (name, type, serialized AttributeProto[, subgraphs]);
# initializers as (name, data_type, dims, data_location, raw_data length,
# external_data); value infos as (name, type) with type None, ("tensor", elem_type,
# shape or None) or (kind,); and the byte span of every top-level graph entry.

NAME, OP, DOMAIN, INPUTS, OUTPUTS, ATTRS = range(6)
_GRAPH_ATTRS = (5, 10)  # AttributeProto.GRAPH, GRAPHS
_EXTERNAL = 1  # TensorProto.EXTERNAL


def _subgraphs(node) -> list[dict]:
    return [sub for a in node[ATTRS] if len(a) > 3 for sub in a[3]]


def _external_locations(g: dict):
    """(name, location) of every external-data initializer, subgraphs included."""
    for name, _, _, location, _, external in g["initializers"]:
        if location == _EXTERNAL:
            yield name, next((v for k, v in external if k == "location"), "")
    for node in g["nodes"]:
        if node[ATTRS]:
            for sub in _subgraphs(node):
                yield from _external_locations(sub)


def _invalid_name(g: dict, where: str = "graph") -> str | None:
    """The first tensor or op name that is not valid UTF-8 (the parser hands those over
    as bytes), checked on every load: a walk over names only."""
    for kind in ("inputs", "outputs", "value_info", "initializers"):
        for entry in g[kind]:
            if entry[0].__class__ is bytes:
                return f"the name of {where} {kind.rstrip('s')} {entry[0]!r}"
    for idx, n in enumerate(g["nodes"]):
        if (n[NAME].__class__ is bytes or n[OP].__class__ is bytes
                or n[DOMAIN].__class__ is bytes):
            text = next(t for t in (n[NAME], n[OP], n[DOMAIN]) if t.__class__ is bytes)
            return f"{text!r} in {where} node {idx}"
        for text in n[INPUTS] + n[OUTPUTS]:
            if text.__class__ is bytes:
                return f"{text!r} in {where} node {idx}"
        for sub in _subgraphs(n):
            if (found := _invalid_name(sub, f"a subgraph of node {idx}")) is not None:
                return found
    return None


def _check_names(g: dict) -> dict[str, int]:
    """Refuse a name defined twice (:func:`_name_clash` words it); return the index of
    the node that writes each node output."""
    init_names = [t[0] for t in g["initializers"]]
    defined: dict[str, int] = dict.fromkeys(init_names, -1)
    input_names = [vi[0] for vi in g["inputs"] if vi[0] not in defined]
    if len(defined) != len(init_names) or len(set(input_names)) != len(input_names):
        _name_clash(g, -1)
    defined.update(dict.fromkeys(input_names, -1))
    defined[""] = -1  # blanks (omitted optional outputs) may repeat
    for idx, n in enumerate(g["nodes"]):
        outs = n[OUTPUTS]
        before = len(defined)
        defined.update(zip(outs, repeat(idx)))
        if len(defined) - before != len(outs) and (
                len(defined) - before != len(outs) - outs.count("")):
            _name_clash(g, idx)
    defined.pop("")
    return {name: by for name, by in defined.items() if by >= 0}


def _name_clash(g: dict, upto: int) -> None:
    """Raise for the first name defined twice (two initializers, two graph inputs, or a
    node output already defined), looking at the nodes up to ``upto``."""
    defined: dict[str, str] = {}
    for init in g["initializers"]:
        if init[0] in defined:
            raise GraphmemError(f"duplicate tensor name {init[0]!r}: two initializers")
        defined[init[0]] = "an initializer"
    for vi in g["inputs"]:
        if vi[0] in defined and defined[vi[0]] != "an initializer":
            raise GraphmemError(f"duplicate tensor name {vi[0]!r}: two graph inputs")
        defined.setdefault(vi[0], "a graph input")
    for idx, n in enumerate(g["nodes"][:upto + 1]):
        for out in n[OUTPUTS]:
            if not out:
                continue
            if out in defined:
                raise GraphmemError(
                    f"duplicate tensor name {out!r}: node {idx} ({n[OP]}) writes it, "
                    f"but it is already {defined[out]}")
            defined[out] = f"the output of node {idx} ({n[OP]})"


def _reads(node) -> tuple[str, ...]:
    """Every tensor a node reads: its inputs without blanks, then what its subgraphs
    read from enclosing scopes (sorted)."""
    subs = _subgraphs(node) if node[ATTRS] else ()
    ins = node[INPUTS]
    if not subs and "" not in ins:
        return ins
    reads = [t for t in ins if t]
    for sub in subs:
        reads.extend(sorted(t for t in _subgraph_reads(sub) if t not in reads))
    return tuple(reads)


def _all_reads(g: dict) -> list[tuple[str, ...]]:
    return list(map(_reads, g["nodes"]))


def _subgraph_reads(graph: dict) -> set[str]:
    """Names a subgraph reads from enclosing scopes."""
    defined = {vi[0] for vi in graph["inputs"]} | {t[0] for t in graph["initializers"]}
    outer: set[str] = set()
    for n in graph["nodes"]:
        for t in _reads(n):
            if t not in defined:
                outer.add(t)
        defined.update(o for o in n[OUTPUTS] if o)
    for o in graph["outputs"]:
        if o[0] not in defined:
            outer.add(o[0])
    return outer


def _topological_order(g: dict, reads: list[tuple[str, ...]],
                       producer: dict[str, int]) -> list[int]:
    """Node indices in file order when that is topological, else a stable sort;
    ``producer``: the node that writes each node output."""
    nodes = g["nodes"]
    available = {vi[0] for vi in g["inputs"]} | {t[0] for t in g["initializers"]}
    sorted_ = True
    for idx, rs in enumerate(reads):
        for t in rs:
            p = producer.get(t)
            if p is None:
                if t not in available:
                    raise GraphmemError(
                        f"node {idx} ({nodes[idx][OP]}) reads tensor {t!r}, which no node "
                        "produces and which is not a graph input or initializer")
            elif p >= idx:
                sorted_ = False
    for o in g["outputs"]:
        if o[0] not in available and o[0] not in producer:
            raise GraphmemError(f"graph output {o[0]!r} is produced by no node")
    if sorted_:
        return list(range(len(nodes)))
    import heapq
    deps = [{producer[t] for t in rs if t in producer} for rs in reads]
    users: dict[int, list[int]] = {}
    indegree = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for p in d:
            users.setdefault(p, []).append(i)
    ready = [i for i, k in enumerate(indegree) if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, []):
            indegree[u] -= 1
            if indegree[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):
        raise GraphmemError(f"the graph has a cycle: {_find_cycle(nodes, set(order), deps, reads)}")
    return order


def _find_cycle(nodes, done: set[int], deps: list[set[int]], reads) -> str:
    """A cycle among the nodes a topological sort could not place, as readable text."""
    # Every unplaced node has an unplaced producer, so walking producers from any of
    # them must come back to a node already seen: that loop is a cycle.
    node = min(set(range(len(nodes))) - done)
    path: list[int] = []
    while node not in path:
        path.append(node)
        node = min(d for d in deps[node] if d not in done)
    loop = path[path.index(node):][::-1]  # producer before consumer
    steps = []
    for a, b in zip(loop, loop[1:] + loop[:1]):
        tensor = next(t for t in reads[b] if t in nodes[a][OUTPUTS])
        steps.append(f"node {a} ({nodes[a][OP]}) -> {tensor!r} -> ")
    return "".join(steps) + f"node {loop[0]} ({nodes[loop[0]][OP]})"


# --------------------------------------------------------------------------- the bytes

_FIELD_TAG = {5: b"\x2a", 11: b"\x5a", 12: b"\x62", 13: b"\x6a"}  # GraphProto fields


def _entry(field: int, message: bytes) -> bytes:
    """A GraphProto entry: the field's tag, the length, the serialized message."""
    return _FIELD_TAG[field] + _varint(len(message)) + message


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _splice(data: bytes, parsed: dict, changes: list[tuple[int, int, bytes | None]]
            ) -> bytes:
    """The model's bytes with graph entries changed: ``changes`` holds (field, index,
    new entry bytes, or None to drop it); an index of -1 appends the entry."""
    if not changes:
        return data
    g = parsed["graph"]
    span = parsed["graph_span"]
    if g is None or span is None:
        return data
    start, length = span
    head = _varint(length)
    begin = start - 1 - len(head)
    if begin < 0 or data[begin:start] != b"\x3a" + head:
        # the graph's length written in a longer form than needed: let protobuf re-write it
        data = _proto(data).SerializeToString()
        parsed = wire.parse_model(data)
        return _splice(data, parsed, changes)
    edits = []
    tail = []
    for field, index, entry in changes:
        if index < 0:
            tail.append(entry)
        else:
            off, size = g["spans"][field][index]
            edits.append((off, off + size, entry or b""))
    edits.sort()
    pieces, at = [], start
    for lo, hi, entry in edits:
        pieces.append(data[at:lo])
        pieces.append(entry)
        at = hi
    pieces.append(data[at:start + length])
    pieces.extend(tail)
    content = b"".join(pieces)
    return b"".join((data[:begin], b"\x3a", _varint(len(content)), content,
                     data[start + length:]))


def _stripped_weights(g: dict) -> list[tuple[int, int, bytes | None]]:
    """Initializers with more than SMALL_CONSTANT_BYTES of raw data, written again with
    dims and type and no data (cheap to infer on): marked external, so nothing mistakes
    the empty tensor for real data."""
    changes = []
    for i, (name, dtype, dims, _, raw, _) in enumerate(g["initializers"]):
        if raw > SMALL_CONSTANT_BYTES:
            t = onnx.TensorProto(name=name, data_type=dtype, dims=dims,
                                 data_location=_EXTERNAL)
            _drop_tensor_data(t)
            changes.append((5, i, _entry(5, t.SerializeToString())))
    return changes


def _bind(data: bytes, g: dict, dims: dict[str, int], default: int | None
          ) -> tuple[dict[str, int], list[tuple[int, int, bytes | None]]]:
    """:func:`bind_dims` on the value infos that name dims (all inputs, the outputs and
    value infos with a symbolic dim), and those entries written again."""
    spans = g["spans"]
    picked = [(11, i) for i in range(len(g["inputs"]))]
    for field, kind in ((12, "outputs"), (13, "value_info")):
        for i, (_, t) in enumerate(g[kind]):
            if t is not None and t[0] == "tensor" and t[2] is not None and any(
                    d.__class__ is str for d in t[2]):
                picked.append((field, i))
    if not dims and default is None and len(picked) == len(g["inputs"]) and all(
            t is not None and t[0] == "tensor" and t[2] is not None
            and all(d.__class__ is int and d >= 0 for d in t[2])
            for name, t in g["inputs"]):
        return {}, []  # every input static, nothing to bind: bind_dims would change nothing
    if not picked:
        return bind_dims(onnx.ModelProto(), dims, default, initializers=()), []
    mini = onnx.ModelProto()
    mini.graph.ParseFromString(b"".join(
        data[off:off + size] for off, size in (spans[f][i] for f, i in picked)))
    bindings = bind_dims(mini, dims, default, initializers=(t[0] for t in g["initializers"]))
    entries = ([(11, vi) for vi in mini.graph.input] + [(12, vi) for vi in mini.graph.output]
               + [(13, vi) for vi in mini.graph.value_info])
    changes = []
    for (field, index), (_, vi) in zip(picked, entries):
        entry = _entry(field, vi.SerializeToString())
        off, size = spans[field][index]
        if entry != data[off:off + size]:
            changes.append((field, index, entry))
    return bindings, changes


def _check(data: bytes, parsed: dict, stripped, order: list[int]) -> None:
    """onnx.checker on the model with its ``stripped`` weights, its nodes in ``order``
    and initializers without data here (external or dropped) as graph inputs of the same
    type: ONNX Runtime runs graphs whose nodes are not sorted, and the checker would
    look for the external files."""
    g = parsed["graph"]
    identity = order == list(range(len(g["nodes"])))
    # Before IR version 4 an initializer had to be a graph input too; ONNX Runtime's
    # optimizer keeps an old model's IR version and adds initializers that are not
    # (folded and fused weights), and runs the file it saved: checked as inputs
    legacy = parsed["ir_version"] < 4
    if (not stripped and identity and not legacy
            and all(t[3] != _EXTERNAL for t in g["initializers"])):
        _run_checker(data)
        return
    work = _splice(data, parsed, stripped)
    parsed = wire.parse_model(work)
    g = parsed["graph"]
    if not identity:
        model = _proto(work)
        nodes = [model.graph.node[i] for i in order]
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        del copy.graph.node[:]
        copy.graph.node.extend(nodes)
        work = copy.SerializeToString()
        parsed = wire.parse_model(work)
        g = parsed["graph"]
    inputs = {vi[0] for vi in g["inputs"]}
    changes = []
    for i, (name, dtype, dims, location, _, _) in enumerate(g["initializers"]):
        if location == _EXTERNAL:
            changes.append((5, i, None))
        if (location == _EXTERNAL or legacy) and name not in inputs:
            vi = helper.make_tensor_value_info(name, dtype, list(dims))
            changes.append((11, -1, _entry(11, vi.SerializeToString())))
    _run_checker(_splice(work, parsed, changes))


def _proto(data: bytes) -> onnx.ModelProto:
    """The ModelProto of bytes our parser read: protobuf's parser may still refuse them."""
    try:
        return onnx.ModelProto.FromString(data)
    except Exception as exc:  # DecodeError
        raise GraphmemError(f"the model is corrupt: {_one_line(exc)}") from None


def _run_checker(work: bytes) -> None:
    try:
        onnx_c.check_model(work)
        release_freed()  # the checker's copy of the model
    except onnx_c.core().checker.ValidationError as exc:
        raise GraphmemError(f"the model fails onnx.checker: {_one_line(exc)}") from None
    except UnicodeDecodeError as exc:
        # the checker's own message quotes the corrupt text and cannot be decoded
        where = _invalid_text(_proto(work)) or _one_line(exc)
        raise GraphmemError(f"the model is corrupt: {where} is not valid UTF-8 text") from None
    except ValueError as exc:  # protobuf's own parser refuses what ours let through
        raise GraphmemError(f"the model is corrupt: {_one_line(exc)}") from None


# Ops whose data propagation in onnx's shape inference materializes their whole output
# (a Range of constant inputs to 3e9 took 12 GB): with one in the graph, inference runs
# without data propagation, and the shape arithmetic it would have followed is left to
# the evaluation of small constants (at most SMALL_CONSTANT_BYTES each), which is bounded.
UNBOUNDED_DATA_PROP = frozenset({"Range"})


def _infer(work: bytes, data_prop: bool = True) -> bytes:
    """onnx's shape inference (with data propagation unless told) on the model's bytes."""
    try:
        inferred = onnx_c.infer_shapes(work, data_prop)
        release_freed()  # inference's two copies of the model
        return inferred
    except Exception as exc:
        raise GraphmemError(f"ONNX shape inference failed: {_one_line(exc)}") from None


def _infer_proto(model: onnx.ModelProto) -> onnx.ModelProto:
    data_prop = not any(n.op_type in UNBOUNDED_DATA_PROP for n in model.graph.node)
    return onnx.ModelProto.FromString(_infer(model.SerializeToString(), data_prop))


def _types(data: bytes) -> dict[str, tuple]:
    """Every value's type in a (shape-inferred) model: ("tensor", elem_type, shape) from
    the value infos and inputs and outputs, ("init", data_type, dims) for initializers."""
    g = wire.parse_values(data)["graph"]
    types: dict[str, tuple] = {}
    for kind in ("value_info", "inputs", "outputs"):
        types.update(vi for vi in g[kind] if vi[1] is not None)
    for name, dtype, dims, *_ in g["initializers"]:
        types[name] = ("init", dtype, dims)
    return types


_KINDS = {"sequence": "a sequence", "map": "a map", "optional": "an optional",
          "sparse_tensor": "a sparse tensor", "opaque": "an opaque value"}
_DTYPES: dict[int, tuple[str, int]] = {}  # elem_type -> dtype_of(elem_type)


def _tensors(types: dict[str, tuple]) -> dict[str, Tensor]:
    """A Tensor for each of ``types`` that is a tensor type with every dim known (or an
    initializer); a value that is not a dense tensor is refused."""
    names, dtypes, shapes, bits = [], [], [], []
    for name, t in types.items():
        kind, elem, shape = t[0], t[1] if len(t) > 1 else 0, t[2] if len(t) > 2 else None
        if kind == "tensor":
            if elem == 0 or shape is None:
                continue
            try:  # a dim that is a name (str) or unknown (None) cannot be compared
                if min(shape, default=0) < 0:
                    continue
            except TypeError:
                continue
        elif kind != "init":
            raise GraphmemError(f"tensor {name!r} is {_KINDS.get(kind, kind)}; graphmem "
                                "plans only dense tensors")
        dtype = _DTYPES.get(elem)
        if dtype is None:
            dtype = _DTYPES[elem] = dtype_of(elem, name)
        names.append(name)
        dtypes.append(dtype[0])
        shapes.append(shape)
        bits.append(dtype[1])
    nbytes = [(prod(s) * b + 7) // 8 for s, b in zip(shapes, bits)]  # Tensor.__post_init__
    made = from_columns(Tensor, len(names), name=names, dtype=dtypes, shape=shapes,
                        bits=bits, bytes=nbytes)
    return dict(zip(names, made))


def _foldable(node) -> bool:
    """A standard-domain, deterministic node without subgraphs."""
    if not standard_domain(node[DOMAIN]) or node[OP] in RANDOM_OPS:
        return False
    return not any(a[1] in _GRAPH_ATTRS for a in node[ATTRS])


def _fold(g: dict, order, tensors, reads, bindings=None) -> tuple[set[int], list[str]]:
    """Which nodes compute only constants (initializers, Constant, static Shape), and
    the constants they make; with ``bindings``, less the data computed from bound dims
    (:func:`_dim_data_nodes`), which runs."""
    return _without_dim_data(g, order, reads, bindings,
                             *_constant_nodes(g, order, tensors, reads))


def _without_dim_data(g: dict, order, reads, bindings, folded: set[int],
                      constants: list[str]) -> tuple[set[int], list[str]]:
    """:func:`_constant_nodes`' answer less the data computed from bound dims."""
    if bindings:
        kept = _dim_data_nodes(g, order, folded, reads)
        if kept:
            nodes = g["nodes"]
            made = {o for i in kept for o in nodes[i][OUTPUTS]}
            return folded - kept, [c for c in constants if c not in made]
    return folded, constants


def _constant_nodes(g: dict, order, tensors, reads) -> tuple[set[int], list[str]]:
    nodes = g["nodes"]
    const = {t[0] for t in g["initializers"]}
    folded: set[int] = set()
    constants: list[str] = []
    for idx in order:
        n = nodes[idx]
        if n[OP] in ("Shape", "Size"):
            ok = all(t in tensors for t in reads[idx])
        else:
            ok = all(t in const for t in reads[idx])
        if ok and _foldable(n):
            folded.add(idx)
            outs = [o for o in n[OUTPUTS] if o]
            const.update(outs)
            constants.extend(outs)
    return folded, constants


# --------------------------------------------------------------------------- checks and shapes

def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _invalid_text(msg, where: str = "model") -> str | None:
    """The first string field anywhere that is not valid UTF-8, as ``where.field``.

    Slower than :func:`_invalid_name`; used to explain a UnicodeDecodeError.
    """
    for field, value in msg.ListFields():
        is_text = field.type == field.TYPE_STRING
        if not is_text and field.type != field.TYPE_MESSAGE:
            continue
        repeated = getattr(field, "is_repeated", None)
        if repeated is None:  # protobuf before 6
            repeated = field.label == field.LABEL_REPEATED
        for i, v in enumerate(value if repeated else [value]):
            at = f"{where}.{field.name}" + (f"[{i}]" if repeated else "")
            if is_text:
                if isinstance(v, bytes):
                    return f"{at} {v!r}"
            elif (found := _invalid_text(v, at)) is not None:
                return found
    return None


def copy_without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose initializers carry dims and type but no data (cheap to infer on)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for init in copy.graph.initializer:
        if init.HasField("raw_data") and len(init.raw_data) > SMALL_CONSTANT_BYTES:
            _drop_tensor_data(init)
    return copy


def _drop_tensor_data(init: onnx.TensorProto) -> None:
    # Keep dims and data_type; drop the bytes. Marked external so nothing mistakes
    # the empty tensor for real data.
    init.ClearField("raw_data")
    init.data_location = onnx.TensorProto.EXTERNAL
    del init.external_data[:]
    entry = init.external_data.add()
    entry.key, entry.value = "location", "graphmem-dropped"


def bind_dims(model: onnx.ModelProto, dims: Mapping[str, int],
              default: int | None = None, *, initializers=None) -> dict[str, int]:
    """Bind symbolic dims in place; return every binding made (``default`` included).

    ``initializers``: the names of the graph's initializers, when ``model`` holds only
    its value infos (the loader binds a model of the entries that name dims)."""
    g = model.graph
    inits = set(initializers) if initializers is not None else {t.name for t in g.initializer}
    dims = dict(dims)
    explicit = set(dims)
    used: set[str] = set()
    unbound: dict[str, str] = {}  # name -> where it was first seen
    for vi in g.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise GraphmemError(f"graph input {vi.name!r} has no shape; graphmem needs its rank and dims")
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:
                continue
            if d.HasField("dim_param") and d.dim_param:
                if d.dim_param not in dims and default is not None:
                    dims[d.dim_param] = int(default)
                if d.dim_param not in dims:
                    unbound.setdefault(d.dim_param, f"axis {axis} of input {vi.name!r}")
                    continue
                used.add(d.dim_param)
                d.dim_value = int(dims[d.dim_param])
            else:
                raise GraphmemError(
                    f"axis {axis} of input {vi.name!r} has an unknown size with no name; "
                    "graphmem needs a static shape for every graph input")
    if unbound:
        raise GraphmemError(_unbound_message(unbound))
    # Symbolic dims elsewhere (outputs, value_info): bind what we can, drop the rest
    # so that stale annotations do not fight shape inference.
    for vi in list(g.output) + list(g.value_info):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        shape = vi.type.tensor_type.shape
        if any(d.HasField("dim_param") and d.dim_param not in dims for d in shape.dim):
            vi.type.tensor_type.ClearField("shape")
            continue
        for d in shape.dim:
            if d.HasField("dim_param"):
                d.dim_value = int(dims[d.dim_param])
    unknown = sorted(explicit - used - _all_dim_params(model))
    if unknown:
        raise GraphmemError(f"--dim {unknown[0]}: the model has no symbolic dimension of that name")
    return dims


def _unbound_message(unbound: Mapping[str, str]) -> str:
    """One line naming every unbound symbolic dim of the inputs, with the options to copy."""
    names = list(unbound)
    where = "; ".join(f"{n!r} ({unbound[n]})" for n in names[:8])
    if len(names) > 8:
        where += f"; and {len(names) - 8} more"
    noun = "dimension" if len(names) == 1 else "dimensions"
    options = " ".join(f"--dim {n}=VALUE" for n in names)
    return (f"symbolic {noun} not bound: {where}; pass {options} "
            f"(or --dim-default VALUE for all)")


def _all_dim_params(model: onnx.ModelProto) -> set[str]:
    names = set()
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            names.update(d.dim_param for d in vi.type.tensor_type.shape.dim if d.dim_param)
    return names


def _contrib_rounds(inferred: bytes, data_prop: bool, g, order, reads, bindings):
    """(model bytes, tensors) once the contrib rules have sized what they can."""
    from graphmem.frontend.contrib_shapes import propagate
    tensors = _tensors(_types(inferred))
    while True:
        known = propagate(_proto(inferred))
        found = [(13, -1, _entry(13, _tensor_value_info(name, elem, shape)))
                 for name, (elem, shape) in known.items() if name not in tensors]
        if not found:
            return inferred, tensors
        inferred = _infer(_splice(inferred, wire.parse_model(inferred), found), data_prop)
        tensors = _tensors(_types(inferred))


def _symbolic_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX Runtime's symbolic shape inference: it knows the contrib ops and attention
    blocks that onnx's own inference leaves open."""
    # with graphmem's rules for the ops ORT's optimizers write (contrib_shapes.py)
    from graphmem.frontend.contrib_shapes import infer
    try:
        return infer(model)
    except Exception:
        return model  # best effort: the caller names the tensor that stays unknown


# Inputs that a node reads for their values as shapes, axes or counts (a few numbers),
# not as data: a constant computed from bound dims may stay folded when only these read it.
SHAPE_ARGUMENTS = {
    "Reshape": {1}, "Expand": {1}, "ConstantOfShape": {0}, "Tile": {1},
    "Slice": {1, 2, 3, 4}, "Range": {0, 1, 2}, "Unsqueeze": {1}, "Squeeze": {1},
    "Resize": {1, 2, 3}, "Upsample": {1}, "Pad": {1, 2, 3}, "TopK": {1}, "OneHot": {1},
    "Split": {1}, "CumSum": {1}, "Trilu": {1}, "CenterCropPad": {1}, "Col2Im": {1, 2},
    "NonMaxSuppression": {2, 3, 4}, "Shape": {0}, "Size": {0}, "Loop": {0},
    **{op: {1} for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                          "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                          "ReduceSumSquare")},
}


def _dim_data_nodes(g: dict, order, folded, reads) -> set[int]:
    """Folded nodes that must run instead: those whose outputs are data computed from a
    bound dimension (a Shape or Size of a tensor that is not a constant), read as data
    by a running node or a graph output. The exporters write such subgraphs for
    defaulted token-type ids, position ids and masks: folded, an [batch, seq, hidden]
    lookup would count as a weight that grows with batch and sequence (issue 21).
    Shape arithmetic (read only as shapes, axes or counts) stays folded."""
    nodes = g["nodes"]
    const = {t[0] for t in g["initializers"]}
    tainted: set[str] = set()
    for idx in order:
        if idx not in folded:
            continue
        n, ins = nodes[idx], reads[idx]
        if (n[OP] in ("Shape", "Size") and any(t not in const for t in ins)) or \
                any(t in tainted for t in ins):
            tainted.update(o for o in n[OUTPUTS] if o)
        const.update(o for o in n[OUTPUTS] if o)
    if not tainted:
        return set()

    def data_reads(idx: int) -> list[str]:
        n = nodes[idx]
        shape_args = SHAPE_ARGUMENTS.get(n[OP], ()) if standard_domain(n[DOMAIN]) else ()
        found = [t for i, t in enumerate(n[INPUTS]) if t and i not in shape_args]
        found.extend(t for t in reads[idx] if t not in n[INPUTS])  # subgraphs' outer reads
        return [t for t in found if t in tainted]

    data = {o[0] for o in g["outputs"] if o[0] in tainted}
    for idx in order:
        if idx not in folded:
            data.update(data_reads(idx))
    kept: set[int] = set()
    for idx in reversed(order):
        if idx in folded and any(o in data for o in nodes[idx][OUTPUTS] if o):
            kept.add(idx)
            data.update(data_reads(idx))
    if kept:
        # closed forward: a folded node that reads what a kept node makes runs too, or
        # its value would wait for a tensor that exists only at run time (GPT-2's
        # decode step: a Range's bounds from Shape(past) arithmetic)
        running = {o for i in kept for o in nodes[i][OUTPUTS] if o}
        for idx in order:
            if idx in folded and idx not in kept and any(t in running for t in reads[idx]):
                kept.add(idx)
                running.update(o for o in nodes[idx][OUTPUTS] if o)
    return kept


# Ops whose output's size depends on the values of their inputs, not their shapes.
DATA_DEPENDENT = frozenset({"NonZero", "NonMaxSuppression", "Compress", "Unique"})


def _data_dependence(g: dict, name: str, tensors) -> str:
    """Why ``name`` has no static shape when its size depends on the data: the nearest
    op of :data:`DATA_DEPENDENT` upstream of it through tensors without one ('' when
    there is none)."""
    nodes = g["nodes"]
    producer = {o: i for i, n in enumerate(nodes) for o in n[OUTPUTS] if o}
    queue, seen = [name], {name}
    while queue:
        t = queue.pop(0)
        i = producer.get(t)
        if i is None:
            continue
        n = nodes[i]
        if n[OP] in DATA_DEPENDENT and standard_domain(n[DOMAIN]):
            label = f" {n[NAME]!r}" if n[NAME] else ""
            return (f"; its size depends on the values computed at run time ({n[OP]}{label}, "
                    f"node {i}, upstream): graphmem plans static shapes only")
        for x in n[INPUTS]:
            if x and x not in seen and x not in tensors:
                seen.add(x)
                queue.append(x)
    return ""


def _unknown(g: dict, order, tensors, folded) -> list[tuple[str, Node]]:
    nodes = g["nodes"]
    missing = []
    for vi in g["inputs"]:
        if vi[0] not in tensors:
            raise GraphmemError(f"graph input {vi[0]!r} has no static shape")
    for idx in order:
        if idx in folded:
            continue
        for out in nodes[idx][OUTPUTS]:
            if out and out not in tensors:
                missing.append((out, _node(idx, nodes[idx])))
    return missing


def _attribute_value(attr) -> object:
    """A node attribute's value as the IR keeps it (a subgraph or tensor as a label)."""
    kind, raw = attr[1], attr[2]
    if kind in _GRAPH_ATTRS:
        return "<subgraph>"
    value = attributes.decode(kind, raw)  # a tensor comes back as its label
    if value is attributes.NOT_DECODED:
        try:
            value = helper.get_attribute_value(onnx.AttributeProto.FromString(raw))
        except Exception:
            return None
        if isinstance(value, onnx.TensorProto):
            value = f"<tensor {list(value.dims)}>"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value


def _node(idx: int, n, outer_reads: tuple[str, ...] = ()) -> Node:
    return _nodes([idx], [n], [outer_reads])[0]


def _nodes(indices: list[int], ns: list, outer_reads: list[tuple[str, ...]]) -> list[Node]:
    """IR nodes of the column rows ``ns`` (made column by column: a million nodes)."""
    return from_columns(
        Node, len(ns), index=indices, name=[n[NAME] for n in ns], op_type=[n[OP] for n in ns],
        domain=[n[DOMAIN] for n in ns], inputs=[n[INPUTS] for n in ns],
        outputs=[n[OUTPUTS] for n in ns],
        attrs=[{a[0]: _attribute_value(a) for a in n[ATTRS]} if n[ATTRS] else {} for n in ns],
        implicit_inputs=outer_reads)


def _control_flow(data: bytes, inferred: bytes, g: dict, order, tensors, reads,
                  base_dir: str):
    """The bodies of the If/Loop/Scan nodes as scopes, and the inferred model's bytes
    with the types of those nodes' outputs (:mod:`graphmem.frontend.control_flow`).

    A value the sizing needs (a Loop's trip count) is an initializer's or a Constant's,
    or else computed from the constants folded so far (the exporters' Shape -> Gather
    of a bound dim), at most SMALL_CONSTANT_BYTES each."""
    from graphmem.frontend.control_flow import graph_values, settle  # imports onnx
    model = _proto(data)
    plain = graph_values(model)
    computed: dict[str, object] = {}

    def values(name: str):
        found = plain(name)
        if found is not None:
            return found
        if not computed:
            from graphmem.frontend.folding import evaluate_constants
            folded, _ = _constant_nodes(g, order, tensors, reads)
            computed.update(evaluate_constants(
                model, [model.graph.node[i] for i in order if i in folded], tensors,
                max_bytes=SMALL_CONSTANT_BYTES, base_dir=base_dir, prefer="reference"))
            computed[""] = None  # evaluated once, whatever it found
        return computed.get(name)
    model, _, scopes = settle(_proto(inferred), order, dict(tensors), _infer_proto, values)
    return model.SerializeToString(), scopes


def _build(parsed, g, order, tensors, reads, folded, constants, model_path, bindings,
           scopes=None) -> Graph:
    nodes_in = g["nodes"]
    inits = frozenset(t[0] for t in g["initializers"])
    indices = [idx for idx in order if idx not in folded] if folded else list(order)
    rows = [nodes_in[idx] for idx in indices]
    implicit = [() if rs is n[INPUTS] else tuple(t for t in rs if t not in n[INPUTS])
                for n, rs in zip(rows, (reads[idx] for idx in indices))]
    nodes = _nodes(indices, rows, implicit)
    opset = max((v for d, v in parsed["opsets"] if standard_domain(d)), default=0)
    return Graph(
        name=g["name"] or (Path(model_path).stem if model_path else "model"),
        nodes=tuple(nodes), tensors=tensors,
        inputs=tuple(vi[0] for vi in g["inputs"] if vi[0] not in inits),
        outputs=tuple(o[0] for o in g["outputs"]),
        weights=inits, constants=tuple(constants),
        folded_nodes=tuple(sorted(folded)), opset=opset, model_path=model_path,
        node_count=len(nodes_in), bindings=dict(bindings), scopes=scopes or {})


def _infer_with_constant_values(model, order, tensors, folded, constants, base_dir):
    from graphmem.frontend.folding import evaluate_constants
    values = evaluate_constants(model, [model.graph.node[i] for i in order if i in folded],
                                tensors, max_bytes=SMALL_CONSTANT_BYTES, base_dir=base_dir,
                                prefer="reference")
    if not values:
        return model
    work = onnx.ModelProto()
    work.CopyFrom(model)
    del work.graph.node[:]
    from onnx import numpy_helper
    known = {t.name for t in model.graph.initializer}
    for name, value in values.items():
        if name not in known:
            work.graph.initializer.append(numpy_helper.from_array(value, name))
    # an entry inferred before the value was known ([?, 1] for a ConstantOfShape of a
    # computed size) would stand for the initializer in inference
    typed = [vi for vi in work.graph.value_info if vi.name not in values]
    del work.graph.value_info[:]
    work.graph.value_info.extend(typed)
    for idx in order:
        n = model.graph.node[idx]
        if idx in folded and all(o in values for o in n.output if o):
            continue
        work.graph.node.append(n)
    inferred = _infer_proto(work)
    # Carry the new knowledge back onto the original graph (nodes untouched).
    # A computed constant's type is its value's: an entry inferred before it was known
    # (a ConstantOfShape of computed dims, [?, ?]) is replaced, not kept.
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    valued = {name for name in constants if name in values}
    out.graph.value_info.extend(vi for vi in inferred.graph.value_info if vi.name not in valued)
    for name in constants:
        if name in valued:
            v = values[name]
            out.graph.value_info.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    return out


def _fill_known_gaps(data: bytes, opset: int, tensors, missing) -> bytes:
    """Types onnx's inference leaves out for a few ops whose outputs follow their input,
    added to the (inferred) model's bytes as value infos.

    Dropout's mask (opsets 7 to 9 infer nothing for it) has the data's shape; its
    element type is bool from opset 10 on, the data's type before.
    """
    from graphmem.core.dtypes import ENUM_BY_NAME
    added = []
    for name, node in missing:
        if node.op_type != "Dropout" or not standard_domain(node.domain):
            continue
        if len(node.outputs) < 2 or name != node.outputs[1]:
            continue
        data_in = tensors.get(node.inputs[0])
        if data_in is None:
            continue
        elem = _BOOL if opset >= 10 else ENUM_BY_NAME[data_in.dtype]
        added.append((13, -1, _entry(13, _tensor_value_info(name, elem, data_in.shape))))
    return _splice(data, wire.parse_model(data), added) if added else data


_BOOL = 9  # TensorProto.BOOL


def _tensor_value_info(name: str, elem_type: int, shape) -> bytes:
    """A serialized ValueInfoProto of a tensor (the bytes onnx.helper's
    make_tensor_value_info gives)."""
    def msg(field: int, body: bytes) -> bytes:
        return _varint(field << 3 | 2) + _varint(len(body)) + body
    dims = b"".join(msg(1, b"\x08" + _varint(d & (1 << 64) - 1)) for d in shape)
    tensor = b"\x08" + _varint(elem_type) + msg(2, dims)
    return msg(1, name.encode()) + msg(2, msg(1, tensor))
