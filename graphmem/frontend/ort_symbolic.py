"""The adapter of ONNX Runtime's symbolic shape inference: the loader's last fallback.

``onnxruntime.tools.symbolic_shape_infer.SymbolicShapeInference`` follows shape
arithmetic symbolically (sympy) and knows contrib ops the rule table
(:mod:`graphmem.frontend.contrib_rules`) leaves to it. :func:`infer` runs the loader's
walk first (:func:`graphmem.frontend.shape_walk.propagate`) and ORT's inference only
where the walk leaves a gap, with the rule table's rules in front of ORT's handlers for
the ops the table has.

This is the one module of graphmem that reaches into ONNX Runtime's private members:
the subclass drives ORT's inference loop itself (``_preprocess``, ``_infer_impl``,
``_update_output_from_vi``, ``run_``, ``out_mp_``: ``infer_shapes``, the public entry,
raises and writes ``sym_shape_infer_temp.onnx`` into the working folder when any tensor
stays unknown, where the loader wants what it found) and puts the rules in its
``dispatcher_``, reading and writing ``known_vi_``, ``sympy_data_`` and
``initializers_``. docs/architecture.md lists these names and the ORT versions they are
tested with (pinned in pyproject.toml); tests/test_architecture_contracts.py fails on
any other private name used. The process's working folder is never changed: the model
handed to ORT has no external data it could read relative to it (:func:`_no_external_reads`).
"""
from __future__ import annotations

from typing import Optional

from graphmem.frontend.contrib_rules import RULES, Call, Rule, Value, is_dim, rule_for
from graphmem.frontend.protowire import static_type
from graphmem.frontend.shape_walk import propagate


def infer(model, *, int_max: int = 2**31 - 1, notes: list | None = None):
    """``model`` (a ModelProto whose graph inputs have static shapes) with the types of
    every value the rules, onnx's per-node inference and, where those leave a gap, ONNX
    Runtime's symbolic inference reach, written as value infos; what stays unknown stays
    out. Never raises for a shape it cannot infer: the loader names the tensor."""
    known = propagate(model)
    missing = [o for n in model.graph.node for o in n.output if o and o not in known]
    if not missing:
        return _with_types(model, known)
    # ORT's own inference knows ops this table leaves to it (DecoderMaskedMultiHeadAttention,
    # PackedAttention, LongformerAttention, SparseAttention, ...); it walks the whole graph
    # again, and what it leaves open (it stops at an op it asserts on) keeps this pass's
    # types
    return _with_types(_symbolic(model, int_max, notes), known)


def _with_types(model, known: dict[str, Value]):
    """A copy of ``model`` with ``known`` types as value infos, where it has none with a
    full shape."""
    from onnx import helper
    out = type(model)()
    out.CopyFrom(model)
    typed = {vi.name: vi for vi in out.graph.value_info}
    typed.update((o.name, o) for o in out.graph.output)
    for name, (elem, shape) in known.items():
        vi = helper.make_tensor_value_info(name, elem, list(shape))
        if name not in typed:
            out.graph.value_info.append(vi)
        elif static_type(typed[name].type.SerializeToString()) is None:
            # declared without a full shape
            typed[name].type.CopyFrom(vi.type)
    return out


def _symbolic(model, int_max: int, notes: list | None = None):
    """ORT's symbolic inference with this table's rules in front of its handlers;
    ``notes`` gains a line when it stops on an op it asserts on."""
    engine = _engine()(int_max)
    sealed = _no_external_reads(model)
    engine._preprocess(sealed)
    while engine.run_:
        try:
            engine._infer_impl()
        except Exception as exc:  # an op ORT's inference asserts on: keep what it found
            if notes is not None:
                text = " ".join(str(exc).split())[:200]
                notes.append(f"ONNX Runtime's symbolic shape inference stopped: "
                             f"{type(exc).__name__}: {text}")
            break
    engine._update_output_from_vi()
    out = engine.out_mp_
    if sealed is not model:  # the initializers as they came, external marks and all
        for k, t in enumerate(model.graph.initializer):
            if t.data_location == t.EXTERNAL and k < len(out.graph.initializer) and \
                    out.graph.initializer[k].name == t.name:
                out.graph.initializer[k].CopyFrom(t)
    return out


