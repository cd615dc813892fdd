"""What real models bring: symbolic dims, every opset, many dtypes, external data,
models over 2 GB, and control flow (If, Loop) with captured outer tensors."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.frontend.reader import from_model
from graphmem.plan.format import Plan

from conftest import F, make_model, plan_of, runtime_model
from verify_hook import verify_or_skip

NEWEST = onnx.defs.onnx_opset_version()


def save(model, path, **kw):
    onnx.save(model, str(path), **kw)
    return path


# ------------------------------------------------------------------ symbolic dims

def attention_like():
    """x[batch, seq, 16] -> Relu -> Add -> y, with a [batch, seq] mask input."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"]),
             helper.make_node("Not", ["mask"], ["keep"])]
    return make_model(nodes, [("x", F, ["batch", "seq", 16]),
                              ("mask", TensorProto.BOOL, ["batch", "seq"])],
                      [("y", F, ["batch", "seq", 16]), ("keep", TensorProto.BOOL, ["batch", "seq"])])


def test_dims_bind_by_name(tmp_path, capsys):
    path = save(attention_like(), tmp_path / "m.onnx")
    out = tmp_path / "p.json"
    assert main(["plan", str(path), "--dim", "batch=32", "--dim", "seq=128", "-o", str(out),
                 "-q"]) == 0
    assert capsys.readouterr().err == ""
    plan = Plan.load(out)
    assert plan.bindings == {"batch": 32, "seq": 128}
    assert plan.tensors["x"].bytes == 32 * 128 * 16 * 4
    assert plan.tensors["keep"].bytes == 32 * 128  # bool: one byte each


