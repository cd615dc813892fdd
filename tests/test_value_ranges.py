"""Sizes read from the data's values (issue 53): the value ranges of a graph's tensors
bound a Resize's sizes, a ConstantOfShape's shape, a Slice's starts; each becomes a
bounded symbol the plan marks, validate accepts and verify checks with the sizes the
data gives. A value with no bound is refused naming the --bound to pass; the spans
hold every value random data makes."""
from __future__ import annotations

import json

import numpy as np
import onnx
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.frontend.value_ranges import Analysis, node_of
from graphmem.plan.validate import problems
from graphmem.verify.verifier import verify

from conftest import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype), name)


def zeros_of_count(clip=True):
    """x float -> Clip(0, 20) -> ReduceMax -> Cast int64 -> Concat with 4 ->
    ConstantOfShape: at most 20 rows (node 4)."""
    nodes = ([helper.make_node("Clip", ["x", "lo", "hi"], ["c"])] if clip else
             [helper.make_node("Identity", ["x"], ["c"])])
    nodes += [helper.make_node("ReduceMax", ["c"], ["m"], keepdims=1),
              helper.make_node("Cast", ["m"], ["n"], to=I64),
              helper.make_node("Concat", ["n", "four"], ["shape"], axis=0),
              helper.make_node("ConstantOfShape", ["shape"], ["z"],
                               value=numpy_helper.from_array(np.array([1.0], np.float32))),
              helper.make_node("Relu", ["z"], ["y"])]
    return make_model(nodes, [("x", F, [3])], [("y", F, ["k", 4])],
                      initializers=[const("lo", 0.0, np.float32), const("hi", 20.0, np.float32),
                                    const("four", [4])])


