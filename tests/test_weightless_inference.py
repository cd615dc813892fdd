"""The loader infers shapes on a model without its weights' data (issue 33's speed):
only the initializers whose values may size a tensor, and the tiny ones, keep their data
in what onnx's shape inference reads, and constant folding computes only the constants
shapes need, never a weight-sized one that only feeds data."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_python_imported_by_plan
from graphmem import wire
from graphmem.errors import GraphmemError
from graphmem.frontend import constant_values, folding, onnx_c
from graphmem.frontend.constant_nodes import shape_values
from graphmem.frontend.constant_values import upstream
from graphmem.frontend.protos import drop_tensor_data
from graphmem.frontend.reader import from_model
from graphmem.frontend.splice import (SHAPE_DATA_BYTES, initializer_from, stripped_tensor,
                                      stripped_weights)
from graphmem.frontend.structure import all_reads

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _quantized_model(side: int = 256, named_dims: bool = True):
    """y = x + DequantizeLinear(w) (a 64 KiB int8 weight, its float form 256 KiB; or
    with ``side`` 64 a 4 KiB one, which keeps its data, its float form 16 KiB), then
    reshaped to a target computed from a big int64 table's Gather and x's Shape: the
    table feeds a shape, the weight only data. A Range turns onnx's data propagation
    off, so the target is known only from its computed value. The outputs' dims are
    names (``named_dims``: bound by the loader) or numbers."""
    rng = np.random.default_rng(0)
    w = rng.integers(-100, 100, (side, side)).astype(np.int8)
    table = np.arange(1024, dtype=np.int64)  # 8 KiB, above SHAPE_DATA_BYTES
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(0.1, np.float32), "scale"),
             numpy_helper.from_array(np.array(0, np.int8), "zp"),
             numpy_helper.from_array(table, "table"),
             numpy_helper.from_array(np.array([1], np.int64), "idx"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(4, np.int64), "four")]
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale", "zp"], ["wf"]),
             helper.make_node("Add", ["x", "wf"], ["y"]),
             helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Gather", ["table", "idx"], ["one_d"]),  # [1]
             helper.make_node("Mul", ["one_d", "minus1"], ["neg"]),  # [-1]
             helper.make_node("Concat", ["neg", "s"], ["target"], axis=0),  # [-1, side, side]
             helper.make_node("Reshape", ["y", "target"], ["z"]),
             helper.make_node("Range", ["zero", "four", "one"], ["r"]),
             helper.make_node("Relu", ["z"], ["out"])]
    outputs = ([_vi("out", ["a", "b", "c"]), _vi("r", ["n"], TensorProto.INT64)] if named_dims
               else [_vi("out", [1, side, side]), _vi("r", [4], TensorProto.INT64)])
    return _model(nodes, [_vi("x", [side, side])], outputs, inits)


def test_shape_values_follow_shape_arguments_upstream_and_stop_at_shape():
    model = _quantized_model()
    g = wire.parse_model(model.SerializeToString()).graph
    found = shape_values(g, all_reads(g))
    assert {"target", "neg", "one_d", "table", "idx", "minus1", "s"} <= found
    assert {"zero", "four", "one"} <= found  # Range's bounds
    # the Shape reads only y's shape: nothing upstream of it is a shape value
    assert not {"y", "x", "wf", "w", "scale", "zp"} & found


def test_only_shape_values_and_tiny_initializers_keep_their_data():
    model = _quantized_model()
    g = wire.parse_model(model.SerializeToString()).graph
    changes = stripped_weights(g, shape_values(g, all_reads(g)))
    names = [g.initializers[i].name for _, i, _ in changes]
    assert names == ["w"]  # 64 KiB of weight; the 8 KiB table sizes a shape
    assert all(t.raw_bytes <= SHAPE_DATA_BYTES for t in g.initializers
               if t.name not in ("w", "table"))


def test_shape_inference_never_reads_the_weights_data(monkeypatch):
    seen = []
    real = onnx_c.infer_shapes

    def spy(data, data_prop=True):
        seen.append(onnx.ModelProto.FromString(data))
        return real(data, data_prop)
    monkeypatch.setattr(onnx_c, "infer_shapes", spy)
    graph = from_model(_quantized_model())
    assert graph.tensors["out"].shape == (1, 256, 256)
    assert seen
    for model in seen:
        inits = {t.name: t for t in model.graph.initializer}
        assert not inits["w"].raw_data and inits["w"].data_location == TensorProto.EXTERNAL
        assert len(model.SerializeToString()) < 16 * 1024


@pytest.fixture
def folding_runs(monkeypatch) -> list[str]:
    """The op of every node constant folding computes, in order, while the test runs
    (by the constant values' shape arithmetic on the wire records, or else by folding's
    evaluators; a node the first gave up on may be named twice)."""
    ran: list[str] = []
    real_run, real_evaluate = folding._run_nodes, constant_values.evaluate

    def spy_run(model, nodes, values, evaluators):
        ran.extend(n.op_type for n in nodes)
        return real_run(model, nodes, values, evaluators)

    def spy_evaluate(nodes, values):
        ran.extend(n.op_type for n in nodes)
        return real_evaluate(nodes, values)
    monkeypatch.setattr(folding, "_run_nodes", spy_run)
    monkeypatch.setattr(constant_values, "evaluate", spy_evaluate)
    return ran


def test_folding_computes_no_weight_sized_constant_that_only_feeds_data(folding_runs):
    ran = folding_runs
    graph = from_model(_quantized_model(64))  # w (4 KiB) keeps its data
    ran_set = set(ran)
    assert "Concat" in ran_set and "Gather" in ran_set  # the Reshape's target
    assert "DequantizeLinear" not in ran_set  # 16 KiB of float weight, for data only
    assert graph.tensors["z"].shape == (1, 64, 64)


def test_a_constant_without_a_type_is_still_computed_from_a_stripped_weight():
    """``upstream`` keeps every folded node the wanted values are computed from."""
    nodes = wire.parse_model(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Neg", ["b"], ["c"]),
         helper.make_node("Abs", ["w"], ["d"])], "g", [], [])).SerializeToString()
    ).graph.nodes
    assert upstream(nodes, [0, 1, 2], {"c"}) == [0, 1]
    assert upstream(nodes, [0, 1, 2], {"d", "b"}) == [0, 2]
    assert upstream(nodes, [1, 2], {"c"}) == [1]  # only among those run
    assert upstream(nodes, [0, 1, 2], set()) == []


def test_an_initializer_is_read_back_from_the_models_bytes():
    model = _quantized_model()
    data = model.SerializeToString()
    g = wire.parse_model(data).graph
    for i, t in enumerate(model.graph.initializer):
        assert initializer_from(data, g, i) == t


@pytest.mark.parametrize("name,data_type,dims", [
    ("w", TensorProto.FLOAT, (64, 3, 7, 7)), ("é x", TensorProto.INT64, ()),
    ("n", TensorProto.INT8, (-1, 2 ** 40))])
def test_a_stripped_tensor_is_the_bytes_protobuf_writes(name, data_type, dims):
    t = onnx.TensorProto(name=name, data_type=data_type, dims=dims)
    drop_tensor_data(t)
    assert stripped_tensor(name, data_type, dims) == t.SerializeToString()


def _unsorted_with_weights():
    """Weights stripped, nodes sorted for the checker, inputs typed: all written as bytes."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    nodes = [helper.make_node("Add", ["a", "b"], ["y"]),
             helper.make_node("MatMul", ["x", "w"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["b"])]
    return _model(nodes, [_vi("x", [8, 64])], [_vi("y", [8, 64])], [w])


