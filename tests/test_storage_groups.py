"""The storage groups the in-place pass grows (graphmem/planning/storage_groups.py) and
the two tests of the in-place rule they share with the validator
(graphmem/core/inplace_rule.py), on tiny hand-built graphs: ``may_join``, ``join``,
``live_across`` and ``overlaps``, each asked directly."""
from __future__ import annotations

import numpy as np
import pytest

from graphmem.core.inplace_rule import live_across, overlaps
from graphmem.core.ir import Graph, Node, Tensor
from graphmem.core.order import file_order
from graphmem.passes import concat
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.storage_groups import StorageGroups

PART, WHOLE = (1, 4, 8), (1, 8, 8)  # 128 and 256 bytes of float32


def _graph(tensors: dict[str, tuple], nodes, inputs=("x",), outputs=("y",)) -> Graph:
    """float32 tensors of the given shapes; nodes (op, inputs, outputs[, attrs])."""
    ts = {n: Tensor(n, "float32", s, 32) for n, s in tensors.items()}
    ns = tuple(Node(i, f"n{i}", op, "", tuple(ins), tuple(outs), dict(attrs[0]) if attrs else {})
               for i, (op, ins, outs, *attrs) in enumerate(nodes))
    return Graph("groups", ns, ts, tuple(inputs), tuple(outputs), frozenset(), ())


def _groups(graph: Graph, a: Assignment = Assignment(), ranges: bool = True):
    """The storage groups of ``a`` over ``graph`` in its file order, and name -> id."""
    ctx = Context.for_order(graph, file_order(graph), 4)
    return StorageGroups(ctx, a, ranges), ctx.index.ids


def _chain(read_a_later: bool = False):
    """a = Neg(x) (0), b = Relu(a) (1), y = Neg(b) or Add(a, b) (2)."""
    last = ("Add", ["a", "b"], ["y"]) if read_a_later else ("Neg", ["b"], ["y"])
    return _graph({t: PART for t in "xaby"},
                  [("Neg", ["x"], ["a"]), ("Relu", ["a"], ["b"]), last])


def test_a_write_over_a_dying_input_joins_its_group():
    g, ids = _groups(_chain())
    a, b, y = ids["a"], ids["b"], ids["y"]
    assert g.root(b) == b and not g.overlaps(a, b)  # apart before the join
    assert not g.live_across(a, 1)  # Relu is a's last reader
    assert g.may_join(b, a, 1)
    g.join(b, a, 1)
    assert g.root(b) == g.root(a) == a
    assert g.overlaps(a, b) and g.overlaps(b, a) and not g.overlaps(a, y)
    assert not g.may_join(b, a, 1) and not g.may_join(b, a)  # one group already
    assert g.may_join(y, b, 2)  # the chain goes on in the same bytes
    g.join(y, b, 2)
    assert g.root(y) == a


def test_a_write_over_an_input_read_later_is_refused():
    g, ids = _groups(_chain(read_a_later=True))
    a, b = ids["a"], ids["b"]
    assert g.live_across(a, 1)
    assert not g.may_join(b, a, 1)
    assert g.may_join(b, a)  # as a view the bytes stay as they are


def test_a_write_over_a_graph_input_is_refused():
    g, ids = _groups(_graph({"x": PART, "y": PART}, [("Relu", ["x"], ["y"])]))
    assert not g.live_across(ids["x"], 0)  # x dies there, and still may not be written
    assert not g.may_join(ids["y"], ids["x"], 0)


def test_a_view_read_later_keeps_its_base_from_being_written():
    """v = Identity(a) joins a's group; b = Relu(a) may not write over a while v is
    still to be read."""
    graph = _graph({t: PART for t in ("x", "a", "v", "b", "y")},
                   [("Neg", ["x"], ["a"]), ("Identity", ["a"], ["v"]),
                    ("Relu", ["a"], ["b"]), ("Add", ["v", "b"], ["y"])])
    g, ids = _groups(graph)
    a, v, b = ids["a"], ids["v"], ids["b"]
    assert not g.live_across(a, 2)  # a alone: Relu is its last reader
    g.join(v, a)
    assert g.live_across(a, 2)  # v, in a's bytes, is read at 3
    assert not g.may_join(b, a, 2)


