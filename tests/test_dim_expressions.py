"""Dims written as arithmetic of other dims: parsed safely, evaluated from the bound
names, checked against a value given for them."""
from __future__ import annotations

import pytest

from graphmem.errors import GraphmemError
from graphmem.frontend.dim_expressions import (looks_like_expression, parse, resolve,
                                               unbound_hint)


@pytest.mark.parametrize("text, bound, value", [
    ("past_seq + 1", {"past_seq": 16}, 17),
    ("past_seq + seq", {"past_seq": 16, "seq": 3}, 19),
    ("2*s0", {"s0": 5}, 10),
    ("s0*s1", {"s0": 5, "s1": 7}, 35),
    ("floor(s0/2)", {"s0": 5}, 2),
    ("ceil(s0/2)", {"s0": 5}, 3),
    ("ceiling(s0/2) + 1", {"s0": 5}, 4),
    ("s0 // 2", {"s0": 7}, 3),
    ("max(a, b)", {"a": 3, "b": 9}, 9),
    ("Min(a, b, 4)", {"a": 3, "b": 9}, 3),
    ("Max(1, seq - 1)", {"seq": 1}, 1),
    ("-a + 2*(b - 1)", {"a": 1, "b": 4}, 5),
    ("s0/2", {"s0": 8}, 4),
])
def test_an_expression_is_evaluated_from_its_names(text, bound, value):
    assert looks_like_expression(text)
    assert parse(text).value(bound) == value


def test_an_unbound_name_leaves_it_open():
    assert parse("past_seq + seq").value({"past_seq": 3}) is None


@pytest.mark.parametrize("text", ["batch", "unk__0", "Concatpresent_key_0_dim_2",
                                  "input.1_dim_0", "seq_len"])
def test_names_are_not_expressions(text):
    assert not looks_like_expression(text)


@pytest.mark.parametrize("text, what", [
    ("__import__('os').system('x')", "__import__"),
    ("a ** 2", "a ** 2"),
    ("sqrt(a)", "sqrt(a)"),
    ("a.b + 1", "a.b"),
    ("a % 2", "a % 2"),
    ("floor(a, b)", "floor takes one argument"),
    ("max(a, key=b)", "max(a, key=b)"),
    ("1.5 * a", "1.5"),
    ("lambda: 1", "lambda"),
    ("a +", "not an expression"),
])
def test_anything_else_is_refused_in_one_line(text, what):
    with pytest.raises(GraphmemError) as exc:
        parse(text)
    message = str(exc.value)
    assert "\n" not in message and what in message


def test_a_fraction_is_not_a_dimension():
    with pytest.raises(GraphmemError, match=r"'s0/2' is 5/2 with s0=5, not an integer"):
        parse("s0/2").value({"s0": 5})


def test_resolve_binds_expressions_from_the_names():
    dims = resolve(["batch", "past_seq", "past_seq + 1", "2*batch"], {"batch": 1,
                                                                       "past_seq": 511})
    assert dims == {"batch": 1, "past_seq": 511, "past_seq + 1": 512, "2*batch": 2}


def test_resolve_refuses_a_value_that_disagrees_naming_both():
    with pytest.raises(GraphmemError) as exc:
        resolve(["past_seq", "past_seq + 1"], {"past_seq": 511, "past_seq + 1": 100})
    assert str(exc.value) == ("--dim past_seq + 1=100 disagrees with past_seq=511, which "
                              "make 'past_seq + 1' 512; bind the names it reads, or give "
                              "it 512")
    # the agreeing value is accepted
    assert resolve(["past_seq + 1"], {"past_seq": 511, "past_seq + 1": 512}) == \
        {"past_seq": 511, "past_seq + 1": 512}