def _ort_saved(batch=1):
    """What ONNX Runtime's optimizer saves: a FusedConv (the contrib rules size it), its
    output read by a standard op, and LayerNormalization below opset 17 (ORT's own).
    The output's first dim is ``batch`` (a name: no input names it, nothing binds it)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                                     "w"),
             numpy_helper.from_array(np.ones(6, np.float32), "gamma")]
    nodes = [helper.make_node("FusedConv", ["x", "w"], ["c"], domain="com.microsoft",
                              activation="Relu"),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "gamma"], ["y"], axis=-1)]
    model = _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [batch, 4, 6, 6])], inits,
                   opset=14)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


@pytest.mark.parametrize("make", [_unsorted_with_weights,
                                  lambda: _quantized_model(named_dims=False), _ort_saved])
def test_a_plan_imports_none_of_onnxs_python(tmp_path, make):
    """A model of standard ops, one whose shapes need the constant values (a Reshape to a
    computed target, a Range), and one ONNX Runtime saved (contrib ops): their plans
    import none of onnx's Python package (55-65 ms, as long as planning a small model)."""
    path, out = tmp_path / "m.onnx", tmp_path / "p.json"
    path.write_bytes(make().SerializeToString())
    assert onnx_python_imported_by_plan([str(path), "-o", str(out), "-q"]) == (0, [])
    graph = from_model(make())
    assert graph.sizing[-1].strategy in ("onnx", "constant-values", "shape-walk")


