"""The model's value_info annotations, checked rather than believed.

An fp16 conversion (onnxconverter-common 1.16, keep_io_types) annotates BERT's pooler
Gather as float16 where the tensor is float32; onnx's checker passes the file, and its
shape inference keeps an annotation that disagrees with what it computes. So the loader
infers without the annotations, compares what it computed with them (:func:`check`),
keeps the computed type and says which tensor was annotated wrong, and gives inference
back only the annotations of tensors it could not size (an opaque op's outputs), for a
second round.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from graphmem.core.dtypes import ENUM_BY_NAME, dtype_of
from graphmem.core.ir import Tensor
from graphmem.errors import GraphmemError


def annotated_types(value_infos: Iterable[tuple[str, tuple | None]]
                    ) -> dict[str, tuple[int, tuple | None]]:
    """The tensor types of value_info entries as :func:`graphmem.wire.parse_model` gives
    them ((name, ("tensor", elem_type, shape or None)), ...): name -> (elem_type, shape)."""
    found = {}
    for name, t in value_infos:
        if t is not None and t[0] == "tensor" and len(t) > 2 and t[1]:
            found[name] = (t[1], tuple(t[2]) if t[2] is not None else None)
    return found


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
