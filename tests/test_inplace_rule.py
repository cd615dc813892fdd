"""The in-place rule (docs/plan-format.md, "The in-place rule"), one table of cases fed to
both of its implementations: the passes (``inplace``, ``concat``) and the validator
(``graphmem/plan/links.py``). For each case the passes make the link exactly when the
validator accepts it in a plan, and both agree with the table, so the two cannot drift.

Each case is a graph of graphmem's IR built by hand (as a library user or another tool
may make one: an element-wise op whose output has another dtype, a Concat axis out of
range), the links the passes are expected to make on the way (``given``), and the link
asked about. The validator is given the plan of no passes (every tensor its own buffer)
with those links planted, its statistics and arena made to match.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import pytest

import graphmem
from graphmem.core.ir import Graph, Node, Tensor
from graphmem.plan.stats import plan_stats
from graphmem.plan.validate import problems

BITS = {"float32": 32, "float16": 16, "int32": 32, "int8": 8}


def _graph(tensors: dict[str, tuple[str, tuple[int, ...]]], nodes, inputs=("x",),
           outputs=("y",)) -> Graph:
    """A graph of (op, inputs, outputs[, attrs]) nodes over ``tensors`` name -> (dtype,
    shape)."""
    ts = {n: Tensor(n, d, tuple(s), BITS[d]) for n, (d, s) in tensors.items()}
    ns = tuple(Node(i, f"n{i}", op, "", tuple(ins), tuple(outs), dict(attrs[0]) if attrs else {})
               for i, (op, ins, outs, *attrs) in enumerate(nodes))
    return Graph("rule", ns, ts, tuple(inputs), tuple(outputs), frozenset(), ())


class Link(NamedTuple):
    """A link of a plan: ``tensor`` is a ``kind`` ("inplace", "view" or "slice") of
    ``of`` (the alias source, or the Concat output); ``at``: its byte offset inside
    ``of`` (a slice's)."""

    tensor: str
    kind: str
    of: str
    at: int = 0


class Case(NamedTuple):
    graph: Graph
    passes: tuple[str, ...]
    asked: Link
    allowed: bool
    words: str = ""  # in the validator's line, for a refused link
    given: tuple[Link, ...] = ()  # links the passes make first, planted too


F32 = "float32"
S = (4, 8)  # 128 bytes in float32


def _chain(src: tuple[str, tuple], out: tuple[str, tuple], op="Relu") -> Graph:
    """x -Neg-> a -op-> b -Neg-> y, ``a`` and ``b`` of the given (dtype, shape)."""
    return _graph({"x": src, "a": src, "b": out, "y": out},
                  [("Neg", ["x"], ["a"]), (op, ["a"], ["b"]), ("Neg", ["b"], ["y"])])


def _concat(axis: int, part: tuple, whole: tuple) -> Graph:
    """a = Neg(x), b = Sigmoid(x), c = Concat(a, b, axis), y = Neg(c)."""
    return _graph({"x": (F32, part), "a": (F32, part), "b": (F32, part), "c": (F32, whole),
                   "y": (F32, whole)},
                  [("Neg", ["x"], ["a"]), ("Sigmoid", ["x"], ["b"]),
                   ("Concat", ["a", "b"], ["c"], {"axis": axis}), ("Neg", ["c"], ["y"])])


def _branch_in_place(later_read_of_slice: bool) -> Case:
    """s1 = Neg(x), c2 = Sigmoid(x), s2 = Relu(c2), cat = Concat(s1, s2) on axis 1: s2
    written in place over c2 inside its own slice while s1 waits (allowed: s1's bytes
    are others); or, ``later_read_of_slice``, r = Relu(cat) written over cat while its
    slice s1 is still to be read by w = Neg(s1) (refused)."""
    p, w = (1, 4, 8), (1, 8, 8)
    tensors = {"x": (F32, p), "s1": (F32, p), "c2": (F32, p), "s2": (F32, p),
               "cat": (F32, w), "y": (F32, w)}
    nodes = [("Neg", ["x"], ["s1"]), ("Sigmoid", ["x"], ["c2"]), ("Neg", ["c2"], ["s2"]),
             ("Concat", ["s1", "s2"], ["cat"], {"axis": 1})]
    slices = (Link("s1", "slice", "cat", 0), Link("s2", "slice", "cat", 128))
    if not later_read_of_slice:
        nodes[2] = ("Relu", ["c2"], ["s2"])
        graph = _graph(tensors, nodes + [("Neg", ["cat"], ["y"])])
        return Case(graph, ("concat", "inplace"), Link("s2", "inplace", "c2"), True,
                    given=slices)
    tensors.update(r=(F32, w), z=(F32, p))
    graph = _graph(tensors, nodes + [("Relu", ["cat"], ["r"]), ("Neg", ["s1"], ["z"])],
                   outputs=("r", "z"))
    return Case(graph, ("concat", "inplace"), Link("r", "inplace", "cat"), False,
                "read later", given=slices)


def _view_read_later() -> Case:
    """v = Identity(a) read after Relu(a) -> b: b may not overwrite a."""
    graph = _graph({"x": (F32, S), "a": (F32, S), "v": (F32, S), "b": (F32, S), "y": (F32, S)},
                   [("Neg", ["x"], ["a"]), ("Identity", ["a"], ["v"]),
                    ("Relu", ["a"], ["b"]), ("Add", ["v", "b"], ["y"])])
    return Case(graph, ("inplace",), Link("b", "inplace", "a"), False, "read later",
                given=(Link("v", "view", "a"),))


CASES = {
    "same dtype and shape, the input dies": Case(
        _chain((F32, S), (F32, S)), ("inplace",), Link("b", "inplace", "a"), True),
    "float16 overwritten by int8 of the same bytes": Case(
        _chain(("float16", (4, 8)), ("int8", (8, 8))), ("inplace",),
        Link("b", "inplace", "a"), False, "of dtype float16, but it is int8"),
    "int32 overwritten by float32 of the same shape": Case(
        _chain(("int32", S), (F32, S)), ("inplace",), Link("b", "inplace", "a"), False,
        "of dtype int32, but it is float32"),
    "another shape of the same bytes": Case(
        _chain((F32, S), (F32, (32,))), ("inplace",), Link("b", "inplace", "a"), False,
        "of shape [4, 8], but its shape is [32]"),
    "a larger output (broadcast)": Case(
        _graph({"x": (F32, (1, 8)), "a": (F32, (1, 8)), "z": (F32, S), "b": (F32, S),
                "y": (F32, S)},
               [("Neg", ["x"], ["a"]), ("Add", ["a", "z"], ["b"]), ("Neg", ["b"], ["y"])],
               inputs=("x", "z")),
        ("inplace",), Link("b", "inplace", "a"), False, "of shape [1, 8], but its shape is"),
    "no bytes": Case(
        _chain((F32, (0, 8)), (F32, (0, 8))), ("inplace",), Link("b", "inplace", "a"),
        False, "has no bytes"),
    "the input is read later": Case(
        _graph({"x": (F32, S), "a": (F32, S), "b": (F32, S), "y": (F32, S)},
               [("Neg", ["x"], ["a"]), ("Relu", ["a"], ["b"]), ("Add", ["a", "b"], ["y"])]),
        ("inplace",), Link("b", "inplace", "a"), False, "read later"),
    "a view of the input is read later": _view_read_later(),
    "the input is a graph input": Case(
        _graph({"x": (F32, S), "y": (F32, S)}, [("Relu", ["x"], ["y"])]),
        ("inplace",), Link("y", "inplace", "x"), False, "graph input 'x'"),
    "the input is a graph output": Case(
        _graph({"x": (F32, S), "a": (F32, S), "b": (F32, S)},
               [("Neg", ["x"], ["a"]), ("Relu", ["a"], ["b"])], outputs=("a", "b")),
        ("inplace",), Link("b", "inplace", "a"), False, "read later"),
    "a Concat branch in place inside its own slice": _branch_in_place(False),
    "over a Concat output whose slice is still to be read": _branch_in_place(True),
    "a view of the same bytes": Case(
        _chain((F32, S), (F32, (32,)), op="Reshape"), ("inplace",),
        Link("b", "view", "a"), True),
    "a view of other bytes": Case(
        _chain((F32, S), (F32, (8, 8)), op="Identity"), ("inplace",),
        Link("b", "view", "a"), False, "a view must have the bytes"),
    "Concat axis 0 of rank 1": Case(
        _concat(0, (4,), (8,)), ("concat",), Link("a", "slice", "c"), True),
    "Concat axis -1 after a leading 1": Case(
        _concat(-1, (1, 4), (1, 8)), ("concat",), Link("a", "slice", "c"), True),
    "Concat axis -3 of rank 2 (out of range)": Case(
        _concat(-3, (1, 4), (1, 8)), ("concat",), Link("a", "slice", "c"), False,
        "axis is out of range for its rank 2"),
    "Concat axis 2 of rank 2 (out of range)": Case(
        _concat(2, (1, 4), (1, 8)), ("concat",), Link("a", "slice", "c"), False,
        "axis is out of range for its rank 2"),
    "Concat slices that are not contiguous": Case(
        _concat(1, (2, 4), (2, 8)), ("concat",), Link("a", "slice", "c"), False,
        "not contiguous"),
}


def _made(plan, link: Link) -> bool:
    t = plan.tensors[link.tensor]
    if link.kind == "slice":
        return t.slice_of == link.of
    return t.alias_of == link.of and t.alias == link.kind


def _planted(graph: Graph, links: tuple[Link, ...]):
    """The plan of no passes with ``links`` planted: each linked tensor moved onto the
    bytes of what it links to, the arena and the statistics made to match."""
    plan = graphmem.plan_graph(graph, [], check=False).plan
    tensors = dict(plan.tensors)
    for link in links:
        fields = ({"slice_of": link.of} if link.kind == "slice"
                  else {"alias_of": link.of, "alias": link.kind})
        at = tensors[link.of].offset + link.at
        tensors[link.tensor] = dataclasses.replace(tensors[link.tensor], offset=at, **fields)
        if link.kind == "slice":  # what is aliased to the slice moves with it
            for other in links:
                if other.kind == "inplace" and other.tensor == link.tensor:
                    tensors[other.of] = dataclasses.replace(tensors[other.of], offset=at)
    end = max((t.offset + t.bytes for t in tensors.values()), default=0)
    arena = -(-end // plan.alignment) * plan.alignment
    plan = dataclasses.replace(plan, tensors=tensors, arena_bytes=arena)
    return dataclasses.replace(plan, stats=plan_stats(plan))


@pytest.mark.parametrize("name", list(CASES))
def test_the_passes_and_the_validator_give_the_same_verdict(name):
    case = CASES[name]
    made = graphmem.plan_graph(case.graph, case.passes).plan  # validated by the pipeline
    assert all(_made(made, link) for link in case.given), "the case's setup did not happen"
    assert _made(made, case.asked) == case.allowed, "the passes disagree with the rule"
    found = problems(_planted(case.graph, (*case.given, case.asked)), case.graph)
    if case.allowed:
        assert found == [], found
    else:
        assert found and f"tensor {case.asked.tensor!r}" in found[0] \
            and case.words in found[0], found


def test_the_planted_plans_differ_only_by_the_link():
    """The validator's refusals are the asked link's: without it every case's plan is
    valid (so a refusal is not some other rule the planting broke)."""
    for name, case in CASES.items():
        assert problems(_planted(case.graph, case.given), case.graph) == [], name
