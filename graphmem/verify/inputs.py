"""The verifier's inputs: seeded random values the model accepts, or real ones from a file.

Random floats are uniform in [-1, 1). An integer input is an index wherever it is read
as one, so it is drawn below the size of every table it indexes: followed through the
ops that keep its values (Cast, Unsqueeze, Squeeze, Reshape, Expand, Slice, Flatten,
Transpose, Identity, ...) to Gather, GatherElements, GatherND, OneHot, the Scatter ops
and the com.microsoft ops that index tables (EmbedLayerNormalization's input ids,
segment ids and position ids; GatherBlockQuantized). An attention mask (an input named
like ``*mask*``, or one a com.microsoft attention op reads as its mask) holds 0 and 1,
every row starting with ones; a 1-D ``mask_index`` of Attention holds sequence lengths.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np

from graphmem.core.ir import Graph, Node
from graphmem.errors import GraphmemError
from graphmem.verify.node_sessions import numpy_dtype

# ops whose output holds (some of) the values of input 0, unchanged
_VALUE_KEEPING = frozenset(("Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Slice",
                            "Flatten", "Transpose", "Identity", "Tile", "Concat", "Gather",
                            "GatherElements", "Split", "CastLike", "ReduceMax", "ReduceMin"))
_MS = "com.microsoft"
# com.microsoft ops: input position -> (position of the table it indexes, axis), or
# "mask" for a 0/1 mask
_CONTRIB_INDEX = {
    "EmbedLayerNormalization": {0: (2, 0), 1: (4, 0), 8: (3, 0), 7: "mask"},
    "Attention": {3: "mask"},
    "MultiHeadAttention": {4: "mask"},
    "DecoderMaskedMultiHeadAttention": {4: "mask"},
    "QAttention": {5: "mask"},
    "PackedAttention": {},
}


def random_inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs the model accepts (see the module's docstring)."""
    rng = np.random.default_rng(seed)
    consumers = graph.consumers()
    feeds = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        dtype = numpy_dtype(t)
        use = _use(graph, name, consumers)
        if use == "mask" or (use is None and "mask" in name.lower()):
            feeds[name] = _mask(rng, t.shape).astype(dtype)
        elif isinstance(use, tuple):  # ("lengths", n)
            feeds[name] = rng.integers(1, use[1] + 1, t.shape).astype(dtype)
        elif dtype.kind == "f" or dtype.name == "bfloat16" or dtype.name.startswith("float8"):
            feeds[name] = rng.uniform(-1.0, 1.0, t.shape).astype(dtype)
        elif dtype.kind == "c":
            feeds[name] = (rng.uniform(-1, 1, t.shape) + 1j * rng.uniform(-1, 1, t.shape)
                           ).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = np.asarray(rng.random(t.shape) < 0.5)  # a 0-d array, not np.bool
        else:
            high = index_bound(graph, name, consumers)
            feeds[name] = rng.integers(0, high, t.shape).astype(dtype)
    return feeds


def _mask(rng, shape) -> np.ndarray:
    """0/1 with every row (last axis) a run of ones then zeros, at least one one."""
    if not shape:
        return np.ones((), np.int64)
    n = shape[-1]
    lengths = rng.integers(1, n + 1, shape[:-1]) if n else np.zeros(shape[:-1], np.int64)
    return (np.arange(n) < np.asarray(lengths)[..., None]).astype(np.int64)


def _use(graph: Graph, name: str, consumers) -> str | tuple | None:
    """"mask" when a com.microsoft attention op reads ``name`` as a 2-D or larger 0/1
    mask, ("lengths", n) for Attention's 1-D mask_index, else None."""
    for n in consumers.get(name, []):
        if n.domain != _MS or n.op_type not in _CONTRIB_INDEX:
            continue
        for pos, role in _CONTRIB_INDEX[n.op_type].items():
            if role == "mask" and n.inputs[pos:pos + 1] == (name,):
                if len(graph.tensors[name].shape) == 1 and n.op_type == "Attention":
                    seq = graph.tensors[n.inputs[0]].shape
                    return ("lengths", seq[1] if len(seq) > 1 else 1)
                return "mask"
    return None


def index_bound(graph: Graph, name: str, consumers=None) -> int:
    """An exclusive upper bound for an integer input: below every table it indexes,
    followed through the ops that keep its values (4 where it indexes none)."""
    if consumers is None:
        consumers = graph.consumers()
    high, seen, todo = 4, {name}, [name]
    while todo:
        x = todo.pop()
        for n in consumers.get(x, []):
            bound = _indexes(graph, n, x)
            if bound is not None:
                high = min(high, bound)
            if n.op_type in _VALUE_KEEPING and n.inputs[:1] == (x,) and n.domain in ("", "ai.onnx"):
                for o in n.outputs:
                    if o and o not in seen and graph.tensors.get(o) is not None \
                            and graph.tensors[o].dtype not in ("float16", "bfloat16"):
                        seen.add(o)
                        todo.append(o)
    return max(high, 1)


