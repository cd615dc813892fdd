"""ONNX model -> graphmem IR: read, bind symbolic dims, infer shapes, fold constants.

The only module (with ``constants.py``) that looks inside onnx protos; everything
after it works on :class:`graphmem.ir.Graph`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import onnx
from onnx import helper, shape_inference

from graphmem.frontend.folding import evaluate_constants, is_foldable
from graphmem.core.dtypes import dtype_of
from graphmem.errors import GraphmemError
from graphmem.core.nogc import gc_paused
from graphmem.core.ir import Graph, Node, Tensor, standard_domain

# Constants up to this size are evaluated when shape inference needs their values.
SMALL_CONSTANT_BYTES = 1 << 20


def read_model(path: str | os.PathLike, *, load_weights: bool = False) -> onnx.ModelProto:
    """Read an ONNX file, turning every failure into a one-line GraphmemError."""
    p = Path(path)
    if not p.exists():
        raise GraphmemError(f"{p}: no such file")
    if p.is_dir():
        raise GraphmemError(f"{p}: is a directory, not an ONNX file")
    if p.stat().st_size == 0:
        raise GraphmemError(f"{p}: empty file, not an ONNX model")
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


def check_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Refuse, without opening it, external data that is not a file inside the model's
    folder (an absolute path, or one that climbs out with ``..``): a model must not make
    graphmem read elsewhere on the machine."""
    for t in _all_initializers(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        norm = os.path.normpath(location)
        if (not location or os.path.isabs(location) or norm == ".."
                or norm.startswith(".." + os.sep) or "\0" in location):
            raise GraphmemError(f"{path}: tensor {t.name!r} keeps its data at {location!r}, "
                                f"outside the model's folder; refused")


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
    model = read_model(path)
    return from_model(model, dims, check=check, base_dir=str(Path(path).parent),
                      model_path=str(path), dim_default=dim_default)


def onnx_opset(model: onnx.ModelProto) -> int:
    """The model's standard-domain opset version (0 when it imports none)."""
    return max((o.version for o in model.opset_import if standard_domain(o.domain)), default=0)


def from_model(model: onnx.ModelProto, dims: Mapping[str, int] | None = None, *,
               check: bool = True, base_dir: str = ".", model_path: str | None = None,
               dim_default: int | None = None) -> Graph:
    """Like :func:`load`, for a ModelProto already in memory."""
    dims = dict(dims or {})
    bad = _invalid_name(model.graph)
    if bad:
        raise GraphmemError(f"the model is corrupt: {bad} is not valid UTF-8 text")
    model = copy_without_weights(model)
    # Our own structural checks first: they name the node and tensor, where the
    # checker only says "not topologically sorted" for a cycle or a missing producer.
    _check_names(model)
    order = _topological_order(model.graph)
    if check:
        _check(model, order)
    bindings = bind_dims(model, dims, dim_default)
    model = _infer(model)
    types = _collect_types(model)
    folded_nodes, constants = _fold(model, order, types, bindings)
    missing = _unknown(model, order, types, folded_nodes)
    if missing:
        # Values of small constants (shape arithmetic) let inference finish the job.
        model = _infer_with_constant_values(model, order, types, folded_nodes, constants,
                                            base_dir)
        types = _collect_types(model)
        folded_nodes, constants = _fold(model, order, types, bindings)
        missing = _unknown(model, order, types, folded_nodes)
    if missing:
        model = _fill_known_gaps(model, order, types, missing)
        types = _collect_types(model)
        missing = _unknown(model, order, types, folded_nodes)
    if missing:
        model = _symbolic_infer(model)
        types = _collect_types(model)
        folded_nodes, constants = _fold(model, order, types, bindings)
        missing = _unknown(model, order, types, folded_nodes)
    if missing:
        name, node = missing[0]
        where = f"output of node {node.index} ({node.op_type}{' ' + repr(node.name) if node.name else ''})"
        more = f"; {len(missing) - 1} more tensors are unknown too" if len(missing) > 1 else ""
        hint = ""
        if not standard_domain(node.domain):
            hint = (f"; {node.op_type!r} is from domain {node.domain!r}, which graphmem runs "
                    "as an opaque op: give the shapes of its outputs in the model's value_info")
        raise GraphmemError(f"cannot infer the shape of tensor {name!r}, {where}{more}{hint}")
    return _build(model, order, types, folded_nodes, constants, model_path, bindings)


# --------------------------------------------------------------------------- checks

def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _invalid_name(g: onnx.GraphProto, where: str = "graph") -> str | None:
    """The first tensor or op name that is not valid UTF-8 (protobuf hands those over
    as bytes), checked on every load: a cheap walk over names only."""
    for kind, vis in (("input", g.input), ("output", g.output), ("value_info", g.value_info),
                      ("initializer", g.initializer)):
        for vi in vis:
            if isinstance(vi.name, bytes):
                return f"the name of {where} {kind} {vi.name!r}"
    for idx, n in enumerate(g.node):
        for text in (n.op_type, n.domain, *n.input, *n.output):
            if isinstance(text, bytes):
                return f"{text!r} in {where} node {idx}"
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                if (found := _invalid_name(sub, f"a subgraph of node {idx}")) is not None:
                    return found
    return None


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


def _check(model: onnx.ModelProto, order: list[int]) -> None:
    """onnx.checker on a copy that needs no weight bytes and lists nodes in ``order``.

    ONNX Runtime runs graphs whose nodes are not sorted, so the checker sees them
    sorted; initializers without data here (external or dropped) become graph inputs
    of the same type, since the checker would otherwise look for their files.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    g = copy.graph
    if order != list(range(len(g.node))):
        nodes = []
        for i in order:
            n = onnx.NodeProto()
            n.CopyFrom(model.graph.node[i])
            nodes.append(n)
        del g.node[:]
        g.node.extend(nodes)
    external = [t for t in g.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        inputs = {i.name for i in g.input}
        keep = [t for t in g.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
        for t in external:
            if t.name not in inputs:
                g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        del g.initializer[:]
        g.initializer.extend(keep)
    try:
        onnx.checker.check_model(copy)
    except onnx.checker.ValidationError as exc:
        raise GraphmemError(f"the model fails onnx.checker: {_one_line(exc)}") from None
    except UnicodeDecodeError as exc:
        # the checker's own message quotes the corrupt text and cannot be decoded
        where = _invalid_text(model) or _one_line(exc)
        raise GraphmemError(f"the model is corrupt: {where} is not valid UTF-8 text") from None


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


def _check_names(model: onnx.ModelProto) -> None:
    g = model.graph
    defined: dict[str, str] = {}
    for init in g.initializer:
        if init.name in defined:
            raise GraphmemError(f"duplicate tensor name {init.name!r}: two initializers")
        defined[init.name] = "an initializer"
    for i in g.input:
        if i.name in defined and defined[i.name] != "an initializer":
            raise GraphmemError(f"duplicate tensor name {i.name!r}: two graph inputs")
        defined.setdefault(i.name, "a graph input")
    for idx, n in enumerate(g.node):
        for out in n.output:
            if not out:
                continue
            if out in defined:
                raise GraphmemError(
                    f"duplicate tensor name {out!r}: node {idx} ({n.op_type}) writes it, "
                    f"but it is already {defined[out]}")
            defined[out] = f"the output of node {idx} ({n.op_type})"


def _topological_order(g: onnx.GraphProto) -> list[int]:
    """Node indices in file order when that is topological, else a stable sort."""
    available = {i.name for i in g.input} | {t.name for t in g.initializer}
    producer = {out: idx for idx, n in enumerate(g.node) for out in n.output if out}
    reads = [_reads(n) for n in g.node]
    for idx, n in enumerate(g.node):
        for t in reads[idx]:
            if t not in available and t not in producer:
                raise GraphmemError(
                    f"node {idx} ({n.op_type}) reads tensor {t!r}, which no node produces "
                    "and which is not a graph input or initializer")
    for o in g.output:
        if o.name not in available and o.name not in producer:
            raise GraphmemError(f"graph output {o.name!r} is produced by no node")
    deps = [{producer[t] for t in reads[i] if t in producer} for i in range(len(g.node))]
    if all(d < i for i in range(len(g.node)) for d in deps[i]):
        return list(range(len(g.node)))
    import heapq
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
    if len(order) < len(g.node):
        raise GraphmemError(f"the graph has a cycle: {_find_cycle(g, set(order), deps, reads)}")
    return order


def _find_cycle(g: onnx.GraphProto, done: set[int], deps: list[set[int]],
                reads: list[list[str]]) -> str:
    """A cycle among the nodes a topological sort could not place, as readable text."""
    # Every unplaced node has an unplaced producer, so walking producers from any of
    # them must come back to a node already seen: that loop is a cycle.
    node = min(set(range(len(g.node))) - done)
    path: list[int] = []
    while node not in path:
        path.append(node)
        node = min(d for d in deps[node] if d not in done)
    loop = path[path.index(node):][::-1]  # producer before consumer
    steps = []
    for a, b in zip(loop, loop[1:] + loop[:1]):
        tensor = next(t for t in reads[b] if t in g.node[a].output)
        steps.append(f"node {a} ({g.node[a].op_type}) -> {tensor!r} -> ")
    return "".join(steps) + f"node {loop[0]} ({g.node[loop[0]].op_type})"


def _subgraph_reads(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from enclosing scopes."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    outer: set[str] = set()
    for n in graph.node:
        for t in _reads(n):
            if t not in defined:
                outer.add(t)
        defined.update(o for o in n.output if o)
    for o in graph.output:
        if o.name not in defined:
            outer.add(o.name)
    return outer


def _reads(n: onnx.NodeProto) -> list[str]:
    reads = [t for t in n.input if t]
    for attr in n.attribute:
        subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for sub in subs:
            reads.extend(sorted(t for t in _subgraph_reads(sub) if t not in reads))
    return reads


# --------------------------------------------------------------------------- shapes

def bind_dims(model: onnx.ModelProto, dims: Mapping[str, int],
               default: int | None = None) -> dict[str, int]:
    """Bind symbolic dims in place; return every binding made (``default`` included)."""
    g = model.graph
    inits = {t.name for t in g.initializer}
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


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model, check_type=False, strict_mode=False,
                                            data_prop=True)
    except Exception as exc:
        raise GraphmemError(f"ONNX shape inference failed: {_one_line(exc)}") from None


def _symbolic_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX Runtime's symbolic shape inference: it knows the contrib ops and attention
    blocks that onnx's own inference leaves open."""
    import tempfile
    cwd = os.getcwd()
    # It saves "sym_shape_infer_temp.onnx" into the working folder when it gives up:
    # run it inside a temp folder so that nothing is left behind.
    with tempfile.TemporaryDirectory(prefix="graphmem-") as scratch:
        try:
            os.chdir(scratch)
            from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
            out = SymbolicShapeInference.infer_shapes(model, auto_merge=True,
                                                      guess_output_rank=False)
            return out if out is not None else model
        except Exception:
            return model  # best effort: the caller names the tensor that stays unknown
        finally:
            os.chdir(cwd)


def _collect_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto | onnx.TensorProto]:
    g = model.graph
    types: dict[str, object] = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        if vi.type.WhichOneof("value") is not None:
            types[vi.name] = vi.type
    for init in g.initializer:
        types[init.name] = init
    return types


