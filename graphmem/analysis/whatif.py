"""Batch and precision what-ifs, and ``fit``: re-plan the model, never scale a plan.

- Batch: a model with a symbolic batch dim gets it bound (like ``--dim``); a model with
  a fixed batch (the zoo's inputs are ``[1, 3, 224, 224]``) is rewritten: the graph
  inputs' first dim, and the Reshape shape constants that hard-code the batch on
  batch-dependent data. The result is checked: every batch-dependent tensor must hold
  exactly ``N / old`` times its elements, and every other tensor keep its size.
- Precision: every floating tensor of the IR takes the element size of the target
  type (float16: 2 bytes, int8: 1 byte) and the graph is planned again, so alignment
  and packing are those of the real sizes.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Sequence

import onnx
from onnx import numpy_helper

from graphmem.analysis.breakdown import FLOAT_TYPES, param_count, weight_bytes, workspace
from graphmem.analysis.macs import mac_totals
from graphmem.analysis.workspace import rule_for
from graphmem.core.dtypes import BITS_BY_NAME
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph, Tensor
from graphmem.frontend.folding import constant_value
from graphmem.frontend.reader import copy_without_weights, from_model
from graphmem.pipeline import DEFAULT_INPLACE, DEFAULT_PASSES, InplaceTable, plan_graph

MAX_BATCH = 1 << 31  # fit gives up doubling here: a model whose memory does not grow


# ---------------------------------------------------------------------- precision

def with_float_dtype(graph: Graph, dtype: str) -> Graph:
    """The graph with every floating-point tensor retyped to ``dtype`` (sizes only)."""
    if dtype not in BITS_BY_NAME:
        raise GraphmemError(f"unknown dtype {dtype!r}; e.g. float32, float16, bfloat16, int8")
    bits = BITS_BY_NAME[dtype]
    tensors = {name: (Tensor(t.name, dtype, t.shape, bits) if t.dtype in FLOAT_TYPES else t)
               for name, t in graph.tensors.items()}
    return replace(graph, tensors=tensors)


def float_dtype(graph: Graph) -> str:
    """The floating type most of the graph's bytes are in ("float32" when there is none)."""
    counts: dict[str, int] = {}
    for t in graph.tensors.values():
        if t.dtype in FLOAT_TYPES:
            counts[t.dtype] = counts.get(t.dtype, 0) + t.bytes
    return max(counts, key=counts.get) if counts else "float32"


# ---------------------------------------------------------------------- batch

@record
class BatchAxis:
    """How a model's batch is set: a symbolic dim name, or a fixed size to rewrite."""

    symbol: str | None
    size: int  # the batch the model has as loaded (its binding for a symbol)


# Symbolic dims taken for the batch wherever they stand (a time-major RNN's input is
# [T, batch, features]: its first axis is not the batch).
BATCH_NAMES = frozenset({"batch", "batch_size", "batchsize", "bs", "n", "b"})


def batch_axis(model: onnx.ModelProto, dims: Mapping[str, int]) -> BatchAxis:
    """The batch of a model: a symbolic dim named like one (:data:`BATCH_NAMES`) on any
    axis of a graph input that is not an initializer, else the first axis of the first
    such input."""
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param.lower() in BATCH_NAMES:
                return BatchAxis(d.dim_param, int(dims.get(d.dim_param, 1)))
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        shape = vi.type.tensor_type.shape.dim
        if not shape:
            continue
        d = shape[0]
        if d.HasField("dim_param") and d.dim_param:
            return BatchAxis(d.dim_param, int(dims.get(d.dim_param, 1)))
        if d.HasField("dim_value") and d.dim_value > 0:
            return BatchAxis(None, int(d.dim_value))
        break
    raise GraphmemError("the model has no graph input with a leading (batch) dimension")


