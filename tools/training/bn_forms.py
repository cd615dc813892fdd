"""Three forms of BatchNormalization in a training step, by what they keep for backward.

    python -m tools.training.bn_forms [MODEL] [--batch 32]

- ``training``: graphmem's default (``build_training(bn="training")``): one
  ``training_mode=1`` node, differentiated by our rule (graphmem/training/rules.py),
  which reads only the node's input and recomputes the batch statistics in backward;
- ``inference``: frozen running statistics (``bn="inference"``), onnx-ad's rule;
- ``decomposed``: training mode written as primitive ops before reversal (ReduceMean,
  Sub, Mul, ReduceMean, Add, Sqrt, Div, Mul, Add, and the running-statistic updates),
  each differentiated by onnx-ad: the alternative to a rule of our own.

For each: nodes, the forward tensors backward reads (count and MiB), what is kept for
backward on the plan, the folded constants and the planned arena (MiB); the table of
docs/training.md's ``training:bn-forms`` section (tools/training/doc_figures.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import onnx
from onnx import helper, numpy_helper


from graphmem.frontend.zoo import zoo_path
import graphmem.training.build as build
from graphmem.training.report import account, load_training, plan_training


def decompose(m: onnx.ModelProto) -> list[str]:
    """Every BatchNormalization as primitive ops in training mode (ONNX semantics), its
    updated running statistics graph outputs ``running/<stat>``; returns their names."""
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    typed = onnx.shape_inference.infer_shapes(m).graph
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim)
             for vi in list(typed.value_info) + list(typed.input)}
    nodes, names, mk = [], [], helper.make_node
    for k, n in enumerate(g.node):
        if n.op_type != "BatchNormalization":
            nodes.append(n)
            continue
        x, s, b, rm, rv = n.input[:5]
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        eps, mom = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
        rank = ranks[x]
        axes = [0] + list(range(2, rank))
        p = f"bn{k}/"
        for name, v in {p + "eps": np.array(eps, np.float32),
                        p + "shape": np.array([1, -1] + [1] * (rank - 2), np.int64),
                        p + "flat": np.array([-1], np.int64),
                        p + "m": np.array(mom, np.float32),
                        p + "1-m": np.array(1 - mom, np.float32)}.items():
            g.initializer.append(numpy_helper.from_array(v, name))
        nodes += [mk("ReduceMean", [x], [p + "mean"], axes=axes, keepdims=1),
                  mk("Sub", [x, p + "mean"], [p + "centered"]),
                  mk("Mul", [p + "centered", p + "centered"], [p + "squared"]),
                  mk("ReduceMean", [p + "squared"], [p + "var"], axes=axes, keepdims=1),
                  mk("Add", [p + "var", p + "eps"], [p + "var+eps"]),
                  mk("Sqrt", [p + "var+eps"], [p + "std"]),
                  mk("Div", [p + "centered", p + "std"], [p + "xhat"]),
                  mk("Reshape", [s, p + "shape"], [p + "scale"]),
                  mk("Reshape", [b, p + "shape"], [p + "bias"]),
                  mk("Mul", [p + "xhat", p + "scale"], [p + "scaled"]),
                  mk("Add", [p + "scaled", p + "bias"], [n.output[0]])]
        for stat, batch in ((rm, p + "mean"), (rv, p + "var")):
            out = build.RUNNING + stat
            nodes += [mk("Reshape", [batch, p + "flat"], [out + "/batch"]),
                      mk("Mul", [stat, p + "m"], [out + "/old"]),
                      mk("Mul", [out + "/batch", p + "1-m"], [out + "/new"]),
                      mk("Add", [out + "/old", out + "/new"], [out])]
            g.output.append(helper.make_tensor_value_info(out, inits[stat].data_type,
                                                          list(inits[stat].dims)))
            names.append(out)
    del g.node[:]
    g.node.extend(nodes)
    return names


def measure(model: onnx.ModelProto, batch: int, form: str) -> dict:
    """One form's step, planned without anything recomputed (as `train --recompute none`
    plans it): its nodes, the forward tensors backward reads (count and bytes, each
    alone), what is kept for backward on the plan, the folded constants and the arena."""
    if form == "decomposed":
        with mock.patch.object(build, "_batch_norm_training", decompose):
            tg = build.build_training(model, batch, bn="training")
    else:
        tg = build.build_training(model, batch, bn=form)
    graph = load_training(tg)
    r = account(tg, graph, *plan_training(graph), batch, "adam")
    return {"nodes": r.nodes, "saved": r.saved_activations,
            "saved_bytes": r.saved_activation_bytes,
            "kept_bytes": r.extra["kept_for_backward_bytes"],
            "constant_bytes": r.constant_bytes, "arena_bytes": r.arena_bytes}


def table(name: str, batch: int) -> str:
    """The three forms of ``name`` (a zoo model or a file) at ``batch``, as Markdown."""
    path = Path(name)
    model = onnx.load(str(path if path.is_file() else zoo_path(name)))
    m = lambda b: f"{b / 2**20:,.1f}"  # noqa: E731
    lines = [f"{name}, batch {batch}, nothing recomputed, MiB "
             f"(`python -m tools.training.bn_forms {name} --batch {batch}`).", "",
             "| BatchNormalization | nodes | forward tensors backward reads | their MiB "
             "| kept for backward MiB | folded constants MiB | planned arena MiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for form in ("training", "inference", "decomposed"):
        d = measure(onnx.ModelProto.FromString(model.SerializeToString()), batch, form)
        lines.append(f"| {form} | {d['nodes']:,} | {d['saved']} | {m(d['saved_bytes'])} "
                     f"| {m(d['kept_bytes'])} | {m(d['constant_bytes'])} "
                     f"| {m(d['arena_bytes'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args(argv)
    print(table(args.model, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
