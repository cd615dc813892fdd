"""Every tensor's shape and bytes as exact formulas of the free dims of a box.

The loader infers static shapes at one binding (:func:`graphmem.frontend.reader.load`,
every strategy: onnx's inference, control flow, folded constants, contrib rules). Here
it runs at every point of a grid over the box (:class:`~graphmem.ranges.formulas.Grid`:
each free dim at its two ends and its middle), each axis of each tensor is interpolated
exactly (a polynomial of degree <= 2 in each dim, rational coefficients), and every
formula is then checked against the loader at further bindings (seeded, inside the box):
an axis that follows one free dim as ``floor((w + B)/C)`` (a strided convolution or
pooling) becomes a computed dim named by that arithmetic (:func:`_floors`), and the axes
after it are fitted again over it; a formula that still misses is not a formula of the
dims (a ``Min``, a shape read from data), and is named in one line with its tensor and op.
"""
from __future__ import annotations

import random
from fractions import Fraction
from typing import Callable, Mapping

from graphmem.core.ir import Graph
from graphmem.core.records import record
from graphmem.errors import GraphmemError, PlanInvalid, UnknownShape
from graphmem.ranges.formulas import Box, Formula, Grid, aux_name, aux_parts, value_of


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
    aux: tuple = ()  # the computed dims the formulas name besides the free ones

    @property
    def names(self) -> tuple[str, ...]:
        """What every formula is over: the free dims, then the computed ones."""
        return tuple(self.box) + tuple(self.aux)


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
            try:
                loaded[key] = g = load_at(dict(binding))
            except GraphmemError as exc:
                if not loaded or isinstance(exc, PlanInvalid):
                    raise  # the model fails at the first binding: not the binding's doing
                # the model loads elsewhere in the box: say where it does not
                where = f"at {_binding_text(binding)} (in {_box_text(box)}): {exc}"
                if isinstance(exc, UnknownShape):
                    raise UnknownShape(where, exc.tensor) from None
                raise GraphmemError(where) from None
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
    axes: dict[tuple[str, int], Formula] = {}
    for name, t in ref.tensors.items():
        for i in range(len(t.shape)):
            axes[name, i] = grid.fit([g.tensors[name].shape[i] for g in graphs])
    bound = {k: grid.fit([g.bindings[k] for g in graphs]) for k in ref.bindings
             if k not in box and all(k in g.bindings for g in graphs)}
    rng = random.Random(seed)
    for _ in range(checks):
        graph_at({n: rng.randint(lo, hi) for n, (lo, hi) in box.items()})
    failing = _misses(axes, loaded)
    aux: list[str] = []
    if failing:  # floors of divisions: computed dims, then the axes over them
        _floors(failing, axes, aux, box, loaded, graph_at, grid)
    ext = names + tuple(aux)
    unfitted: dict[str, str] = {}
    for key, g in list(loaded.items()):
        binding = dict(key)
        for k in [k for k, f in bound.items() if g.bindings.get(k) != f.at(binding)]:
            unfitted[f"dim {k}"] = (f"the dim {k!r} the model computes is {g.bindings.get(k)} "
                                    f"at {_binding_text(binding)}, not a polynomial of "
                                    f"{', '.join(names)}")
            del bound[k]
    tensors: dict[str, TensorFormula] = {}
    missed = _misses(axes, loaded)
    for name, t in ref.tensors.items():
        shape = tuple(axes[name, i].widen(ext) for i in range(len(t.shape)))
        tensors[name] = TensorFormula(t.dtype, t.bits, shape, bytes_formula(shape, t.bits, ext))
        bad = [i for i in range(len(t.shape)) if (name, i) in missed]
        if bad:
            binding = missed[name, bad[0]]
            actual = loaded[binding_key(binding)].tensors[name]
            node = producer.get(name)
            where = (f"{node.op_type} node {node.name or node.index!r}" if node
                     else "a graph input" if name in ref.inputs else "a weight")
            unfitted[name] = (f"tensor {name!r} (of {where}): shape {actual.shape} at "
                              f"{_binding_text(binding)} is not "
                              f"[{', '.join(a.text() for a in shape)}]; its size is "
                              f"not a polynomial of {', '.join(ext)}")
    bound = {k: f.widen(ext) for k, f in bound.items()}
    top = {n: hi for n, (lo, hi) in box.items()}
    return SizeFormulas(dict(box), tensors, tuple(unfitted.values()), graph_at(top), loaded,
                        bound, tuple(aux))


def _misses(axes: dict, loaded: dict) -> dict:
    """(tensor, axis) -> a binding where its formula misses the loader's shape."""
    out = {}
    for key, g in loaded.items():
        binding = dict(key)
        for (name, i), f in axes.items():
            if (name, i) not in out and f.exact(binding) != g.tensors[name].shape[i]:
                out[name, i] = binding
    return out