def test_dim_default_binds_the_rest_and_says_so(tmp_path, capsys):
    path = save(attention_like(), tmp_path / "m.onnx")
    out = tmp_path / "p.json"
    assert main(["plan", str(path), "--dim", "seq=8", "--dim-default", "1", "-o", str(out),
                 "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["graphmem: --dim-default 1 bound batch=1"]
    plan = Plan.load(out)
    assert plan.bindings == {"seq": 8, "batch": 1}  # the plan records every binding
    assert plan.tensors["x"].bytes == 1 * 8 * 16 * 4


def test_dim_default_is_off_unless_asked(tmp_path, capsys):
    path = save(attention_like(), tmp_path / "m.onnx")
    assert main(["plan", str(path), "--dim", "seq=8", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "symbolic dimension not bound: 'batch'" in err and "--dim batch=VALUE" in err
    assert not (tmp_path / "p.json").exists()


def test_every_unbound_dim_is_named_in_one_line(tmp_path, capsys):
    path = save(attention_like(), tmp_path / "m.onnx")
    assert main(["plan", str(path), "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "'batch' (axis 0 of input 'x')" in err and "'seq' (axis 1 of input 'x')" in err
    assert "--dim batch=VALUE --dim seq=VALUE" in err


def token_type_encoder(batch="batch", seq="seq"):
    """The embeddings of a transformers BERT export: token-type ids defaulted inside the
    model (a buffer sliced to the sequence and expanded to the batch), looked up, added
    to the word embeddings."""
    rng = np.random.default_rng(0)
    hidden, vocab = 16, 50
    inits = [numpy_helper.from_array(np.zeros((1, 64), np.int64), "buffered_token_type_ids"),
             numpy_helper.from_array(rng.standard_normal((2, hidden)).astype(np.float32),
                                     "type_emb"),
             numpy_helper.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32),
                                     "word_emb"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
             helper.make_node("Gather", ["ids_shape", "one"], ["seq_len"], axis=0),
             helper.make_node("Unsqueeze", ["seq_len", "zero"], ["seq_1d"]),
             helper.make_node("Slice", ["buffered_token_type_ids", "zero", "seq_1d", "axis1"],
                              ["types_row"]),
             helper.make_node("Expand", ["types_row", "ids_shape"], ["token_type_ids"]),
             helper.make_node("Gather", ["type_emb", "token_type_ids"], ["type_lookup"]),
             helper.make_node("Gather", ["word_emb", "input_ids"], ["word_lookup"]),
             helper.make_node("Add", ["word_lookup", "type_lookup"], ["out"])]
    graph = helper.make_graph(
        nodes, "encoder", [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                         [batch, seq])],
        [helper.make_tensor_value_info("out", F, [batch, seq, hidden])], inits)
    return runtime_model(graph, 17)


def test_data_made_from_bound_dims_runs_and_is_not_a_weight(tmp_path, capsys):
    """A lookup sized by batch and sequence is an activation planned in the arena: the
    weights do not change with the bindings; shape arithmetic still folds."""
    small = from_model(token_type_encoder(), {"batch": 1, "seq": 8})
    large = from_model(token_type_encoder(), {"batch": 8, "seq": 64})
    for g in (small, large):
        assert set(g.constants) == {"ids_shape", "seq_len", "seq_1d"}
        assert "type_lookup" in g.arena_tensors() and "token_type_ids" in g.arena_tensors()

    def weights(g):
        return sum(g.tensors[t].bytes for t in g.weight_names())
    assert weights(small) == weights(large)
    # with every dim fixed in the file, nothing is bound: the lookup folds as before
    fixed = from_model(token_type_encoder(2, 8))
    assert "type_lookup" in fixed.constants
    path = save(token_type_encoder(), tmp_path / "encoder.onnx")
    assert main(["verify", str(path), "--dim", "batch=2", "--dim", "seq=8"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_dim_default_rejects_a_negative_value(tmp_path, capsys):
    path = save(attention_like(), tmp_path / "m.onnx")
    with pytest.raises(SystemExit):
        main(["plan", str(path), "--dim-default", "-3"])
    assert "cannot be negative" in capsys.readouterr().err


def test_dim_default_api():
    g = from_model(attention_like(), {"batch": 2}, dim_default=3)
    assert g.bindings == {"batch": 2, "seq": 3}
    assert g.tensors["y"].shape == (2, 3, 16)


# ------------------------------------------------------------------ opsets and dtypes

def opset_model(opset: int):
    """View, element-wise and Concat ops in forms every opset from 7 on accepts."""
    shape = numpy_helper.from_array(np.array([2, 12], dtype=np.int64), "shape")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Reshape", ["b", "shape"], ["c"]),
             helper.make_node("Identity", ["c"], ["d"]),
             helper.make_node("Flatten", ["x"], ["e"], axis=1),
             helper.make_node("Concat", ["d", "e"], ["f"], axis=0),
             helper.make_node("Dropout", ["f"], ["g", "mask"]),
             helper.make_node("Add", ["g", "g"], ["y"])]
    return make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, [4, 12])], [shape], opset=opset)


@pytest.mark.parametrize("opset", range(7, NEWEST + 1))
def test_every_opset_plans(opset):
    result = plan_of(opset_model(opset))
    assert result.plan.tensors["y"].bytes == 12 * 4 * 4
    kinds = {name: t.alias for name, t in result.plan.tensors.items() if t.alias}
    assert kinds.get("c") == "view" and kinds.get("d") == "view"


DTYPES = [  # (onnx type, name, bytes of a [3, 5] tensor)
    (TensorProto.FLOAT16, "float16", 30), (TensorProto.BFLOAT16, "bfloat16", 30),
    (TensorProto.INT8, "int8", 15), (TensorProto.UINT8, "uint8", 15),
    (TensorProto.BOOL, "bool", 15), (TensorProto.DOUBLE, "float64", 120),
    (TensorProto.INT64, "int64", 120), (TensorProto.INT4, "int4", 8),
    (TensorProto.FLOAT8E4M3FN, "float8e4m3fn", 15),
]


@pytest.mark.parametrize("elem,name,nbytes", DTYPES, ids=[d[1] for d in DTYPES])
def test_dtype_sizes(elem, name, nbytes):
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=elem),
             helper.make_node("Identity", ["c"], ["d"]),
             helper.make_node("Cast", ["d"], ["y"], to=TensorProto.FLOAT)]
    model = make_model(nodes, [("x", F, [3, 5])], [("y", F, [3, 5])], opset=21)
    result = plan_of(model)
    assert result.graph.tensors["c"].dtype == name
    assert result.plan.tensors["c"].bytes == nbytes
    assert result.plan.tensors["d"].alias == "view"