def resize_to_data():
    """A mask resized to sizes clipped to [1, 16] from a float input: each of its two
    data-valued dims at most 16 (Resize node 3)."""
    nodes = [helper.make_node("Clip", ["s", "one", "sixteen"], ["sc"]),
             helper.make_node("Cast", ["sc"], ["si"], to=I64),
             helper.make_node("Concat", ["ones", "si"], ["sizes"], axis=0),
             helper.make_node("Resize", ["mask", "", "", "sizes"], ["r"], mode="nearest"),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    return make_model(nodes, [("mask", F, [1, 1, 4, 4]), ("s", F, [2])],
                      [("y", F, [1, 1, "h", "w"])],
                      initializers=[const("one", 1.0, np.float32),
                                    const("sixteen", 16.0, np.float32), const("ones", [1, 1])])


def slice_from_data():
    """Rows from a clipped start to the end: at most the input's 10 (Slice node 2)."""
    nodes = [helper.make_node("Clip", ["s", "zero", "nine"], ["sc"]),
             helper.make_node("Cast", ["sc"], ["start"], to=I64),
             helper.make_node("Slice", ["x", "start", "big", "ax0"], ["rows"]),
             helper.make_node("Neg", ["rows"], ["y"])]
    return make_model(nodes, [("x", F, [10, 3]), ("s", F, [1])], [("y", F, ["k", 3])],
                      initializers=[const("zero", 0.0, np.float32),
                                    const("nine", 9.0, np.float32),
                                    const("big", [2 ** 63 - 1]), const("ax0", [0])])


def save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def test_constant_of_shape_of_a_clipped_value(tmp_path):
    graph = graphmem.load(save(zeros_of_count(), tmp_path))
    sym = graph.data_bounds.symbols["ConstantOfShape_4"]
    assert (sym.bound, sym.proven, sym.axis) == (20, 20, 0)
    assert "element 0 of its shape is at most 20" in sym.why
    assert graph.tensors["z"].shape == (20, 4) and graph.tensors["y"].shape == (20, 4)
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["y"].bounded_by == {"ConstantOfShape_4": 20}
    assert problems(plan, graph) == []
    report = verify(plan, graph, inputs={"x": np.array([7.5, -3.0, 2.0], np.float32)})
    assert report.passed, report
    assert {c.tensor: c.shape for c in report.bounded}["y"] == (7, 4)
    assert "ConstantOfShape_4 (ConstantOfShape, node 4): 7 of at most 20" in \
        report.symbol_counts


def test_a_lowered_bound_below_the_data_fails_naming_the_tensor(tmp_path, capsys):
    model = save(zeros_of_count(), tmp_path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.array([7.5, 1.0, 2.0], np.float32))
    assert main(["verify", model, "--bound", "ConstantOfShape_4=5",
                 "--inputs", str(inputs)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "FAIL: tensor 'z'" in out and "ConstantOfShape_4 <= 5" in out, out
    assert main(["verify", model, "--inputs", str(inputs)]) == 0


def test_an_unbounded_value_is_refused_naming_the_bound(tmp_path, capsys):
    model = save(zeros_of_count(clip=False), tmp_path)
    assert main(["plan", model]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bound ConstantOfShape_4=N" in err, err
    out = tmp_path / "p.json"
    assert main(["plan", model, "--bound", "ConstantOfShape_4=9", "-o", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["bounds"]["ConstantOfShape_4"]["bound"] == 9
    assert plan["bounds"]["ConstantOfShape_4"]["proven"] is None


def test_resize_to_sizes_from_data_each_dim_bounded(tmp_path, capsys):
    graph = graphmem.load(save(resize_to_data(), tmp_path))
    symbols = graph.data_bounds.symbols
    assert {s: symbols[s].bound for s in symbols} == {"Resize_3_axis2": 16,
                                                      "Resize_3_axis3": 16}
    assert graph.tensors["y"].shape == (1, 1, 16, 16)
    plan = graphmem.plan_graph(graph).plan
    assert problems(plan, graph) == []
    feeds = {"mask": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4),
             "s": np.array([5.7, 30.0], np.float32)}
    report = verify(plan, graph, inputs=feeds)
    assert report.passed, report
    assert {c.tensor: c.shape for c in report.bounded}["y"] == (1, 1, 5, 16)
    # a tightened bound on one dim: planned there, and caught when the data exceeds it
    model = save(resize_to_data(), tmp_path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **feeds)
    assert main(["verify", model, "--bound", "Resize_3_axis2=4", "--inputs",
                 str(inputs)]) == 1
    assert "FAIL: tensor 'r'" in " ".join(capsys.readouterr().out.split())


def test_slice_from_a_data_start_is_at_most_its_input(tmp_path):
    graph = graphmem.load(save(slice_from_data(), tmp_path))
    sym = graph.data_bounds.symbols["Slice_2"]
    assert sym.bound == 10 and graph.tensors["y"].shape == (10, 3)
    plan = graphmem.plan_graph(graph).plan
    assert problems(plan, graph) == []
    report = verify(plan, graph, inputs={"x": np.ones((10, 3), np.float32),
                                         "s": np.array([6.2], np.float32)})
    assert report.passed, report
    assert {c.tensor: c.shape for c in report.bounded}["y"] == (4, 3)


def test_a_model_without_data_sizes_has_no_symbols(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"]),
             helper.make_node("Add", ["x", "z"], ["y"])]
    graph = graphmem.load(save(make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])]),
                               tmp_path))
    assert not graph.data_bounds and graph.tensors["y"].shape == (2, 3)


# --------------------------------------------------------------------------- soundness

CHAINS = [
    # (op, extra constant input or None, attributes)
    [("Clip", (-2.0, 5.0)), ("Mul", 3.5), ("Sub", 1.25), ("Cast", "int64"), ("Abs", None)],
    [("Relu", None), ("Add", 0.5), ("Div", 4.0), ("Floor", None), ("Neg", None)],
    [("Sigmoid", None), ("Mul", 100.0), ("Cast", "int32"), ("Mul", -3), ("Max", -50)],
    [("Clip", (0.0, 8.0)), ("Sqrt", None), ("Exp", None), ("Ceil", None), ("Min", 9.0)],
    [("Clip", (1.0, 6.0)), ("Reciprocal", None), ("Mul", 7.0), ("Round", None)],
]


def _chain_model(chain):
    nodes, inits, cur, dtype = [], [], "x", np.float32
    for k, (op, arg) in enumerate(chain):
        out = f"t{k}"
        if op == "Clip":
            inits += [const(f"lo{k}", arg[0], dtype), const(f"hi{k}", arg[1], dtype)]
            nodes.append(helper.make_node("Clip", [cur, f"lo{k}", f"hi{k}"], [out]))
        elif op == "Cast":
            dtype = np.dtype(arg).type
            nodes.append(helper.make_node("Cast", [cur], [out],
                                          to=helper.np_dtype_to_tensor_dtype(np.dtype(arg))))
        elif arg is None:
            nodes.append(helper.make_node(op, [cur], [out]))
        else:
            inits.append(const(f"c{k}", arg, dtype))
            nodes.append(helper.make_node(op, [cur, f"c{k}"], [out]))
        cur = out
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return make_model(nodes, [("x", F, [6])], [(cur, elem, [6])], initializers=inits)


@settings(max_examples=40)
@given(chain=st.sampled_from(range(len(CHAINS))),
       data=st.lists(st.floats(-1e4, 1e4, width=32), min_size=6, max_size=6))
def test_random_data_stays_within_the_spans(chain, data):
    from onnx.reference import ReferenceEvaluator
    model = onnx.shape_inference.infer_shapes(_chain_model(CHAINS[chain]))
    types = {vi.name: vi.type.tensor_type for vi in list(model.graph.value_info) +
             list(model.graph.input) + list(model.graph.output)}
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    dtypes = {n: str(helper.tensor_dtype_to_np_dtype(t.elem_type)) for n, t in types.items()}
    dtypes.update({n: str(v.dtype) for n, v in consts.items()})
    a = Analysis(lambda t: (6,) if t in types else consts[t].shape if t in consts else None,
                 lambda t: dtypes.get(t, ""), consts.get)
    a.run(node_of(n, 17) for n in model.graph.node)
    x = np.array(data, np.float32)
    run = ReferenceEvaluator(model)
    names = [o for n in model.graph.node for o in n.output]
    with np.errstate(all="ignore"):
        values = run.run(names, {"x": x})
    for name, v in zip(names, values):
        s = a.get(name)
        v = np.asarray(v, np.float64)
        assert np.all(s.lo <= v) and np.all(v <= s.hi), (name, s, v)


def loop_over_clipped_boxes():
    """torchvision's paste-mask loop in small: a Loop over 3 boxes (clipped to [0, 10],
    cast to int64 outside it) whose body makes a ConstantOfShape of a box's width; a
    NonZero beside it (the graph's data-dependent op)."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["boxes", "i"], ["box"], axis=0),
         helper.make_node("Gather", ["box", "one_i"], ["x1"], axis=0),
         helper.make_node("Gather", ["box", "zero_i"], ["x0"], axis=0),
         helper.make_node("Sub", ["x1", "x0"], ["w"]),
         helper.make_node("Unsqueeze", ["w", "ax0_b"], ["wv"]),
         helper.make_node("Concat", ["wv", "one_v"], ["ws"], axis=0),
         helper.make_node("ReduceMax", ["ws"], ["wm"], keepdims=1),
         helper.make_node("Concat", ["wm", "two_v"], ["shape"], axis=0),
         helper.make_node("ConstantOfShape", ["shape"], ["z"],
                          value=numpy_helper.from_array(np.array([1.0], np.float32))),
         helper.make_node("ReduceSum", ["z"], ["total"], keepdims=0),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("total", F, [])],
        [const("one_i", 1), const("zero_i", 0), const("ax0_b", [0]), const("one_v", [1]),
         const("two_v", [2])])
    nodes = [helper.make_node("Clip", ["b", "lo", "hi"], ["bc"]),
             helper.make_node("Cast", ["bc"], ["boxes"], to=I64),
             helper.make_node("Loop", ["three", "true"], ["totals"], body=body),
             helper.make_node("Greater", ["b", "lo"], ["pos"]),
             helper.make_node("NonZero", ["pos"], ["nz"])]
    return make_model(nodes, [("b", F, [3, 2])], [("totals", F, [3]), ("nz", I64, [2, "k"])],
                      initializers=[const("lo", 0.0, np.float32), const("hi", 10.0, np.float32),
                                    const("three", 3), const("true", True, np.bool_)])


def test_a_loop_body_reads_the_graphs_value_ranges(tmp_path):
    graph = graphmem.load(save(loop_over_clipped_boxes(), tmp_path))
    body = graph.data_bounds.body_symbols
    # the width x1 - x0 of boxes in [0, 10] is at most 10; the ReduceMax with 1 at least 1
    assert {s: body[s].bound for s in body} == {"ConstantOfShape_8_2_body": 10}
    (scope,) = graph.scopes[2]
    assert scope.graph.tensors["z"].shape == (10, 2)
    plan = graphmem.plan_graph(graph).plan
    assert plan.bounds["ConstantOfShape_8_2_body"]["scope"] == {"node": 2, "attr": "body"}
    assert problems(plan, graph) == []
    feeds = {"b": np.array([[1.5, 7.9], [3.0, 2.0], [-4.0, 30.0]], np.float32)}
    report = verify(plan, graph, inputs=feeds)
    assert report.passed, report


def test_a_body_sized_from_values_plans_without_a_data_dependent_op(tmp_path):
    """The same loop without the NonZero: the body's size read from the data is bounded
    all the same (the settling is tried again with the bounds where it was refused)."""
    model = loop_over_clipped_boxes()
    del model.graph.node[3:]
    del model.graph.output[1:]
    graph = graphmem.load(save(model, tmp_path))
    assert {s: b.bound for s, b in graph.data_bounds.body_symbols.items()} == \
        {"ConstantOfShape_8_2_body": 10}
    plan = graphmem.plan_graph(graph).plan
    assert problems(plan, graph) == []
    report = verify(plan, graph, inputs={"b": np.array([[1.5, 7.9], [3.0, 2.0],
                                                        [-4.0, 30.0]], np.float32)})
    assert report.passed, report


def _sized_by(first_value_nodes, inputs, extra_inits, rank):
    """x -> the nodes (ending in ``si``, an int64 [k]) -> ConstantOfShape(si) -> y."""
    nodes = first_value_nodes + [
        helper.make_node("ConstantOfShape", ["si"], ["z"],
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Relu", ["z"], ["y"])]
    return make_model(nodes, inputs, [("y", F, [f"d{k}" for k in range(rank)])],
                      initializers=extra_inits, opset=17)


def test_a_scatter_that_adds_is_not_bounded_by_its_data_and_updates(tmp_path, capsys):
    """ScatterElements with reduction="add" sums updates into one place: 4 + 4 + 4 + 4
    from values in [0, 4]; its span is not theirs (planned at 4, it held 16), so the
    size it gives is open and the refusal names the --bound."""
    m = _sized_by([
        helper.make_node("Clip", ["x", "lo", "hi"], ["xc"]),
        helper.make_node("Clip", ["u", "lo", "hi"], ["uc"]),
        helper.make_node("ScatterElements", ["xc", "idx", "uc"], ["s"], axis=0,
                         reduction="add"),
        helper.make_node("Cast", ["s"], ["s64"], to=I64),
        helper.make_node("Slice", ["s64", "zero", "one"], ["si"])],
        [("x", F, [3]), ("u", F, [3])],
        [const("lo", 0.0, np.float32), const("hi", 4.0, np.float32), const("idx", [0, 0, 0]),
         const("zero", [0]), const("one", [1])], 1)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    capsys.readouterr()
    assert main(["plan", str(path), "-o", str(tmp_path / "p.json"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--bound ConstantOfShape_5=N" in err and err.count("\n") == 1, err


def test_a_reduce_sum_with_no_axes_and_noop_passes_its_input_through(tmp_path, capsys):
    """ReduceSum(noop_with_empty_axes=1) of no axes is its input: values in [-3, -2]
    plus 10 size a ConstantOfShape at most [8, 8, 8] (not the [-9, -6] of a sum)."""
    m = _sized_by([
        helper.make_node("Clip", ["x", "lo", "hi"], ["xc"]),
        helper.make_node("ReduceSum", ["xc", "noaxes"], ["s"], keepdims=1,
                         noop_with_empty_axes=1),
        helper.make_node("Add", ["s", "ten"], ["s10"]),
        helper.make_node("Cast", ["s10"], ["si"], to=I64)],
        [("x", F, [3])],
        [const("lo", -3.0, np.float32), const("hi", -2.0, np.float32),
         const("ten", 10.0, np.float32), const("noaxes", np.zeros(0, np.int64))], 3)
    path, plan_file = tmp_path / "m.onnx", tmp_path / "p.json"
    onnx.save(m, path)
    assert main(["plan", str(path), "-o", str(plan_file), "--quiet"]) == 0
    assert graphmem.Plan.load(str(plan_file)).tensors["z"].bytes == 8 * 8 * 8 * 4
    np.savez(tmp_path / "in.npz", x=np.full(3, -2, np.float32))
    capsys.readouterr()
    assert main(["verify", str(path), "--plan", str(plan_file), "--inputs",
                 str(tmp_path / "in.npz")]) == 0
    assert "PASS" in capsys.readouterr().out


def test_a_static_size_the_run_does_not_give_fails_verify_naming_the_tensor(tmp_path, capsys):
    """A known gap, caught: onnx's inference gives a Resize with keep_aspect_ratio_policy
    "not_smaller" and sizes from the data its input's shape, [1, 1, 4, 8], and the plan
    takes it as static; ONNX Runtime computes [4, 4, 16, 32] (every axis scaled by the
    largest ratio) and refuses to write it into the planned slot. verify says so as a
    FAIL of the plan naming the tensor, exit 1 (it was an ONNX Runtime error, exit 2)."""
    nodes = [helper.make_node("Clip", ["s", "one", "sixteen"], ["sc"]),
             helper.make_node("Cast", ["sc"], ["si"], to=I64),
             helper.make_node("Concat", ["ones", "si"], ["sizes"], axis=0),
             helper.make_node("Resize", ["mask", "", "", "sizes"], ["r"], mode="nearest",
                              keep_aspect_ratio_policy="not_smaller"),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    m = make_model(nodes, [("mask", F, [1, 1, 4, 8]), ("s", F, [2])],
                   [("y", F, [1, 1, "h", "w"])],
                   initializers=[const("one", 1.0, np.float32),
                                 const("sixteen", 16.0, np.float32), const("ones", [1, 1])],
                   opset=18)
    path, plan_file, npz = tmp_path / "m.onnx", tmp_path / "p.json", tmp_path / "in.npz"
    onnx.save(m, path)
    assert main(["plan", str(path), "-o", str(plan_file), "--quiet"]) == 0
    np.savez(npz, mask=np.ones((1, 1, 4, 8), np.float32), s=np.array([16, 16], np.float32))
    capsys.readouterr()
    assert main(["verify", str(path), "--plan", str(plan_file), "--inputs", str(npz)]) == 1
    out = capsys.readouterr().out
    assert "FAIL: tensor 'r' (node 3 (Resize)) is [4,4,16,32] at run time, planned " \
           "[1,1,4,8]" in out, out
