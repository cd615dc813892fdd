"""The annotated ONNX model: the same model with its plan attached where Netron shows it.

Per tensor (the ``ValueInfoProto`` of graph inputs and outputs, a new ``value_info``
entry for every other arena tensor): ``bytes``, ``offset``, ``live`` ("first..last"),
``storage`` (tensors with one id share bytes), ``kind``, and ``alias_of``/``alias``/
``slice_of`` where set. Per node: ``step`` (position in the order) and ``live_bytes`` /
``live_bytes_unaliased`` at that step; folded nodes get ``folded``. Netron shows a value
info's ``doc_string`` as the tensor's description and a node's ``doc_string`` and
``metadata_props`` in its properties.

Where they go depends on the IR version. ``metadata_props`` on tensors and nodes came
with IR version 10: a model at IR >= 10 (or any model with ``raise_ir_version``) gets
them as ``graphmem.<field>`` entries. An older model (the zoo's are IR 3) keeps its IR
version, because raising it changes which graph optimisations ONNX Runtime applies (on
densenet121 the outputs then differ in the last bit); its tensors and nodes carry the
fields in ``[graphmem] key=value ...`` doc_string lines, a few fields to a line and the
note in words on a line of its own, so that Netron's description wraps
(:func:`doc_fields` reads them). Either way the model's own ``metadata_props`` (every IR
version has them) hold ``graphmem.format``, ``.arena_bytes``, ``.unaliased_peak_bytes``
(``.lower_bound_bytes`` in older annotations: docs/plan-format.md), ``.aliased_peak_bytes``,
``.naive_bytes``, ``.alignment``, ``.passes``, ``.pass_savings``, ``.peak_step`` and
``graphmem.plan``, the whole plan file text, so :func:`read_plan` gets back exactly the
plan that was written.
"""
from __future__ import annotations

import json
import os
import re

import onnx

from graphmem.core.dtypes import ENUM_BY_NAME
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph
from graphmem.plan.format import FORMAT, Plan
from graphmem.plan.view import PlanView

PREFIX = "graphmem."
PLAN_KEY = "graphmem.plan"
MIN_IR_VERSION = 10  # first IR version with ValueInfoProto/NodeProto.metadata_props
_DOC_TAG = "[graphmem] "
_NAME_FIELDS = ("alias_of", "slice_of")
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def annotate(model: onnx.ModelProto, view: PlanView, graph: Graph, *,
             raise_ir_version: bool = False) -> onnx.ModelProto:
    """A copy of ``model`` with ``view``'s plan attached; ``model`` is left as it is.

    ``raise_ir_version`` raises an older model to IR version 10 so that tensors and
    nodes get ``metadata_props``; without it such a model keeps its IR version and
    gets the same fields in ``doc_string`` only.
    """
    plan = view.plan
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if raise_ir_version:
        out.ir_version = max(out.ir_version, MIN_IR_VERSION)
    props = out.ir_version >= MIN_IR_VERSION
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
            mark_doc(node, props, f"({_mib(s.live_bytes)} live of a {_mib(plan.arena_bytes)} "
                               f"arena at step {s.step} of {len(plan.order)})",
                  step=s.step, live_bytes=s.live_bytes,
                  live_bytes_unaliased=s.live_bytes_unaliased)
        elif idx in graph.folded_nodes:
            mark_doc(node, props, "(folded into a constant at plan time; not in the arena)",
                  folded=1)

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
            planned = plan.tensors.get(r.name)
            # with bound dims the file's shapes stay symbolic; a tensor planned at a
            # data bound (issue 53) has the size the data gives: its shape stays open,
            # for the loader to size at the plan's bounds again
            if not plan.bindings and (planned is None or planned.bounded_by is None):
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
        mark_doc(vi, props, f"({_mib(r.bytes)})", **fields)

    # model level (model metadata_props exist in every IR version)
    s = plan.stats
    _props(out, format=FORMAT, arena_bytes=plan.arena_bytes,
           unaliased_peak_bytes=s.get("unaliased_peak_bytes", ""),
           aliased_peak_bytes=s.get("aliased_peak_bytes", ""),
           naive_bytes=s.get("naive_bytes", ""), alignment=plan.alignment,
           passes=",".join(p.get("name", "?") for p in plan.passes) or "none",
           pass_savings=json.dumps({p.get("name", "?"): p.get("bytes_saved")
                                    for p in plan.passes}),
           peak_step=view.peak_step, plan=plan.to_json())
    return out


def doc_fields(doc_string: str) -> dict[str, str]:
    """The ``key=value`` fields of the graphmem lines of a doc_string (names unquoted);
    the note line, in words, has none."""
    out: dict[str, str] = {}
    for line in doc_string.split("\n"):
        if line.startswith(_DOC_TAG):
            out.update((k, json.loads(v) if v.startswith('"') else v)
                       for k, v in _FIELD.findall(line[len(_DOC_TAG):]))
    return out


def read_plan(path: str | os.PathLike) -> Plan:
    """The plan stored in an annotated model by :func:`annotate`."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise GraphmemError(f"{path}: not an ONNX model ({type(exc).__name__})") from None
    return plan_of_model(model, str(path))


def plan_of_model(model: onnx.ModelProto, source: str = "model") -> Plan:
    """The plan in a ModelProto's ``graphmem.plan`` metadata entry, refused unread when
    it is larger than any plan for the model it sits in can be."""
    from graphmem.frontend.reader import plan_size_bound
    text = next((p.value for p in model.metadata_props if p.key == PLAN_KEY), None)
    if text is None:
        raise GraphmemError(f"{source}: no graphmem plan in this model "
                            f"(write one with `graphmem export MODEL --annotated OUT`)")
    return Plan.parse(text, f"{source} (embedded plan)", plan_size_bound(model),
                      what="a JSON plan")


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


# Characters of fields on one doc_string line before the next field starts a new one:
# Netron shows a description as it is written, one long line running off the panel.
DOC_LINE = 60


def mark_doc(msg, props: bool, note: str, **fields) -> None:
    """Fields as metadata_props (IR >= 10) and as ``[graphmem] k=v ...`` doc lines (a few
    fields to a line), then the note on a ``[graphmem]`` line of its own."""
    if props:
        _props(msg, **fields)
    # names are JSON-quoted so that spaces or '=' in them cannot break the line apart
    lines, current = [], []
    for k, v in fields.items():
        item = f"{k}={json.dumps(v) if k in _NAME_FIELDS else v}"
        if current and len(" ".join(current + [item])) > DOC_LINE:
            lines.append(" ".join(current))
            current = []
        current.append(item)
    lines += [" ".join(current)] if current else []
    text = "\n".join(f"{_DOC_TAG}{line}" for line in lines + [note])
    # appended, so a doc_string the model already had is kept
    msg.doc_string = f"{msg.doc_string}\n{text}" if msg.doc_string else text


def _mib(n: int) -> str:
    """A size in the unit that reads best (``3.06 MiB``, ``784.00 KiB``)."""
    from graphmem.analysis.footprint import format_bytes
    return format_bytes(n)