def test_an_output_declared_with_a_name_only_the_contrib_rules_size(tmp_path):
    """The rules' type of an output declared [n, 4, 6, 6] is written over the declared
    one: as a value info beside it, the declared type stood for it, the output stayed
    unknown, and the contrib rules went round for ever (a subprocess, so that a
    regression fails rather than hangs)."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_ort_saved("n").SerializeToString())
    code = ("import graphmem\n"
            f"g = graphmem.load({str(path)!r})\n"
            "print(g.tensors['y'].shape, g.sizing[-1].strategy)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.split("\n")[0] == "(1, 4, 6, 6) shape-walk"


def test_the_checker_still_reads_an_unsorted_model_with_weights():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    nodes = [helper.make_node("Relu", ["a"], ["y"], not_an_attribute=1),
             helper.make_node("MatMul", ["x", "w"], ["a"])]
    with pytest.raises(GraphmemError, match="fails onnx.checker"):
        from_model(_model(nodes, [_vi("x", [8, 64])], [_vi("y", [8, 64])], [w]))


def test_a_later_constant_values_round_computes_only_new_constants(folding_runs, monkeypatch):
    """The Reshape's target (a Mul of constants) sizes y in the first round; the second
    computes the target read from y's Shape, and does not compute the Mul again. (The
    shape walk before the rounds would size it all in one pass: taken out here.)"""
    from graphmem.frontend import shape_strategies
    monkeypatch.setattr(shape_strategies, "STRATEGIES", tuple(
        s for s in shape_strategies.STRATEGIES if s.name != "shape-walk"))
    ran = folding_runs
    inits = [numpy_helper.from_array(np.array([3, 4], np.int64), "c"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([1], np.int64), "ones"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(4, np.int64), "four")]
    nodes = [helper.make_node("Mul", ["c", "one"], ["target"]),
             helper.make_node("Reshape", ["x", "target"], ["y"]),
             helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Concat", ["s", "ones"], ["target2"], axis=0),
             helper.make_node("Reshape", ["y", "target2"], ["z"]),
             helper.make_node("Range", ["zero", "four", "one"], ["r"])]
    graph = from_model(_model(nodes, [_vi("x", [2, 6])],
                              [_vi("z", ["a", "b", "c"]), _vi("r", ["n"], TensorProto.INT64)],
                              inits))
    assert graph.tensors["z"].shape == (3, 4, 1)
    assert ran.count("Mul") == 1 and ran.count("Concat") == 1


def test_onnxruntimes_symbolic_inference_sees_the_weights_it_reads(monkeypatch):
    """The last fallback, ONNX Runtime's symbolic inference, runs onnx's inference node by
    node with the initializers a node reads, and stops at one whose data is marked
    external (GPT-2 through the transformer optimizer: its attention biases): it gets
    the model with the data of the weights up to SMALL_CONSTANT_BYTES back."""
    from graphmem.frontend import shape_strategies
    seen = []
    real = shape_strategies.symbolic_infer

    def spy(model, notes=None):
        seen.append({t.name: (len(t.raw_data), t.data_location) for t in model.graph.initializer})
        return real(model, notes)
    monkeypatch.setattr(shape_strategies, "symbolic_infer", spy)
    rng = np.random.default_rng(0)
    bias = rng.standard_normal(2048).astype(np.float32)  # 8 KiB
    inits = [numpy_helper.from_array(bias, "bias")]
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"]),
             helper.make_node("Opaque", ["a"], ["y"], domain="example.org")]
    graph = helper.make_graph(nodes, "g", [_vi("x", [4, 2048])], [_vi("y", ["p", "q"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("example.org", 1)],
                              ir_version=8)
    with pytest.raises(GraphmemError, match="cannot infer the shape of tensor 'y'"):
        from_model(model)
    assert seen == [{"bias": (8192, TensorProto.DEFAULT)}]


def test_each_unknown_node_is_read_once_per_load_without_its_attributes(monkeypatch):
    """What is still unknown is asked after every strategy: the record of each open node
    is made once (ORT's saved graphs start with most nodes unknown), and its attributes
    are not decoded (nothing that reads what is open needs them)."""
    from graphmem.frontend import attributes, shape_strategies
    made = []
    real = shape_strategies.OpenNode

    def spy(idx, *rest):
        made.append(idx)
        return real(idx, *rest)
    monkeypatch.setattr(shape_strategies, "OpenNode", spy)
    monkeypatch.setattr(attributes, "decode", lambda *a, **k: pytest.fail("decoded"))
    nodes = [helper.make_node("Opaque", ["x"], ["a"], domain="example.org", size=3),
             helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Neg", ["b"], ["y"])]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [_vi("x", [4])], [_vi("y", ["n"])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.org", 1)],
        ir_version=8)
    with pytest.raises(GraphmemError, match="cannot infer the shape of tensor 'a'"):
        from_model(model)
    assert sorted(made) == [0, 1, 2]


def test_a_large_file_is_mapped_and_loads_as_its_bytes_do(monkeypatch, tmp_path):
    """A file of at least MAP_BYTES is parsed in a read-only map (the pages of weights
    shape inference does not need are never read); the graph is the one its bytes give,
    unsorted nodes, stripped weights, checker and constant values included."""
    import mmap

    from graphmem.frontend import reader
    path = tmp_path / "m.onnx"
    path.write_bytes(_quantized_model().SerializeToString())
    from_bytes = reader.load(path)
    monkeypatch.setattr(reader, "MAP_BYTES", 1024)
    assert isinstance(reader.file_contents(path), mmap.mmap)
    mapped = reader.load(path)
    assert mapped.tensors == from_bytes.tensors and mapped.nodes == from_bytes.nodes
    assert [s.strategy for s in mapped.sizing] == [s.strategy for s in from_bytes.sizing]
    monkeypatch.setattr(reader, "MAP_BYTES", 1 << 40)
    assert isinstance(reader.file_contents(path), bytes)


def test_a_mapped_file_without_weights_goes_to_the_checker_as_bytes(monkeypatch, tmp_path):
    from graphmem.frontend import reader
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("Relu", ["x"], ["y"], not_an_attribute=1)]
    path.write_bytes(_model(nodes, [_vi("x", [4])], [_vi("y", [4])]).SerializeToString())
    monkeypatch.setattr(reader, "MAP_BYTES", 16)
    with pytest.raises(GraphmemError, match="fails onnx.checker"):
        reader.load(path)
    path.write_bytes(_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [4])],
                            [_vi("y", [4])]).SerializeToString())
    assert reader.load(path).tensors["y"].shape == (4,)