def _static_tensor(name: str, t) -> Tensor | None:
    """A Tensor when ``t`` gives a tensor type with every dim known, else None."""
    if isinstance(t, onnx.TensorProto):
        dtype, bits = dtype_of(t.data_type, name)
        return Tensor(name, dtype, tuple(int(d) for d in t.dims), bits)
    if t is None:
        return None
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        what = {"sequence_type": "a sequence", "map_type": "a map", "optional_type": "an optional",
                "sparse_tensor_type": "a sparse tensor"}.get(kind, kind)
        raise GraphmemError(f"tensor {name!r} is {what}; graphmem plans only dense tensors")
    tt = t.tensor_type
    if tt.elem_type == 0 or not tt.HasField("shape"):
        return None
    shape = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        shape.append(int(d.dim_value))
    dtype, bits = dtype_of(tt.elem_type, name)
    return Tensor(name, dtype, tuple(shape), bits)


def _fold(model, order, types, bindings=None) -> tuple[set[int], list[str]]:
    """Which nodes compute only constants (initializers, Constant, static Shape), and
    the constants they make; with ``bindings``, less the data computed from bound dims
    (:func:`_dim_data_nodes`), which runs."""
    folded, constants = _constant_nodes(model, order, types)
    if bindings:
        kept = _dim_data_nodes(model, order, folded)
        if kept:
            made = {o for i in kept for o in model.graph.node[i].output}
            return folded - kept, [c for c in constants if c not in made]
    return folded, constants


