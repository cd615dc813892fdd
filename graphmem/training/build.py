"""Inference ONNX model -> training graph (loss, backward pass, weight gradients).

Reverse mode is done by ``onnx_ad`` (pinned in pyproject.toml); this module is the only
one that imports it. After reversal we rewrite what its rules get wrong for memory:
ReLU's backward mask is taken from the ReLU's output, not its input, so the
pre-activation can die in forward.

Node names carry the phase: ``f:<i>`` forward (the model and the loss), ``b:<i>``
backward (everything onnx_ad added), ``r:<i>`` recomputation (see :mod:`.recompute`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import GraphmemError
from .grouped_conv import patched
from .prepare import prepare_inference

LOSSES = ("xent", "sum", "mean")
# Small int64 arithmetic on shapes that :func:`_fold_shape_queries` evaluates.
SHAPE_ARITHMETIC = {"Concat", "Slice", "Reshape", "Squeeze", "Unsqueeze", "Gather", "Add",
                    "Sub", "Mul", "Div", "Cast", "Identity"}
SEED = "loss_seed"


@dataclass(frozen=True)
class TrainingGraph:
    """A training step as one ONNX model, and what its names mean."""

    model: onnx.ModelProto
    loss: str
    weights: tuple[str, ...]  # trainable parameters (initializers)
    gradients: dict = field(default_factory=dict)  # weight -> gradient output name
    data_inputs: tuple[str, ...] = ()  # data (and label) inputs, seed excluded
    seed: str = SEED  # the loss seed input: feed np.ones([1], float32)

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
                   prepared: bool = False) -> TrainingGraph:
    """Build the training graph of an inference model.

    ``loss``: ``xent`` (cross-entropy of the logits against a one-hot ``label`` input;
    a final Softmax is dropped and its input used as logits), ``sum`` or ``mean`` of the
    output, or ``auto`` (``xent`` when the output comes from a Softmax, else ``sum``).
    BatchNormalization stays in inference form (frozen running statistics).
    ``relu_fix`` and ``rewrites`` switch our post-reversal rewrites off (for checks).
    """
    import onnx_ad

    m = model if prepared else prepare_inference(model, batch)
    m = _copy(m)
    g = m.graph
    if len(g.output) != 1:
        raise GraphmemError(f"training needs a model with one output, not {len(g.output)}")
    weights = trainable_weights(m)
    if not weights:
        raise GraphmemError("the model has no trainable float initializers")
    loss_name, data_inputs = _add_loss(m, loss)
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
        g = m.graph
        with patched():  # our grouped-Conv weight rule
            r = onnx_ad.reverse(m, inputs=list(weights), outputs=[loss_name], layout="onnx")
    except Exception as exc:
        raise GraphmemError(f"reverse mode failed: {type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:300]}") from None
    rg = r.graph
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
    keep = [o for o in rg.output if o.name == loss_name or o.name in gradients.values()]
    del rg.output[:]
    rg.output.extend(keep)
    return TrainingGraph(r, loss_name, tuple(weights), gradients, tuple(data_inputs))


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


def relu_mask_from_output(m: onnx.ModelProto) -> int:
    """Rewrite ``Greater(c, 0)`` on a ReLU's input ``c`` in backward to read ``relu(c)``.

    ``relu(c) > 0`` exactly when ``c > 0``, so the mask is the same; but ``c`` no longer
    has a backward reader and can die in forward. Returns the number of rewrites.
    """
    g = m.graph
    relu_of = {n.input[0]: n.output[0] for n in g.node
               if n.op_type == "Relu" and n.name.startswith("f:")}
    zeros = {i.name for i in g.initializer if not numpy_helper.to_array(i).any()}
    zeros |= {n.output[0] for n in g.node if n.op_type == "Constant"
              and not numpy_helper.to_array(n.attribute[0].t).any()}
    count = 0
    for n in g.node:
        if (n.op_type == "Greater" and n.name.startswith("b:") and n.input[0] in relu_of
                and n.input[1] in zeros):
            n.input[0] = relu_of[n.input[0]]
            count += 1
    return count


def _static_shapes(m: onnx.ModelProto) -> dict[str, list[int]]:
    """Static shapes of every value, from graphmem's loader (it folds shape arithmetic
    that onnx's own inference gives up on)."""
    from ..load import from_model
    graph = from_model(m, check=False)
    return {name: list(t.shape) for name, t in graph.tensors.items()}


