"""LoRA adapters (Hu et al. 2021) added to an inference graph, for planning the
fine-tuning step where only they train.

For each matrix product whose weight ``W`` is a 2-D initializer (``MatMul(x, W)``, or
``Gemm(x, W)`` with ``transA`` 0), the graph gets two initializers ``A`` (in x rank) and
``B`` (rank x out) and computes ``y + (x @ A) @ B`` in place of ``y``; ``A`` is drawn
small and ``B`` is zero, as LoRA initializes them, so the adapted graph computes what
the original does. The base weights are read and frozen: no gradient, no optimizer
state. ``targets`` (glob patterns on the weight's or the node's name) choose the
products; by default every one qualifies.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphmem.core.records import record
from graphmem.errors import GraphmemError


@record
class Lora:
    """Adapters of ``rank`` on the products whose weight or node name matches one of
    ``targets`` (all when empty)."""

    rank: int
    targets: tuple[str, ...] = ()

    def __post_init__(self):
        if self.rank <= 0:
            raise GraphmemError(f"--lora: the rank must be positive, not {self.rank}")

    def matches(self, weight: str, node: str) -> bool:
        return not self.targets or any(fnmatchcase(weight, t) or fnmatchcase(node, t)
                                       for t in self.targets)

    def add_to(self, model: onnx.ModelProto) -> list[str]:
        """Add the adapters to ``model`` (changed in place) and return their
        initializers' names, ``A`` and ``B`` of each product in node order."""
        g = model.graph
        inits = {i.name: i for i in g.initializer}
        names = {n for node in g.node for n in (*node.input, *node.output)} | set(inits)
        rng = np.random.default_rng(self.rank)
        adapters: list[str] = []
        nodes: list[onnx.NodeProto] = []
        for k, node in enumerate(g.node):
            nodes.append(node)
            w = inits.get(node.input[1]) if len(node.input) > 1 else None
            if w is None or len(w.dims) != 2 or not self._product(node) \
                    or not self.matches(w.name, node.name):
                continue
            trans_b = node.op_type == "Gemm" and _attr(node, "transB")
            fan_in, fan_out = (w.dims[1], w.dims[0]) if trans_b else (w.dims[0], w.dims[1])
            dtype = helper.tensor_dtype_to_np_dtype(w.data_type)
            base = _fresh(f"lora{k}", names)
            a, b = f"{base}.A", f"{base}.B"
            g.initializer.append(numpy_helper.from_array(
                (rng.standard_normal((fan_in, self.rank)) / fan_in).astype(dtype), a))
            g.initializer.append(numpy_helper.from_array(
                np.zeros((self.rank, fan_out), dtype), b))
            y = node.output[0]
            plain = _fresh(f"{y}.base", names)
            node.output[0] = plain
            nodes += [helper.make_node("MatMul", [node.input[0], a], [f"{base}.xa"],
                                       name=f"{base}/down"),
                      helper.make_node("MatMul", [f"{base}.xa", b], [f"{base}.xab"],
                                       name=f"{base}/up"),
                      helper.make_node("Add", [plain, f"{base}.xab"], [y],
                                       name=f"{base}/add")]
            names.update((a, b, f"{base}.xa", f"{base}.xab"))
            adapters += [a, b]
        if not adapters:
            raise GraphmemError("--lora: no matrix product with a 2-D weight matches "
                                + (f"--lora-targets {' '.join(self.targets)}" if self.targets
                                   else "in the model"))
        del g.node[:]
        g.node.extend(nodes)
        return adapters

    @staticmethod
    def _product(node: onnx.NodeProto) -> bool:
        if node.domain not in ("", "ai.onnx"):
            return False
        return node.op_type == "MatMul" or (node.op_type == "Gemm"
                                            and not _attr(node, "transA"))


def _attr(node: onnx.NodeProto, name: str) -> int:
    return next((a.i for a in node.attribute if a.name == name), 0)


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
