"""Symbolic dims bound to values: ``--dim NAME=VALUE`` and ``--dim-default``, on the
graph inputs (every one must end up static), and on the outputs and value infos that
name dims (bound where they can be, else their shapes dropped, so that stale annotations
do not fight shape inference).

The rules (:func:`bind_shapes`) read and give plain shapes, tuples of dims (an int, a
str: a dim_param, or None: unknown); :func:`bind_dims` applies them to a ModelProto,
:func:`bind` to the wire records of the model's bytes (the entries that change written
again: onnx's Python package, 55-65 ms to import, is not imported for it)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from graphmem import wire
from graphmem.errors import GraphmemError
from graphmem.frontend.dim_expressions import (expression_names, is_expression, resolve,
                                               unbound_hint)
from graphmem.frontend.splice import INPUT, OUTPUT, VALUE_INFO, entry, tensor_value_info

if TYPE_CHECKING:
    import onnx

# A tensor's dims: an int (dim_value), a str (dim_param) or None (neither); None: no shape
Shape = Optional[tuple]


def bind_shapes(inputs: Sequence[tuple[str, Shape]], others: Sequence[Shape],
                params: Sequence[str], dims: Mapping[str, int], default: int | None,
                notes: list[str] | None = None
                ) -> tuple[dict[str, int], list[tuple], list[Shape]]:
    """The binding rules: ``inputs`` are (name, shape) of the graph inputs that are
    tensors and not initializers, ``others`` the shapes of the outputs and value infos
    that are tensors, ``params`` every dim_param the graph names (:func:`dim_params`).
    Return every binding made (``default`` and the values of dims written as
    expressions of others, ``past_seq + 1``, included), the inputs' shapes bound (every
    dim a number), and the others' shapes bound, or None where a dim stays unbound (the
    shape dropped). An input with no shape, an unnamed unknown input dim or an unbound
    name is refused (one line). A ``--dim`` the model does not have is a line in
    ``notes`` (printed at once without them): one command line may serve a family of
    models."""
    dims = dict(dims)
    explicit = set(dims)
    if default is not None:  # the names first: an expression of them follows from them
        for _, shape in inputs:
            for d in shape or ():
                if d.__class__ is str and d and not is_expression(d):
                    dims.setdefault(d, int(default))
    dims = resolve(list(params), dims)
    used: set[str] = set()
    unbound: dict[str, str] = {}  # name -> where it was first seen
    bound_inputs = []
    for name, shape in inputs:
        if shape is None:
            raise GraphmemError(f"graph input {name!r} has no shape; "
                                "graphmem needs its rank and dims")
        new = list(shape)
        for axis, d in enumerate(shape):
            if d.__class__ is int and d >= 0:
                continue
            if d.__class__ is str and d:
                if d not in dims and default is not None:
                    dims[d] = int(default)
                if d not in dims:
                    unbound.setdefault(d, f"axis {axis} of input {name!r}")
                    continue
                used.add(d)
                new[axis] = int(dims[d])
            else:
                raise GraphmemError(
                    f"axis {axis} of input {name!r} has an unknown size with no name; "
                    "graphmem needs a static shape for every graph input")
        bound_inputs.append(tuple(new))
    if unbound:
        raise GraphmemError(unbound_message(unbound))
    bound_others: list[Shape] = []
    for shape in others:
        if shape is not None and any(d.__class__ is str and d not in dims for d in shape):
            shape = None
        elif shape is not None:
            shape = tuple(int(dims[d]) if d.__class__ is str else d for d in shape)
        bound_others.append(shape)
    for name in sorted(explicit - used - set(params) - expression_names(params)):
        line = f"--dim {name}: the model has no symbolic dimension of that name; ignored"
        if notes is None:
            from graphmem.notes import note
            note(line)
        else:
            notes.append(line)
        dims.pop(name)
    return dims, bound_inputs, bound_others


def dim_params(shapes: Iterable[Shape]) -> list[str]:
    """Every dim_param of ``shapes``, once each, in the order first seen (a set's order
    follows the hash seed: the bindings the plan file lists, expressions' values among
    them, would differ from run to run)."""
    names: dict[str, None] = {}
    for shape in shapes:
        for d in shape or ():
            if d.__class__ is str and d:
                names[d] = None
    return list(names)


# --------------------------------------------------------------------------- the wire

def bind(data: bytes, g: wire.Graph, dims: dict[str, int], default: int | None,
         notes: list[str] | None = None
         ) -> tuple[dict[str, int], list[tuple[int, int, bytes | None]]]:
    """:func:`bind_shapes` on the wire graph ``g`` (its spans index ``data``): return
    the bindings and the inputs, outputs and value infos that change, written again
    (splice changes: name, element type and dims; a doc string or denotation dropped);
    ``notes`` gains a line for a ``--dim`` the model does not have."""
    inits = {t.name for t in g.initializers}
    inputs = [(i, vi) for i, vi in enumerate(g.inputs) if vi.name not in inits
              and vi.type is not None and vi.type.kind == "tensor"]
    others = [(field, i, vi) for field, kind in ((OUTPUT, "outputs"), (VALUE_INFO, "value_info"))
              for i, vi in enumerate(getattr(g, kind)) if _names_dims(vi.type)]
    if not dims and default is None and not others and all(
            vi.type is not None and vi.type.kind == "tensor" and vi.type.shape is not None
            and all(d.__class__ is int and d >= 0 for d in vi.type.shape)
            for vi in g.inputs):
        return {}, []  # every input static, nothing to bind: nothing would change
    bindings, bound_inputs, bound_others = bind_shapes(
        [(vi.name, vi.type.shape) for _, vi in inputs], [vi.type.shape for *_, vi in others],
        wire_dim_params(g), dims, default, notes)
    changes = []
    for field, i, vi, shape in ([(INPUT, i, vi, s) for (i, vi), s in zip(inputs, bound_inputs)]
                                + [(*o, s) for o, s in zip(others, bound_others)]):
        if shape != vi.type.shape:
            changes.append((field, i, entry(field, tensor_value_info(
                vi.name, vi.type.elem_type, shape))))
    return bindings, changes


def _names_dims(t) -> bool:
    """A tensor's type with a dim_param (the outputs and value infos binding may change)."""
    return (t is not None and t.kind == "tensor" and t.shape is not None
            and any(d.__class__ is str for d in t.shape))


