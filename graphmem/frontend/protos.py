"""The few places the loader turns bytes into onnx protos, and the one-line text of
what went wrong there."""
from __future__ import annotations

from typing import TYPE_CHECKING

from graphmem.errors import GraphmemError
from graphmem.frontend.lazy import onnx as _onnx

if TYPE_CHECKING:
    import onnx
else:
    onnx = _onnx


def one_line(exc: BaseException) -> str:
    """An exception's text on one line, at most 300 characters."""
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def to_proto(data: bytes) -> onnx.ModelProto:
    """The ModelProto of bytes our parser read: protobuf's parser may still refuse them."""
    try:
        return onnx.ModelProto.FromString(bytes(data))  # bytes: a mapped file too
    except Exception as exc:  # protobuf's DecodeError: its text is the message
        raise GraphmemError(f"the model is corrupt: {one_line(exc)}") from None


def invalid_text(msg, where: str = "model") -> str | None:
    """The first string field anywhere that is not valid UTF-8, as ``where.field``.

    Slower than :func:`graphmem.frontend.structure.invalid_name`; used to explain a
    UnicodeDecodeError.
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
            elif (found := invalid_text(v, at)) is not None:
                return found
    return None


# The external-data location of a tensor whose data the loader left out
DROPPED = "graphmem-dropped"


def drop_tensor_data(init: onnx.TensorProto) -> None:
    """Keep dims and data_type; drop the bytes. Marked external so nothing mistakes
    the empty tensor for real data."""
    init.ClearField("raw_data")
    init.data_location = onnx.TensorProto.EXTERNAL
    del init.external_data[:]
    entry = init.external_data.add()
    entry.key, entry.value = "location", DROPPED
