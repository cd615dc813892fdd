"""The graphs ONNX Runtime runs (issue 33): the files its optimizer saves plan and
verify, ``--ort-optimize`` plans them from the command line and shows the arena as
exported beside them, and ``--infer-by-running`` fills the shapes no rule gives."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.frontend.ort_optimize import LEVELS, optimize, ort_level
from graphmem.frontend.zoo import zoo_path

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "data" / "corpus"


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """tempfile's folder for this test alone: what the command leaves there shows."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _saved(source: Path, level: str, out: Path) -> Path:
    """``source`` as ONNX Runtime's optimizer saves it at ``level`` (CPU)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort_level(level)
    so.optimized_model_filepath = str(out)
    so.log_severity_level = 3
    ort.InferenceSession(str(source), so, providers=["CPUExecutionProvider"])
    return out


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("source", ["squeezenet", "bert-ts", "gpt2-past-dynamo"])
def test_every_file_onnx_runtime_saves_plans_and_validates(source, level, tmp_path):
    """squeezenet: FusedConv (extended), NCHWc Conv/MaxPool/ReorderOutput (all); the
    BERT and GPT-2 exports: FusedMatMul, FusedGemm, SkipLayerNormalization, BiasGelu,
    FastGelu. A zoo file's IR version (3) stays: ORT adds initializers that are not
    graph inputs, which the loader accepts for the files ORT runs."""
    path = zoo_path(source) or CORPUS / f"{source}.onnx"
    saved = _saved(path, level, tmp_path / f"{source}.{level}.onnx")
    graph = graphmem.load(saved, dim_default=2)
    plan = graphmem.plan_graph(graph).plan
    graphmem.validate(plan, graph)
    if level != "basic" and source == "squeezenet":
        domains = {n.domain for n in graph.nodes}
        assert domains & {"com.microsoft", "com.microsoft.nchwc"}


def test_plan_ort_optimize_shows_both_arenas_and_leaves_nothing(own_tmp, tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["plan", "squeezenet", "--ort-optimize", "all", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "arena as exported" in text and "as the runtime runs it" in text
    plan = graphmem.Plan.load(out)
    assert plan.model == "light_squeezenet.all.onnx"
    assert not list(own_tmp.iterdir())  # the optimized model's folder is gone


def test_verify_runs_the_optimized_graph(own_tmp, capsys):
    assert main(["verify", "squeezenet", "--ort-optimize", "all"]) == 0
    out = capsys.readouterr().out
    assert "light_squeezenet.all.onnx" in out and "PASS" in out
    assert not list(own_tmp.iterdir())


def test_verify_optimized_where_the_weights_lie_beside_the_model(own_tmp, tmp_path, capsys):
    """A model whose weights are in a file beside it: ORT's optimized copy, saved into
    a temporary folder, must not point at that file by its relative name (ORT keeps
    the references of the weights it leaves as they are: BERT's MatMul weights)."""
    import onnx
    model = onnx.load(str(CORPUS / "bert-ts.onnx"))
    onnx.save_model(model, str(tmp_path / "bert.onnx"), save_as_external_data=True,
                    location="bert.weights", size_threshold=1024)
    assert main(["verify", str(tmp_path / "bert.onnx"), "--dim-default", "2",
                 "--ort-optimize", "all"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert not list(own_tmp.iterdir())


def test_annotated_export_of_the_optimized_model_carries_its_weights(own_tmp, tmp_path,
                                                                     capsys):
    """The optimized model's folder is removed when the command ends: the annotated
    model holds the weights the source kept beside it, and ORT runs it."""
    import onnx
    model = onnx.load(str(CORPUS / "bert-ts.onnx"))
    onnx.save_model(model, str(tmp_path / "bert.onnx"), save_as_external_data=True,
                    location="bert.weights", size_threshold=1024)
    out = tmp_path / "out" / "annotated.onnx"
    out.parent.mkdir()
    assert main(["export", str(tmp_path / "bert.onnx"), "--dim-default", "2",
                 "--ort-optimize", "extended", "--annotated", str(out)]) == 0
    capsys.readouterr()
    saved = onnx.load(str(out), load_external_data=False)
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in saved.graph.initializer)
    assert any(n.domain == "com.microsoft" for n in saved.graph.node)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.ones([2 if isinstance(d, str) or d is None else d for d in i.shape],
                             np.int64) for i in session.get_inputs()}
    assert session.run(None, feeds)
    assert not list(own_tmp.iterdir())


def test_report_json_gives_both_arenas(own_tmp, capsys):
    assert main(["report", "squeezenet", "--ort-optimize", "extended", "--json",
                 "--no-layers"]) == 0
    data = json.loads(capsys.readouterr().out)
    rt = data["runtime"]
    assert rt["ort_optimize"] == "extended" and rt["provider"] == "cpu"
    assert rt["arena_bytes"] == data["totals"]["arena_bytes"]
    assert rt["nodes"] < rt["exported_nodes"]  # Relus fused into their Convs
    assert not list(own_tmp.iterdir())


def test_optimize_for_cuda_plans_or_refuses_in_one_line():
    """For CUDA the optimized graph is what a GPU session runs; without the provider or a
    GPU the refusal is one GraphmemError naming the provider."""
    try:
        made = optimize(zoo_path("squeezenet"), "extended", "cuda")
    except graphmem.GraphmemError as exc:
        assert "cuda" in str(exc).lower() and "\n" not in str(exc)
    else:
        graph = graphmem.load(made.path)
        graphmem.validate(graphmem.plan_graph(graph, provider="cuda").plan, graph)


def _cdist_model(path: Path) -> Path:
    """CDist (com.microsoft, a CPU kernel) has no shape rule in graphmem or ORT's
    symbolic inference."""
    b = numpy_helper.from_array(np.ones((5, 3), np.float32), "b")
    nodes = [helper.make_node("CDist", ["a", "b"], ["d"], domain="com.microsoft"),
             helper.make_node("Relu", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "cdist", [helper.make_tensor_value_info(
        "a", TensorProto.FLOAT, ["n", 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["n", "m"])], [b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    path.write_bytes(model.SerializeToString())
    return path


def test_a_shape_no_rule_gives_is_named_with_the_option(tmp_path, capsys):
    model = _cdist_model(tmp_path / "cdist.onnx")
    assert main(["plan", str(model), "--dim", "n=4", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "'CDist' is from domain 'com.microsoft'" in err and "--infer-by-running" in err


def test_infer_by_running_fills_the_gap(own_tmp, tmp_path, capsys):
    model = _cdist_model(tmp_path / "cdist.onnx")
    out = tmp_path / "p.json"
    assert main(["plan", str(model), "--dim", "n=4", "--infer-by-running", "-o", str(out),
                 "-q"]) == 0
    plan = graphmem.Plan.load(out)
    assert plan.tensors["d"].bytes == plan.tensors["y"].bytes == 4 * 5 * 4  # [4, 5] float
    assert not list(own_tmp.iterdir())
    assert main(["verify", str(model), "--dim", "n=4", "--infer-by-running"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("name", ["squeezenet", "resnet50"])
def test_the_arena_of_what_ort_runs_is_at_most_its_own_pattern_and_the_io(name):
    """Issue 33's bar on the zoo: with --ort-optimize all the arena (graph inputs and
    outputs inside it) is at most ONNX Runtime's own memory-pattern block at
    ORT_ENABLE_ALL (tools/bench/ort_pattern.py) plus the input and output bytes."""
    from tools.bench import ort_pattern
    from graphmem.frontend.ort_optimize import cleanup
    path = zoo_path(name)
    try:
        graph = graphmem.load(optimize(path, "all").path)
        arena = graphmem.plan_graph(graph).plan.arena_bytes
    finally:
        cleanup()
    io = sum(graph.tensors[t].bytes for t in set(graph.inputs) | set(graph.outputs))
    ort_all = ort_pattern.measure(path, "all")["pattern_bytes"]
    assert ort_all and arena <= ort_all + io


def test_the_summary_says_when_the_model_as_given_does_not_plan(own_tmp, tmp_path, capsys):
    """The graph ONNX Runtime runs is sized by one run (--infer-by-running) where the model
    as given is not: the summary says why there is no arena as exported."""
    model = _cdist_model(tmp_path / "cdist.onnx")
    assert main(["plan", str(model), "--dim", "n=4", "--ort-optimize", "all",
                 "--infer-by-running", "-o", str(tmp_path / "p.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "the model as given does not plan" in out and "CDist" in out


def test_deploy_forms_tool_parts(tmp_path):
    """tools/corpus/deploy_forms.py: a two-input Sum becomes Add with the same results, and a
    row that misses the bar is marked in the table."""
    from tools.corpus import deploy_forms
    nodes = [helper.make_node("Sum", ["a", "b"], ["s"]), helper.make_node("Sum", ["s", "a", "b"], ["y"])]
    graph = helper.make_graph(nodes, "sums", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3])
                                              for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    src = tmp_path / "sums.onnx"
    src.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                      ir_version=8).SerializeToString())
    out = deploy_forms.sum_as_add(src, tmp_path / "adds.onnx")
    import onnx
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Add", "Sum"]
    feeds = {"a": np.arange(3, dtype=np.float32), "b": np.ones(3, np.float32)}
    runs = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            for p in (src, out)]
    assert np.array_equal(*runs)
    row = {"model": "m", "form": "exported", "nodes": 3, "io": 0, "verify": True, "bar": False,
           "failures": [], **{f"arena_{k}": 2 << 20 for k in ("exported", *LEVELS)},
           **{f"ort_{k}": 1 << 20 for k in ("off", *LEVELS)}}
    assert "| **no** | PASS |" in deploy_forms.table([row])
