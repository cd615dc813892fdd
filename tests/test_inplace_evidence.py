"""The in-place tables rest on evidence from ONNX Runtime's kernel sources
(graphmem/core/inplace_evidence.json, made by tools/upstream/inplace_evidence.py): every default
entry has it, entries without it are only in the opt-in probed tables (issue 20)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from onnx import TensorProto, helper

import graphmem
from graphmem.core import ops

from conftest import make_model
from graphmem.frontend.reader import from_model

F = TensorProto.FLOAT
ROOT = Path(__file__).resolve().parent.parent


def test_the_evidence_file_parses_and_names_its_source():
    data = json.loads((ROOT / "graphmem/core/inplace_evidence.json").read_text())
    assert data["format"] == "graphmem.inplace-evidence/1"
    assert len(data["onnxruntime"]["commit"]) == 40 and data["onnxruntime"]["version"]
    assert set(data["providers"]) == {"cpu", "cuda"}
    assert ops.evidence_file() == data


@pytest.mark.parametrize("provider", ops.PROVIDERS)
def test_every_default_entry_has_evidence_with_a_file_and_line(provider):
    table = ops.INPLACE_TABLES[provider]
    assert table, f"the {provider} default table is empty"
    for op, pairs in table.items():
        found = {tuple(e["pair"]): e for e in ops.evidence(provider, op)}
        for pair in pairs:
            e = found[pair]
            assert e["kind"] in ("declared", "source")
            assert e["file"].startswith((f"onnxruntime/core/providers/{provider}/",
                                         f"onnxruntime/contrib_ops/{provider}/"))
            assert isinstance(e["line"], int) and e["line"] > 0
            if e["kind"] == "declared":
                assert "MayInplace" in e["text"] or "Alias" in e["text"]
            else:
                assert e["function"] and e["why"] and e["cites"]


def test_the_default_tables_are_the_candidates_with_evidence():
    for provider in ops.PROVIDERS:
        probed = ops.INPLACE_TABLES[ops.table_key(provider, "probed")]
        fused = {op: p for op, p in ops.INPLACE_TABLES[provider].items()
                 if op in ops.FUSED or op in ops.ROWWISE}
        assert probed == {**ops.ELEMENTWISE, **fused}  # no fused or row-wise pair is probed
        for op, pairs in ops.INPLACE_TABLES[provider].items():
            assert set(pairs) <= set({**ops.ELEMENTWISE, **ops.ROWWISE, **ops.FUSED}[op])
    # the runtime's own declarations the zoo relies on
    assert ops.INPLACE_TABLES["cpu"]["Relu"] == [(0, 0)]
    assert ops.evidence("cpu", "Relu")[0]["kind"] == "declared"
    assert ops.INPLACE_TABLES["cuda"]["Relu"] == [(0, 0)]
    # read from source: Sum's inputs 0 and 1 only (Sum-6 writes before it reads input 2)
    assert ops.INPLACE_TABLES["cpu"]["Sum"] == [(0, 0), (1, 0)]
    assert "Exp" not in ops.INPLACE_TABLES["cpu"] and "Add" not in ops.INPLACE_TABLES["cuda"]
    # the fused ops ORT's optimizers write: a Conv's fused sum into its output (CPU)
    assert ops.INPLACE_TABLES["cpu"]["com.microsoft:FusedConv"] == [(3, 0)]
    assert ops.INPLACE_TABLES["cpu"]["com.microsoft.nchwc:Conv"] == [(3, 0)]
    assert ops.evidence("cpu", "com.microsoft:FusedConv")[0]["file"] == \
        "onnxruntime/contrib_ops/cpu/fused_conv.cc"
    assert ops.INPLACE_TABLES["cuda"]["com.microsoft:GroupQueryAttention"] == [(3, 1), (4, 2)]
    assert "com.microsoft:FusedConv" not in ops.INPLACE_TABLES["cuda"]  # declares none


def _fused_conv_graph(elem):
    """x -> Conv -> a; FusedConv(x, w, b, sum=a) -> y: the sum dies at the FusedConv."""
    import numpy as np
    from onnx import numpy_helper
    dtype = np.float32 if elem == F else np.float16
    w = numpy_helper.from_array(np.ones((4, 4, 1, 1), dtype), "w")
    b = numpy_helper.from_array(np.zeros(4, dtype), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["a"]),
             helper.make_node("FusedConv", ["x", "w", "b", "a"], ["y"], domain="com.microsoft",
                              activation="Relu")]
    model = make_model(nodes, [("x", elem, [1, 4, 8, 8])], [("y", elem, [1, 4, 8, 8])], [w, b],
                       value_info=[("y", elem, [1, 4, 8, 8])])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return from_model(model)


def test_fused_conv_writes_over_its_sum_for_float_only():
    """CPU FusedConv declares MayInplace(3, 0) on its float kernel; the MLFloat16 one
    declares none (ops.PAIR_DTYPE)."""
    plan = graphmem.plan_graph(_fused_conv_graph(F)).plan
    assert plan.tensors["y"].alias_of == "a"
    plan16 = graphmem.plan_graph(_fused_conv_graph(TensorProto.FLOAT16)).plan
    assert plan16.tensors["y"].alias_of is None


def _attention_scores_graph(elem, tmp_path):
    """q @ k -> s; Softmax(s) -> p; p @ v -> y: the scores die at the Softmax."""
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    model = make_model(nodes, [("q", elem, [1, 2, 64, 8]), ("k", elem, [1, 2, 8, 64]),
                               ("v", elem, [1, 2, 64, 8])], [("y", elem, [1, 2, 64, 8])])
    path = tmp_path / f"scores-{elem}.onnx"
    path.write_bytes(model.SerializeToString())
    return graphmem.load(path)


def test_softmax_writes_over_its_input_for_float_only(tmp_path):
    """CPU Softmax declares MayInplace(0, 0) on its float kernel, not on the double one
    (ops.PAIR_DTYPE): a float attention block's probabilities take the scores' bytes
    (Whisper's encoder: two 54 MB tensors at its peak become one), a double one's do not;
    CUDA's Softmax declares nothing."""
    assert ops.INPLACE_TABLES["cpu"]["Softmax"] == [(0, 0)]
    assert ops.INPLACE_TABLES["cpu"]["LogSoftmax"] == [(0, 0)]
    assert "Softmax" not in ops.INPLACE_TABLES["cuda"]
    assert ops.evidence("cpu", "Softmax")[0]["file"] == "onnxruntime/core/providers/cpu/math/softmax.cc"
    graph = _attention_scores_graph(F, tmp_path)
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["p"].alias_of == "s"
    graphmem.validate(plan, graph)
    from graphmem.verify.verifier import verify
    assert verify(plan, graph).passed
    plan64 = graphmem.plan_graph(_attention_scores_graph(TensorProto.DOUBLE, tmp_path)).plan
    assert plan64.tensors["p"].alias_of is None
    cuda = graphmem.plan_graph(graph, provider="cuda").plan
    assert cuda.tensors["p"].alias_of is None


def test_gelu_is_in_no_default_table_and_probed_tables_are_opt_in():
    for provider in ops.PROVIDERS:
        assert "Gelu" not in ops.INPLACE_TABLES[provider]
    assert not ops.evidence("cpu", "Gelu")  # its CPU kernel declares nothing
    assert "Gelu" in ops.PROBE_CANDIDATES
    assert ops.unproven("cpu") == {}
    assert "Exp" in ops.unproven("cpu-probed")


def test_table_ids_are_distinct():
    ids = [ops.table_id(t) for t in ops.INPLACE_TABLES]
    assert len(set(ids)) == len(ids)
    assert all(ops.table_of_id(ops.table_id(t)) == t for t in ops.INPLACE_TABLES)


def _exp_model(tmp_path) -> Path:
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    model = make_model(nodes, [("x", F, [4, 64])], [("y", F, [4, 64])])
    path = tmp_path / "exp.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_a_plan_made_with_each_table_records_it_and_validates(tmp_path):
    graph = graphmem.load(_exp_model(tmp_path))
    default = graphmem.plan_graph(graph).plan
    assert default.target["inplace_table"] == ops.table_id("cpu")
    assert default.tensors["b"].alias_of is None  # Exp declares nothing on CPU
    assert default.tensors["y"].alias_of == "b"  # Relu does
    graphmem.validate(default, graph)
    probed = graphmem.plan_graph(graph, inplace_table="probed").plan
    assert probed.target["inplace_table"] == ops.table_id("cpu-probed")
    assert probed.target["provider"] == "CPUExecutionProvider"
    assert probed.tensors["b"].alias_of == "a"
    graphmem.validate(probed, graph)
    # the table's record, as the commands pass it
    from graphmem.planning.target import InplaceTable
    keyed = graphmem.plan_graph(graph, table=InplaceTable("cpu", "probed")).plan
    assert keyed.target == probed.target
    # a probed plan relabelled as a default one breaks the default table's rules
    import dataclasses
    relabelled = dataclasses.replace(probed, target={**probed.target,
                                                     "inplace_table": ops.table_id("cpu")})
    assert graphmem.problems(relabelled, graph)


def test_plan_command_with_the_probed_table(tmp_path, capsys):
    from graphmem.cli import main
    model = _exp_model(tmp_path)
    out = tmp_path / "p.json"
    assert main(["plan", str(model), "--inplace-table", "probed", "-o", str(out), "-q"]) == 0
    err = capsys.readouterr().err
    assert "--inplace-table probed" in err and "graphmem probe" in err
    plan = graphmem.Plan.load(out)
    assert plan.target["inplace_table"] == ops.table_id("cpu-probed")
    graphmem.validate(plan, graphmem.load(model))
    assert main(["verify", str(model), "--plan", str(out)]) == 0  # validated and run
    capsys.readouterr()
    assert main(["plan", str(model), "-o", str(out), "-q"]) == 0
    assert "--inplace-table" not in capsys.readouterr().err  # the default says nothing
    assert graphmem.Plan.load(out).target["inplace_table"] == ops.table_id("cpu")


def test_probe_json_says_what_the_runtime_declares(capsys):
    from graphmem.cli import main
    assert main(["probe", "--ops", "Relu,Gelu,Sum", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["ops"]
    relu, gelu, total = out["Relu"], out["Gelu"], out["Sum"]
    assert relu["declared"] == [{"pair": [0, 0], "declared": "yes",
                                 "where": relu["declared"][0]["where"]}]
    assert relu["declared"][0]["where"].startswith(
        "onnxruntime/core/providers/cpu/activation/activations.cc:")
    assert gelu["declared"][0]["declared"] == "no" and not gelu["in_table"]
    assert not gelu["in_probed_table"]
    assert [d["declared"] for d in total["declared"][:3]] == ["source", "source", "no"]


def test_the_tool_reads_a_source_tree(tmp_path):
    """tools/upstream/inplace_evidence.py on a tiny tree: a declaration through a helper macro
    is found at the macro's line and the registration's line, and only the newest
    opset's registrations count."""
    from tools.upstream import inplace_evidence as tool
    cpu = tmp_path / "onnxruntime/core/providers/cpu"
    cpu.mkdir(parents=True)
    (cpu / "act.cc").write_text(
        "#define REG(op, v) \\\n"
        "  ONNX_CPU_OPERATOR_KERNEL(op, v, \\\n"
        "      KernelDefBuilder().MayInplace(0, 0), op<float>);\n"
        "ONNX_CPU_OPERATOR_VERSIONED_KERNEL(Neg, 6, 12, KernelDefBuilder().MayInplace(0, 0),\n"
        "    Neg<float>);\n"
        "ONNX_CPU_OPERATOR_KERNEL(Neg, 13, KernelDefBuilder(), Neg<float>);\n"
        "// REG(Exp, 99);\n"
        "REG(Relu, 14);\n")
    src = tool.Source(str(tmp_path), "HEAD")
    found = tool.declared(src, tool.registrations(src, "cpu"))
    assert found["Neg"]["newest_opset"] == 13 and found["Neg"]["evidence"] == []
    (e,) = found["Relu"]["evidence"]
    assert (e["kind"], e["pair"], e["line"], e["macro"]) == ("declared", [0, 0], 3, "REG")
    assert e["registration"] == {"file": "onnxruntime/core/providers/cpu/act.cc", "line": 8}
    assert "Exp" not in found  # a comment registers nothing


def _scatter_model(tmp_path) -> Path:
    """A MaxPool adjoint as training graphs build it: zeros of the input's shape, the
    pooled gradient scattered into them at the argmax positions."""
    from onnx import numpy_helper
    import numpy as np
    idx = numpy_helper.from_array(np.array([[0], [3], [5]], np.int64), "idx")
    shape = numpy_helper.from_array(np.array([8, 16], np.int64), "shape")
    nodes = [helper.make_node("Relu", ["g"], ["dy"]),
             helper.make_node("Expand", ["zero", "shape"], ["zeros"]),
             helper.make_node("Mul", ["zeros", "x"], ["z"]),  # zeros made from an input
             helper.make_node("ScatterND", ["z", "idx", "dy"], ["dx"]),
             helper.make_node("Sigmoid", ["dx"], ["y"])]
    zero = numpy_helper.from_array(np.zeros([1, 16], np.float32), "zero")
    model = make_model(nodes, [("x", F, [8, 16]), ("g", F, [3, 16])], [("y", F, [8, 16])],
                       [idx, shape, zero])
    path = tmp_path / "scatter.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_scatternd_writes_over_its_dying_data_input_and_verifies(tmp_path):
    """CPU ScatterND skips its copy when output and data are the same bytes (source
    evidence): the MaxPool adjoint's zero fill is overwritten, not copied."""
    assert ops.evidence("cpu", "ScatterND")[0]["kind"] == "source"
    assert ops.evidence("cuda", "ScatterND")[0]["kind"] == "declared"
    graph = graphmem.load(_scatter_model(tmp_path))
    plan = graphmem.plan_graph(graph).plan
    assert plan.tensors["dx"].alias_of == "z" and plan.tensors["dx"].alias == "inplace"
    graphmem.validate(plan, graph)
    from graphmem.verify.verifier import verify
    report = verify(plan, graph, check_all=True)
    assert report.passed, report


def test_plans_made_with_a_past_table_still_validate_against_it(tmp_path):
    """Adding ScatterND changed the CPU table's digest; a plan saved before names the old
    table, which validates it, and refuses what that table did not allow."""
    import dataclasses
    old = "graphmem-cpu-8b4ae1bc507e"  # the CPU table before ScatterND (this change)
    assert ops.table_of_id(ops.table_id("cpu")) == "cpu" and ops.table_id("cpu") != old
    graph = graphmem.load(_exp_model(tmp_path))
    plan = graphmem.plan_graph(graph).plan
    saved = dataclasses.replace(plan, target={**plan.target, "inplace_table": old})
    assert graphmem.problems(saved, graph) == []
    key = ops.table_of_id(old)
    assert key == "cpu@8b4ae1bc507e" and ops.table_id(key) == old
    assert ops.provider_of(key) == "cpu" and "ScatterND" not in ops.INPLACE_TABLES[key]
    graph = graphmem.load(_scatter_model(tmp_path))
    plan = graphmem.plan_graph(graph).plan
    assert graphmem.problems(plan, graph) == []
    saved = dataclasses.replace(plan, target={**plan.target, "inplace_table": old})
    assert any("dx" in p for p in graphmem.problems(saved, graph))
    unknown = dataclasses.replace(plan, target={**plan.target, "inplace_table": "graphmem-cpu-0"})
    assert "not a table graphmem knows" in graphmem.problems(unknown, graph)[0]