def test_sequence_map_optional_are_refused_by_name():
    seq = make_model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
                      helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                     [("x", F, [2])], [("y", F, [4])])
    with pytest.raises(GraphmemError, match="tensor 's' is a sequence"):
        from_model(seq)
    opt = make_model([helper.make_node("Optional", ["x"], ["o"]),
                      helper.make_node("OptionalGetElement", ["o"], ["y"])],
                     [("x", F, [2])], [("y", F, [2])], opset=18)
    with pytest.raises(GraphmemError, match="tensor 'o' is an optional"):
        from_model(opt)
    m = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    m.graph.input.append(helper.make_value_info(
        "table", helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(F, []))))
    with pytest.raises(GraphmemError, match="tensor 'table' is a map"):
        from_model(m)


# ------------------------------------------------------------------ external data

def matmul_model(rows=512, cols=1024):
    w = numpy_helper.from_array(np.random.default_rng(0).random((rows, cols), np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    return make_model(nodes, [("x", F, [4, rows])], [("z", F, [4, cols])], [w])


def test_external_data_plans_without_the_weight_file(tmp_path):
    path = save(matmul_model(), tmp_path / "m.onnx", save_as_external_data=True,
                all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    assert (tmp_path / "m.data").stat().st_size == 512 * 1024 * 4
    with_file = graphmem.plan_model(path).plan
    (tmp_path / "m.data").unlink()  # only shapes are needed: nothing may read it
    without = graphmem.plan_model(path).plan
    assert without.to_json() == with_file.to_json()
    assert graphmem.load(path).tensors["W"].bytes == 512 * 1024 * 4


def test_external_data_truncated_file_is_not_read(tmp_path):
    path = save(matmul_model(), tmp_path / "m.onnx", save_as_external_data=True,
                location="m.data", size_threshold=0)
    (tmp_path / "m.data").write_bytes(b"\0" * 10)
    assert main(["plan", str(path), "-o", str(tmp_path / "p.json"), "-q"]) == 0
    graphmem.validate(Plan.load(tmp_path / "p.json"), graphmem.load(path))


def test_large_inline_initializer_plans(tmp_path):
    # Over the loader's 1 MiB threshold for dropping tensor data: such a model once failed onnx.checker.
    path = save(matmul_model(1024, 1024), tmp_path / "m.onnx")
    assert graphmem.plan_model(path).plan.tensors["z"].bytes == 4 * 1024 * 4


def test_small_external_shape_constant_is_read_when_needed(tmp_path):
    shape = numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "shape")
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [("x", F, [12])],
                       [("y", F, [3, 4])], [shape])
    path = save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data",
                size_threshold=0)
    assert graphmem.load(path).tensors["y"].shape == (3, 4)


def huge_model(path, sparse_file: bool):
    """A 3 GiB weight declared in external data; the data file is sparse or absent."""
    rows, cols = 32768, 24576
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[rows, cols],
                    data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "big.data"), ("offset", "0"), ("length", str(rows * cols * 4))):
        entry = w.external_data.add()
        entry.key, entry.value = k, v
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    model = make_model(nodes, [("x", F, [8, rows])], [("z", F, [8, cols])], [w])
    save(model, path)
    if sparse_file:
        with open(path.parent / "big.data", "wb") as f:
            f.truncate(rows * cols * 4)  # sparse: no blocks written
    return rows * cols * 4


@pytest.mark.parametrize("sparse_file", [False, True], ids=["no-data-file", "sparse-data-file"])
def test_model_over_2gb_plans_without_reading_weights(tmp_path, sparse_file):
    path = tmp_path / "big.onnx"
    weight_bytes = huge_model(path, sparse_file)
    assert weight_bytes > 2 ** 31 and path.stat().st_size < 10_000
    assert main(["plan", str(path), "-o", str(tmp_path / "p.json"), "-q"]) == 0
    graph = graphmem.load(path)
    assert graph.weight_bytes() == weight_bytes
    plan = Plan.load(tmp_path / "p.json")
    graphmem.validate(plan, graph)
    assert plan.tensors["y"].bytes == 8 * 24576 * 4


# ------------------------------------------------------------------ control flow

