"""The model the loader's shape strategies work on, in whichever form a step needs.

A :class:`WorkingModel` holds the model as read (its bytes and their wire view) and the
model the strategies infer on: at first the bytes with dims bound and large weights
stripped (:mod:`graphmem.frontend.splice`), then with the types found so far. That model
is kept as bytes or as an onnx ``ModelProto``, whichever the last change made; the other
form, and the wire view of the bytes (what :func:`~graphmem.frontend.splice.splice`,
the shape walk and the tensors read), are made when asked and kept until the next
change, which makes them stale. A strategy says what it needs (``bytes``, ``proto``,
``view``, ``tensors()``) and what it changed (``set_bytes``, ``set_proto``, ``splice``),
never how one form becomes the other.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from graphmem import wire
from graphmem.core.ir import Tensor
from graphmem.frontend import inference
from graphmem.frontend.lazy import onnx as _onnx
from graphmem.frontend.protos import to_proto
from graphmem.frontend.protowire import NotDecoded, tensor_array
from graphmem.frontend.splice import (INITIALIZER, NODE, SHAPE_DATA_BYTES,
                                      SMALL_CONSTANT_BYTES, entry_message, initializer_from,
                                      splice)
from graphmem.frontend.structure import EXTERNAL

if TYPE_CHECKING:
    import onnx
else:
    onnx = _onnx


class WorkingModel:
    """The model as read (``source``, ``source_view``, from the folder ``base_dir``) and
    the working model, in the forms asked for so far. (A plain class, not a dataclass:
    the loader makes one on every run.)"""

    def __init__(self, source: bytes, source_view: wire.Model, work: bytes, base_dir: str):
        self.source = source  # the model's bytes as read
        self.source_view = source_view  # their wire view
        self.base_dir = base_dir  # the model's folder (its external data)
        self._source_proto: onnx.ModelProto | None = None
        # the working model: at least one of _bytes and _proto is set; _view (full)
        # and _values (parse_values: no nodes) are of _bytes, when made
        self._bytes: bytes | None = work
        self._proto: onnx.ModelProto | None = None
        self._view: wire.Model | None = None
        self._values: wire.Model | None = None

    # ---- the forms of the working model

    @property
    def bytes(self) -> bytes:
        """The working model serialized (from the proto, once, when that is newer)."""
        if self._bytes is None:
            self._bytes = self._proto.SerializeToString()
        return self._bytes

    @property
    def proto(self) -> onnx.ModelProto:
        """The working model as a ModelProto (parsed once from the bytes). A caller that
        changes it in place says so with :meth:`set_proto`."""
        if self._proto is None:
            self._proto = to_proto(self.bytes)
        return self._proto

    @property
    def view(self) -> wire.Model:
        """The wire view of :attr:`bytes`, nodes and all (parsed once per change)."""
        if self._view is None:
            self._view = wire.parse_model(self.bytes)
        return self._view

    def _types_view(self) -> wire.Model:
        """A wire view of :attr:`bytes` with the value infos, inputs, outputs and
        initializers: the full one when made, else one without the nodes (faster)."""
        if self._view is not None:
            return self._view
        if self._values is None:
            self._values = wire.parse_values(self.bytes)
        return self._values

    def tensors(self) -> dict[str, Tensor]:
        """Every tensor the working model's types size (:func:`inference.tensors_of`)."""
        return inference.tensors_of(inference.types_of(self._types_view().graph))

    def output_index(self) -> dict[str, int]:
        """The working model's graph outputs: name -> position."""
        return {o.name: k for k, o in enumerate(self._types_view().graph.outputs)}

    # ---- changes

    def set_bytes(self, data: bytes) -> None:
        """The working model is now ``data``: the proto and the wire views are stale."""
        self._bytes, self._proto, self._view, self._values = data, None, None, None

    def set_proto(self, model: onnx.ModelProto, data: bytes | None = None) -> None:
        """The working model is now ``model`` (changed in place or new; ``data``: its
        bytes, when the caller has them): the bytes and the wire views are stale."""
        self._bytes, self._proto, self._view, self._values = data, model, None, None

    def splice(self, changes: list[tuple[int, int, bytes | None]]) -> None:
        """Change graph entries of the working model in its bytes (:func:`splice`), by
        the wire view of those bytes that is at hand: a change of the value infos, the
        outputs or the initializers needs no node's span, and no parse of the nodes."""
        if not changes:
            return
        if self._view is None and any(field == NODE for field, _, _ in changes):
            layout = self.view
        else:
            layout = self._types_view()
        self.set_bytes(splice(self.bytes, layout, changes))

    # ---- the model as read

    @property
    def source_proto(self) -> onnx.ModelProto:
        """The model as read, weights and all, as a ModelProto (parsed once, when a
        fallback first needs it)."""
        if self._source_proto is None:
            self._source_proto = to_proto(self.source)
        return self._source_proto

    def stored_values(self, names) -> dict:
        """The values of the initializers among ``names`` that the working model carries
        without their data and that hold at most SMALL_CONSTANT_BYTES, read from the
        model's bytes as read (every such weight that a computation needs, and only
        those)."""
        inits = self.source_view.graph.initializers
        index = {t.name: i for i, t in enumerate(inits)}
        out = {}
        for name in names:
            i = index.get(name)
            if i is None:
                continue
            init = inits[i]
            if SHAPE_DATA_BYTES < init.raw_bytes <= SMALL_CONSTANT_BYTES and \
                    init.data_location != EXTERNAL:
                message = entry_message(self.source, self.source_view.graph, INITIALIZER, i)
                try:
                    out[name] = tensor_array(message)
                except NotDecoded:  # an element type read by onnx only (bfloat16, ...)
                    from onnx import numpy_helper
                    out[name] = numpy_helper.to_array(onnx.TensorProto.FromString(message))
        return out

    def with_small_weights(self) -> onnx.ModelProto:
        """The working model's proto with the data of its initializers of up to
        SMALL_CONSTANT_BYTES back (a copy, where any comes back): ONNX Runtime's symbolic
        inference runs onnx's inference on each node with the initializers it reads,
        and stops at one whose data is marked external (the fallback sees the weights it
        saw before they were stripped; it runs only where the other strategies left a
        tensor unknown)."""
        model = self.proto
        g = self.source_view.graph
        index = {t.name: i for i, t in enumerate(g.initializers)}
        back = []
        for k, t in enumerate(model.graph.initializer):
            i = index.get(t.name)
            if i is not None and t.data_location == EXTERNAL:
                init = g.initializers[i]
                if init.data_location != EXTERNAL and \
                        SHAPE_DATA_BYTES < init.raw_bytes <= SMALL_CONSTANT_BYTES:
                    back.append((k, i))
        if not back:
            return model
        out = onnx.ModelProto()
        out.CopyFrom(model)
        for k, i in back:
            out.graph.initializer[k].CopyFrom(initializer_from(self.source, g, i))
        return out