def _no_external_reads(model):
    """``model`` with no initializer whose data ORT's inference would read from a file.

    ORT reads an initializer's value with ``numpy_helper.to_array`` and no folder, so a
    tensor whose data is external is looked up relative to the process's working folder:
    a file of that name there (the model's own ``.data`` when graphmem runs in the
    model's folder, or anything else) would be read. The tensors still external here are
    those the loader left out on purpose (stripped weights, external data it does not
    read for shapes: :meth:`~graphmem.frontend.working_model.WorkingModel.with_small_weights`
    put back what ORT may read): each is written as a tensor of its dims and type with no
    data, so reading its value fails in memory, as it failed on the missing file, and
    nothing is opened."""
    external = [k for k, t in enumerate(model.graph.initializer)
                if t.data_location == t.EXTERNAL]
    if not external:
        return model
    out = type(model)()
    out.CopyFrom(model)
    for k in external:
        t = out.graph.initializer[k]
        del t.external_data[:]
        t.data_location = t.DEFAULT
    return out


_ENGINE: list = []


def _engine():
    """ORT's SymbolicShapeInference with this table's rules in front of its handlers
    (made once: importing it imports sympy and onnxruntime)."""
    if _ENGINE:
        return _ENGINE[0]
    from onnx import helper
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    class ContribShapeInference(SymbolicShapeInference):
        def __init__(self, int_max: int):
            super().__init__(int_max, auto_merge=True, guess_output_rank=False, verbose=0)
            for op_type in {op for _, op in RULES}:
                self.dispatcher_[op_type] = self._dispatch(self.dispatcher_.get(op_type))

        def _dispatch(self, theirs):
            def handle(node):
                found = rule_for(node.domain, node.op_type)
                if found is None:
                    if theirs is not None:
                        theirs(node)
                    return
                self._apply(node, found)
            return handle

        def _apply(self, node, found: Rule) -> None:
            call = Call(inputs=[self._value_of(t) for t in node.input],
                        attrs={a.name: _attribute(helper.get_attribute_value(a))
                               for a in node.attribute},
                        outputs=len(node.output), given=[bool(t) for t in node.input],
                        values=lambda i: self._small_value(node, i))
            try:
                outs = found(call)
            except Exception:  # malformed attributes, no ORT to measure with
                return  # the outputs stay unknown and the loader names them
            for name, out in zip(node.output, outs):
                if name and out is not None and out[0]:
                    vi = helper.make_tensor_value_info(
                        name, out[0], [d if is_dim(d) else None for d in out[1]])
                    self.known_vi_[name].CopyFrom(vi)

        def _small_value(self, node, i: int):
            """A computed value, or a small initializer's (never one whose data the
            loader left out, nor a weight read for nothing)."""
            name = node.input[i]
            if name in self.sympy_data_:
                return self.sympy_data_[name]
            init = self.initializers_.get(name)
            if init is None or init.data_location == init.EXTERNAL or \
                    len(init.raw_data) > 4096:
                return None
            from onnx import numpy_helper
            return numpy_helper.to_array(init)

        def _value_of(self, name: str) -> Optional[Value]:
            if not name or name not in self.known_vi_:
                return None
            t = self.known_vi_[name].type
            if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.elem_type \
                    or not t.tensor_type.HasField("shape"):
                return None
            dims = tuple(d.dim_value if d.HasField("dim_value") else
                         (d.dim_param or None) for d in t.tensor_type.shape.dim)
            return (t.tensor_type.elem_type, dims)

        def _onnx_infer_single_node(self, node):
            if rule_for(node.domain, node.op_type) is not None:
                # onnx knows none of these (and would take nchwc's Conv for the standard
                # one): the outputs start untyped and the rule types them
                for o in node.output:
                    if o:
                        vi = self.out_mp_.graph.value_info.add()
                        vi.name = o
                        self.known_vi_[o] = vi
                return
            super()._onnx_infer_single_node(node)

    _ENGINE.append(ContribShapeInference)
    return ContribShapeInference


def _attribute(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value
