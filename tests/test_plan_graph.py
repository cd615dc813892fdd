"""A plan pins the exact graph it was made for (issue 57): the plan records a digest of
the graph's structure, every command that reads a plan checks it (a mismatch is one
line and exit 2, never a verdict), and ``--ort-optimize`` plans one canonical graph
whatever node sequence ONNX Runtime happens to write."""
from __future__ import annotations

import json
import random
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import graphmem
from graphmem.cli import main
from graphmem.frontend.ort_optimize import canonical_order, ort_level
from graphmem.frontend.zoo import zoo_path
from graphmem.plan.graph_digest import PlanForAnotherGraph, graph_digest

from conftest import make_model

F = TensorProto.FLOAT


def _shuffled(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """``model`` with its nodes in another topologically valid sequence (a seeded random
    choice among the nodes ready at each step), the nodes themselves unchanged."""
    g = model.graph
    made = {t for n in g.node for t in n.output}
    needs = [{t for t in n.input if t in made} for n in g.node]
    rng = random.Random(seed)
    have: set[str] = set()
    left = list(range(len(g.node)))
    order = []
    while left:
        ready = [i for i in left if needs[i] <= have]
        i = rng.choice(ready)
        left.remove(i)
        order.append(i)
        have.update(g.node[i].output)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend([model.graph.node[i] for i in order])
    return out


def _ort_saved(source: Path, out: Path) -> Path:
    """``source`` as ONNX Runtime saves it at level all (CPU), weights inside."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort_level("all")
    so.optimized_model_filepath = str(out)
    so.log_severity_level = 3
    ort.InferenceSession(str(source), so, providers=["CPUExecutionProvider"])
    return out


@pytest.fixture
def ort_shuffles(monkeypatch):
    """ONNX Runtime whose optimized model comes out in another node sequence each time
    (as its NCHWc reorders do on large models): every session that saves its optimized
    graph has that file's nodes shuffled, seeded by the count of sessions so far."""
    real = ort.InferenceSession
    made = []

    def session(path, so=None, *args, **kwargs):
        s = real(path, so, *args, **kwargs)
        saved = so.optimized_model_filepath if so is not None else ""
        if saved and Path(saved).is_file():
            model = onnx.load(saved, load_external_data=False)
            shuffled = _shuffled(model, len(made))
            made.append([n.output[0] for n in shuffled.graph.node])
            Path(saved).write_bytes(shuffled.SerializeToString())
        return s

    monkeypatch.setattr(ort, "InferenceSession", session)
    return made


def test_the_same_model_ort_optimized_in_another_node_order_plans_to_the_same_file(
        ort_shuffles, tmp_path):
    """Two runs of ``plan --ort-optimize all`` whose optimized files list their nodes
    in other sequences write byte-identical plans, and each verifies against the
    graph the other run optimized."""
    p1, p2 = tmp_path / "p1.json", tmp_path / "p2.json"
    assert main(["plan", "squeezenet", "--ort-optimize", "all", "-o", str(p1), "-q"]) == 0
    assert main(["plan", "squeezenet", "--ort-optimize", "all", "-o", str(p2), "-q"]) == 0
    assert len(ort_shuffles) >= 2 and ort_shuffles[0] != ort_shuffles[1]  # ORT's luck
    assert p1.read_bytes() == p2.read_bytes()
    assert main(["verify", "squeezenet", "--plan", str(p1), "--ort-optimize", "all"]) == 0


def test_a_plan_checked_against_its_graph_permuted_is_refused_never_judged(tmp_path,
                                                                           capsys):
    """A plan of ONNX Runtime's saved graph, checked against the same nodes in another
    valid sequence: its indices would name other nodes, so the plan is refused (exit 2,
    one line) -- not reported as a wrong plan (exit 1)."""
    saved = _ort_saved(zoo_path("squeezenet"), tmp_path / "sq.all.onnx")
    model = onnx.load(str(saved))
    permuted = tmp_path / "sq.permuted.onnx"
    shuffled = _shuffled(model, 7)
    assert [n.output[0] for n in shuffled.graph.node] != [n.output[0] for n in model.graph.node]
    onnx.save(shuffled, str(permuted))
    plan = tmp_path / "p.json"
    assert main(["plan", str(saved), "-o", str(plan), "-q"]) == 0
    assert main(["verify", str(saved), "--plan", str(plan)]) == 0
    capsys.readouterr()
    for command in (["verify", str(permuted), "--plan", str(plan)],
                    ["verify", str(permuted), "--plan", str(plan), "--runtime-only"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(
            "graphmem: this plan was made for another graph: "), err


def _pair(tmp_path) -> tuple[Path, Path]:
    """Two models with the same tensors, shapes and node sequence: x -> Relu -> a ->
    Exp -> y, and the same with Sigmoid for Relu. A plan of one is valid by every rule
    for the other; only the digest tells them apart."""
    paths = []
    for op in ("Relu", "Sigmoid"):
        m = make_model([helper.make_node(op, ["x"], ["a"]), helper.make_node("Exp", ["a"], ["y"])],
                       [("x", F, [4, 16])], [("y", F, [4, 16])])
        paths.append(tmp_path / f"{op.lower()}.onnx")
        onnx.save(m, str(paths[-1]))
    return paths[0], paths[1]


@pytest.mark.parametrize("command", [
    ["verify", "{b}", "--plan", "{p}"],
    ["verify", "{b}", "--plan", "{p}", "--runtime-only"],
    ["export", "{b}", "--plan", "{p}", "--html", "{out}"],
    ["report", "{b}", "--plan", "{p}"],
])
def test_a_plan_checked_against_another_graph_exits_2_with_one_line(tmp_path, capsys,
                                                                     command):
    a, b = _pair(tmp_path)
    plan = tmp_path / "p.json"
    assert main(["plan", str(a), "-o", str(plan), "-q"]) == 0
    capsys.readouterr()
    out = tmp_path / "r.html"
    argv = [c.format(b=b, p=plan, out=out) for c in command]
    assert main(argv) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "graphmem: this plan was made for another graph: "), lines
    assert "FAIL" not in cap.out and not out.exists()
    assert main([c.format(b=a, p=plan, out=out) for c in command]) == 0


def test_the_digest_is_of_the_structure(tmp_path):
    """The digest follows nodes, their reads and writes, and shapes at the bindings; not
    node names, nor the file's initializer order."""
    a, b = _pair(tmp_path)
    ga, gb = graphmem.load(a), graphmem.load(b)
    assert graph_digest(ga) == graph_digest(graphmem.load(a))
    assert graph_digest(ga) != graph_digest(gb)
    named = onnx.load(str(a))
    for i, n in enumerate(named.graph.node):
        n.name = f"renamed_{i}"
    onnx.save(named, str(tmp_path / "named.onnx"))
    assert graph_digest(graphmem.load(tmp_path / "named.onnx")) == graph_digest(ga)
    wide = make_model([helper.make_node("Relu", ["x"], ["a"]),
                       helper.make_node("Exp", ["a"], ["y"])],
                      [("x", F, ["N", 16])], [("y", F, ["N", 16])])
    onnx.save(wide, str(tmp_path / "n.onnx"))
    assert graph_digest(graphmem.load(tmp_path / "n.onnx", {"N": 4})) == graph_digest(ga)
    assert graph_digest(graphmem.load(tmp_path / "n.onnx", {"N": 5})) != graph_digest(ga)


def test_the_plan_file_records_the_digest_and_an_old_plan_still_reads(tmp_path):
    a, b = _pair(tmp_path)
    plan = graphmem.plan_model(a).plan
    d = json.loads(plan.to_json())
    assert d["graph"] == graph_digest(graphmem.load(a))
    assert list(d)[:3] == ["format", "model", "graph"]
    assert graphmem.Plan.parse(plan.to_json(), "p") == plan
    del d["graph"]  # a plan written before the digest: read, checked by the rules alone
    old = graphmem.Plan.from_dict(d)
    assert old.graph is None and not graphmem.problems(old, graphmem.load(a))
    with pytest.raises(PlanForAnotherGraph):
        graphmem.validate(plan, graphmem.load(b))
    d["graph"] = 12
    with pytest.raises(graphmem.GraphmemError, match="graph must be a string"):
        graphmem.Plan.from_dict(d)


def test_canonical_order_ignores_the_file_sequence_and_the_names():
    model = onnx.load(str(zoo_path("inception_v1")))
    base = [model.graph.node[i].output[0] for i in canonical_order(model.graph)]
    for seed in range(3):
        shuffled = _shuffled(model, seed)
        for i, n in enumerate(shuffled.graph.node):
            n.name = f"n{seed}_{i}"
        order = canonical_order(shuffled.graph)
        assert [shuffled.graph.node[i].output[0] for i in order] == base
    # a topological order: each node after the producers of what it reads
    made = set(i.name for i in model.graph.input) | {t.name for t in model.graph.initializer}
    for name in base:
        node = next(n for n in model.graph.node if n.output[0] == name)
        assert all(t in made or not t for t in node.input)
        made.update(node.output)


def test_save_graph_writes_the_graph_planned(tmp_path, capsys):
    plan, saved = tmp_path / "p.json", tmp_path / "G.onnx"
    assert main(["plan", "squeezenet", "--ort-optimize", "all", "-o", str(plan), "-q",
                 "--save-graph", str(saved)]) == 0
    p = graphmem.Plan.load(plan)
    assert p.graph == graph_digest(graphmem.load(saved))
    assert main(["verify", str(saved), "--plan", str(plan)]) == 0
    assert "PASS" in capsys.readouterr().out
    # its weights are inside it (the optimized model's folder is gone): it loads anywhere
    model = onnx.load(str(saved))
    assert not any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)
    ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"])


def test_save_graph_refuses_a_bad_output_before_the_work(tmp_path, capsys):
    assert main(["plan", "squeezenet", "-o", str(tmp_path / "p.json"), "-q",
                 "--save-graph", str(tmp_path / "missing" / "G.onnx")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "p.json").exists()
    same = str(tmp_path / "same.onnx")
    assert main(["plan", "squeezenet", "-o", same, "-q", "--save-graph", same]) == 2
    assert "name the same file" in capsys.readouterr().err
    assert not (tmp_path / "same.onnx").exists()