def _fold_shape_queries(m: onnx.ModelProto, shapes: dict[str, list[int]]) -> int:
    """Replace backward ``Shape``/``Size`` of statically shaped tensors, and the small
    int64 arithmetic on them, by initializers.

    Every shape is static once the batch and the seed count are bound; as constants,
    the shape arithmetic onnx_ad emits folds away instead of needing evaluation (which
    the loader could not finish for inception_v1's MaxPool adjoint once the weights
    were initializers again).
    """
    from ..constants import shape_value
    from ..ir import Tensor

    from onnx.reference import ReferenceEvaluator

    g = m.graph
    small = {i.name: numpy_helper.to_array(i) for i in g.initializer
             if i.data_type == TensorProto.INT64 and int(np.prod(i.dims)) <= 64}
    keep, count = [], 0
    for n in g.node:
        src = shapes.get(n.input[0]) if n.input else None
        value = None
        if n.op_type in ("Shape", "Size") and n.name.startswith("b:") and src is not None:
            value = shape_value(n, Tensor(n.input[0], "float32", tuple(src), 32))
        elif (n.name.startswith("b:") and n.op_type in SHAPE_ARITHMETIC and len(n.output) == 1
              and all(t in small for t in n.input if t)):
            out = ReferenceEvaluator(helper.make_model(helper.make_graph(
                [n], "fold", [], [helper.make_tensor_value_info(n.output[0], 0, None)],
                [numpy_helper.from_array(small[t], t) for t in dict.fromkeys(n.input) if t]),
                opset_imports=[helper.make_opsetid("", 17)])).run(None, {})[0]
            if out.dtype == np.int64 and out.size <= 64:
                value = out
        if value is not None:
            small[n.output[0]] = value
            g.initializer.append(numpy_helper.from_array(value, n.output[0]))
            count += 1
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    return count


def copies_to_reshapes(m: onnx.ModelProto) -> int:
    """Turn backward copies that only move data into ``Reshape`` (a view the planner
    aliases): an ``Expand`` that adds no elements, and a ``Transpose`` that only moves
    axes of size 1 (both come from the seed axis of size 1).

    onnx_ad expands each gradient to add its seed axis, and moves the seed axis around
    with transposes: full copies of the gradient (392 MiB each for vgg19's fc6).
    Returns the number of rewrites.
    """
    g = m.graph
    shapes = _static_shapes(m)
    count = _fold_shape_queries(m, shapes)
    for k, n in enumerate(g.node):
        if n.op_type not in ("Expand", "Transpose") or not n.name.startswith("b:"):
            continue
        src, dst = shapes.get(n.input[0]), shapes.get(n.output[0])
        if src is None or dst is None or int(np.prod(src)) != int(np.prod(dst)):
            continue
        if n.op_type == "Transpose":
            perm = list(helper.get_attribute_value(n.attribute[0])) if n.attribute else \
                list(reversed(range(len(src))))
            moved = [a for a in perm if src[a] != 1]
            if moved != sorted(moved):
                continue  # a real transpose: elements change places
        target = f"{n.output[0]}__shape"
        g.initializer.append(numpy_helper.from_array(np.array(dst, np.int64), target))
        g.node[k].CopyFrom(helper.make_node("Reshape", [n.input[0], target], list(n.output),
                                            name=n.name))
        count += 1
    return count


def fills_from_seed(m: onnx.ModelProto) -> int:
    """Make backward ``ConstantOfShape`` fills (the zeros a MaxPool adjoint scatters
    into) transient: ``Expand(loss_seed * 0 + value, shape)``.

    A fill of constants is folded by the planner and then held for the whole step like
    a weight (768 MiB of zeros for vgg19 at batch 32); computed from the seed input it
    is an arena tensor that lives only from its (sunk) producer to its reader.
    """
    g = m.graph
    count = 0
    for k, n in enumerate(g.node):
        if n.op_type != "ConstantOfShape" or not n.name.startswith("b:"):
            continue
        value = next((numpy_helper.to_array(a.t) for a in n.attribute if a.name == "value"),
                     np.zeros([1], np.float32))
        if value.dtype != np.float32:
            continue
        base = f"{n.output[0]}__fill"
        g.initializer.append(numpy_helper.from_array(
            np.array([0.0], np.float32), f"{base}_zero"))
        g.initializer.append(numpy_helper.from_array(value.reshape([1]), f"{base}_value"))
        fill = [helper.make_node("Mul", [SEED, f"{base}_zero"], [f"{base}_0"],
                                 name=f"{n.name}a"),
                helper.make_node("Add", [f"{base}_0", f"{base}_value"], [base],
                                 name=f"{n.name}b"),
                helper.make_node("Expand", [base, n.input[0]], list(n.output), name=n.name)]
        g.node[k].CopyFrom(fill[2])
        for j, node in enumerate(fill[:2]):
            g.node.insert(k + j, node)
        count += 1
    return count


