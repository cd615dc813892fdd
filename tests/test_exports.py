"""Review exports (issue 5): annotated ONNX, HTML report, GraphML, for all nine zoo graphs."""
from __future__ import annotations

from conftest import runtime_model
import argparse
import html as htmllib
import json
import re

import graphmem
import networkx as nx
import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from graphmem.export.annotate import annotate, doc_fields, plan_of_model, read_plan
from graphmem.cli import main
from graphmem.commands import report_html
from graphmem.commands.common import add_model_args
from graphmem.export.graphml import graphml_text, to_networkx
from graphmem.export.html import render, report_data
from graphmem.frontend.reader import read_model
from graphmem.plan.view import build
from graphmem.frontend.zoo import ZOO, zoo_path


@pytest.fixture(scope="module", params=ZOO)
def zoo(request):
    """(name, graph, view, original ModelProto) for one zoo graph, planned once."""
    graph = graphmem.load(zoo_path(request.param))
    plan = graphmem.plan_graph(graph, model_name=f"{request.param}.onnx").plan
    return request.param, graph, build(plan, graph), read_model(zoo_path(request.param))


def props(msg) -> dict[str, str]:
    return {p.key: p.value for p in msg.metadata_props}


# ---------------------------------------------------------------- plan view

def test_view_timeline_matches_plan_stats(zoo):
    name, graph, view, _ = zoo
    stats = view.plan.stats
    assert max(view.live) == stats["aliased_peak_bytes"]
    assert max(view.live_unaliased) == stats["unaliased_peak_bytes"]
    assert view.live[view.peak_step + 1] == stats["aliased_peak_bytes"]
    assert len(view.live) == len(view.plan.order) + 2
    live_at_peak = {r.name for r in view.tensors if r.first <= view.peak_step <= r.last}
    assert set(view.peak_tensors) == live_at_peak and live_at_peak
    # an alias or a slice shares its source's storage id; owners of storage each get one
    storage = {r.name: r.storage for r in view.tensors}
    for r in view.tensors:
        if r.alias_of:
            assert storage[r.name] == storage[r.alias_of]
        if r.slice_of:
            assert storage[r.name] == storage[r.slice_of]
    owners = [r for r in view.tensors if not (r.alias_of or r.slice_of)]
    assert len(set(storage.values())) <= len(owners)


# ---------------------------------------------------------------- annotated ONNX

@pytest.mark.parametrize("raise_ir", [False, True], ids=["keep-ir", "ir10"])
def test_annotated_model_round_trips_and_checks(zoo, raise_ir):
    name, graph, view, model = zoo
    plan = view.plan
    out = annotate(model, view, graph, raise_ir_version=raise_ir)
    back = onnx.load_from_string(out.SerializeToString())
    onnx.checker.check_model(back, full_check=True)
    assert back.ir_version == (10 if raise_ir else model.ir_version)
    assert list(back.opset_import) == list(model.opset_import)
    got = plan_of_model(back, name)
    assert got == plan
    assert got.to_json() == plan.to_json()
    meta = props(back)
    assert meta["graphmem.format"] == "graphmem.plan/1"
    assert int(meta["graphmem.arena_bytes"]) == plan.arena_bytes
    assert int(meta["graphmem.unaliased_peak_bytes"]) == plan.stats["unaliased_peak_bytes"]
    assert int(meta["graphmem.aliased_peak_bytes"]) == plan.stats["aliased_peak_bytes"]
    assert meta["graphmem.passes"] == ",".join(p["name"] for p in plan.passes)
    assert json.loads(meta["graphmem.pass_savings"]) == \
        {p["name"]: p["bytes_saved"] for p in plan.passes}

    def fields(msg):
        # IR >= 10: metadata_props; older: the doc_string line; the two never disagree
        from_doc = doc_fields(msg.doc_string)
        if raise_ir:
            from_props = {k[len("graphmem."):]: v for k, v in props(msg).items()}
            assert from_props == from_doc
        else:
            assert not msg.metadata_props
        return from_doc

    # every arena tensor carries its placement where Netron shows value info
    infos = {vi.name: vi for vi in list(back.graph.input) + list(back.graph.output) +
             list(back.graph.value_info)}
    for r in view.tensors:
        f = fields(infos[r.name])
        assert int(f["bytes"]) == r.bytes and int(f["offset"]) == r.offset
        assert f["live"] == f"{r.first}..{r.last}"
        assert int(f["storage"]) == r.storage and f["kind"] == r.kind
        assert f.get("alias_of") == r.alias_of and f.get("alias") == r.alias
        assert f.get("slice_of") == r.slice_of
    # every running node carries its step and the live bytes there
    for st in view.steps:
        f = fields(back.graph.node[st.node])
        assert int(f["step"]) == st.step
        assert int(f["live_bytes"]) == st.live_bytes
        assert int(f["live_bytes_unaliased"]) == st.live_bytes_unaliased
    for idx in graph.folded_nodes:
        assert fields(back.graph.node[idx])["folded"] == "1"
    # the model itself is unchanged apart from the annotations
    assert [n.op_type for n in back.graph.node] == [n.op_type for n in model.graph.node]
    assert [list(n.input) for n in back.graph.node] == [list(n.input) for n in model.graph.node]
    assert [list(n.attribute) for n in back.graph.node] == \
        [list(n.attribute) for n in model.graph.node]
    assert list(back.graph.initializer) == list(model.graph.initializer)


