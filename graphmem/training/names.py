"""What a training step's parts are called where a user reads them.

The built graph names its nodes by phase (``f:12``, ``b:584``, ``r:30``) and onnx-ad
and the rewrites name backward tensors after their rules (``a_conv_weight_107``,
``seed_last_304``): internal names. A report names a forward node by the layer of the
model it came from, and a backward node by the forward layer it works for.
"""
from __future__ import annotations

import onnx

from graphmem.core.ir import Graph
from graphmem.training.build import TrainingGraph

# The orders plan_training tries, as a user reads them
ORDER_WORDS = {
    "sunk helpers": "backward's helper computations (weight transposes, masks) each run "
                    "just before it is needed",
    "sunk floating": "every computation that reads no activation run just before it is "
                     "needed",
    "file": "the order onnx-ad built",
}

LOSS_WORDS = {"xent": "cross-entropy against a one-hot label", "sum": "sum of the output",
              "mean": "mean of the output"}


def loss_kind(tg: TrainingGraph) -> str:
    """The loss the step was built with: ``xent``, ``sum`` or ``mean``."""
    if "label" in tg.data_inputs:
        return "xent"
    made = next((n for n in tg.model.graph.node if tg.loss in n.output), None)
    return "mean" if made is not None and made.op_type == "ReduceMean" else "sum"


def layer_names(tg: TrainingGraph, model: onnx.ModelProto) -> dict[str, str]:
    """Built node name (``f:12``) -> the name of the node of ``model`` (the inference
    model as read) that made the same output; forward nodes only, where it has one."""
    made_by = {o: n.name or f"{n.op_type} {i}" for i, n in enumerate(model.graph.node)
               for o in n.output if o}
    out = {}
    for n in tg.model.graph.node:
        if n.name.startswith(("f:", "r:")):
            name = next((made_by[o] for o in n.output if o in made_by), None)
            if name is None:  # a model output the step keeps inside: <name>_intermediate
                name = next((made_by[o.removesuffix("_intermediate")] for o in n.output
                             if o.removesuffix("_intermediate") in made_by), None)
            if name is not None:
                out[n.name] = name
    return out


def node_names(graph: Graph, layers: dict[str, str]) -> dict[str, str]:
    """Built node name -> the name a user reads: the model's layer name for a forward
    node (``conv1``), ``conv1 (recomputed)`` for its recomputation, ``backward of conv1``
    for a backward node (the forward layer whose weight or output it reads, followed
    back through the backward tensors it reads), else ``backward`` (the loss seed's
    fills). ``layers``: :func:`layer_names`."""
    producer = {t: n for n in graph.nodes for t in n.outputs if t}
    weight_reader: dict[str, object] = {}
    for n in graph.nodes:
        if n.name.startswith("f:"):
            for t in n.reads:
                if t in graph.weights:
                    weight_reader.setdefault(t, n)
    served: dict[str, str | None] = {}

    def forward_of(n) -> str | None:
        """The forward layer a backward node works for (memoized; the graph is in a
        topological order, so what it reads is decided first)."""
        if n.name in served:
            return served[n.name]
        found = None
        for t in n.reads:
            if t in weight_reader:
                found = weight_reader[t].name
                break
        if found is None:
            for t in n.reads:
                p = producer.get(t)
                if p is not None and p.name.startswith("f:"):
                    found = p.name
                    break
        if found is None:
            for t in n.reads:
                p = producer.get(t)
                if p is not None and not p.name.startswith("f:") and p.name in served:
                    found = served[p.name]
                    if found is not None:
                        break
        served[n.name] = found
        return found

    out = {}
    for n in graph.nodes:  # file order is topological
        if n.name.startswith("f:"):
            # a node the step adds (the loss, its reshapes) has no layer of the model
            out[n.name] = layers.get(n.name) or f"{n.op_type} of the step"
        elif n.name.startswith("r:"):
            # a recomputed copy (r:87, r:87.76: the 76th fresh copy) of forward node f:87
            forward = "f:" + n.name[2:].split(".")[0]
            layer = layers.get(n.name) or layers.get(forward) or out.get(forward) or \
                f"{n.op_type} of the step"
            out[n.name] = f"{layer} (recomputed)"
        else:
            f = forward_of(n)
            out[n.name] = f"backward of {out.get(f) or layers.get(f, f)}" if f else \
                "backward"
    return out


def with_names(graph: Graph, names: dict[str, str]) -> Graph:
    """``graph`` with its nodes renamed for display (a plan refers to nodes by index)."""
    from dataclasses import replace
    return replace(graph, nodes=tuple(replace(n, name=names.get(n.name, n.name))
                                      for n in graph.nodes))