def _floors(failing: dict, axes: dict, aux: list, box: Box, loaded: dict, graph_at,
            grid: Grid) -> None:
    """Axes that are ``floor((w + b)/c)`` of a free dim (or of such a computed dim) become
    that computed dim (added to ``aux``); then the axes still missing are fitted again
    with a computed dim in place of the free one it is computed from."""
    names = tuple(box)
    for _ in range(4):  # nested floors: a strided op after a strided op
        found = False
        for (name, i) in list(failing):
            x = _only_dim(name, i, loaded, names)
            if x is None:
                continue
            for w in [x] + [u for u in aux if _root(u) == x]:
                made = _floor_of(name, i, w, x, box, loaded, graph_at)
                if made is not None:
                    if made not in aux:
                        aux.append(made)
                    axes[name, i] = Formula.var(names + tuple(aux), made)
                    found = True
                    break
        # every formula over the names so far
        ext = names + tuple(aux)
        for k in axes:
            if axes[k].names != ext:
                axes[k] = axes[k].widen(ext)
        failing = _misses(axes, loaded)
        for (name, i) in list(failing):
            f = _refit(name, i, aux, box, loaded, graph_at, grid)
            if f is not None:
                axes[name, i] = f.widen(ext)
        failing = _misses(axes, loaded)
        if not failing or not found:
            return


def _root(name: str) -> str:
    parts = aux_parts(name)
    return name if parts is None else _root(parts[0])


def _only_dim(name: str, i: int, loaded: dict, names) -> str | None:
    """The one free dim the axis follows at every loaded binding (None for none or more)."""
    for x in names:
        seen: dict[int, int] = {}
        if all(seen.setdefault(dict(k)[x], g.tensors[name].shape[i]) == g.tensors[name].shape[i]
               for k, g in loaded.items()):
            return x
    return None


def _floor_of(name, i, w, x, box, loaded, graph_at) -> str | None:
    """The computed dim ``floor((w + b)/c)`` the axis is at every loaded binding (loading
    ``c + 1`` consecutive values of ``w`` to pin ``b``), or None."""
    lo, hi = box[x]
    base = {n: r[0] for n, r in box.items()}
    pts = sorted({(value_of(w, dict(k)), g.tensors[name].shape[i]) for k, g in loaded.items()})
    (w0, y0), (w1, y1) = pts[0], pts[-1]
    if y1 == y0 or w1 == w0:
        return None
    c = round((w1 - w0) / (y1 - y0))
    if c < 2 or c > 4096:
        return None
    start = value_of(w, {**base, x: lo})
    want: set[int] = set()
    v = lo
    while v <= hi and len(want) < c + 1:  # c + 1 consecutive values of w, from the low end
        wv = value_of(w, {**base, x: v})
        if wv > start + c:
            break
        if wv not in want:
            want.add(wv)
            graph_at({**base, x: v})
        v += 1
    b_lo, b_hi = -10 ** 18, 10 ** 18
    for k, g in loaded.items():
        wv, y = value_of(w, dict(k)), g.tensors[name].shape[i]
        b_lo, b_hi = max(b_lo, c * y - wv), min(b_hi, c * y - wv + c - 1)
    if b_lo > b_hi:
        return None
    made = aux_name(w, b_lo, c)
    if all(value_of(made, dict(k)) == g.tensors[name].shape[i] for k, g in loaded.items()):
        return made
    return None


def _refit(name, i, aux, box, loaded, graph_at, grid: Grid) -> Formula | None:
    """The axis as a polynomial with one computed dim in place of its free dim: on the
    grid's values of the other dims and the computed dim's values at the grid's values
    of the free one (loading where needed), checked at every loaded binding."""
    names = tuple(box)
    for u in aux:
        x = _root(u)
        j = names.index(x)
        us = {value_of(u, {x: v}): v for v in grid.values[j]}
        if len(us) < len(grid.values[j]):
            continue
        sub = names[:j] + (u,) + names[j + 1:]
        values = [sorted(us) if n == u else grid.values[k] for k, n in enumerate(sub)]
        g2 = Grid(dict.fromkeys(sub, (0, 0)), values=values)
        ys = []
        for p in g2.points:
            binding = {n: (us[p[u]] if n == x else p[n]) for n in names}
            ys.append(graph_at(binding).tensors[name].shape[i])
        f = g2.fit(ys)
        ext = names + tuple(aux)
        f = f.widen(ext)
        if all(f.exact(dict(k)) == g.tensors[name].shape[i] for k, g in loaded.items()):
            return f
    return None


def _box_text(box: Box) -> str:
    return ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in box.items())


def _binding_text(binding: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in binding.items())


def check_at(formulas: SizeFormulas, graph: Graph, binding: Mapping[str, int]) -> list[str]:
    """The tensors of ``graph`` (loaded at ``binding``) whose bytes differ from their
    formula there: none when the formulas hold."""
    return [f"{name}: formula {f.bytes.text()} = {f.bytes.at(binding)}, loader "
            f"{graph.tensors[name].bytes}" for name, f in formulas.tensors.items()
            if f.bytes.at(binding) != graph.tensors[name].bytes]
