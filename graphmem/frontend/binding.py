"""Symbolic dims bound to values: ``--dim NAME=VALUE`` and ``--dim-default``, on the
graph inputs (every one must end up static), and on the outputs and value infos that
name dims (bound where they can be, else their shapes dropped, so that stale annotations
do not fight shape inference). On the wire, only the entries that name dims are parsed
as protos and written again (:func:`bind`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from graphmem.errors import GraphmemError
from graphmem.frontend.dim_expressions import (expression_names, is_expression, resolve,
                                               unbound_hint)
from graphmem.frontend.lazy import onnx as _onnx
from graphmem.frontend.splice import INPUT, OUTPUT, VALUE_INFO, entry

if TYPE_CHECKING:
    import onnx
else:
    onnx = _onnx


def bind(data: bytes, g: dict, dims: dict[str, int], default: int | None,
         notes: list[str] | None = None
         ) -> tuple[dict[str, int], list[tuple[int, int, bytes | None]]]:
    """:func:`bind_dims` on the value infos that name dims (all inputs, the outputs and
    value infos with a symbolic dim), and those entries written again (splice changes);
    ``notes`` gains a line for a ``--dim`` the model does not have."""
    spans = g["spans"]
    picked = [(INPUT, i) for i in range(len(g["inputs"]))]
    for field, kind in ((OUTPUT, "outputs"), (VALUE_INFO, "value_info")):
        for i, vi in enumerate(g[kind]):
            t = vi.type
            if t is not None and t.kind == "tensor" and t.shape is not None and any(
                    d.__class__ is str for d in t.shape):
                picked.append((field, i))
    if not dims and default is None and len(picked) == len(g["inputs"]) and all(
            vi.type is not None and vi.type.kind == "tensor" and vi.type.shape is not None
            and all(d.__class__ is int and d >= 0 for d in vi.type.shape)
            for vi in g["inputs"]):
        return {}, []  # every input static, nothing to bind: bind_dims would change nothing
    if not picked:
        return bind_dims(onnx.ModelProto(), dims, default, initializers=(), notes=notes), []
    mini = onnx.ModelProto()
    mini.graph.ParseFromString(b"".join(
        data[off:off + size] for off, size in (spans[f][i] for f, i in picked)))
    bindings = bind_dims(mini, dims, default, initializers=(t.name for t in g["initializers"]),
                         notes=notes)
    entries = ([(INPUT, vi) for vi in mini.graph.input]
               + [(OUTPUT, vi) for vi in mini.graph.output]
               + [(VALUE_INFO, vi) for vi in mini.graph.value_info])
    changes = []
    for (field, index), (_, vi) in zip(picked, entries):
        new = entry(field, vi.SerializeToString())
        off, size = spans[field][index]
        if new != data[off:off + size]:
            changes.append((field, index, new))
    return bindings, changes


def bind_dims(model: onnx.ModelProto, dims: Mapping[str, int],
              default: int | None = None, *, initializers=None,
              notes: list[str] | None = None) -> dict[str, int]:
    """Bind symbolic dims in place; return every binding made (``default`` and the
    values of dims written as expressions of others, ``past_seq + 1``, included).

    ``initializers``: the names of the graph's initializers, when ``model`` holds only
    its value infos (the loader binds a model of the entries that name dims). A ``--dim``
    the model does not have is a line in ``notes`` (printed at once without them): one
    command line may serve a family of models."""
    g = model.graph
    inits = set(initializers) if initializers is not None else {t.name for t in g.initializer}
    params = all_dim_params(model)
    dims = dict(dims)
    explicit = set(dims)
    if default is not None:  # the names first: an expression of them follows from them
        for vi in g.input:
            if vi.name not in inits and vi.type.HasField("tensor_type"):
                for d in vi.type.tensor_type.shape.dim:
                    if d.dim_param and not is_expression(d.dim_param):
                        dims.setdefault(d.dim_param, int(default))
    dims = resolve(params, dims)
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
        raise GraphmemError(unbound_message(unbound))
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
    for name in sorted(explicit - used - set(params) - expression_names(params)):
        line = f"--dim {name}: the model has no symbolic dimension of that name; ignored"
        if notes is None:
            from graphmem.notes import note
            note(line)
        else:
            notes.append(line)
        dims.pop(name)
    return dims


def unbound_message(unbound: Mapping[str, str]) -> str:
    """One line naming every unbound symbolic dim of the inputs, with the options to copy."""
    names = list(unbound)
    where = "; ".join(f"{n!r} ({unbound[n]}{unbound_hint(n, {}, brief=True)})"
                      for n in names[:8])
    if len(names) > 8:
        where += f"; and {len(names) - 8} more"
    noun = "dimension" if len(names) == 1 else "dimensions"
    # an expression is bound through the names it reads
    to_bind = dict.fromkeys(m for n in names for m in (expression_names([n]) or [n]))
    options = " ".join(f"--dim {n}=VALUE" for n in to_bind)
    return (f"symbolic {noun} not bound: {where}; pass {options} "
            f"(or --dim-default VALUE for all)")


def all_dim_params(model: onnx.ModelProto) -> list[str]:
    """Every dim_param of the graph's inputs, outputs and value infos, once each, in the
    order first seen (a set's order follows the hash seed: the bindings the plan file
    lists, expressions' values among them, would differ from run to run)."""
    names: dict[str, None] = {}
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            names.update(dict.fromkeys(d.dim_param for d in vi.type.tensor_type.shape.dim
                                       if d.dim_param))
    return list(names)