def _branches(read_slice_later: bool):
    """s1 = Neg(x) (0), c2 = Sigmoid(x) (1), s2 = Relu(c2) (2), cat = Concat(s1, s2) on
    axis 1 (3), r = Relu(cat) (4), then y = Neg(s1) (5) if ``read_slice_later`` else
    y = Neg(r)."""
    tail = ("Neg", ["s1"], ["y"]) if read_slice_later else ("Neg", ["r"], ["y"])
    graph = _graph({"x": PART, "s1": PART, "c2": PART, "s2": PART, "cat": WHOLE,
                    "r": WHOLE, "y": PART if read_slice_later else WHOLE},
                   [("Neg", ["x"], ["s1"]), ("Sigmoid", ["x"], ["c2"]),
                    ("Relu", ["c2"], ["s2"]), ("Concat", ["s1", "s2"], ["cat"], {"axis": 1}),
                    ("Relu", ["cat"], ["r"]), tail],
                   outputs=("y", "r") if read_slice_later else ("y",))
    ctx = Context.for_order(graph, file_order(graph), 4)
    a, _ = concat.run(ctx, Assignment(), None)
    assert a.slice_of == {"s1": "cat", "s2": "cat"}
    return StorageGroups(ctx, a), ctx.index.ids


def test_concat_slices_are_byte_ranges_of_one_group():
    g, ids = _branches(read_slice_later=False)
    s1, s2, cat = ids["s1"], ids["s2"], ids["cat"]
    assert g.root(s1) == g.root(s2) == cat
    assert g.overlaps(s1, cat) and g.overlaps(s2, cat) and not g.overlaps(s1, s2)
    # s2 is written in place inside its own slice while s1 waits to be read by cat
    assert g.may_join(s2, ids["c2"], 2)
    g.join(s2, ids["c2"], 2)
    # cat's group moved into c2's storage, s2 at c2's bytes (cat now starts before them)
    assert g.root(cat) == g.root(s1) == ids["c2"] and g.overlaps(ids["c2"], s2)
    assert not g.overlaps(ids["c2"], s1)
    assert g.may_join(ids["r"], cat, 4)  # every slice was read for the last time by cat


def test_a_write_over_a_concat_output_waits_for_its_slices():
    g, ids = _branches(read_slice_later=True)
    cat, s1 = ids["cat"], ids["s1"]
    assert g.live_across(cat, 4)  # s1, inside cat's bytes, is read at 5
    assert not g.may_join(ids["r"], cat, 4)


def test_a_join_is_refused_when_a_member_crosses_a_write_of_the_other_group():
    """s1 = Neg(x) (0), t = Neg(x) (1), u = Relu(t) (2, in place over t), s2 = Neg(x)
    (3), cat = Concat(s1, s2) (4). cat's group may not join u's storage: s1, at the
    bytes u overwrote, is live across that write. Without the write it may."""
    graph = _graph({"x": PART, "s1": PART, "t": PART, "u": PART, "s2": PART, "cat": WHOLE,
                    "y": WHOLE, "z": PART},
                   [("Neg", ["x"], ["s1"]), ("Neg", ["x"], ["t"]), ("Relu", ["t"], ["u"]),
                    ("Neg", ["x"], ["s2"]), ("Concat", ["s1", "s2"], ["cat"], {"axis": 1}),
                    ("Neg", ["cat"], ["y"]), ("Neg", ["u"], ["z"])], outputs=("y", "z"))
    for write in (True, False):
        ctx = Context.for_order(graph, file_order(graph), 4)
        a, _ = concat.run(ctx, Assignment(), None)
        g, ids = StorageGroups(ctx, a), ctx.index.ids
        t, u, cat = ids["t"], ids["u"], ids["cat"]
        g.join(u, t, 2 if write else None)
        assert g.may_join(cat, u) is not write


def test_groups_without_byte_ranges_decide_a_chain_and_take_no_links():
    g, ids = _groups(_chain(), ranges=False)
    assert g.may_join(ids["b"], ids["a"], 1)
    g.join(ids["b"], ids["a"], 1)
    assert g.root(ids["b"]) == ids["a"] and g.may_join(ids["y"], ids["b"], 2)
    with pytest.raises(ValueError, match="byte ranges"):
        _groups(_chain(), Assignment(alias={"b": ("a", "inplace")}), ranges=False)


@pytest.mark.parametrize("first,last,pos,want", [
    (0, 5, 2, True), (2, 5, 2, False), (0, 2, 2, False), (-1, 3, 0, True), (1, 1, 1, False)])
def test_live_across_is_produced_before_and_read_after(first, last, pos, want):
    assert live_across(first, last, pos) is want
    assert bool(live_across(np.array([first]), np.array([last]), pos)[0]) is want


@pytest.mark.parametrize("a,b,want", [
    ((0, 8), (4, 12), True), ((0, 8), (8, 16), False), ((4, 12), (0, 8), True),
    ((0, 16), (4, 8), True), ((4, 4), (0, 8), False), ((0, 8), (4, 4), False)])
def test_overlaps_is_a_shared_byte(a, b, want):
    assert overlaps(*a, *b) is want
    arrays = [np.array([v]) for v in (*a, *b)]
    assert bool(overlaps(*arrays)[0]) is want