def if_model():
    """``c`` is read only inside the If branches: an implicit input of the If node."""
    then_g = helper.make_graph([helper.make_node("Add", ["c", "c"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Sigmoid", ["c"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [2, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["c"]),
             helper.make_node("Neg", ["x"], ["n"]),  # may reuse c's bytes only if c is dead
             helper.make_node("Tanh", ["n"], ["m"]),
             helper.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Add", ["r", "m"], ["y"])]
    return make_model(nodes, [("x", F, [2, 3]), ("cond", TensorProto.BOOL, [])],
                      [("y", F, [2, 3])])


def loop_model():
    """A Loop whose body adds the outer tensor ``w`` (captured) to the carried value."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "w"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [2, 3])])
    trip = numpy_helper.from_array(np.array(3, dtype=np.int64), "trip")
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [helper.make_node("Sigmoid", ["x"], ["w"]),
             helper.make_node("Relu", ["x"], ["v0"]),
             helper.make_node("Exp", ["x"], ["k"]),
             helper.make_node("Loop", ["trip", "cond", "v0"], ["v"], body=body),
             helper.make_node("Mul", ["v", "k"], ["y"])]
    return make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], [trip, cond])


def scan_model():
    """A Scan summing the rows of ``xs`` into a carried state, scaled by outer ``w``."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["row", "w"], ["scaled"]),
         helper.make_node("Add", ["s_in", "scaled"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["each"])], "body",
        [helper.make_tensor_value_info("s_in", F, [3]), helper.make_tensor_value_info("row", F, [3])],
        [helper.make_tensor_value_info("s_out", F, [3]),
         helper.make_tensor_value_info("each", F, [3])])
    nodes = [helper.make_node("Sigmoid", ["x"], ["w"]),
             helper.make_node("Relu", ["x"], ["s0"]),
             helper.make_node("Tanh", ["x"], ["k"]),
             helper.make_node("Scan", ["s0", "xs"], ["s", "rows"], body=body,
                              num_scan_inputs=1),
             helper.make_node("Mul", ["s", "k"], ["y"])]
    return make_model(nodes, [("x", F, [3]), ("xs", F, [4, 3])],
                      [("y", F, [3]), ("rows", F, [4, 3])])


@pytest.mark.parametrize("build,node,captured", [(if_model, "If", "c"), (loop_model, "Loop", "w"),
                                                 (scan_model, "Scan", "w")])
def test_control_flow_captured_tensor_lives_until_the_node(build, node, captured, tmp_path):
    model = build()
    import onnxruntime as ort
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for passes in ([], ["inplace"], ["inplace", "share"], ["inplace", "share", "place"]):
        result = plan_of(model, passes)  # validates
        plan, graph = result.plan, result.graph
        holder = next(n for n in graph.nodes if n.op_type == node)
        assert captured in holder.implicit_inputs
        pos = plan.order.index(holder.index)
        assert plan.tensors[captured].live[1] == pos
        # nothing produced before the node may sit on the captured tensor's bytes
        c = plan.tensors[captured]
        for name, t in plan.tensors.items():
            if name != captured and t.live[0] < pos and t.live[1] >= c.live[0] and t.bytes:
                assert (t.offset + t.bytes <= c.offset or c.offset + c.bytes <= t.offset
                        or t.alias_of == captured or c.alias_of == name), name
    path = save(model, tmp_path / "cf.onnx")
    assert main(["plan", str(path), "-o", str(tmp_path / "p.json"), "-q"]) == 0
    assert json.loads((tmp_path / "p.json").read_text())["tensors"][captured]["live"][1] == pos


@pytest.mark.parametrize("build", [if_model, loop_model, scan_model])
def test_control_flow_verifies(build, tmp_path):
    path = save(build(), tmp_path / "cf.onnx")
    verify_or_skip(path, graphmem.plan_model(path))


def test_unsorted_graph_plans_like_onnxruntime_runs_it():
    """ORT runs a graph whose nodes are not in topological order; so does graphmem."""
    nodes = [helper.make_node("Add", ["a", "b"], ["y"]), helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["b"])]
    model = make_model(nodes, [("x", F, [4])], [("y", F, [4])])
    import onnxruntime as ort
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert plan_of(model).plan.order == [1, 2, 0]
