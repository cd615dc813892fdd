"""Inference ONNX model -> training graph (loss, backward pass, weight gradients).

Reverse mode is done by ``onnx_ad`` (pinned in pyproject.toml); only this module,
:mod:`.rules`, :mod:`.grouped_conv` and :mod:`.activations` (our rules, patched in while
reversing: Conv and grouped-Conv weight gradients without overhang, ConvTranspose's
weight, AveragePool with ``ceil_mode``, training-mode BatchNormalization, GELU, HardSwish,
LayerNormalization) import it; :mod:`.activations` also makes each exported GELU chain
one node for the reversal and puts it back after. After reversal
:mod:`.rewrites` fixes what its rules get wrong for memory (the ReLU mask, explicit pads,
copies, constant fills, double transposes).

Node names carry the phase: ``f:<i>`` forward (the model and the loss), ``b:<i>``
backward (everything onnx_ad added), ``r:<i>`` recomputation (see :mod:`.recompute`).
"""
from __future__ import annotations

from dataclasses import field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphmem.core.ir import CONTROL_FLOW, standard_domain
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.frontend.reader import onnx_opset
from graphmem.training.activations import fuse, unfuse
from graphmem.training.rules import patched
from graphmem.training.prepare import prepare_inference
from graphmem.training.rewrites import (SEED, cancel_transposes, copies_to_reshapes, fills_from_seed,
                       pads_into_weight_conv, relu_mask_from_output)

LOSSES = ("xent", "sum", "mean")
BN_MODES = ("training", "inference")
RUNNING = "running/"  # prefix of the updated running statistics' output names


