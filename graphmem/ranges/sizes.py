"""Every tensor's shape and bytes as exact formulas of the free dims of a box.

The loader infers static shapes at one binding (:func:`graphmem.frontend.reader.load`,
every strategy: onnx's inference, control flow, folded constants, contrib rules). Here
it runs at every point of a grid over the box (:class:`~graphmem.ranges.formulas.Grid`:
each free dim at its two ends and its middle), each axis of each tensor is interpolated
exactly (a polynomial of degree <= 2 in each dim, rational coefficients), and every
formula is then checked against the loader at further bindings (seeded, inside the box):
a formula that misses one is not a formula of the dims (a ``Min``, a ``floor`` of a
division, a shape read from data), and is named in one line with its tensor and op.
"""
from __future__ import annotations

import random
from fractions import Fraction
from typing import Callable, Mapping

from graphmem.core.ir import Graph
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.ranges.formulas import Box, Formula, Grid


@record
class TensorFormula:
    """One tensor: its dtype, bits per element, each axis and its bytes as formulas."""

    dtype: str
    bits: int
    shape: tuple[Formula, ...]
    bytes: Formula


@record
class SizeFormulas:
    """The formulas of a model over ``box``: ``tensors`` (every tensor of the graph,
    weights and folded constants too), ``unfitted`` (one line per tensor whose size is
    not such a formula), the graph at the box's upper corner (``graph``) and every graph
    the fit loaded, by binding (``loaded``), and every other binding the loader made
    (``bindings``: a fixed dim, or one written as an expression of others) as a formula."""

    box: dict
    tensors: dict
    unfitted: tuple
    graph: Graph
    loaded: dict
    bindings: dict  # every other dim the loader bound (fixed, or an expression: past_seq + 1)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.box)


def binding_key(binding: Mapping[str, int]) -> tuple:
    return tuple(sorted(binding.items()))


def bytes_formula(shape: tuple[Formula, ...], bits: int, names) -> Formula:
    """The dense bytes of a tensor of ``shape``: ceil(prod(shape) * bits / 8)."""
    numel = Formula.const(names, 1)
    for axis in shape:
        numel = numel * axis
    return numel * Fraction(bits, 8)


def structure(graph: Graph) -> tuple:
    """What must not change from one binding to another: the running nodes, the
    constants, every tensor's dtype and rank."""
    return (tuple(n.index for n in graph.nodes), tuple(graph.constants),
            tuple(sorted((t.name, t.dtype, len(t.shape)) for t in graph.tensors.values())))


def size_formulas(load_at: Callable[[dict], Graph], box: Box, *, checks: int = 4,
                  seed: int = 0) -> SizeFormulas:
    """Fit and check the formulas of the graphs ``load_at(binding)`` gives over ``box``
    (a binding of every free dim; the fixed dims are ``load_at``'s business)."""
    names = tuple(box)
    grid = Grid(box)
    loaded: dict[tuple, Graph] = {}

    def graph_at(binding: dict) -> Graph:
        key = binding_key(binding)
        if key not in loaded:
            loaded[key] = g = load_at(dict(binding))
            if g.scopes:
                raise GraphmemError("a range of dims is not planned for a model with "
                                    "If/Loop/Scan bodies yet; bind every dim with --dim NAME=VALUE")
            first = next(iter(loaded.values()))
            if structure(g) != structure(first):
                raise GraphmemError(
                    f"the graph changes with the dims ({_binding_text(binding)} folds or "
                    f"types differently from {_binding_text(dict(next(iter(loaded))))}); "
                    "plan the range in parts")
        return loaded[key]

    graphs = [graph_at(p) for p in grid.points]
    ref = graphs[0]
    producer = {t: n for n in ref.nodes for t in n.outputs if t}
    tensors: dict[str, TensorFormula] = {}
    for name, t in ref.tensors.items():
        shape = tuple(grid.fit([g.tensors[name].shape[i] for g in graphs])
                      for i in range(len(t.shape)))
        tensors[name] = TensorFormula(t.dtype, t.bits, shape,
                                      bytes_formula(shape, t.bits, names))
    bound = {k: grid.fit([g.bindings[k] for g in graphs]) for k in ref.bindings
             if k not in box and all(k in g.bindings for g in graphs)}
    rng = random.Random(seed)
    extra = [{n: rng.randint(lo, hi) for n, (lo, hi) in box.items()} for _ in range(checks)]
    unfitted: dict[str, str] = {}
    for binding in extra:
        g = graph_at(binding)
        for k in [k for k, f in bound.items() if g.bindings.get(k) != f.at(binding)]:
            unfitted[f"dim {k}"] = (f"the dim {k!r} the model computes is {g.bindings.get(k)} "
                                    f"at {_binding_text(binding)}, not a polynomial of "
                                    f"{', '.join(names)}")
            del bound[k]
        for name, f in tensors.items():
            if name in unfitted:
                continue
            actual = g.tensors[name]
            if any(a.at(binding) != v for a, v in zip(f.shape, actual.shape)) \
                    or f.bytes.at(binding) != actual.bytes:
                node = producer.get(name)
                where = (f"{node.op_type} node {node.name or node.index!r}" if node
                         else "a graph input" if name in ref.inputs else "a weight")
                unfitted[name] = (f"tensor {name!r} (of {where}): shape {actual.shape} at "
                                  f"{_binding_text(binding)} is not "
                                  f"[{', '.join(a.text() for a in f.shape)}]; its size is "
                                  f"not a polynomial of {', '.join(names)}")
    top = {n: hi for n, (lo, hi) in box.items()}
    return SizeFormulas(dict(box), tensors, tuple(unfitted.values()), graph_at(top), loaded, bound)


def _binding_text(binding: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in binding.items())


def check_at(formulas: SizeFormulas, graph: Graph, binding: Mapping[str, int]) -> list[str]:
    """The tensors of ``graph`` (loaded at ``binding``) whose bytes differ from their
    formula there: none when the formulas hold."""
    return [f"{name}: formula {f.bytes.text()} = {f.bytes.at(binding)}, loader "
            f"{graph.tensors[name].bytes}" for name, f in formulas.tensors.items()
            if f.bytes.at(binding) != graph.tensors[name].bytes]