def _constant_nodes(model, order, types) -> tuple[set[int], list[str]]:
    g = model.graph
    const = {t.name for t in g.initializer}
    folded: set[int] = set()
    constants: list[str] = []
    for idx in order:
        n = g.node[idx]
        if not is_foldable(n):
            continue
        reads = _reads(n)
        if n.op_type in ("Shape", "Size") and standard_domain(n.domain):
            ok = all(_static_tensor(t, types.get(t)) is not None for t in reads)
        else:
            ok = all(t in const for t in reads)
        if ok:
            folded.add(idx)
            outs = [o for o in n.output if o]
            const.update(outs)
            constants.extend(outs)
    return folded, constants


# Inputs that a node reads for their values as shapes, axes or counts (a few numbers),
# not as data: a constant computed from bound dims may stay folded when only these read it.
SHAPE_ARGUMENTS = {
    "Reshape": {1}, "Expand": {1}, "ConstantOfShape": {0}, "Tile": {1},
    "Slice": {1, 2, 3, 4}, "Range": {0, 1, 2}, "Unsqueeze": {1}, "Squeeze": {1},
    "Resize": {1, 2, 3}, "Upsample": {1}, "Pad": {1, 2, 3}, "TopK": {1}, "OneHot": {1},
    "Split": {1}, "CumSum": {1}, "Trilu": {1}, "CenterCropPad": {1}, "Col2Im": {1, 2},
    "NonMaxSuppression": {2, 3, 4}, "Shape": {0}, "Size": {0},
    **{op: {1} for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                          "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                          "ReduceSumSquare")},
}


def _dim_data_nodes(model, order, folded) -> set[int]:
    """Folded nodes that must run instead: those whose outputs are data computed from a
    bound dimension (a Shape or Size of a tensor that is not a constant), read as data
    by a running node or a graph output. The exporters write such subgraphs for
    defaulted token-type ids, position ids and masks: folded, an [batch, seq, hidden]
    lookup would count as a weight that grows with batch and sequence (issue 21).
    Shape arithmetic (read only as shapes, axes or counts) stays folded."""
    g = model.graph
    const = {t.name for t in g.initializer}
    tainted: set[str] = set()
    for idx in order:
        if idx not in folded:
            continue
        n = g.node[idx]
        ins = [t for t in n.input if t]
        if (n.op_type in ("Shape", "Size") and any(t not in const for t in ins)) or \
                any(t in tainted for t in ins):
            tainted.update(o for o in n.output if o)
        const.update(o for o in n.output if o)
    if not tainted:
        return set()

    def data_reads(n) -> list[str]:
        shape_args = SHAPE_ARGUMENTS.get(n.op_type, ()) if standard_domain(n.domain) else ()
        reads = [t for i, t in enumerate(n.input) if t and i not in shape_args]
        reads.extend(t for t in _reads(n) if t not in n.input)  # subgraphs' outer reads
        return [t for t in reads if t in tainted]

    data = {o.name for o in g.output if o.name in tainted}
    for idx in order:
        if idx not in folded:
            data.update(data_reads(g.node[idx]))
    kept: set[int] = set()
    for idx in reversed(order):
        if idx in folded and any(o in data for o in g.node[idx].output if o):
            kept.add(idx)
            data.update(data_reads(g.node[idx]))
    return kept


def _unknown(model, order, types, folded) -> list[tuple[str, Node]]:
    g = model.graph
    missing = []
    for vi in g.input:
        if _static_tensor(vi.name, types.get(vi.name)) is None:
            raise GraphmemError(f"graph input {vi.name!r} has no static shape")
    for idx in order:
        if idx in folded:
            continue
        n = g.node[idx]
        for out in n.output:
            if out and _static_tensor(out, types.get(out)) is None:
                missing.append((out, _node(idx, n)))
    return missing


def _infer_with_constant_values(model, order, types, folded, constants, base_dir):
    tensors = {name: t for name in types if (t := _static_tensor(name, types[name])) is not None}
    values = evaluate_constants(model, [model.graph.node[i] for i in order if i in folded],
                                tensors, max_bytes=SMALL_CONSTANT_BYTES, base_dir=base_dir)
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
    for idx in order:
        n = model.graph.node[idx]
        if idx in folded and all(o in values for o in n.output if o):
            continue
        work.graph.node.append(n)
    inferred = _infer(work)
    # Carry the new knowledge back onto the original graph (nodes untouched).
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(inferred.graph.value_info)
    for name in constants:
        if name in values and name not in {vi.name for vi in out.graph.value_info}:
            v = values[name]
            out.graph.value_info.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    return out


def _fill_known_gaps(model, order, types, missing):
    """Types onnx's inference leaves out for a few ops whose outputs follow their input.

    Dropout's mask (opsets 7 to 9 infer nothing for it) has the data's shape; its
    element type is bool from opset 10 on, the data's type before.
    """
    opset = onnx_opset(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for name, node in missing:
        if node.op_type != "Dropout" or not standard_domain(node.domain):
            continue
        if len(node.outputs) < 2 or name != node.outputs[1]:
            continue
        data = _static_tensor(node.inputs[0], types.get(node.inputs[0]))
        if data is None:
            continue
        from graphmem.core.dtypes import ENUM_BY_NAME
        elem = onnx.TensorProto.BOOL if opset >= 10 else ENUM_BY_NAME[data.dtype]
        out.graph.value_info.append(helper.make_tensor_value_info(name, elem, list(data.shape)))
    return out


def _node(idx: int, n: onnx.NodeProto, outer_reads: tuple[str, ...] = ()) -> Node:
    attrs = {}
    for a in n.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            attrs[a.name] = "<subgraph>"
        else:
            try:
                value = helper.get_attribute_value(a)
            except Exception:
                value = None
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if isinstance(value, onnx.TensorProto):
                value = f"<tensor {list(value.dims)}>"
            attrs[a.name] = value
    return Node(index=idx, name=n.name, op_type=n.op_type, domain=n.domain,
                inputs=tuple(n.input), outputs=tuple(n.output), attrs=attrs,
                implicit_inputs=outer_reads)


def _build(model, order, types, folded, constants, model_path, bindings) -> Graph:
    g = model.graph
    inits = {t.name for t in g.initializer}
    tensors: dict[str, Tensor] = {}
    for name, t in types.items():
        st = _static_tensor(name, t)
        if st is not None:
            tensors[name] = st
    nodes = []
    for idx in order:
        if idx in folded:
            continue
        n = g.node[idx]
        explicit = [t for t in n.input if t]
        implicit = tuple(t for t in _reads(n) if t not in explicit)
        nodes.append(_node(idx, n, implicit))
    opset = onnx_opset(model)
    return Graph(
        name=g.name or (Path(model_path).stem if model_path else "model"),
        nodes=tuple(nodes), tensors=tensors,
        inputs=tuple(i.name for i in g.input if i.name not in inits),
        outputs=tuple(o.name for o in g.output),
        weights=frozenset(inits), constants=tuple(constants),
        folded_nodes=tuple(sorted(folded)), opset=opset, model_path=model_path,
        node_count=len(g.node), bindings=dict(bindings))
