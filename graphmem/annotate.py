"""The annotated ONNX model: the same model with its plan attached where Netron shows it.

Per tensor (the ``ValueInfoProto`` of graph inputs and outputs, a new ``value_info``
entry for every other arena tensor): ``metadata_props`` ``graphmem.bytes``,
``graphmem.offset``, ``graphmem.live`` ("first..last"), ``graphmem.storage``,
``graphmem.alias_of``/``graphmem.alias``/``graphmem.slice_of`` where set, and a one-line
``doc_string``. Per node: ``graphmem.step`` (position in the order; folded nodes get
``graphmem.folded``) and ``graphmem.live_bytes`` at that step, plus a doc_string line.
Model ``metadata_props``: ``graphmem.format``, ``graphmem.arena_bytes``,
``graphmem.lower_bound_bytes``, ``graphmem.aliased_peak_bytes``, ``graphmem.passes`` and
``graphmem.plan``, the whole plan file text, so :func:`read_plan` gets back exactly the
plan that was written.

``ValueInfoProto.metadata_props`` is an IR version 10 field, so the model's
``ir_version`` is raised to at least 10 (opset imports are untouched; ONNX Runtime runs
such a model exactly as before).
"""
from __future__ import annotations

import json
import os

import onnx

from .dtypes import ENUM_BY_NAME
from .errors import GraphmemError
from .ir import Graph
from .plan import FORMAT, Plan
from .planview import PlanView

PREFIX = "graphmem."
PLAN_KEY = "graphmem.plan"
MIN_IR_VERSION = 10  # first IR version with ValueInfoProto/NodeProto.metadata_props
_DOC_TAG = "[graphmem] "


def annotate(model: onnx.ModelProto, view: PlanView, graph: Graph) -> onnx.ModelProto:
    """A copy of ``model`` with ``view``'s plan attached; ``model`` is left as it is."""
    plan = view.plan
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = max(out.ir_version, MIN_IR_VERSION)
    g = out.graph
    _strip(out)

    # per node
    steps = {s.node: s for s in view.steps}
    for idx, node in enumerate(g.node):
        s = steps.get(idx)
        if s is not None:
            if node.op_type != s.op:
                raise GraphmemError(f"node {idx} of the model is {node.op_type}, the plan's "
                                    f"graph has {s.op} there: not the model that was planned")
            _props(node, step=s.step, live_bytes=s.live_bytes,
                   live_bytes_unaliased=s.live_bytes_unaliased)
            _doc(node, f"step {s.step} of {len(plan.order)}; live {_mib(s.live_bytes)} "
                       f"({s.live_bytes} bytes) of a {_mib(plan.arena_bytes)} arena")
        elif idx in graph.folded_nodes:
            _props(node, folded=1)
            _doc(node, "folded into a constant at plan time; not in the arena")

    # per tensor: reuse the graph's own input/output ValueInfo, add value_info for the rest
    existing = {vi.name: vi for vi in list(g.input) + list(g.output)}
    old_vi = {vi.name: vi for vi in g.value_info}
    for r in view.tensors:
        vi = existing.get(r.name)
        if vi is None:
            vi = old_vi.get(r.name)
        if vi is None:
            vi = g.value_info.add()
            vi.name = r.name
            vi.type.tensor_type.elem_type = ENUM_BY_NAME[r.dtype]
            if not plan.bindings:  # with bound dims the file's shapes stay symbolic
                shape = vi.type.tensor_type.shape
                shape.SetInParent()
                for d in r.shape:
                    shape.dim.add().dim_value = d
        fields = dict(bytes=r.bytes, offset=r.offset, live=f"{r.first}..{r.last}",
                      storage=r.storage, kind=r.kind)
        if r.alias_of is not None:
            fields.update(alias_of=r.alias_of, alias=r.alias)
        if r.slice_of is not None:
            fields["slice_of"] = r.slice_of
        _props(vi, **fields)
        share = (f"; {r.alias} of {r.alias_of}" if r.alias_of else "") + \
                (f"; slice of {r.slice_of}" if r.slice_of else "")
        _doc(vi, f"{r.bytes} bytes at offset {r.offset}, live {r.first}..{r.last}, "
                 f"storage {r.storage}{share}")

    # model level
    s = plan.stats
    _props(out, format=FORMAT, arena_bytes=plan.arena_bytes,
           lower_bound_bytes=s.get("lower_bound_bytes", ""),
           aliased_peak_bytes=s.get("aliased_peak_bytes", ""),
           naive_bytes=s.get("naive_bytes", ""), alignment=plan.alignment,
           passes=",".join(p.get("name", "?") for p in plan.passes) or "none",
           pass_savings=json.dumps({p.get("name", "?"): p.get("bytes_saved")
                                    for p in plan.passes}),
           peak_step=view.peak_step, plan=plan.to_json())
    return out


def read_plan(path: str | os.PathLike) -> Plan:
    """The plan stored in an annotated model by :func:`annotate`."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise GraphmemError(f"{path}: not an ONNX model ({type(exc).__name__})") from None
    return plan_of_model(model, str(path))


def plan_of_model(model: onnx.ModelProto, source: str = "model") -> Plan:
    """The plan in a ModelProto's ``graphmem.plan`` metadata entry."""
    text = next((p.value for p in model.metadata_props if p.key == PLAN_KEY), None)
    if text is None:
        raise GraphmemError(f"{source}: no graphmem plan in this model "
                            f"(write one with `graphmem export MODEL --annotated OUT`)")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphmemError(f"{source}: the embedded plan is not JSON ({exc})") from None
    return Plan.from_dict(d, f"{source} (embedded plan)")


def _strip(model: onnx.ModelProto) -> None:
    """Drop annotations of an earlier run, so annotating twice does not stack them."""
    def clean(msg):
        keep = [p for p in msg.metadata_props if not p.key.startswith(PREFIX)]
        del msg.metadata_props[:]
        msg.metadata_props.extend(keep)
        if _DOC_TAG in msg.doc_string:
            lines = [ln for ln in msg.doc_string.split("\n") if not ln.startswith(_DOC_TAG)]
            msg.doc_string = "\n".join(lines)

    clean(model)
    g = model.graph
    for msg in list(g.node) + list(g.input) + list(g.output) + list(g.value_info):
        clean(msg)


def _props(msg, **fields) -> None:
    for key, value in fields.items():
        entry = msg.metadata_props.add()
        entry.key = PREFIX + key
        entry.value = str(value)


def _doc(msg, text: str) -> None:
    # appended, so a doc_string the model already had is kept
    msg.doc_string = f"{msg.doc_string}\n{_DOC_TAG}{text}" if msg.doc_string else _DOC_TAG + text


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"