def cancel_transposes(m: onnx.ModelProto) -> int:
    """Read ``x`` where backward computes ``Transpose(Transpose(x))`` with perms that
    cancel (onnx_ad's Gemm rule does this to weights: two folded 392 MiB copies of
    vgg19's fc6), then drop the nodes nobody reads any more."""
    g = m.graph
    producer = {o: n for n in g.node for o in n.output}

    def perm(n, rank):
        p = [list(helper.get_attribute_value(a)) for a in n.attribute if a.name == "perm"]
        return p[0] if p else list(reversed(range(rank)))

    replace_by = {}
    for n in g.node:
        first = producer.get(n.input[0]) if n.input else None
        if (n.op_type == "Transpose" and n.name.startswith("b:") and first is not None
                and first.op_type == "Transpose"):
            p1 = perm(first, len(perm(n, 0)) or 0) if first.attribute else None
            p2 = perm(n, len(p1) if p1 else 0)
            if p1 and len(p1) == len(p2) and [p1[i] for i in p2] == list(range(len(p2))):
                replace_by[n.output[0]] = first.input[0]
    outputs = {o.name for o in g.output}
    replace_by = {k: v for k, v in replace_by.items() if k not in outputs}
    for n in g.node:
        for k, t in enumerate(n.input):
            if t in replace_by:
                n.input[k] = replace_by[t]
    while True:  # drop dead nodes
        read = {t for n in g.node for t in n.input} | outputs
        dead = [n for n in g.node if n.name.startswith("b:") and not any(
            o in read for o in n.output if o)]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
    return len(replace_by)


def pads_into_weight_conv(m: onnx.ModelProto) -> int:
    """``Conv(Transpose(Pad(x)), f, pads=0)`` -> ``Conv(Transpose(x), f, pads=p)``.

    onnx_ad's Conv weight gradient pads the forward input explicitly (a full copy of it
    at the peak of backward); the pads are on spatial axes only and the transpose swaps
    the first two, so the convolution can pad by itself. Returns the rewrites.
    """
    g = m.graph
    producer = {o: n for n in g.node for o in n.output}
    readers: dict[str, int] = {}
    for n in g.node:
        for t in n.input:
            readers[t] = readers.get(t, 0) + 1
    inits = {i.name: i for i in g.initializer}
    count = 0
    for conv in g.node:
        if conv.op_type != "Conv" or not conv.name.startswith("b:"):
            continue
        tr = producer.get(conv.input[0])
        pad = producer.get(tr.input[0]) if tr is not None and tr.op_type == "Transpose" else None
        if pad is None or pad.op_type != "Pad" or readers.get(pad.output[0]) != 1:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in pad.attribute}
        mode = attrs.get("mode", b"constant")
        if mode not in (b"constant", "constant") or len(pad.input) > 2 and pad.input[2]:
            continue
        if len(pad.input) < 2 or pad.input[1] not in inits:
            continue
        pads = numpy_helper.to_array(inits[pad.input[1]]).tolist()
        rank = len(pads) // 2
        perm = [list(helper.get_attribute_value(a)) for a in tr.attribute if a.name == "perm"]
        conv_attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
        if (not perm or perm[0][:2] != [1, 0] or perm[0][2:] != list(range(2, rank))
                or pads[0] or pads[1] or pads[rank] or pads[rank + 1]
                or any(conv_attrs.get("pads", [0]))):
            continue
        spatial_pads = pads[2:rank] + pads[rank + 2:]
        tr.input[0] = pad.input[0]
        for a in list(conv.attribute):
            if a.name == "pads":
                conv.attribute.remove(a)
        conv.attribute.append(helper.make_attribute("pads", spatial_pads))
        count += 1
    outputs = {o.name for o in g.output}
    read = {t for n in g.node for t in n.input} | outputs
    for n in [n for n in g.node if n.op_type == "Pad" and n.output[0] not in read]:
        g.node.remove(n)
    return count


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
