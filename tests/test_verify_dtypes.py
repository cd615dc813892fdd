"""Issue 35: verify judges float16, bfloat16 and int8 models exactly, draws inputs the
model accepts, and runs models above the runtime's IR version (tests/data/dtypes/,
written by tools/corpus/dtype_models.py from tests/data/corpus/bert-ts.onnx and by hand)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graphmem
from graphmem.cli import main
from graphmem.frontend.zoo import zoo_path
from graphmem.verify.inputs import random_inputs
from graphmem.verify.verifier import verify

DATA = Path(__file__).parent / "data"
DTYPES = DATA / "dtypes"
DIMS = {"batch": 2, "seq": 8, "past_seq": 4}
MODELS = ["bert_fp16", "bert_opt", "bert_opt_fp16", "bert_int8_dynamic", "bert_int8_qdq",
          "bf16", "contrib_bert", "ir14"]


def _load(path: Path):
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    names = {d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim
             if d.dim_param}
    return graphmem.load(path, {k: v for k, v in DIMS.items() if k in names})


def _verifies_bit_for_bit(graph) -> None:
    """Plans with the default passes and with none verify at three seeds, every output
    bit for bit."""
    for passes in (list(graphmem.DEFAULT_PASSES), []):
        plan = graphmem.plan_graph(graph, passes).plan
        for seed in (0, 1, 2):
            report = verify(plan, graph, seed=seed)
            assert report.passed, (seed, report.mismatch and report.mismatch.describe())
            assert all(o.max_abs_diff == 0 for o in report.outputs)


@pytest.mark.parametrize("name", MODELS)
def test_every_dtype_model_verifies_at_three_seeds(name):
    _verifies_bit_for_bit(_load(DTYPES / f"{name}.onnx"))


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1", "resnet50"])
def test_zoo_verifies_at_three_seeds(name):
    graph = graphmem.load(zoo_path(name))
    plan = graphmem.plan_graph(graph).plan
    for seed in (0, 1, 2):
        assert verify(plan, graph, seed=seed).passed


@pytest.mark.parametrize("name", ["bert-ts", "bert-dynamo", "gpt2-past-ts", "gpt2-past-dynamo"])
def test_corpus_verifies_at_three_seeds(name):
    graph = _load(DATA / "corpus" / f"{name}.onnx")
    plan = graphmem.plan_graph(graph).plan
    for seed in (0, 1, 2):
        report = verify(plan, graph, seed=seed)
        assert report.passed, report.mismatch and report.mismatch.describe()


def test_float16_whole_model_differences_warn_but_do_not_decide():
    """The whole-model session keeps ORT's float32 values between float16 nodes; the
    node-by-node run rounds each to float16. That is the second line, never the verdict."""
    graph = _load(DTYPES / "bert_opt_fp16.onnx")
    report = verify(graphmem.plan_graph(graph, []).plan, graph)
    assert report.passed and report.whole_model
    assert report.whole_model_problem is None


def test_contrib_ids_stay_in_their_tables_and_masks_are_zero_one():
    graph = _load(DTYPES / "contrib_bert.onnx")
    for seed in range(5):
        feeds = random_inputs(graph, seed)
        assert 0 <= feeds["ids"].min() and feeds["ids"].max() < 4  # 30-row table, at most 4
        assert set(np.unique(feeds["segments"])) <= {0, 1}  # a 2-row table
        mask = feeds["mask"]
        assert set(np.unique(mask)) <= {0, 1} and (mask[:, 0] == 1).all()


def test_indices_followed_through_value_keeping_ops(tmp_path):
    from onnx import TensorProto, helper
    from conftest import make_model
    nodes = [helper.make_node("Cast", ["i"], ["c"], to=TensorProto.INT64),
             helper.make_node("Unsqueeze", ["c", "ax"], ["u"]),
             helper.make_node("Gather", ["table", "u"], ["y"], axis=0)]
    ax = helper.make_tensor("ax", TensorProto.INT64, [1], [0])
    model = make_model(nodes, [("table", TensorProto.FLOAT, [3, 5]), ("i", TensorProto.INT32, [64])],
                       [("y", TensorProto.FLOAT, [1, 64, 5])], initializers=[ax])
    path = tmp_path / "g.onnx"
    path.write_bytes(model.SerializeToString())
    feeds = random_inputs(graphmem.load(path), 0)
    assert feeds["i"].max() < 3


def test_a_model_onnx_writes_at_ir_14_runs_lowered_with_one_note(capsys):
    import onnx
    from graphmem.verify.runtime import runtime_max_ir
    path = DTYPES / "ir14.onnx"
    assert onnx.load(str(path)).ir_version == 14
    assert main(["verify", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "PASS" in out
    if runtime_max_ir() < 14:
        notes = [line for line in err.splitlines() if "IR version 14" in line]
        assert len(notes) == 1 and f"runs as IR {runtime_max_ir()}" in notes[0]


def test_a_model_that_needs_the_newer_ir_names_both_versions(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper
    from graphmem.verify.runtime import runtime_max_ir
    if runtime_max_ir() >= 14:
        pytest.skip("this onnxruntime reads IR 14")
    # FLOAT6E2M3 came with IR 14: lowering cannot help
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["h"], to=27),
                           helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 14
    path = tmp_path / "f6.onnx"
    onnx.save(m, str(path))
    from graphmem.verify.runtime import usable_ir_version
    from graphmem.errors import GraphmemError
    with pytest.raises(GraphmemError, match=r"IR version 14 and needs IR 14 .*FLOAT6E2M3.*up to 13"):
        usable_ir_version(m)


def test_refused_random_inputs_name_the_input_and_how_to_pass_real_ones(tmp_path, capsys):
    """A Reshape whose shape is a graph input: random values are no shape; one line says
    which input and how to pass real ones."""
    from onnx import TensorProto, helper
    from conftest import make_model
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [2, 6]), ("shape", TensorProto.INT64, [2])],
                       [("y", TensorProto.FLOAT, [3, 4])])
    path = tmp_path / "r.onnx"
    path.write_bytes(model.SerializeToString())
    code = main(["verify", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "'shape'" in err[0] and "--inputs FILE.npz" in err[0]
    np.savez(tmp_path / "in.npz", x=np.ones([2, 6], np.float32), shape=np.array([3, 4]))
    assert main(["verify", str(path), "--inputs", str(tmp_path / "in.npz")]) == 0


def test_int4_block_quantized_weights_verify_and_count_as_stored(tmp_path):
    """The int4 QDQ form (MatMulNBitsQuantizer's quant_format QDQ, for providers without
    MatMulNBits): an INT4 weight dequantized block by block (opset 21, block_size)
    before its MatMul. Two int4 values a byte, scales by block."""
    from onnx import TensorProto, helper
    from conftest import make_model
    from graphmem.analysis import breakdown
    rng = np.random.default_rng(0)
    k, n, block = 64, 32, 32
    w = helper.make_tensor("w", TensorProto.INT4, [k, n],
                           rng.integers(-8, 8, k * n).tolist())
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [k // block, n],
                               (rng.random(k // block * n) * 0.1 + 0.01).tolist())
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale"], ["wf"], axis=0,
                              block_size=block),
             helper.make_node("MatMul", ["x", "wf"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("MatMul", ["r", "wt"], ["y"])]
    wt = helper.make_tensor("wt", TensorProto.FLOAT, [n, 8], rng.random(n * 8).tolist())
    model = make_model(nodes, [("x", TensorProto.FLOAT, ["batch", k])],
                       [("y", TensorProto.FLOAT, ["batch", 8])], [w, scale, wt], opset=21)
    path = tmp_path / "int4-qdq.onnx"
    path.write_bytes(model.SerializeToString())
    graph = graphmem.load(path, {"batch": 4})
    assert breakdown.weight_bytes(graph) == k * n // 2 + (k // block) * n * 4 + n * 8 * 4
    _verifies_bit_for_bit(graph)


def test_qoperator_static_int8_verifies(tmp_path):
    """quantize_static in the QOperator format: QLinearConv, and ORT's contrib QLinearAdd
    and QLinearGlobalAveragePool (the QDQ format is in tests/data/dtypes/)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from conftest import make_model, quantize_static_quietly
    rng = np.random.default_rng(0)
    conv = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n)
            for n, s in (("w0", (16, 3, 3, 3)), ("w1", (16, 16, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1] * 4),
             helper.make_node("Add", ["c1", "r0"], ["a"]),
             helper.make_node("GlobalAveragePool", ["a"], ["y"])]
    src, dst = tmp_path / "fp32.onnx", tmp_path / "qop.onnx"
    onnx.save(make_model(nodes, [("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                         [("y", TensorProto.FLOAT, [1, 16, 1, 1])], conv, opset=17), src)
    quantize_static_quietly(src, dst, [{"x": rng.standard_normal((1, 3, 12, 12)).astype(
        np.float32)} for _ in range(2)], "QOperator")
    graph = graphmem.load(dst)
    ops = {n.op_type for n in graph.nodes}
    assert {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool"} <= ops, ops
    _verifies_bit_for_bit(graph)
