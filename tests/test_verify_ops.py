"""Every entry of graphmem.ops.OVERWRITE runs correctly in place on ONNX Runtime (CPU).

For each (op, input) pair the table allows, a tiny graph is planned with one buffer
per tensor and then the op's output is moved onto that input, exactly as the inplace
pass would do it. The plan must stay valid by the rules and the arena run must match a
plain run tensor for tensor (--check-all), with poison in every free byte.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.core import ops
from graphmem.verify.verifier import verify

from conftest import make_model

F, B, U8 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.UINT8
SHAPE = [2, 3, 64]  # long enough for the vectorized loops
BOOL_OPS = {"Not", "And", "Or", "Xor"}
VARIADIC = {"Max", "Min", "Mean", "Sum"}


def _elem(op):
    return B if op in BOOL_OPS else U8 if op == "BitShift" else F


def _case(op: str, arity: int, small: int | None, tmp_path):
    """x_k -> Identity -> p_k; y = op(p_0..); the file path of that model."""
    elem = _elem(op)
    shapes = [SHAPE] * arity
    if small is not None:
        shapes[small] = SHAPE[1:]  # broadcast along the first axis
    nodes = [helper.make_node("Identity", [f"x{k}"], [f"p{k}"]) for k in range(arity)]
    inits, extra, attrs = [], [], {}
    if op == "BatchNormalization":
        for name, v in (("s", 1.5), ("b", 0.25), ("m", 0.1), ("v", 2.0)):
            inits.append(numpy_helper.from_array(np.full([3], v, np.float32), name))
        extra = ["s", "b", "m", "v"]
        shapes = [SHAPE]
    elif op == "Clip":
        inits = [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
                 numpy_helper.from_array(np.array(0.5, np.float32), "hi")]
        extra = ["lo", "hi"]
    elif op == "PRelu":
        inits = [numpy_helper.from_array(np.linspace(0.1, 0.9, 64).astype(np.float32), "slope")]
        extra = ["slope"]
    if op == "BitShift":
        attrs["direction"] = "LEFT"
    if op == "Mod":
        attrs["fmod"] = 1
    nodes.append(helper.make_node(op, [f"p{k}" for k in range(arity)] + extra, ["y"], **attrs))
    model = make_model(nodes, [(f"x{k}", elem, s) for k, s in enumerate(shapes)],
                       [("y", elem, SHAPE)], initializers=inits, opset=20)
    path = tmp_path / f"{op}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _in_place(plan: graphmem.Plan, out: str, src: str) -> graphmem.Plan:
    tensors = dict(plan.tensors)
    tensors[out] = dataclasses.replace(tensors[out], offset=tensors[src].offset,
                                       alias_of=src, alias="inplace")
    # the arena ends where its last tensor now ends (docs/plan-format.md)
    end = max(t.offset + t.bytes for t in tensors.values())
    new = dataclasses.replace(plan, tensors=tensors,
                              arena_bytes=-(-end // plan.alignment) * plan.alignment)
    from graphmem.plan.stats import plan_stats
    return dataclasses.replace(new, stats=plan_stats(new))


def _cases():
    for op, pairs in sorted(ops.OVERWRITE.items()):
        arity = 3 if op in VARIADIC else 2 if len(pairs) > 1 else 1
        for i in range(arity):
            yield op, arity, i, None
        if arity == 2 and op not in BOOL_OPS:
            yield op, arity, 1, 0  # out over the full input 1, input 0 broadcast


@pytest.mark.parametrize("op,arity,index,small", list(_cases()),
                         ids=lambda v: str(v))
def test_overwrite_op_runs_in_place(op, arity, index, small, tmp_path):
    _run_in_place(op, arity, index, small, tmp_path, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(),
                    reason="needs onnxruntime-gpu with CUDAExecutionProvider and a CUDA device")
@pytest.mark.parametrize("op,arity,index,small", list(_cases()),
                         ids=lambda v: str(v))
def test_overwrite_op_runs_in_place_on_cuda(op, arity, index, small, tmp_path):
    _run_in_place(op, arity, index, small, tmp_path, "cuda")


def test_a_kernel_that_cannot_run_in_place_fails(tmp_path):
    """The control: Transpose written over its own input is caught at that node."""
    nodes = [helper.make_node("Identity", ["x"], ["p"]),
             helper.make_node("Transpose", ["p"], ["y"], perm=[1, 0])]
    model = make_model(nodes, [("x", F, [64, 64])], [("y", F, [64, 64])])
    path = tmp_path / "transpose.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    plan = _in_place(graphmem.plan_graph(graph, []).plan, "y", "p")
    assert graphmem.problems(plan, graph)  # not in the table, so the rules refuse it
    report = verify(plan, graph, runtime_only=True)
    assert not report.passed and report.mismatch.node.startswith("node 1 (Transpose")
    assert report.mismatch.overlapping == ("p",)


def _run_in_place(op, arity, index, small, tmp_path, provider):
    path = _case(op, arity, small, tmp_path)
    graph = graphmem.load(path)
    plan = graphmem.plan_graph(graph, []).plan
    src = f"p{index}"
    assert (index, 0) in ops.overwrite_pairs(graph.nodes[-1])
    mutated = _in_place(plan, "y", src)
    graphmem.validate(mutated, graph)  # the rules accept it ...
    report = verify(mutated, graph, check_all=True, provider=provider)
    assert report.passed, report.mismatch and report.mismatch.describe()  # ... and the kernel


VIEW_CASES = {
    "Reshape": ([2, 3, 64], [6, 64], {}, [np.array([6, 64], np.int64)]),
    "Flatten": ([2, 3, 64], [2, 192], {"axis": 1}, []),
    "Squeeze": ([1, 3, 64], [3, 64], {}, [np.array([0], np.int64)]),
    "Unsqueeze": ([3, 64], [1, 3, 64], {}, [np.array([0], np.int64)]),
    "Identity": ([2, 3, 64], [2, 3, 64], {}, []),
    "Dropout": ([2, 3, 64], [2, 3, 64], {}, []),
}


@pytest.mark.parametrize("op", sorted(ops.VIEW))
def test_view_op_runs_on_its_input_bytes(op, tmp_path):
    """A view's output at its input's offset, while the input is still read later."""
    shape, out_shape, attrs, consts = VIEW_CASES[op]
    inits = [numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(consts)]
    nodes = [helper.make_node("Neg", ["x"], ["p"]),
             helper.make_node(op, ["p"] + [f"c{i}" for i in range(len(consts))], ["v"], **attrs),
             helper.make_node("Sigmoid", ["v"], ["s"]),
             helper.make_node("Neg", ["p"], ["q"])]  # p is read after the view
    model = make_model(nodes, [("x", F, shape)], [("s", F, out_shape), ("q", F, shape)],
                       initializers=inits, opset=20)
    path = tmp_path / f"{op}.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path)
    plan = graphmem.plan_graph(graph, []).plan
    tensors = dict(plan.tensors)
    tensors["v"] = dataclasses.replace(tensors["v"], offset=tensors["p"].offset,
                                       alias_of="p", alias="view")
    from graphmem.plan.stats import plan_stats
    view = dataclasses.replace(plan, tensors=tensors)
    view = dataclasses.replace(view, stats=plan_stats(view))
    graphmem.validate(view, graph)
    report = verify(view, graph, check_all=True)
    assert report.passed, report.mismatch and report.mismatch.describe()
