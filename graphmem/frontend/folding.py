"""Constant subgraphs: which nodes fold at plan time, and their values when needed.

Folding is decided on types alone (a ``Shape`` of a statically shaped tensor is a
constant); values are computed only on request, e.g. by the verifier, or by the
loader when shape inference needs the result of shape arithmetic.
"""
from __future__ import annotations

import warnings
from typing import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphmem.core.ir import Tensor
from graphmem.errors import GraphmemError
from graphmem.frontend import bounds
from graphmem.frontend.sparse import dense_values


def constant_value(name: str, inits: Mapping[str, onnx.TensorProto],
                   constants: Mapping[str, onnx.NodeProto]) -> np.ndarray | None:
    """The value of ``name`` when it is an initializer (``inits``: name -> tensor) or the
    output of a ``Constant`` node with a ``value`` tensor (``constants``: output name ->
    node), else None."""
    if name in inits:
        return numpy_helper.to_array(inits[name])
    node = constants.get(name)
    if node is not None:
        for a in node.attribute:
            if a.name == "value":
                return numpy_helper.to_array(a.t)
    return None


def shape_value(n: onnx.NodeProto, tensor: Tensor) -> np.ndarray:
    """The value a Shape or Size node gives for a statically shaped input."""
    if n.op_type == "Size":
        return np.array(tensor.numel, dtype=np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    rank = len(tensor.shape)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(tensor.shape[start:end], dtype=np.int64)


def evaluate_constants(model: onnx.ModelProto, folded_nodes: Iterable[onnx.NodeProto],
                       tensors: Mapping[str, Tensor], *, max_bytes: int | None = None,
                       base_dir: str = ".",
                       initializer_values: Mapping[str, np.ndarray] | None = None,
                       failures: dict[str, str] | None = None,
                       prefer: str = "onnxruntime",
                       ) -> dict[str, np.ndarray]:
    """Values of the folded tensors (initializers included), skipping any over ``max_bytes``.

    ``folded_nodes`` must be in a topological order. Large initializers are read
    only when ``max_bytes`` allows them. The nodes run in one ONNX Runtime session (the
    runtime the plan is verified on); when that fails, node by node, each on ONNX
    Runtime and else on onnx's reference evaluator, so that one node no evaluator can
    run costs only the constants computed from it. ``prefer="reference"`` tries onnx's
    reference evaluator first (the loader's few shape constants: it spares importing
    ONNX Runtime). ``failures``, when given, receives for each tensor left out the
    reason: the node that failed and its error.
    """
    evaluators = (_on_runtime, _on_reference)
    if prefer == "reference":
        evaluators = evaluators[::-1]
    values: dict[str, np.ndarray] = dict(initializer_values or {})
    for init in model.graph.initializer:
        if init.name in values:
            continue
        value = _initializer_value(init, base_dir, max_bytes, failures)
        if value is not None:
            values[init.name] = value
    for sp in model.graph.sparse_initializer:  # read as dense (graphmem/frontend/sparse.py)
        name, dims = sp.values.name, [int(d) for d in sp.dims]
        t = tensors.get(name)
        if name in values or (max_bytes is not None and t is not None and t.bytes > max_bytes):
            continue
        try:
            values[name] = dense_values(sp, name, dims)
        except GraphmemError as exc:
            if failures is not None:
                failures[name] = str(exc)

    def too_big(name: str) -> bool:
        t = tensors.get(name)
        return max_bytes is not None and t is not None and t.bytes > max_bytes

    def shape_of(name: str):
        t = tensors.get(name)
        return t.shape if t is not None else None

    run: list[onnx.NodeProto] = []
    available = set(values)
    for n in folded_nodes:
        outs = [o for o in n.output if o]
        if any(too_big(o) for o in outs):
            continue
        sizing = [n.input[i] for i in bounds.SIZING_INPUTS.get(n.op_type, (bounds.RESIZE_SIZES,)
                                                              if n.op_type == "Resize" else ())
                  if i < len(n.input)]
        if any(t in available and t not in values for t in sizing) and run:
            # its size comes from values still to compute: compute those first
            _run_batch(model, run, values, evaluators, failures)
            run = []
            available = set(values)
        elements = bounds.output_elements(n.op_type, tuple(n.input), values, shape_of)
        if elements is not None and (elements > bounds.MAX_TENSOR_BYTES or (
                max_bytes is not None and elements > max_bytes)):
            # never allocated: too large to compute here, and no failure (its type
            # follows from the values that size it, in onnx's inference; a detector's
            # RoIAlign zeros at the bounds printed a note on every plan)
            continue
        if n.op_type in ("Shape", "Size") and n.input[0] in tensors:
            values[outs[0]] = shape_value(n, tensors[n.input[0]])
            available.add(outs[0])
            continue
        if all(t in available for t in n.input if t):
            run.append(n)
            available.update(outs)
    if run:
        _run_batch(model, run, values, evaluators, failures)
    return values


def _run_batch(model: onnx.ModelProto, run: list[onnx.NodeProto],
               values: dict[str, np.ndarray], evaluators,
               failures: dict[str, str] | None) -> None:
    """Add the outputs of ``run`` to ``values``: in one go, or else node by node."""
    try:
        values.update(_run_nodes(model, run, values, evaluators))
        return
    except Exception:  # not dropped: every node is tried again alone below, and each
        pass  # that fails again is named with its error in ``failures``
    for n in run:
        outs = [o for o in n.output if o]
        lost = next((t for t in n.input if t and t not in values), None)
        if lost is not None:
            reason = (failures or {}).get(lost, f"its input {lost!r} has no value")
        else:
            try:
                values.update(_run_nodes(model, [n], values, evaluators))
                continue
            except Exception as exc:
                reason = (f"{n.op_type} node {n.name!r} failed on ONNX Runtime and on the "
                          f"reference evaluator ({' '.join(str(exc).split())[:200]})")
        if failures is not None:
            for o in outs:
                failures[o] = reason


def _run_nodes(model: onnx.ModelProto, nodes: list[onnx.NodeProto],
               values: Mapping[str, np.ndarray], evaluators) -> dict[str, np.ndarray]:
    """The outputs of ``nodes`` (a topological list), their inputs taken from
    ``values``, from the first of ``evaluators`` that runs them (the last one's error
    is raised when none does)."""
    wanted = [o for n in nodes for o in n.output if o]
    if evaluators and evaluators[0] is _on_reference:
        # the shape arithmetic exporters write, computed as the reference evaluator
        # does without building one (graphmem/frontend/shape_arithmetic.py)
        from graphmem.frontend.shape_arithmetic import Unsupported, evaluate
        try:
            found = evaluate(nodes, values)
            return {name: found[name] for name in wanted}
        except Unsupported:
            pass
    made = set(wanted)
    needed = sorted({t for n in nodes for t in n.input if t and t not in made})
    graph = helper.make_graph(
        nodes, "constants", [],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in wanted],
        [numpy_helper.from_array(values[t], t) for t in needed])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import),
                            ir_version=max(model.ir_version, 4))
    for i, run in enumerate(evaluators):
        try:
            # numpy's warnings (a Log of 0 in T5's masks) are the model's business, not
            # lines on stderr: folding computes what a run would
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results = run(sub, wanted)
            break
        except Exception:  # the next evaluator is tried; the last one's error is raised
            if i == len(evaluators) - 1:
                raise
    return {name: np.asarray(v) for name, v in zip(wanted, results)}