def wire_dim_params(g: wire.Graph) -> list[str]:
    """:func:`all_dim_params` of a wire graph."""
    return dim_params(vi.type.shape for kind in ("inputs", "outputs", "value_info")
                      for vi in getattr(g, kind)
                      if vi.type is not None and vi.type.kind == "tensor")


# --------------------------------------------------------------------------- the proto

def bind_dims(model: onnx.ModelProto, dims: Mapping[str, int],
              default: int | None = None, *, initializers=None,
              notes: list[str] | None = None) -> dict[str, int]:
    """Bind symbolic dims in place (:func:`bind_shapes`); return every binding made.

    ``initializers``: the names of the graph's initializers, when ``model`` holds only
    its value infos. A ``--dim`` the model does not have is a line in ``notes`` (printed
    at once without them)."""
    g = model.graph
    inits = set(initializers) if initializers is not None else {t.name for t in g.initializer}
    inputs = [vi for vi in g.input if vi.name not in inits and vi.type.HasField("tensor_type")]
    others = [vi for vi in list(g.output) + list(g.value_info)
              if vi.type.HasField("tensor_type")]
    bindings, bound_inputs, bound_others = bind_shapes(
        [(vi.name, _shape(vi)) for vi in inputs], [_shape(vi) for vi in others],
        all_dim_params(model), dims, default, notes)
    for vi, shape in zip(inputs + others, bound_inputs + bound_others):
        tt = vi.type.tensor_type
        if shape is None:
            if tt.HasField("shape"):
                tt.ClearField("shape")
            continue
        for d, new in zip(tt.shape.dim, shape):
            if d.HasField("dim_param") and new.__class__ is int:
                d.dim_value = new
    return bindings


def _shape(vi) -> Shape:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else
                 d.dim_param if d.HasField("dim_param") else None for d in tt.shape.dim)


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
    order first seen (:func:`dim_params`)."""
    g = model.graph
    return dim_params(_shape(vi) for vi in list(g.input) + list(g.output) + list(g.value_info)
                      if vi.type.HasField("tensor_type"))