def test_resolve_solves_for_the_one_name_an_expression_determines():
    assert resolve(["past_seq", "past_seq + 1"], {"past_seq + 1": 17}) == \
        {"past_seq": 16, "past_seq + 1": 17}
    # and then evaluates another expression of it
    assert resolve(["past_seq + 1", "past_seq + seq"], {"past_seq + 1": 17, "seq": 2}) == \
        {"past_seq": 16, "seq": 2, "past_seq + 1": 17, "past_seq + seq": 18}
    # no integer solution: nothing is solved, the value stays as given
    assert resolve(["2*s"], {"2*s": 7}) == {"2*s": 7}


def test_resolve_refuses_a_negative_dimension():
    with pytest.raises(GraphmemError, match="cannot be negative"):
        resolve(["seq - 2"], {"seq": 1})


def test_an_unparseable_name_stays_a_name():
    # a dim named like arithmetic that graphmem does not evaluate is bound by its text
    assert resolve(["a ** 2"], {"a ** 2": 4}) == {"a ** 2": 4}
    assert "not allowed" in unbound_hint("a ** 2", {})
    assert unbound_hint("past_seq + seq", {"seq": 1}) == \
        " (an expression of past_seq: bind it)"
    assert unbound_hint("batch", {}) == ""


def test_bindings_keep_one_order_whatever_the_hash_seed(tmp_path):
    """The plan's bindings (expressions' values among them) are listed in the order the
    model first names each dim, in every process: they were a set's order once, and the
    plan file changed with PYTHONHASHSEED."""
    import json
    import os
    import subprocess
    import sys

    from onnx import TensorProto, helper, save
    exprs = ["past + seq", "batch*seq", "2*past", "seq + 1", "past + 3", "batch*past"]
    outs = [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [e])
            for k, e in enumerate(exprs)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", "past"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "g", [x],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT,
                                                             ["batch", "seq", "past"])],
                              value_info=outs)
    path = tmp_path / "m.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code = ("import json, sys, graphmem; g = graphmem.load(sys.argv[1], dim_default=2); "
            "print(json.dumps(list(graphmem.plan_graph(g).plan.bindings)))")
    seen = set()
    for seed in ("0", "1", "2", "3"):
        out = subprocess.run([sys.executable, "-c", code, str(path)], check=True,
                             capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        seen.add(out)
    assert len(seen) == 1
    assert json.loads(seen.pop()) == ["batch", "seq", "past", *exprs]


@pytest.mark.parametrize("text, value, bound", [
    ("past_seq + 1", 17, {}), ("2*s + 3", 11, {}), ("2*s", 7, {}), ("s - 5", 2, {}),
    ("(s + seq)/2", 9, {"seq": 4}), ("-s + 20", 3, {}), ("s*seq - 1", 11, {"seq": 3}),
    ("s/3 + 1", 5, {}), ("s - 10", 2, {}), ("seq*4 + s", 8, {"seq": 2}), ("0*s + 1", 1, {}),
    ("12/s", 3, {}), ("s*s", 16, {}), ("floor(s/2)", 3, {}), ("max(s, 4)", 9, {}),
])
def test_solving_is_sympys(text, value, bound):
    """The linear form's root where the expression is linear in its free name, sympy's
    (imported then) where it is not: the same answer either way."""
    e = parse(text)
    free = next(n for n in e.names if n not in bound)
    assert e.solve(value, bound) == e._solve_with_sympy(free, value, bound)


def test_evaluating_and_solving_a_linear_expression_imports_no_sympy():
    import subprocess
    import sys
    code = ("import sys\n"
            "from graphmem.frontend.dim_expressions import resolve\n"
            "dims = resolve(['past_seq + 1', 'floor(seq/2) + 1', 'max(seq, 4)'],\n"
            "               {'past_seq + 1': 17, 'seq': 6})\n"
            "print(sorted(dims.items()), 'sympy' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ("[('floor(seq/2) + 1', 4), ('max(seq, 4)', 6), "
                                   "('past_seq', 16), ('past_seq + 1', 17), ('seq', 6)] False")


def test_a_division_by_zero_is_named():
    with pytest.raises(GraphmemError, match=r"^dimension 'a/b' divides by zero with a=1, b=0$"):
        parse("a/b").value({"a": 1, "b": 0})