def _dim(graph: Graph, tensor: str, axis: int) -> int | None:
    shape = graph.tensors[tensor].shape if tensor in graph.tensors else None
    if not shape:
        return None
    axis = axis + len(shape) if axis < 0 else axis
    return shape[axis] if 0 <= axis < len(shape) else None


def _indexes(graph: Graph, n: Node, x: str) -> int | None:
    """The size of the table ``n`` indexes with ``x``, None where it indexes none."""
    ins = n.inputs
    if n.domain in ("", "ai.onnx"):
        if n.op_type in ("Gather", "GatherElements") and ins[1:2] == (x,):
            return _dim(graph, ins[0], n.attrs.get("axis", 0))
        if n.op_type in ("ScatterElements",) and ins[1:2] == (x,):
            return _dim(graph, ins[0], n.attrs.get("axis", 0))
        if n.op_type in ("GatherND", "ScatterND") and ins[1:2] == (x,):
            data = graph.tensors[ins[0]].shape
            b = n.attrs.get("batch_dims", 0)
            last = graph.tensors[x].shape[-1] if graph.tensors[x].shape else 1
            dims = data[b:b + last]
            return min(dims) if dims else None
        if n.op_type == "OneHot" and ins[:1] == (x,):
            return 2
        return None
    if n.domain == _MS:
        if n.op_type == "GatherBlockQuantized" and ins[1:2] == (x,):
            return _dim(graph, ins[0], n.attrs.get("gather_axis", 0))
        for pos, role in _CONTRIB_INDEX.get(n.op_type, {}).items():
            if role != "mask" and ins[pos:pos + 1] == (x,) and len(ins) > role[0] \
                    and ins[role[0]]:
                return _dim(graph, ins[role[0]], role[1])
    return None


def read_inputs(source: str | os.PathLike, graph: Graph) -> dict[str, np.ndarray]:
    """Inputs from an ONNX test-data folder (``input_0.pb``, ``input_1.pb``, ...) or one
    ``.npz`` file. A TensorProto's name, or an array's key, picks the graph input; an
    unnamed TensorProto or an ``arr_N`` key, its position among the graph's inputs."""
    path = Path(source)
    if path.suffix == ".npz" or path.is_file():
        return _read_npz(path, graph)
    from onnx import TensorProto, numpy_helper
    # input_2.pb before input_10.pb
    files = sorted(path.glob("input_*.pb"), key=lambda p: (len(p.name), p.name))
    if not files:
        raise GraphmemError(f"{source}: no input_*.pb files (an ONNX test-data folder) "
                            "and not an .npz file")
    feeds = {}
    for i, p in enumerate(files):
        t = TensorProto()
        try:
            t.ParseFromString(p.read_bytes())
            value = numpy_helper.to_array(t)
        except Exception as exc:
            raise GraphmemError(f"{p}: not a TensorProto ({exc})") from None
        name = t.name if t.name in graph.inputs else (graph.inputs[i] if i < len(graph.inputs) else None)
        if name is None:
            raise GraphmemError(f"{p}: the model has only {len(graph.inputs)} inputs")
        feeds[name] = value
    return feeds


def _read_npz(path: Path, graph: Graph) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise GraphmemError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:
        raise GraphmemError(f"{path}: not an .npz file ({' '.join(str(exc).split())[:200]})"
                            ) from None
    feeds = {}
    for key, value in arrays.items():
        name = key
        if key not in graph.inputs and key.startswith("arr_") and key[4:].isdigit() \
                and int(key[4:]) < len(graph.inputs):
            name = graph.inputs[int(key[4:])]
        if name not in graph.inputs:
            raise GraphmemError(f"{path}: array {key!r} names no graph input (the inputs: "
                                + ", ".join(repr(i) for i in graph.inputs[:8]) + ")")
        feeds[name] = value
    return feeds


def checked_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``inputs`` for every graph input, at its declared shape and type."""
    feeds = {}
    for name in graph.inputs:
        if name not in inputs:
            raise GraphmemError(f"no value given for graph input {name!r}")
        value = np.asarray(inputs[name])
        want = graph.tensors[name]
        if tuple(value.shape) != tuple(want.shape):
            raise GraphmemError(f"input {name!r} has shape {list(value.shape)}, the plan "
                                f"was made for {list(want.shape)}")
        dtype = numpy_dtype(want)
        if value.dtype != dtype:
            if not np.can_cast(value.dtype, dtype, casting="same_kind"):
                raise GraphmemError(f"input {name!r} is {value.dtype}, the model declares "
                                    f"{want.dtype}")
            value = value.astype(dtype)
        feeds[name] = value
    return feeds


def feeding(graph: Graph, node: Node) -> list[str]:
    """The graph inputs whose values reach ``node`` (for a message on a refused input)."""
    producers = graph.producers()
    inputs = set(graph.inputs)
    found, seen, todo = [], set(), list(node.reads)
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in inputs:
            found.append(t)
        elif t in producers:
            todo.extend(producers[t].reads)
    return [i for i in graph.inputs if i in found]