def test_annotating_twice_does_not_stack(zoo):
    name, graph, view, model = zoo
    once = annotate(model, view, graph)
    assert annotate(once, view, graph).SerializeToString() == once.SerializeToString()
    once10 = annotate(model, view, graph, raise_ir_version=True)
    assert annotate(once10, view, graph).SerializeToString() == once10.SerializeToString()


def test_doc_fields_quote_names():
    from graphmem.export.annotate import mark_doc
    vi = onnx.ValueInfoProto(doc_string="kept")
    mark_doc(vi, False, "(note)", bytes=4, alias_of='a b="c"=d', alias="view")
    assert vi.doc_string.startswith("kept\n[graphmem] ")
    assert doc_fields(vi.doc_string) == {"bytes": "4", "alias_of": 'a b="c"=d', "alias": "view"}


def test_doc_lines_wrap_for_netron():
    """Netron shows a description as written: the fields come a few to a line and the
    note on a line of its own, every line tagged (so annotating again replaces them)."""
    from graphmem.export.annotate import DOC_LINE, mark_doc
    vi = onnx.ValueInfoProto()
    fields = dict(bytes=3211264, offset=6422528, live="12..15", storage=7, kind="activation",
                  alias_of="a_rather_long_tensor_name/with/a/path", alias="inplace")
    mark_doc(vi, False, "(3.06 MiB)", **fields)
    lines = vi.doc_string.split("\n")
    assert len(lines) >= 3 and all(ln.startswith("[graphmem] ") for ln in lines)
    assert lines[-1] == "[graphmem] (3.06 MiB)"
    assert all(len(ln) <= len("[graphmem] ") + DOC_LINE for ln in lines[:-1])
    assert doc_fields(vi.doc_string) == {k: str(v) for k, v in fields.items()}


def _ort_outputs(model, graph, level=None):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3  # the zoo's initializers-as-inputs warn on every load
    if level is not None:
        opts.graph_optimization_level = level
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {i.name: rng.standard_normal(graph.tensors[i.name].shape).astype(np.float32)
            for i in sess.get_inputs() if i.name in graph.inputs}
    assert feed  # the data input is fed; the weights are the model's own
    return sess.run(None, feed)


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1", "resnet50",
                                  "densenet121"])