def rebatch(model: onnx.ModelProto, batch: int, old: int) -> onnx.ModelProto:
    """A copy with a fixed batch ``old`` rewritten to ``batch``.

    Rewrites the first dim of every graph input whose first dim is ``old``, and the
    leading ``old`` of each Reshape shape constant (initializer or Constant node) whose
    data depends on those inputs. Stale value_info and output shapes are dropped so
    that shape inference starts afresh.
    """
    if batch < 1:
        raise GraphmemError(f"batch must be at least 1, not {batch}")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    tainted: set[str] = set()
    for vi in g.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == old:
            dims[0].dim_value = batch
            tainted.add(vi.name)
    del g.value_info[:]
    for vi in g.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    constants = {o: n for n in g.node if n.op_type == "Constant" for o in n.output}
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in g.node:
        for i, t in enumerate(n.input):
            users.setdefault(t, []).append((n, i))
    grew = True
    while grew:  # to a fixpoint: the file's node order need not be topological
        before = len(tainted)
        for n in g.node:
            if any(t in tainted for t in n.input):
                tainted.update(o for o in n.output if o)
        grew = len(tainted) > before
    rewrites = [(n, n.input[1]) for n in g.node
                if n.op_type == "Reshape" and len(n.input) > 1 and n.input[0] in tainted]
    for node, shape_name in rewrites:
        value = constant_value(shape_name, inits, constants)
        if value is None or value.ndim != 1 or not len(value) or int(value[0]) != old:
            continue  # computed shapes follow the data; 0 and -1 already do
        new = value.copy()
        new[0] = batch
        # Another reader (a Reshape of a weight, say) keeps the old value.
        shared = any(not (u.op_type == "Reshape" and i == 1 and u.input[0] in tainted)
                     for u, i in users.get(shape_name, []))
        if shared:
            name = f"{shape_name}__graphmem_batch"
            if name not in inits:
                inits[name] = numpy_helper.from_array(new, name)
                g.initializer.append(inits[name])
            node.input[1] = name
        elif shape_name in inits:
            inits[shape_name].CopyFrom(numpy_helper.from_array(new, shape_name))
        else:
            const = constants[shape_name]
            const.ClearField("attribute")
            const.attribute.append(
                onnx.helper.make_attribute("value", numpy_helper.from_array(new, shape_name)))
    return m


class Batcher:
    """Graphs of one model at any batch: read once, rewritten and loaded per batch."""

    def __init__(self, model: onnx.ModelProto, dims: Mapping[str, int] | None = None,
                 model_path: str | None = None, dim_default: int | None = None,
                 bounds: Mapping[str, int] | None = None):
        self.dims = dict(dims or {})
        self.dim_default = dim_default  # binds the other symbolic dims, as in load()
        self.bounds = dict(bounds) if bounds else None  # issue 53: --bound, at every batch
        # Rewritten copies are made of the model without its large weights: cheap to copy.
        self.model = copy_without_weights(model)
        self.model_path = model_path
        self.axis = batch_axis(model, self.dims)
        # onnx.checker runs once, on the model as given; rewritten copies skip it.
        self.base = from_model(model, {**self.dims, **self._binding(self.axis.size)},
                               check=True, model_path=model_path, dim_default=dim_default,
                               bounds=self.bounds)
        self._cache: dict[int, Graph] = {self.axis.size: self.base}

    def _binding(self, batch: int) -> dict[str, int]:
        return {self.axis.symbol: batch} if self.axis.symbol is not None else {}

    def _load(self, batch: int) -> Graph:
        model = (self.model if self.axis.symbol is not None or batch == self.axis.size
                 else rebatch(self.model, batch, self.axis.size))
        return from_model(model, {**self.dims, **self._binding(batch)}, check=False,
                          model_path=self.model_path, dim_default=self.dim_default,
                          bounds=self.bounds)

    def graph(self, batch: int) -> Graph:
        """The model loaded at ``batch``, checked to scale linearly from the base batch."""
        if batch < 1:
            raise GraphmemError(f"batch must be at least 1, not {batch}")
        if batch not in self._cache:
            g = self._load(batch)
            check_scaling(self.base, g, self.axis.size, batch)
            self._cache = {self.axis.size: self.base, batch: g}  # keep memory flat in fit
        return self._cache[batch]


# Ops whose output describes its input's shape, not its data: it does not grow with it
SHAPE_OF = frozenset({"Shape", "Size"})


def check_scaling(base: Graph, g: Graph, old: int, new: int) -> None:
    """A tensor computed from the rebatched inputs' data holds exactly ``new/old`` times
    its elements in ``g``; any other arena tensor holds the same number or ``new/old``
    times as many (the exporters size masks, position ids and class tokens through
    Shape arithmetic: a Range over the batch grows with no data path from an input,
    while the Shape of a growing tensor keeps its size). Anything else means a shape in
    the model hard-codes the batch."""
    grown = {t for t in base.inputs if t in g.tensors
             and g.tensors[t].numel != base.tensors[t].numel}
    for n in base.nodes:  # base.nodes is in a topological order
        if n.op_type not in SHAPE_OF and any(t in grown for t in n.reads):
            grown.update(o for o in n.outputs if o)
    # issue 53: a size that depends on the data is its bound's, whatever the batch
    bounded = base.data_bounds.governed if base.data_bounds else {}
    for name in base.arena_tensors():
        if name in bounded:
            continue
        a, b = base.tensors[name], g.tensors.get(name)
        if b is None:
            raise GraphmemError(f"rebatching lost tensor {name!r}")
        scaled, same = b.numel * old == a.numel * new, b.numel == a.numel
        if scaled if name in grown else (scaled or same):
            continue
        expected = (f"{new}/{old} times as many elements" if name in grown else
                    f"the same size or {new}/{old} times as many elements")
        raise GraphmemError(
            f"cannot set the batch to {new}: tensor {name!r} has shape {list(a.shape)} at "
            f"batch {old} but {list(b.shape)} at batch {new}, not {expected}; a shape in "
            "the model hard-codes the batch (give the model a symbolic batch dim and use "
            "--dim)")


