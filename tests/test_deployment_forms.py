"""Deployment forms through the loader and the CLI: dims written as expressions, a
``--dim`` the model lacks, value_info annotations that lie, and quantized weights
counted as stored (issue 34)."""
from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphmem.analysis import breakdown
from graphmem.cli import main
from graphmem.frontend.reader import from_model

from conftest import F, runtime_model

I64 = TensorProto.INT64


def decode_step(mask_dim="past_seq + 1", batch=1):
    """A KV-cache decode step as the dynamo exporter writes one: the mask's axis is
    ``past_seq + 1``, the present key ``past_seq + 1`` long."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((100, 32)).astype(np.float32), "embed")
    shape = numpy_helper.from_array(np.array([batch, 1, 2, 16], np.int64), "heads")
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["h"]),                  # b,1,32
        helper.make_node("Reshape", ["h", "heads"], ["h4"]),
        helper.make_node("Transpose", ["h4"], ["q"], perm=[0, 2, 1, 3]),          # b,2,1,16
        helper.make_node("Concat", ["past_key", "q"], ["present_key"], axis=2),   # b,2,P+1,16
        helper.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),                      # b,2,1,P+1
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axes"], ["mask4"]),              # b,1,1,P+1
        helper.make_node("Add", ["scores", "mask4"], ["logits"]),
    ]
    axes = numpy_helper.from_array(np.array([1, 2], np.int64), "axes")
    graph = helper.make_graph(
        nodes, "decode",
        [helper.make_tensor_value_info("input_ids", I64, [batch, 1]),
         helper.make_tensor_value_info("attention_mask", I64, [batch, mask_dim]),
         helper.make_tensor_value_info("past_key", F, [batch, 2, "past_seq", 16])],
        [helper.make_tensor_value_info("logits", F, [batch, 2, 1, mask_dim]),
         helper.make_tensor_value_info("present_key", F, [batch, 2, mask_dim, 16])],
        [w, shape, axes])
    return runtime_model(graph, 17)


def save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


# ---------------------------------------------------------------------- dims as expressions

def test_a_decode_step_plans_with_past_seq_alone(tmp_path, capsys):
    path = save(decode_step(), tmp_path)
    assert main(["plan", path, "--dim", "past_seq=511", "-o", str(tmp_path / "p.json")]) == 0
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["bindings"]["past_seq + 1"] == 512
    g = from_model(decode_step(), {"past_seq": 511})
    assert g.tensors["attention_mask"].shape == (1, 512)
    assert g.tensors["present_key"].shape == (1, 2, 512, 16)


def test_a_disagreeing_value_for_an_expression_is_refused(tmp_path, capsys):
    path = save(decode_step(), tmp_path)
    code = main(["plan", path, "--dim", "past_seq=511", "--dim", "past_seq + 1=100"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--dim past_seq + 1=100 disagrees with past_seq=511" in err and "512" in err


def test_binding_the_expression_alone_binds_its_name(tmp_path):
    g = from_model(decode_step(), {"past_seq + 1": 17})
    assert g.bindings["past_seq"] == 16 and g.tensors["past_key"].shape == (1, 2, 16, 16)


def test_an_unbound_expression_names_what_to_bind(tmp_path, capsys):
    path = save(decode_step(), tmp_path)
    assert main(["plan", path]) == 2
    err = capsys.readouterr().err
    assert "past_seq" in err and err.count("\n") == 1


def test_a_dim_the_model_lacks_is_a_note(tmp_path, capsys):
    # the exporter fixed the batch: one command line serves the family of models
    path = save(decode_step(), tmp_path)
    assert main(["plan", path, "--dim", "batch=1", "--dim", "past_seq=8", "-o",
                 str(tmp_path / "p.json")]) == 0
    err = capsys.readouterr().err
    assert "--dim batch" in err and "no symbolic dimension" in err


# ---------------------------------------------------------------------- annotations

def mis_annotated():
    """A Gather of a float32 table whose value_info says float16 (what onnxconverter-
    common's fp16 conversion writes for BERT's pooler Gather with keep_io_types)."""
    table = numpy_helper.from_array(np.ones((10, 64), np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["g"]),
             helper.make_node("Relu", ["g"], ["y"])]
    graph = helper.make_graph(
        nodes, "lie", [helper.make_tensor_value_info("ids", I64, [4])],
        [helper.make_tensor_value_info("y", F, [4, 64])], [table],
        value_info=[helper.make_tensor_value_info("g", TensorProto.FLOAT16, [4, 64])])
    return runtime_model(graph, 17)


def test_a_lying_annotation_loses_to_the_computed_type(tmp_path, capsys):
    g = from_model(mis_annotated())
    assert g.tensors["g"].dtype == "float32" and g.tensors["g"].bytes == 4 * 64 * 4
    assert any("'g'" in n and "float16" in n for n in g.load_notes)
    path = save(mis_annotated(), tmp_path)
    assert main(["plan", path, "-o", str(tmp_path / "p.json")]) == 0
    assert "'g'" in capsys.readouterr().err


def test_an_annotation_is_kept_where_nothing_computes_the_tensor():
    m = mis_annotated()
    m.graph.node[1].op_type, m.graph.node[1].domain = "Mystery", "example.custom"
    m.opset_import.append(helper.make_opsetid("example.custom", 1))
    m.graph.value_info.append(helper.make_tensor_value_info("y", F, [4, 64]))
    g = from_model(m)
    assert g.tensors["y"].shape == (4, 64)


def test_an_opaque_ops_annotation_sizes_what_follows_in_the_first_round(monkeypatch):
    """The annotation of a contrib op's output goes into onnx's first inference: what
    follows it is computed there (one inference in all), and checked, so a lying
    annotation after the opaque op is caught as one before it is."""
    from graphmem.frontend import inference
    m = mis_annotated()
    m.graph.node[0].op_type, m.graph.node[0].domain = "Mystery", "example.custom"
    m.opset_import.append(helper.make_opsetid("example.custom", 1))
    m.graph.value_info[0].type.tensor_type.elem_type = F  # the opaque op's output: true
    m.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.FLOAT16,
                                                            [4, 64]))  # a lie
    rounds = []
    infer = inference.infer
    monkeypatch.setattr(inference, "infer", lambda *a: rounds.append(1) or infer(*a))
    g = from_model(m)
    assert g.tensors["g"].shape == (4, 64) and g.tensors["y"].dtype == "float32"
    assert any("'y'" in n and "float16" in n for n in g.load_notes)
    assert len(rounds) == 1


def test_an_annotation_of_a_name_no_node_makes_is_passed_over(monkeypatch):
    """ORT's transformer optimizer leaves value_info for the tensors it removed: they
    are no tensors of the graph, and cost no second round of inference."""
    from graphmem.frontend import inference
    m = mis_annotated()
    m.graph.value_info[0].type.tensor_type.elem_type = F
    m.graph.value_info.append(helper.make_tensor_value_info("removed", F, [4, 64]))
    rounds = []
    infer = inference.infer
    monkeypatch.setattr(inference, "infer", lambda *a: rounds.append(1) or infer(*a))
    g = from_model(m)
    assert "removed" not in g.tensors and not g.load_notes and len(rounds) == 1


# ---------------------------------------------------------------------- weights as stored

def qdq_convnet(tmp_path):
    from conftest import quantize_static_quietly
    rng = np.random.default_rng(0)
    nodes, inits, x, cin = [], [], "x", 3
    for i in range(3):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((32, cin, 3, 3)) * 0.1).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x, cin = f"r{i}", 32
    graph = helper.make_graph(nodes, "convnet",
                              [helper.make_tensor_value_info("x", F, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info(x, F, [1, 32, 16, 16])], inits)
    src, dst = tmp_path / "fp32.onnx", tmp_path / "qdq.onnx"
    onnx.save(runtime_model(graph, 17), src)

    quantize_static_quietly(src, dst, [{"x": rng.standard_normal((1, 3, 16, 16)).astype(
        np.float32)}])
    return src, dst


def test_qdq_weights_count_as_stored(tmp_path, capsys):
    src, dst = qdq_convnet(tmp_path)
    fp32, qdq = from_model(onnx.load(src)), from_model(onnx.load(dst))
    float_bytes = (32 * 3 * 9 + 2 * 32 * 32 * 9) * 4
    assert breakdown.weight_bytes(fp32) == float_bytes
    stored = breakdown.weight_bytes(qdq)
    assert float_bytes // 4 <= stored < float_bytes // 4 + 1024  # int8, scales, zero points
    assert breakdown.dequantized_bytes(qdq) == float_bytes
    assert breakdown.compute_class(qdq) == "int8"
    assert main(["report", str(dst), "--json", "--no-layers"]) == 0
    t = json.loads(capsys.readouterr().out)["totals"]
    assert t["weight_bytes"] == stored and t["weight_bytes_dequantized"] == float_bytes
    assert main(["fit", str(dst), "--budget", "64MiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weight_bytes"] == stored
