"""Sizes as exact formulas of the free dims (graphmem.ranges.sizes, .formulas)."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

import range_models as rm
from graphmem.frontend.reader import load
from graphmem.ranges.formulas import Formula, Grid, nonnegative
from graphmem.ranges.sizes import size_formulas


def _formulas(tmp_path, make, box):
    path = rm.save(make(), tmp_path / f"{make.__name__}.onnx")
    return path, size_formulas(lambda b: load(path, b), box)


@pytest.mark.parametrize("make, box, expected", [
    (rm.matmul_chain, {"batch": (1, 32), "seq": (1, 4096)}, rm.MATMUL_CHAIN_BYTES),
    (rm.attention, {"seq": (1, 4096)}, rm.ATTENTION_BYTES),
    (rm.decode_step, {"batch": (1, 32), "past_seq": (0, 8192)}, rm.DECODE_STEP_BYTES),
])
def test_hand_built_formulas(tmp_path, make, box, expected):
    path, sf = _formulas(tmp_path, make, box)
    assert sf.unfitted == ()
    for name, text in expected.items():
        assert sf.tensors[name].bytes.text() == text, name
    # byte for byte at bindings the fit never saw
    for binding in ({n: lo for n, (lo, hi) in box.items()},
                    {n: (lo + hi) // 3 + 1 for n, (lo, hi) in box.items()}):
        g = load(path, binding)
        for name, f in sf.tensors.items():
            assert f.bytes.at(binding) == g.tensors[name].bytes, (name, binding)


def test_unfitted_size_named(tmp_path):
    """A dim the graph computes as Min(64, seq) is no polynomial over 1..200: the line
    names the tensor and its op."""
    sf = size_formulas(lambda b: load("tests/data/corpus/bert-dynamo.onnx", {"batch": 1, **b}),
                       {"seq": (1, 200)})
    assert sf.unfitted
    assert any("Min(64, seq)" in line for line in sf.unfitted)
    assert all("not a polynomial of seq" in line for line in sf.unfitted)
    assert any("(of Slice node" in line for line in sf.unfitted)
    # within 1..64 it is one
    sf = size_formulas(lambda b: load("tests/data/corpus/bert-dynamo.onnx", {"batch": 1, **b}),
                       {"seq": (1, 64)})
    assert sf.unfitted == ()


def test_formula_json_round_trip():
    names = ("batch", "seq")
    f = Formula(names, {(1, 2): Fraction(3, 2), (0, 1): Fraction(4), (0, 0): Fraction(-1)})
    g = Formula.from_json(names, f.to_json())
    assert g == f
    assert f.at({"batch": 3, "seq": 5}) == -(-(Fraction(3, 2) * 75 + 20 - 1).numerator
                                             // (Fraction(3, 2) * 75 + 20 - 1).denominator)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=9, max_size=9), st.integers(1, 50),
       st.integers(1, 50))
def test_grid_fit_is_exact(coefs, a, b):
    """A polynomial of degree <= 2 in each of two dims is recovered exactly."""
    names = ("a", "b")
    f = Formula(names, {(i, j): Fraction(coefs[3 * i + j]) for i in range(3) for j in range(3)})
    grid = Grid({"a": (1, 60), "b": (2, 90)})
    fitted = grid.fit([f.at(p) for p in grid.points])
    assert fitted == f
    assert fitted.at({"a": a, "b": b}) == f.at({"a": a, "b": b})


def test_nonnegative_proofs():
    names = ("s",)
    s = Formula.var(names, "s")
    assert nonnegative(s * s - s * 3 + Formula.const(names, 2), {"s": (2, 100)})  # (s-1)(s-2)
    assert not nonnegative(s - Formula.const(names, 5), {"s": (1, 100)})
    assert nonnegative(s - Formula.const(names, 5), {"s": (5, 100)})
