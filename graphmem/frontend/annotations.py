"""The model's value_info annotations, checked rather than believed.

An fp16 conversion (onnxconverter-common 1.16, keep_io_types) annotates BERT's pooler
Gather as float16 where the tensor is float32; onnx's checker passes the file, and its
shape inference keeps an annotation that disagrees with what it computes. So the loader
infers without the annotations (:func:`without_annotations`; those of the outputs of ops
onnx has no schema for, ONNX Runtime's contrib ops, stay: nothing could check them),
compares what it computed with them, keeps the computed type and says which tensor was
annotated wrong (:func:`check`), and gives inference back only the annotations of
tensors it could not size, for a second round.
"""
from __future__ import annotations

from typing import Container, Mapping

from graphmem import wire
from graphmem.core.dtypes import ENUM_BY_NAME, dtype_of
from graphmem.errors import GraphmemError
from graphmem.core.ir import Tensor
from graphmem.frontend.splice import VALUE_INFO, splice


def without_annotations(work: bytes, opaque: Container[str] = ()
                        ) -> tuple[bytes, dict[str, tuple[int, tuple | None]]]:
    """``work`` (the model's bytes, dims bound) without its value_info entries, and those
    entries' tensor types: name -> (elem_type, shape or None).

    The static annotations of the tensors named in ``opaque`` (outputs of ops onnx's
    inference has no schema for: ONNX Runtime's contrib ops) are kept, and are not among
    those returned: nothing would check them, and given in the first round they size
    what follows them there (a second round of inference for them alone took as long as
    the first on an int4 Whisper encoder)."""
    parsed = wire.parse_model(work)
    g = parsed.graph
    if g is None or not g.value_info:
        return work, {}
    found = {}
    drops = []
    for i, vi in enumerate(g.value_info):
        t = vi.type
        typed = t is not None and t.kind == "tensor" and t.elem_type
        if typed and vi.name in opaque and _static(t.shape):
            continue
        if typed:
            found[vi.name] = (t.elem_type, tuple(t.shape) if t.shape is not None else None)
        drops.append((VALUE_INFO, i, None))
    return splice(work, parsed, drops), found


def _static(shape) -> bool:
    return shape is not None and all(d.__class__ is int and d >= 0 for d in shape)


def check(annotations: Mapping[str, tuple[int, tuple | None]], tensors: Mapping[str, Tensor]
          ) -> tuple[list[str], dict[str, tuple[int, tuple]]]:
    """(notes, types to give back): a note for the tensors whose computed type or static
    shape disagrees with the annotation (the computed one is kept), and the static
    annotations of the tensors inference left unsized."""
    wrong: list[str] = []
    back: dict[str, tuple[int, tuple]] = {}
    for name, (elem, shape) in annotations.items():
        t = tensors.get(name)
        if t is None:
            if _static(shape):
                back[name] = (elem, shape)
            continue
        said_shape = shape if _static(shape) else None
        if ENUM_BY_NAME.get(t.dtype) != elem or (said_shape is not None
                                                   and tuple(said_shape) != t.shape):
            try:
                said = dtype_of(elem, name)[0]
            except GraphmemError:  # a string or unknown element type, said as its number
                said = f"element type {elem}"
            wrong.append(f"{name!r} (value_info says {said}"
                         f"{' ' + str(list(said_shape)) if said_shape is not None else ''}, "
                         f"computed {t.dtype} {list(t.shape)})")
    notes = []
    if wrong:
        more = f"; and {len(wrong) - 1} more" if len(wrong) > 1 else ""
        notes.append(f"value_info disagrees with the computed type of tensor {wrong[0]}"
                     f"{more}: the computed types are used")
    return notes, back