@record
class TrainingGraph:
    """A training step as one ONNX model, and what its names mean."""

    model: onnx.ModelProto
    loss: str
    weights: tuple[str, ...]  # trainable parameters (initializers)
    gradients: dict = field(default_factory=dict)  # weight -> gradient output name
    data_inputs: tuple[str, ...] = ()  # data (and label) inputs, seed excluded
    seed: str = SEED  # the loss seed input: feed np.ones([1], float32)
    # the precision the step is planned at (graphmem.training.precision): the model is
    # written in float32; load_training retypes its floating tensors
    precision: str = "fp32"
    # forward values recomputed in backward from the values kept anyway, never kept by
    # a checkpointing rewrite (the selective rule of :mod:`.selective`)
    recomputable: frozenset = frozenset()
    # parameters the step reads but does not train (``--frozen``, ``--trainable``, the
    # base weights under ``--lora``): initializers, no gradient, no optimizer state
    frozen: tuple[str, ...] = ()

    def feeds(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ORT feeds for one step: the given data plus the loss seed."""
        return {**data, self.seed: np.ones([1], np.float32)}


def trainable_weights(model: onnx.ModelProto) -> list[str]:
    """Float initializers that are parameters: not BN running statistics, not shapes."""
    g = model.graph
    floats = {i.name for i in g.initializer
              if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)}
    frozen: set[str] = set()
    for n in g.node:
        if n.op_type == "BatchNormalization":
            frozen.update(n.input[3:5])
        elif n.op_type in ("Reshape", "Expand", "Tile", "ConstantOfShape", "Pad", "Slice",
                           "Resize", "Upsample"):
            frozen.update(n.input[1:])
    read = [t for n in g.node for t in n.input]
    return [t for t in dict.fromkeys(read) if t in floats and t not in frozen]


def build_training(model: onnx.ModelProto, batch: int | None = None, *, loss: str = "auto",
                   relu_fix: bool = True, rewrites: bool = True,
                   prepared: bool = False, output: str | None = None,
                   bn: str = "training", fuse_activations: bool = True,
                   trains=None, lora=None) -> TrainingGraph:
    """Build the training graph of an inference model.

    ``loss``: ``xent`` (cross-entropy of the logits against a one-hot ``label`` input;
    a final Softmax is dropped and its input used as logits), ``sum`` or ``mean`` of the
    output, or ``auto`` (``xent`` when the output comes from a Softmax, else ``sum``).
    ``bn``: ``training`` (default) puts every BatchNormalization in training mode: it
    normalizes with the batch's statistics and outputs its running statistics updated
    with them (graph outputs ``running/<mean or var input>``, see
    :func:`running_stat_outputs`); ``inference`` keeps the frozen running statistics.
    ``output``: the graph output the loss is taken of, for a model with several (a BERT
    export's hidden states and pooled output; default: the first); the others, and the
    nodes, inputs and weights only they need, are dropped.
    ``relu_fix`` and ``rewrites`` switch our post-reversal rewrites off (for checks);
    ``fuse_activations`` our activation rules: exported GELU chains differentiated as
    one op, HardSwish by an in-place-friendly rule (:mod:`.activations`).
    ``trains``: which parameters train (a predicate on their names, default all); the
    others are frozen: read, never differentiated. ``lora``: a
    :class:`graphmem.training.lora.Lora`; its adapters are added to the graph and are
    the only parameters that train.
    """
    import onnx_ad

    flow = next((i for i, n in enumerate(model.graph.node)
                 if n.op_type in CONTROL_FLOW and standard_domain(n.domain)), None)
    if flow is not None:
        n = model.graph.node[flow]
        raise GraphmemError(f"node {flow} ({n.op_type}{' ' + repr(n.name) if n.name else ''}) "
                            "is control flow; train does not differentiate through If, Loop "
                            "or Scan (plan, verify, report and fit plan their bodies)")
    m = model if prepared else prepare_inference(model, batch)
    m = _copy(m)
    g = m.graph
    if output is not None or len(g.output) != 1:
        _keep_one_output(g, output)
    if bn not in BN_MODES:
        raise GraphmemError(f"unknown BatchNormalization mode {bn!r}; choose from "
                            f"{', '.join(BN_MODES)}")
    adapters = lora.add_to(m) if lora is not None else None
    parameters = trainable_weights(m)
    if not parameters:
        raise GraphmemError("the model has no trainable float initializers")
    if adapters is not None:
        trains = set(adapters).__contains__
    weights = [w for w in parameters if trains is None or trains(w)]
    frozen = tuple(w for w in parameters if w not in set(weights))
    if not weights:
        raise GraphmemError(f"no parameter trains: all {len(parameters)} of the model's "
                            f"parameters are frozen (see --trainable and --frozen)")
    loss_name, data_inputs = _add_loss(m, loss)
    running = _batch_norm_training(m) if bn == "training" else []  # outputs after the loss
    # onnx_ad differentiates graph inputs only: move the weights out of the initializers.
    values = {i.name: i for i in g.initializer if i.name in set(weights)}
    for w in weights:
        g.initializer.remove(values[w])
        g.input.append(helper.make_tensor_value_info(
            w, values[w].data_type, list(values[w].dims)))
    forward_count = len(g.node)
    try:
        # onnx_ad places the seed axis by rank: give it every forward value's type.
        m = onnx.shape_inference.infer_shapes(m)
        _add_loader_shapes(m)
        # one node per exported GELU, differentiated as one (activations.py)
        chains = fuse(m) if fuse_activations else {}
        g = m.graph
        with patched(fuse_activations):  # our rules (rules.py)
            r = onnx_ad.reverse(m, inputs=list(weights), outputs=[loss_name], layout="onnx")
        unfuse(r, chains)
    except Exception as exc:
        raise GraphmemError(f"reverse mode failed: {type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:300]}") from None
    rg = r.graph
    # onnx_ad puts the primal nodes first, but lowers some (LRN becomes several nodes):
    # the forward ends at the loss, not at the inference model's node count.
    forward_count = 1 + max((i for i, n in enumerate(rg.node) if loss_name in n.output),
                            default=forward_count - 1)
    for i, n in enumerate(rg.node):
        n.name = f"f:{i}" if i < forward_count else f"b:{i}"
    seed_in = f"adj_{loss_name}"
    _rename_input(rg, seed_in, SEED)
    _bind_seed_dim(rg)
    if relu_fix:
        relu_mask_from_output(r)
    if rewrites:
        pads_into_weight_conv(r)  # before copies_to_reshapes: it matches the Transpose
        copies_to_reshapes(r)
        fills_from_seed(r)
        cancel_transposes(r)
    gradients = _squeeze_gradients(r, weights)
    # Weights back as initializers only: the planner counts them as weights, not arena
    # tensors, and ORT treats them as constants.
    for w in weights:
        rg.initializer.append(values[w])
    keep_in = [i for i in rg.input if i.name not in values]
    del rg.input[:]
    rg.input.extend(keep_in)
    # The inference output is not a training output.
    keep = [o for o in rg.output if o.name == loss_name or o.name in gradients.values()
            or o.name in running]
    del rg.output[:]
    rg.output.extend(keep)
    return TrainingGraph(r, loss_name, tuple(weights), gradients, tuple(data_inputs),
                         frozen=frozen)


def running_stat_outputs(model: onnx.ModelProto) -> dict[str, str]:
    """The running statistics a training step updates: ``{input name: output name}``
    for each training-mode BatchNormalization's mean and variance that is a graph output."""
    outputs = {o.name for o in model.graph.output}
    out = {}
    for n in model.graph.node:
        if n.op_type == "BatchNormalization" and _training_mode(n):
            for i, o in zip(n.input[3:5], n.output[1:3]):
                if o in outputs:
                    out[i] = o
    return out


def _training_mode(node: onnx.NodeProto) -> bool:
    return any(a.name == "training_mode" and a.i for a in node.attribute)


def _batch_norm_training(m: onnx.ModelProto) -> list[str]:
    """Every BatchNormalization to training mode (ONNX semantics, opset 14+: batch mean
    and population variance; ``running' = momentum * running + (1 - momentum) * batch``),
    its updated running mean and variance made graph outputs. Returns their names."""
    g = m.graph
    # before the nodes are taken: it rebuilds the node list (protobuf copies them)
    _stats_as_initializers(g, [t for n in g.node if n.op_type == "BatchNormalization"
                               for t in n.input[3:5]])
    nodes = [n for n in g.node if n.op_type == "BatchNormalization"]
    if not nodes:
        return []
    opset = onnx_opset(m)
    if opset < 14:
        raise GraphmemError(f"training-mode BatchNormalization needs opset 14 or later, the "
                            f"model has {opset} (or use --bn inference)")
    stats = {i.name: i for i in g.initializer}
    names: list[str] = []
    taken = {t for n in g.node for t in list(n.input) + list(n.output)}
    for n in nodes:
        if len(n.input) < 5 or any(t not in stats for t in n.input[3:5]):
            raise GraphmemError(f"BatchNormalization {n.name or n.output[0]!r}: its running "
                                "mean and variance must be initializers for training mode "
                                "(or use --bn inference)")
        attrs = [a for a in n.attribute if a.name != "training_mode"]
        del n.attribute[:]
        n.attribute.extend(attrs + [helper.make_attribute("training_mode", 1)])
        outs = [n.output[0]]
        for stat in n.input[3:5]:
            name = RUNNING + stat
            while name in taken:  # a statistic shared by two nodes: one output each
                name += "'"
            taken.add(name)
            outs.append(name)
            init = stats[stat]
            g.output.append(helper.make_tensor_value_info(name, init.data_type,
                                                          list(init.dims)))
            names.append(name)
        del n.output[:]
        n.output.extend(outs)
    return names


def _add_loader_shapes(m: onnx.ModelProto) -> None:
    """Static types onnx's inference left unknown, from graphmem's loader (it evaluates
    shape arithmetic onnx gives up on: ShuffleNet's channel shuffle, exported by
    TorchScript, reshapes by sizes read from ``Shape``; onnx_ad then refused a Conv
    'needs a declared input shape'). Best effort: a model the loader refuses keeps
    onnx's types."""
    from graphmem.core.dtypes import ENUM_BY_NAME
    from graphmem.frontend.reader import from_model

    g = m.graph
    typed = {vi.name: vi for vi in list(g.input) + list(g.output) + list(g.value_info)}

    def static(vi) -> bool:
        t = vi.type.tensor_type
        return t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim)

    wanted = {o for n in g.node for o in n.output if o and not (o in typed and static(typed[o]))}
    if not wanted:
        return
    try:
        tensors = from_model(m, check=False).tensors
    except GraphmemError:
        return
    in_value_info = {vi.name for vi in g.value_info}
    for name in sorted(wanted):
        t = tensors.get(name)
        if t is None or t.dtype not in ENUM_BY_NAME:
            continue
        vi = helper.make_tensor_value_info(name, ENUM_BY_NAME[t.dtype], list(t.shape))
        if name in in_value_info:
            typed[name].CopyFrom(vi)
        elif name not in typed:
            g.value_info.append(vi)


def _stats_as_initializers(g: onnx.GraphProto, names) -> None:
    """Running statistics that are an ``Identity`` of an initializer become initializers
    of their own: PyTorch's TorchScript exporter writes one initializer for equal
    tensors and an ``Identity`` for each other (every fresh BatchNorm's running variance
    is ones), and in training mode each node updates its own."""
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    made = set()
    for name in names:
        src, node = name, producer.get(name)
        while src not in inits and node is not None and node.op_type == "Identity":
            src, node = node.input[0], producer.get(node.input[0])
        if name in inits or src not in inits or name in made:
            continue
        copy = onnx.TensorProto()
        copy.CopyFrom(inits[src])
        copy.name = name
        g.initializer.append(copy)
        made.add(name)
    if made:
        kept = [n for n in g.node if not (n.op_type == "Identity" and n.output[0] in made)]
        del g.node[:]
        g.node.extend(kept)


def _keep_one_output(g: onnx.GraphProto, name: str | None) -> None:
    """Keep only the graph output ``name`` (default: the first) and what computes it."""
    names = [o.name for o in g.output]
    if not names:
        raise GraphmemError("training needs a model with an output")
    name = names[0] if name is None else name
    if name not in names:
        raise GraphmemError(f"--output {name}: the model has no output of that name "
                            f"(its outputs: {', '.join(names[:8])})")
    kept = [o for o in g.output if o.name == name]
    del g.output[:]
    g.output.extend(kept)
    needed = {name}
    live = []
    for n in reversed(g.node):  # the nodes are in a topological order (checked on load)
        if any(o in needed for o in n.output):
            live.append(n)
            needed.update(t for t in n.input if t)
            for a in n.attribute:  # a subgraph's reads from the outer scope
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    needed.update(t for sn in sub.node for t in sn.input if t)
    del g.node[:]
    g.node.extend(reversed(live))
    keep_inits = [t for t in g.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(keep_inits)
    keep_inputs = [i for i in g.input if i.name in needed]
    del g.input[:]
    g.input.extend(keep_inputs)


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def _add_loss(m: onnx.ModelProto, loss: str) -> tuple[str, list[str]]:
    g = m.graph
    out = g.output[0]
    producer = {o: n for n in g.node for o in n.output}
    data_inputs = [i.name for i in g.input]
    last = producer.get(out.name)
    if loss == "auto":
        loss = "xent" if last is not None and last.op_type == "Softmax" else "sum"
    if loss not in LOSSES:
        raise GraphmemError(f"unknown loss {loss!r}; choose from auto, {', '.join(LOSSES)}")
    nodes = []
    if loss == "xent":
        if last is not None and last.op_type == "Softmax":
            logits = last.input[0]
            g.node.remove(last)
        else:
            logits = out.name
        dims = [d.dim_value for d in out.type.tensor_type.shape.dim]
        if len(dims) != 2 or not all(dims):
            raise GraphmemError(f"cross-entropy needs a [batch, classes] output, not {dims}")
        g.input.append(helper.make_tensor_value_info("label", TensorProto.FLOAT, dims))
        data_inputs.append("label")
        g.initializer.append(numpy_helper.from_array(
            np.array(-1.0 / dims[0], np.float32), "loss_scale"))
        nodes = [helper.make_node("LogSoftmax", [logits], ["loss_logp"], axis=1),
                 helper.make_node("Mul", ["loss_logp", "label"], ["loss_terms"]),
                 helper.make_node("ReduceSum", ["loss_terms"], ["loss_total"], keepdims=0),
                 helper.make_node("Mul", ["loss_total", "loss_scale"], ["loss"])]
    elif loss == "sum":
        nodes = [helper.make_node("ReduceSum", [out.name], ["loss"], keepdims=0)]
    else:
        nodes = [helper.make_node("ReduceMean", [out.name], ["loss"], keepdims=0)]
    g.node.extend(nodes)
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    return "loss", data_inputs


def _rename_input(g: onnx.GraphProto, old: str, new: str) -> None:
    for i in g.input:
        if i.name == old:
            i.name = new
    for n in g.node:
        for k, t in enumerate(n.input):
            if t == old:
                n.input[k] = new


def _bind_seed_dim(g: onnx.GraphProto) -> None:
    """One seed: every symbolic dimension onnx_ad introduced becomes 1."""
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.Clear()
                d.dim_value = 1


def _squeeze_gradients(m: onnx.ModelProto, weights) -> dict[str, str]:
    """``adj_<w>`` has a trailing seed axis of 1: reshape it to ``w``'s shape."""
    g = m.graph
    outputs = {o.name: o for o in g.output}
    g.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), "grad_seed_axis"))
    gradients = {}
    for i, w in enumerate(weights):
        adj = f"adj_{w}"
        if adj not in outputs:
            raise GraphmemError(f"reverse mode gave no gradient for {w!r}")
        name = f"grad/{w}"
        g.node.append(helper.make_node("Squeeze", [adj, "grad_seed_axis"], [name],
                                       name=f"b:g{i}"))
        o = outputs[adj]
        dims = [d.dim_value for d in o.type.tensor_type.shape.dim][:-1]
        g.output.remove(o)
        g.output.append(helper.make_tensor_value_info(name, o.type.tensor_type.elem_type, dims))
        gradients[w] = name
    return gradients