def test_annotated_model_runs_the_same_in_onnxruntime(name):
    graph = graphmem.load(zoo_path(name))
    view = build(graphmem.plan_graph(graph).plan, graph)
    model = read_model(zoo_path(name))
    want = _ort_outputs(model, graph)
    got = _ort_outputs(annotate(model, view, graph), graph)
    assert len(got) == len(want)
    for a, b in zip(want, got):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_raised_ir_version_runs_in_onnxruntime():
    import onnxruntime as ort
    graph = graphmem.load(zoo_path("densenet121"))
    view = build(graphmem.plan_graph(graph).plan, graph)
    model = read_model(zoo_path("densenet121"))
    raised = annotate(model, view, graph, raise_ir_version=True)
    # IR 10 lets ONNX Runtime optimise differently: equal to rounding, and bit for bit
    # with graph optimisations off
    for a, b in zip(_ort_outputs(model, graph), _ort_outputs(raised, graph)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for a, b in zip(_ort_outputs(model, graph, off), _ort_outputs(raised, graph, off)):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- HTML

def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    assert m, "no embedded data"
    return json.loads(m.group(1))


def test_html_report_content(zoo):
    name, graph, view, _ = zoo
    plan = view.plan
    page = render(view)
    assert page.startswith("<!DOCTYPE html>")
    # self-contained: nothing fetched at view time
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)
    assert "<link" not in page and "@import" not in page
    # every tensor live at the peak step is listed in the page itself
    peak_section = page[page.index('<section id="peak">'):]
    peak_section = peak_section[:peak_section.index("</section>")]
    assert view.peak_tensors
    for t in view.peak_tensors:
        # a name cell may be cut short on screen: the full name is its text and its title
        assert re.search(rf'<td class=name title="{re.escape(htmllib.escape(t))}">'
                         rf'{re.escape(htmllib.escape(t))}</td>', peak_section), t
    # the headline numbers are in the page
    assert f"{plan.arena_bytes:,} bytes" in page
    assert f"{plan.stats['unaliased_peak_bytes']:,} bytes" in page
    for p in plan.passes:
        assert f"<td class=name>{p['name']}</td><td class=r>{p['bytes_saved']:,}</td>" in page
    data = embedded(page)
    assert data == json.loads(json.dumps(report_data(view)))
    assert len(data["t"]) == len(plan.tensors)
    assert [data["t"][i][0] for i in data["peak"]] == view.peak_tensors
    assert data["arena"] == plan.arena_bytes
    assert max(data["live"]) == plan.stats["aliased_peak_bytes"]
    assert len(data["ops"]) == len(plan.order)


