"""A Loop's trip count from its condition (issue 53): a counter compared with a constant
bounds it (exactly, where nothing else stops it), M left out or INT64_MAX as exporters
write a while-loop; a condition of the data is bounded by M or the count, or needs
``--bound Loop_N=K``."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.frontend.control_flow import graph_values
from graphmem.frontend.loop_trips import condition_count
from graphmem.verify.verifier import verify

from conftest import make_model

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
INT64_MAX = (1 << 63) - 1


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype), name)


def counted_loop(cond="iter", m=None):
    """A Loop whose scan output ``ys`` is ``x + i`` each iteration and whose carried
    counter ``k`` goes 0, 2, 4, ...; ``cond`` is the body's condition: ``iter``
    i + 1 < 10, ``counter`` k + 2 < 7, ``le_swapped`` 10 >= i + 1, ``and_data``
    i + 1 < 10 and i < lim (an input), ``data`` i < lim; ``m`` the trip count M (None:
    left out)."""
    n = helper.make_node
    body = [n("Add", ["i", "one"], ["next"]), n("Add", ["k_in", "two"], ["k_out"]),
            n("Cast", ["i"], ["f"], to=F), n("Add", ["x", "f"], ["y"])]
    if cond == "iter":
        body.append(n("Less", ["next", "ten"], ["c_out"]))
    elif cond == "counter":
        body.append(n("Less", ["k_out", "seven"], ["c_out"]))
    elif cond == "le_swapped":
        body.append(n("GreaterOrEqual", ["ten", "next"], ["c_out"]))
    elif cond == "and_data":
        body += [n("Less", ["next", "ten"], ["count_ok"]), n("Less", ["f", "lim"], ["data_ok"]),
                 n("And", ["count_ok", "data_ok"], ["c_out"])]
    elif cond == "data":
        body.append(n("Less", ["f", "lim"], ["c_out"]))
    g = helper.make_graph(
        body, "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", B, []),
         helper.make_tensor_value_info("k_in", I64, [])],
        [helper.make_tensor_value_info("c_out", B, []),
         helper.make_tensor_value_info("k_out", I64, []),
         helper.make_tensor_value_info("y", F, [3])],
        [const("one", 1), const("two", 2), const("ten", 10), const("seven", 7)])
    inits = [numpy_helper.from_array(np.array(True), "true"), const("k0", 0)]
    if m is not None:
        inits.append(const("M", m))
    return make_model([n("Loop", ["M" if m is not None else "", "true", "k0"], ["k", "ys"],
                         body=g)],
                      [("x", F, [3]), ("lim", F, [])], [("ys", F, ["t", 3]), ("k", I64, [])],
                      initializers=inits)


def save(model, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return str(path)


@pytest.mark.parametrize("cond,m,trips", [
    ("iter", None, 10), ("iter", INT64_MAX, 10), ("iter", 6, 6), ("iter", 30, 10),
    ("counter", None, 4), ("le_swapped", INT64_MAX, 11),
])
def test_a_counted_condition_fixes_the_trip_count(tmp_path, capsys, cond, m, trips):
    path = save(counted_loop(cond, m), tmp_path)
    graph = graphmem.load(path)
    assert graph.tensors["ys"].shape == (trips, 3)
    assert graph.data_bounds is None  # static: nothing to bound
    plan = graphmem.plan_graph(graph).plan
    graphmem.validate(plan, graph)
    assert main(["verify", path]) == 0  # ONNX Runtime's run fills every planned slice


def test_the_count_of_each_condition():
    def count(cond, m=None):
        model = counted_loop(cond, m)
        node = model.graph.node[0]
        return condition_count(node, node.attribute[0].g, graph_values(model))
    assert count("iter")[:2] == (10, True)
    assert count("counter")[:2] == (4, True)  # k after iteration i: 2(i + 1) < 7
    assert count("le_swapped")[:2] == (11, True)
    assert count("and_data")[:2] == (10, False)  # the data may stop it sooner
    assert count("data") is None


def test_a_condition_of_the_data_is_bounded_by_its_count(tmp_path, capsys):
    path = save(counted_loop("and_data"), tmp_path)
    graph = graphmem.load(path)
    sym = graph.data_bounds.symbols["Loop_0"]
    assert (sym.bound, sym.proven, sym.tensor) == (10, 10, "ys")
    assert "stops it after at most 10 iterations" in sym.why
    assert graph.tensors["ys"].shape == (10, 3)
    plan = graphmem.plan_graph(graph).plan
    graphmem.validate(plan, graph)
    inputs = tmp_path / "in.npz"  # i < 3.5: iterations 0 to 4
    np.savez(inputs, x=np.ones(3, np.float32), lim=np.array(3.5, np.float32))
    capsys.readouterr()
    assert main(["verify", path, "--inputs", str(inputs)]) == 0
    assert "Loop_0 (Loop, node 0): 5 of at most 10" in capsys.readouterr().out
    low = tmp_path / "low.json"
    assert main(["plan", path, "-q", "--bound", "Loop_0=4", "-o", str(low)]) == 0
    capsys.readouterr()
    assert main(["verify", path, "--plan", str(low), "--inputs", str(inputs)]) == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert "FAIL: tensor 'ys'" in printed and "Loop_0 <= 4" in printed, printed


def test_a_condition_of_the_data_alone_needs_a_bound(tmp_path, capsys):
    path = save(counted_loop("data", INT64_MAX), tmp_path)
    with pytest.raises(GraphmemError, match="pass --bound Loop_0=N"):
        graphmem.load(path)
    assert main(["plan", path, "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--bound Loop_0=N" in err[0], err
    graph = graphmem.load(path, bounds={"Loop_0": 8})
    assert graph.data_bounds.symbols["Loop_0"].proven is None
    assert graph.tensors["ys"].shape == (8, 3)
    report = verify(graphmem.plan_graph(graph).plan, graph,
                    inputs={"x": np.ones(3, np.float32), "lim": np.array(3.5, np.float32)})
    assert report.passed, report


def loop_in_an_if(escapes=False):
    """An If whose then_branch runs the ``and_data`` Loop of :func:`counted_loop` (at
    most 10 iterations, fewer as ``lim`` says) and sums its scan output (``escapes``:
    returns the scan output itself, whose size would leave the branch)."""
    n = helper.make_node
    inner = counted_loop("and_data").graph.node[0]
    then = [inner]
    if escapes:
        then.append(n("Identity", ["ys"], ["out"]))
    else:
        then.append(n("ReduceSum", ["ys", "ax0"], ["out"], keepdims=0))
    shape = ["t", 3] if escapes else [3]
    g_then = helper.make_graph(
        then, "then", [], [helper.make_tensor_value_info("out", F, shape)],
        [numpy_helper.from_array(np.array(True), "true"), const("k0", 0), const("ax0", [0])])
    other = n("Identity", ["x"], ["out2"]) if not escapes else n(
        "Constant", [], ["out2"], value=numpy_helper.from_array(np.zeros((2, 3), np.float32)))
    g_else = helper.make_graph([other], "else", [],
                               [helper.make_tensor_value_info("out2", F, shape)])
    nodes = [n("ReduceSum", ["x"], ["s"], keepdims=0), n("Greater", ["s", "zero"], ["c"]),
             n("If", ["c"], ["y"], then_branch=g_then, else_branch=g_else)]
    return make_model(nodes, [("x", F, [3]), ("lim", F, [])], [("y", F, shape)],
                      initializers=[const("zero", 0.0, np.float32)])


def test_a_loop_in_a_body_gets_a_symbol_of_that_body(tmp_path, capsys):
    path = save(loop_in_an_if(), tmp_path)
    graph = graphmem.load(path)
    sym = graph.data_bounds.body_symbols["Loop_0_2_then_branch"]
    assert (sym.bound, sym.proven, sym.scope, sym.tensor) == (10, 10, "2_then_branch", "ys")
    (then, _) = graph.scopes[2]
    assert then.graph.tensors["ys"].shape == (10, 3)
    plan = graphmem.plan_graph(graph).plan
    graphmem.validate(plan, graph)
    assert plan.bounds["Loop_0_2_then_branch"]["scope"] == {"node": 2, "attr": "then_branch"}
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones(3, np.float32), lim=np.array(3.5, np.float32))
    capsys.readouterr()
    assert main(["verify", path, "--inputs", str(inputs)]) == 0
    out = capsys.readouterr().out
    assert "Loop_0_2_then_branch (Loop, node 0 in the then_branch of node 2): 5 of at " \
        "most 10" in out, out
    tight = graphmem.load(path, bounds={"Loop_0_2_then_branch": 6})
    assert tight.scopes[2][0].graph.tensors["ys"].shape == (6, 3)
    low = tmp_path / "low.json"
    assert main(["plan", path, "-q", "--bound", "Loop_0_2_then_branch=4", "-o",
                 str(low)]) == 0
    capsys.readouterr()
    assert main(["verify", path, "--plan", str(low), "--inputs", str(inputs)]) == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert "FAIL: tensor 'ys' (the then_branch of node 2 (If))" in printed, printed
    assert "Loop_0_2_then_branch <= 4" in printed, printed


def test_a_bounded_loop_whose_size_leaves_its_body_is_refused(tmp_path, capsys):
    path = save(loop_in_an_if(escapes=True), tmp_path)
    assert main(["plan", path, "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot size tensor 'out'" in err[0], err
    assert "its size depends on Loop node 0 of that body, bounded by Loop_0_2_then_branch" \
        in err[0], err


def test_an_int32_counter_that_wraps_proves_no_count(tmp_path, capsys):
    """k += 1,500,000,000 in int32 wraps past 2**31 before it reaches 2,000,000,000:
    the condition holds all of M = 10 iterations, not the 2 the arithmetic says. No
    count is proven from a 32-bit counter: the Loop is planned at M, and verify passes."""
    i32 = TensorProto.INT32
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int32), name)  # noqa: E731
    body = helper.make_graph(
        [helper.make_node("Add", ["k", "step"], ["k_out"]),
         helper.make_node("Less", ["k_out", "lim"], ["c_out"]),
         helper.make_node("Cast", ["k"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["x", "f"], ["y"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("k", i32, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("k_out", i32, []),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [c("step", 1500000000), c("lim", 2000000000)])
    m = make_model([helper.make_node("Loop", ["M", "true", "k0"], ["kf", "ys"], body=body)],
                   [("x", TensorProto.FLOAT, [3])],
                   [("ys", TensorProto.FLOAT, ["t", 3]), ("kf", i32, [])],
                   initializers=[numpy_helper.from_array(np.array(10, np.int64), "M"),
                                 numpy_helper.from_array(np.array(True), "true"), c("k0", 0)])
    path, plan_file = tmp_path / "m.onnx", tmp_path / "p.json"
    onnx.save(m, path)
    assert main(["plan", str(path), "-o", str(plan_file), "--quiet"]) == 0
    assert graphmem.Plan.load(str(plan_file)).bounds["Loop_0"]["bound"] == 10
    capsys.readouterr()
    assert main(["verify", str(path), "--plan", str(plan_file)]) == 0
    out = capsys.readouterr().out
    assert "Loop_0 (Loop, node 0): 10 of at most 10" in out and "PASS" in out, out
