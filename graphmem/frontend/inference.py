"""onnx's shape inference on the model's bytes, and the :class:`Tensor` of every value
whose type its answer fixes (read back with :func:`graphmem.wire.parse_values`)."""
from __future__ import annotations

from math import prod

from graphmem import wire
from graphmem.core.dtypes import dtype_of
from graphmem.core.ir import Tensor, from_columns
from graphmem.core.memory import release_freed
from graphmem.errors import GraphmemError
from graphmem.frontend import onnx_c
from graphmem.frontend.lazy import onnx
from graphmem.frontend.protos import one_line

# Ops whose data propagation in onnx's shape inference materializes their whole output
# (a Range of constant inputs to 3e9 took 12 GB; a ConstantOfShape of [1e9] read by a
# Mul, std::bad_alloc under 4 GB, and 21 GB from a 139 KB file with a Reshape target of
# 2.3e18 under it): with one in the graph, inference runs without data propagation, and
# the shape arithmetic it would have followed is left to the evaluation of small
# constants (at most SMALL_CONSTANT_BYTES each), which is bounded. (On the corpus
# exports, which all have ConstantOfShape, the plans and what each strategy sizes are
# the same without it.)
UNBOUNDED_DATA_PROP = frozenset({"Range", "ConstantOfShape"})


def infer(work: bytes, data_prop: bool = True) -> bytes:
    """onnx's shape inference (with data propagation unless told) on the model's bytes."""
    try:
        inferred = onnx_c.infer_shapes(work, data_prop)
        release_freed()  # inference's two copies of the model
        return inferred
    except Exception as exc:  # onnx's InferenceError, ValidationError, ...: the message
        raise GraphmemError(f"ONNX shape inference failed: {one_line(exc)}") from None


def infer_proto(model: onnx.ModelProto) -> onnx.ModelProto:
    data_prop = not any(n.op_type in UNBOUNDED_DATA_PROP for n in model.graph.node)
    return onnx.ModelProto.FromString(infer(model.SerializeToString(), data_prop))


def types(data: bytes) -> dict[str, tuple]:
    """Every value's type in a (shape-inferred) model's bytes: :func:`types_of` its
    wire graph (read without its nodes)."""
    return types_of(wire.parse_values(data).graph)


def types_of(g: wire.Graph) -> dict[str, tuple]:
    """Every value's type in a wire graph: a ``wire.ValueType`` (kind, elem_type,
    shape) from the value infos and inputs and outputs, ``("init", data_type, dims)``
    for initializers."""
    found: dict[str, tuple] = {}
    for kind in ("value_info", "inputs", "outputs"):
        # a comprehension: dict.update copies each record that is not an exact tuple
        found.update({vi.name: vi.type for vi in getattr(g, kind) if vi.type is not None})
    for init in g.initializers:
        found[init.name] = ("init", init.data_type, init.dims)
    return found


_KINDS = {"sequence": "a sequence", "map": "a map", "optional": "an optional",
          "sparse_tensor": "a sparse tensor", "opaque": "an opaque value"}
_DTYPES: dict[int, tuple[str, int]] = {}  # elem_type -> dtype_of(elem_type)


def tensors_of(types: dict[str, tuple]) -> dict[str, Tensor]:
    """A Tensor for each of ``types`` that is a tensor type with every dim known (or an
    initializer); a value that is not a dense tensor is refused."""
    names, dtypes, shapes, bits = [], [], [], []
    for name, (kind, elem, shape) in types.items():
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


def tensors(data: bytes) -> dict[str, Tensor]:
    """:func:`tensors_of` the :func:`types` of a model's bytes."""
    return tensors_of(types(data))