def test_html_escapes_hostile_names():
    from onnx import TensorProto, helper
    from graphmem.frontend.reader import from_model
    F = TensorProto.FLOAT
    bad = "</script><b>x&y"
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], [bad]), helper.make_node("Relu", [bad], ["y"])],
        "hostile", [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    graph = from_model(model)
    view = build(graphmem.plan_graph(graph).plan, graph)
    page = render(view)
    assert bad not in page
    assert [t[0] for t in embedded(page)["t"]] == ["x", bad, "y"]


# ---------------------------------------------------------------- GraphML

def test_graphml_loads_back_with_attributes(zoo, tmp_path):
    name, graph, view, _ = zoo
    plan = view.plan
    path = tmp_path / f"{name}.graphml"
    path.write_text(graphml_text(view, graph))
    g = nx.read_graphml(path, force_multigraph=True)
    assert g.is_directed()
    assert g.graph["arena_bytes"] == plan.arena_bytes
    assert g.graph["unaliased_peak_bytes"] == plan.stats["unaliased_peak_bytes"]
    steps = {s.node: s for s in view.steps}
    for idx in plan.order:
        attrs = g.nodes[f"n{idx}"]
        assert attrs["step"] == steps[idx].step
        assert attrs["live_bytes"] == steps[idx].live_bytes
        assert attrs["op_type"] == steps[idx].op
    seen = {}
    for u, v, key, attrs in g.edges(keys=True, data=True):
        seen[attrs["tensor"]] = attrs
        assert key == attrs["tensor"]
    assert set(seen) == set(plan.tensors)
    for tname, t in plan.tensors.items():
        a = seen[tname]
        assert (a["bytes"], a["offset"], a["first"], a["last"], a["kind"]) == \
            (t.bytes, t.offset, t.live[0], t.live[1], t.kind)
        assert a.get("alias_of") == t.alias_of and a.get("alias") == t.alias
    # edges follow the data flow: the model's own consumers
    consumers = graph.consumers()
    for tname in plan.tensors:
        want = {f"n{c.index}" for c in consumers.get(tname, [])}
        got = {v for u, v, k in g.edges(keys=True) if k == tname and v.startswith("n")}
        assert got == want


def test_graphml_networkx_graph_is_a_dag():
    graph = graphmem.load(zoo_path("inception_v1"))
    view = build(graphmem.plan_graph(graph).plan, graph)
    g = to_networkx(view, graph)
    assert nx.is_directed_acyclic_graph(g)
    # a topological order of the GraphML agrees with the plan's order for operator nodes
    pos = {f"n{idx}": p for p, idx in enumerate(view.plan.order)}
    for u, v in g.edges():
        if u in pos and v in pos:
            assert pos[u] < pos[v]


# ---------------------------------------------------------------- CLI

def test_cli_export_all_three_and_plan_from(tmp_cwd, capsys):
    assert main(["export", "squeezenet", "--annotated", "a.onnx", "--html", "r.html",
                 "--graphml", "g.graphml"]) == 0
    for f in ("a.onnx", "r.html", "g.graphml"):
        assert (tmp_cwd / f).stat().st_size > 1000
    assert main(["plan", "squeezenet", "-q", "-o", "ref.json"]) == 0
    assert main(["export", "--plan-from", "a.onnx", "--plan-out", "back.json"]) == 0
    assert (tmp_cwd / "back.json").read_bytes() == (tmp_cwd / "ref.json").read_bytes()
    assert main(["export", "--plan-from", "a.onnx"]) == 0  # default name from the model
    assert (tmp_cwd / "a.plan.json").read_bytes() == (tmp_cwd / "ref.json").read_bytes()
    capsys.readouterr()
    assert main(["export", "--plan-from", "a.onnx", "--plan-out", "-"]) == 0
    assert capsys.readouterr().out == (tmp_cwd / "ref.json").read_text()


def test_cli_saved_plan_gives_the_same_exports(tmp_cwd):
    assert main(["plan", "squeezenet", "-q", "--alignment", "256", "-o", "p.json"]) == 0
    assert main(["export", "squeezenet", "--plan", "p.json", "--annotated", "a.onnx",
                 "--html", "r.html"]) == 0
    assert read_plan("a.onnx") == graphmem.Plan.load("p.json")
    assert read_plan("a.onnx").alignment == 256  # the saved plan, not a new default one
    # an annotated model is a plan source too
    assert main(["export", "squeezenet", "--plan", "a.onnx", "--html", "r2.html"]) == 0
    assert (tmp_cwd / "r2.html").read_text() == (tmp_cwd / "r.html").read_text()


def test_cli_refuses_a_plan_for_another_model(tmp_cwd, capsys):
    assert main(["plan", "squeezenet", "-q", "-o", "p.json"]) == 0
    capsys.readouterr()
    assert main(["export", "resnet50", "--plan", "p.json", "--html", "r.html",
                 "--annotated", "a.onnx"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    # the plan records the graph it was made for (issue 57): refused before any rule
    assert err.startswith("graphmem: this plan was made for another graph: ")
    assert not (tmp_cwd / "r.html").exists() and not (tmp_cwd / "a.onnx").exists()
    assert sorted(p.name for p in tmp_cwd.iterdir()) == ["p.json"]


@pytest.mark.parametrize("argv, message", [
    (["export", "squeezenet"], "nothing to write"),
    (["export", "--html", "r.html"], "give a MODEL"),
    (["export", "--plan-from", "missing.onnx"], "no such annotated model"),
    (["export", "squeezenet", "--plan-out", "x.json", "--html", "r.html"], "--plan-from"),
    (["export", "squeezenet", "--plan", "nope.json", "--html", "r.html"], "no such plan file"),
])
def test_cli_export_bad_input(tmp_cwd, capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphmem: ") and message in err
    assert list(tmp_cwd.iterdir()) == []


def test_cli_plan_from_a_model_without_plan(tmp_cwd, capsys):
    model = read_model(zoo_path("squeezenet"))
    onnx.save(model, str(tmp_cwd / "plain.onnx"))
    assert main(["export", "--plan-from", "plain.onnx"]) == 2
    assert "no graphmem plan in this model" in capsys.readouterr().err
    (tmp_cwd / "junk.onnx").write_text("not onnx")
    assert main(["export", "--plan-from", "junk.onnx"]) == 2
    assert "not an ONNX model" in capsys.readouterr().err


def test_report_html_hooks(tmp_cwd):
    # the report command (another module) adds these to its own parser
    parser = argparse.ArgumentParser()
    add_model_args(parser)
    report_html.add_html_args(parser)
    args = parser.parse_args(["squeezenet", "--html", "rep.html"])
    assert report_html.write_html(args) == "rep.html"
    assert main(["export", "squeezenet", "--html", "exp.html"]) == 0
    assert (tmp_cwd / "rep.html").read_text() == (tmp_cwd / "exp.html").read_text()
    # a parser that already has --plan keeps its own
    p2 = argparse.ArgumentParser()
    add_model_args(p2)
    p2.add_argument("--plan")
    report_html.add_html_args(p2)
    assert p2.parse_args(["m", "--plan", "x"]).plan == "x"


def _symbolic_model():
    from onnx import TensorProto, helper
    F = TensorProto.FLOAT
    w = onnx.numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["flat"]),
             helper.make_node("Add", ["flat", "flat"], ["y"])]
    shape = onnx.numpy_helper.from_array(np.array([-1, 2], dtype=np.int64), "shape")
    return runtime_model(helper.make_graph(
        nodes, "sym", [helper.make_tensor_value_info("x", F, ["N", 4])],
        [helper.make_tensor_value_info("y", F, ["M", 2])], [w, shape]), 17)


def test_symbolic_model_keeps_its_dims_and_saved_bindings(tmp_cwd):
    import onnxruntime as ort
    onnx.save(_symbolic_model(), "sym.onnx")
    assert main(["plan", "sym.onnx", "--dim", "N=3", "-q", "-o", "p.json"]) == 0
    # the saved plan's bindings are used when no --dim is given
    assert main(["export", "sym.onnx", "--plan", "p.json", "--annotated", "a.onnx",
                 "--graphml", "g.graphml"]) == 0
    a = onnx.load("a.onnx")
    onnx.checker.check_model(a)
    assert read_plan("a.onnx").bindings == {"N": 3}
    # shapes bound for planning are not pinned into the file: it still runs at any N
    h = next(vi for vi in a.graph.value_info if vi.name == "h")
    assert not h.type.tensor_type.HasField("shape")
    sess = ort.InferenceSession(a.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], 2 * np.maximum(x, 0).reshape(-1, 2))
    # a --dim that disagrees with the saved plan is refused
    assert main(["export", "sym.onnx", "--dim", "N=4", "--plan", "p.json", "--html", "r.html"]) == 2
    assert not (tmp_cwd / "r.html").exists()


def test_external_weights_stay_reachable(tmp_cwd, capsys, monkeypatch):
    (tmp_cwd / "m").mkdir()
    (tmp_cwd / "out").mkdir()
    # w (64 bytes) goes external, the Reshape target (16 bytes) stays inline
    onnx.save(_symbolic_model(), "m/ext.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="ext.data", size_threshold=80)
    # run from the model's folder: the loader's onnx.checker call resolves external
    # data against the working directory
    monkeypatch.chdir(tmp_cwd / "m")
    assert main(["export", "ext.onnx", "--dim", "N=2", "--annotated", "../out/a.onnx"]) == 2
    assert "external" in capsys.readouterr().err
    assert list((tmp_cwd / "out").iterdir()) == []
    assert main(["export", "ext.onnx", "--dim", "N=2", "--annotated", "a.onnx"]) == 0
    refs = onnx.load("a.onnx", load_external_data=False)
    assert refs.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    onnx.checker.check_model("a.onnx")  # by path: the checker reads ext.data next to it
    a = onnx.load("a.onnx")  # the weights load from ext.data
    assert onnx.numpy_helper.to_array(a.graph.initializer[0]).tolist() == np.eye(4).tolist()
    assert read_plan("a.onnx").bindings == {"N": 2}


def test_export_without_passes(tmp_cwd):
    assert main(["export", "squeezenet", "--passes", "none", "--annotated", "a.onnx",
                 "--html", "r.html", "--graphml", "g.graphml"]) == 0
    plan = read_plan("a.onnx")
    assert plan.passes == [] and not any(t.alias_of for t in plan.tensors.values())
    page = (tmp_cwd / "r.html").read_text()
    assert "no passes ran" in page
    assert embedded(page)["arena"] == plan.arena_bytes
    g = nx.read_graphml(tmp_cwd / "g.graphml", force_multigraph=True)
    assert g.graph["passes"] == "none"
    # an annotated model is itself a model to export from: annotations are replaced
    assert main(["export", "a.onnx", "--annotated", "b.onnx"]) == 0
    b = read_plan("b.onnx")
    assert [p["name"] for p in b.passes] == list(graphmem.DEFAULT_PASSES)
    assert b.arena_bytes < plan.arena_bytes
    model_b = onnx.load("b.onnx")
    assert [p.key for p in model_b.metadata_props].count("graphmem.plan") == 1
    assert all(n.doc_string.count(" step=") <= 1 for n in model_b.graph.node)