# ---------------------------------------------------------------------- footprints

def footprint(graph: Graph, passes: Sequence[str] = DEFAULT_PASSES, alignment: int = 64,
              placement: str = "best", time_limit: float = 10.0,
              table: InplaceTable = DEFAULT_INPLACE, workspace_rule: str | None = None,
              threads: int = 1, capacity: int | None = None) -> dict:
    """Plan ``graph`` (``table``: the in-place table trusted) and return weights,
    activations, workspace and their total, and the matrix MACs (``macs_at_least``: a
    lower bound, an op has no rule). The workspace is the largest working buffer under
    ``workspace_rule`` (default: the one ``table.provider``'s kernels follow;
    :mod:`graphmem.analysis.workspace`) for ``threads`` threads. ``capacity`` (bytes):
    the arena placed within it where the placement can (``plan_graph``'s); the place
    pass's verdict is then ``capacity`` (None where no place pass ran) and the aliased
    peak ``aliased_peak_bytes``."""
    result = plan_graph(graph, passes, alignment=alignment, placement=placement,
                        time_limit=time_limit, table=table, capacity=capacity)
    ws, _ = workspace(graph, rule_for(table.provider, workspace_rule), threads)
    weights = weight_bytes(graph)
    macs = mac_totals(graph)  # matrix MACs, a lower bound where an op has no rule
    return {"weight_bytes": weights, "params": param_count(graph),
            "activation_bytes_naive": result.plan.stats["naive_bytes"],
            "arena_bytes": result.plan.arena_bytes, "workspace_bytes": ws,
            "total_bytes": weights + result.plan.arena_bytes + ws,
            **{k: macs[k] for k in ("matrix_macs", "macs_at_least")},
            **({} if capacity is None else {
                "capacity": next((r.detail.get("capacity") for r in result.reports
                                  if r.name == "place"), None),
                "aliased_peak_bytes": result.plan.stats["aliased_peak_bytes"]})}


def sweep(batcher: Batcher, batches: Sequence[int], dtypes: Sequence[str],
          progress: Callable[[str], None] | None = None, **plan_options) -> list[dict]:
    """One footprint per (batch, dtype), each from its own plan; ``progress`` is told
    which it plans."""
    rows = []
    for b in batches:
        g = batcher.graph(b)
        for dt in dtypes:
            if progress is not None:
                progress(f"what-if batch {b}, {dt} ({len(rows) + 1} of "
                         f"{len(batches) * len(dtypes)})")
            rows.append({"batch": b, "dtype": dt,
                         **footprint(with_float_dtype(g, dt), **plan_options)})
    return rows


def fit(total_at: Callable[[int], int], budget: int) -> dict:
    """The largest batch whose ``total_at(batch)`` is within ``budget``.

    Doubling from 1 until a batch does not fit, then bisection; assumes totals grow
    with the batch. Returns ``batch`` (0 when batch 1 does not fit), ``total_bytes``
    (at that batch; at batch 1 when it is 0), ``next_total_bytes`` (at batch + 1, which
    was probed and does not fit) and the batches ``probed`` in order.
    """
    probed: list[int] = []
    totals: dict[int, int] = {}

    def fits(b: int) -> bool:
        if b not in totals:
            totals[b] = total_at(b)
            probed.append(b)
        return totals[b] <= budget

    if not fits(1):
        return {"batch": 0, "total_bytes": totals[1], "next_total_bytes": totals[1],
                "probed": probed}
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_BATCH:
            raise GraphmemError(f"the model fits the budget at batch {lo}; its memory does "
                                "not seem to grow with the batch")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return {"batch": lo, "total_bytes": totals[lo], "next_total_bytes": totals[hi],
            "probed": probed}


