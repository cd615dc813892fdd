"""Graph rewrites of onnx_ad's backward pass that keep its gradients and cut memory.

Each returns how many places it rewrote; each only touches backward nodes (``b:``
names). ``tests/test_training.py`` checks that they leave the gradients unchanged.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = "loss_seed"  # the graph input that seeds the loss adjoint
# Small int64 arithmetic on shapes that :func:`_fold_shape_queries` evaluates.
SHAPE_ARITHMETIC = {"Concat", "Slice", "Reshape", "Squeeze", "Unsqueeze", "Gather", "Add",
                    "Sub", "Mul", "Div", "Cast", "Identity"}


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
    from graphmem.frontend.reader import from_model
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
    from graphmem.frontend.folding import shape_value
    from graphmem.core.ir import Tensor

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
    with transposes: full copies of the gradient.
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
    a weight; computed from the seed input it
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
    cancel (onnx_ad's Gemm rule does this to weights: two folded copies of each
    weight), then drop the nodes nobody reads any more."""
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