def _on_runtime(sub: onnx.ModelProto, wanted: list[str]) -> list:
    """Run ``sub`` on ONNX Runtime's CPU provider, its outputs typed by onnx's shape
    inference first, and the contrib rules where it leaves one untyped (ORT's own
    DequantizeLinear): the runtime refuses an output of undefined type."""
    import onnxruntime as ort
    inferred = onnx.shape_inference.infer_shapes(sub)
    elem = {vi.name: vi.type.tensor_type.elem_type
            for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    if not all(elem.get(o) for o in wanted):
        from graphmem.frontend.shape_walk import propagate
        for name, (e, _) in propagate(sub.SerializeToString()).items():
            elem[name] = elem.get(name) or e
    typed = onnx.ModelProto()
    typed.CopyFrom(sub)
    for out in typed.graph.output:
        out.type.tensor_type.elem_type = elem.get(out.name, 0)
    ort.set_default_logger_severity(4)  # its allocator logs to stderr outside the session
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failure is reported by the caller
    session = ort.InferenceSession(typed.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(wanted, {})


def _on_reference(sub: onnx.ModelProto, wanted: list[str]) -> list:
    """Run ``sub`` on onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(sub).run(wanted, {})


def _initializer_value(init: onnx.TensorProto, base_dir: str, max_bytes: int | None,
                       failures: dict[str, str] | None = None) -> np.ndarray | None:
    """The value of an initializer (None: over ``max_bytes``, dropped by the loader, or
    external data that cannot be read, which ``failures`` then names)."""
    if init.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in init.external_data}
        if info.get("location") in (None, "graphmem-dropped"):
            return None
        length = int(info.get("length", 0) or 0)
        if max_bytes is not None and length > max_bytes:
            return None
        t = onnx.TensorProto()
        t.CopyFrom(init)
        try:  # read where every command reads (the model's folder, named or real)
            from graphmem.frontend.external_data import load_tensor
            load_tensor(t, base_dir)
            return numpy_helper.to_array(t)
        except Exception as exc:  # GraphmemError (the rule), OSError, ValueError:
            # named in ``failures``, and the constants computed from it are left out
            if failures is not None:
                failures[init.name] = (f"its external data cannot be read "
                                       f"({' '.join(str(exc).split())[:200]})")
            return None
    try:
        return numpy_helper.to_array(init)
    except ValueError as exc:  # data shorter or longer than its dims say
        raise GraphmemError(f"initializer {init.name!r}: its data does not fill its shape "
                            f"{list(init.dims)} ({str(exc).splitlines()[0]})") from None
