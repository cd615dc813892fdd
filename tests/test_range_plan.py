"""Range plans (graphmem.ranges): one plan for a box of dims, evaluated at a binding,
proved over the box; on hand-built graphs and the corpus transformers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import range_models as rm
from graphmem.cli import main
from graphmem.frontend.reader import load
from graphmem.pipeline import plan_graph
from graphmem.plan.format import Plan
from graphmem.plan.validate import validate
from graphmem.ranges.build import build_range_plan
from graphmem.ranges.evaluate import evaluate
from graphmem.ranges.prove import range_problems, structural_problems
from graphmem.ranges.rangeplan import RangePlan

CORPUS = Path(__file__).parent / "data" / "corpus"
OPTIONS = {"passes": ["reorder", "concat", "inplace", "share", "place"], "alignment": 64}


def _build(path, box, fixed=None):
    fixed = fixed or {}

    def load_at(b):
        return load(path, {**fixed, **b})
    built = build_range_plan(load_at, box, model_name=Path(path).name, options=OPTIONS)
    # through its JSON text, as a runtime reads it
    rp = RangePlan.from_dict(json.loads(built.plan.to_json()))
    return built, rp, load_at


def _check_at(rp, load_at, binding, ratio=1.05):
    """The evaluated plan is valid for the model bound there, every tensor has the
    bytes a fresh plan gives it, and the arena is within ``ratio`` of the fresh one."""
    plan = evaluate(rp, binding)
    graph = load_at(binding)
    validate(plan, graph)
    fresh = plan_graph(graph, **OPTIONS).plan
    assert {n: t.bytes for n, t in plan.tensors.items()} == \
        {n: t.bytes for n, t in fresh.tensors.items()}
    assert plan.arena_bytes <= ratio * fresh.arena_bytes, (binding, plan.arena_bytes,
                                                           fresh.arena_bytes)
    return plan, fresh


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    path = rm.save(rm.attention(), tmp_path_factory.mktemp("range") / "attention.onnx")
    return _build(path, {"seq": (1, 4096)})


@pytest.fixture(scope="module")
def decode(tmp_path_factory):
    path = rm.save(rm.decode_step(), tmp_path_factory.mktemp("range") / "decode.onnx")
    return _build(path, {"batch": (1, 32), "past_seq": (0, 8192)})


@pytest.mark.parametrize("seq", [1, 2, 63, 64, 65, 1000, 4095, 4096])
def test_attention_range_plan(attention, seq):
    built, rp, load_at = attention
    assert rp.tensors["scores"].bytes.text() == "4*seq**2"
    plan, fresh = _check_at(rp, load_at, {"seq": seq})
    assert plan.bindings["seq"] == seq


def test_range_plan_proved(attention, decode):
    for built, rp, load_at in (attention, decode):
        assert range_problems(rp, built.formulas.graph) == []
        assert structural_problems(rp, load_at, evaluate) == []


def test_not_the_upper_bound_plan(decode):
    built, rp, load_at = decode
    small = evaluate(rp, {"batch": 1, "past_seq": 0}).arena_bytes
    large = evaluate(rp, {"batch": 32, "past_seq": 8192}).arena_bytes
    assert small < large / 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 32), st.integers(0, 8192))
def test_decode_step_any_binding(decode, batch, past_seq):
    """At any binding: valid, and every size the fresh plan's, byte for byte."""
    built, rp, load_at = decode
    _check_at(rp, load_at, {"batch": batch, "past_seq": past_seq})


# ----------------------------------------------------------------------- the prover

def _corrupt(rp: RangePlan, change) -> RangePlan:
    d = json.loads(rp.to_json())
    change(d)
    return RangePlan.from_dict(d)


def test_prover_finds_broken_rules(decode):
    built, rp, _ = decode
    graph = built.formulas.graph
    seg = max(range(len(rp.segments)), key=lambda i: len(rp.segments[i].blocks))

    def unstack(d):  # a block no longer sits on one it shares a step with
        stack = d["segments"][seg]["stack"]
        j = next(j for j, (_, below) in enumerate(stack) if below)
        stack[j][1] = []
    assert any("neither is stacked" in p for p in range_problems(_corrupt(rp, unstack), graph))

    def misalign(d):
        t = d["segments"][seg]["tensors"]["scores"]
        t["offset_in_block"] = {"text": "4", "den": 1, "terms": [[4, {}]]}
    found = range_problems(_corrupt(rp, misalign), graph)
    assert any("not a multiple of 64" in p for p in found)

    def view_of_other_size(d):
        d["segments"][seg]["tensors"]["probs"].update(alias_of="q", alias="view")
    assert any("a view of 'q'" in p for p in range_problems(_corrupt(rp, view_of_other_size), graph))

    def uncovered(d):
        d["segments"] = d["segments"][:1]
    assert rp.segments[0].dims != rp.dims
    assert any("no segment holds" in p for p in range_problems(_corrupt(rp, uncovered), graph))


# ----------------------------------------------------------------------- the command line

def test_cli_plan_at_and_verify(tmp_path, capsys):
    model = rm.save(rm.decode_step(), tmp_path / "decode.onnx")
    out = tmp_path / "decode.rangeplan.json"
    assert main(["plan", model, "--dim", "batch=1..8", "--dim", "past_seq=0..1024",
                 "-o", str(out), "-q"]) == 0
    assert json.loads(out.read_text())["format"] == "graphmem.rangeplan/1"
    for past in (0, 5, 1024):
        assert main(["verify", model, "--plan", str(out), "--dim", "batch=3",
                     "--dim", f"past_seq={past}"]) == 0
    at = tmp_path / "at.plan.json"
    assert main(["plan", model, "--dim", "batch=1..8", "--dim", "past_seq=0..1024",
                 "--at", "batch=2", "--at", "past_seq=77", "-o", str(at), "-q"]) == 0
    plan = Plan.load(at)
    assert plan.bindings["past_seq"] == 77
    from graphmem.plan.graph_digest import graph_digest
    bound = load(model, {"batch": 2, "past_seq": 77})
    assert plan.graph == graph_digest(bound)  # pinned to the graph at its binding
    validate(plan, bound)
    assert main(["verify", model, "--plan", str(at)]) == 0
    # the plan asked of the model bound elsewhere: refused, exit 2
    assert main(["verify", model, "--plan", str(at), "--dim", "batch=3"]) == 2
    capsys.readouterr()
    # outside the box: one line, exit 2, nothing written
    bad = tmp_path / "bad.plan.json"
    assert main(["verify", model, "--plan", str(out), "--dim", "batch=9",
                 "--dim", "past_seq=1"]) == 2
    assert main(["plan", model, "--dim", "batch=1..8", "--dim", "past_seq=0..1024",
                 "--at", "batch=2", "-o", str(bad), "-q"]) == 2
    assert main(["plan", model, "--dim", "batch=8..1", "-o", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("graphmem: ") for line in err), err
    assert "outside the range plan's batch=1..8" in err[0]
    assert "needs past_seq" in err[1]
    assert not bad.exists()


def test_cli_unfitted_size_refused(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["plan", str(CORPUS / "bert-dynamo.onnx"), "--dim", "batch=1",
                 "--dim", "seq=1..200", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphmem: no range plan: ") and "not a polynomial of seq" in err
    assert not out.exists()


# ----------------------------------------------------------------------- the corpus

CORPUS_CASES = [
    ("bert-ts.onnx", {"seq": (1, 64), "batch": (1, 4)}, {}),
    ("bert-dynamo.onnx", {"seq": (1, 64)}, {"batch": 2}),
    ("gpt2-past-dynamo.onnx", {"past_seq": (1, 120), "batch": (1, 4)}, {"seq": 1}),
    ("gpt2-past-ts.onnx", {"past_seq": (1, 120)}, {"seq": 1, "batch": 2}),
    ("gpt2-past-ts.onnx", {"seq": (1, 64)}, {"past_seq": 4, "batch": 1}),
]


def _bindings(box, count):
    """``count`` bindings spread over the box, its two corners included."""
    out = []
    for k in range(count):
        out.append({n: lo + (hi - lo) * k // (count - 1) for n, (lo, hi) in box.items()})
    return out


def test_corpus_one_model(capsys):
    name, box, fixed = CORPUS_CASES[3]
    built, rp, load_at = _build(str(CORPUS / name), box, fixed)
    assert range_problems(rp, built.formulas.graph) == []
    for b in _bindings(box, 3):
        _check_at(rp, load_at, b)


@pytest.mark.slow
@pytest.mark.parametrize("name, box, fixed", CORPUS_CASES)
def test_corpus_range_plans(tmp_path, name, box, fixed, capsys):
    """The corpus transformers: proved; at 12 bindings over the box (corners included)
    valid, sizes byte for byte, within 1.05x of a fresh plan; verify passes at three;
    the smallest binding's arena is below half the largest's."""
    path = str(CORPUS / name)
    built, rp, load_at = _build(path, box, fixed)
    assert range_problems(rp, built.formulas.graph) == []
    assert structural_problems(rp, load_at, evaluate) == []
    plans = [_check_at(rp, load_at, b)[0] for b in _bindings(box, 12)]
    assert plans[0].arena_bytes < plans[-1].arena_bytes / 2
    out = tmp_path / "r.json"
    rp.save(out)
    for b in _bindings(box, 3):
        dims = [a for n, v in {**fixed, **b}.items() for a in ("--dim", f"{n}={v}")]
        assert main(["verify", path, "--plan", str(out), *dims]) == 0


# ----------------------------------------------------------------------- memory as formulas

def test_memory_formulas_equal_the_evaluated_plans(decode, attention):
    """The aliased peak and arena formulas of each segment equal, byte for byte, what
    the evaluated plan's own statistics say at bindings inside the segment."""
    import random
    from graphmem.ranges.memory import aliased_peak, arena, arena_at, max_at, memory
    for built, rp, _ in (attention, decode):
        rng = random.Random(3)
        for i, seg in enumerate(rp.segments):
            peak, chains = aliased_peak(rp, i), arena(rp, i)
            assert chains is not None
            for _ in range(4):
                b = {n: rng.randint(lo, hi) for n, (lo, hi) in seg.dims.items()}
                if rp.segment_at(b) != i:
                    continue
                plan = evaluate(rp, b)
                assert max_at(peak, b) == plan.stats["aliased_peak_bytes"]
                assert arena_at(chains, b, rp.alignment) == plan.arena_bytes
    m = memory(attention[1])
    assert m["segments"][-1]["aliased_peak_bytes"] == "4*seq**2 + 96*seq"
    assert memory(decode[1])["input_bytes"] == "32*batch*past_seq + 64*batch"


def test_cli_report_formulas(tmp_path, capsys):
    model = rm.save(rm.attention(), tmp_path / "attention.onnx")
    assert main(["report", model, "--dim", "seq=100..4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["weights_bytes"] == "2048"
    assert data["input_bytes"] == "64*seq"
    assert data["segments"][-1]["aliased_peak_bytes"] == "4*seq**2 + 96*seq"


def test_cli_serving_fit(tmp_path, capsys):
    """fit from the range plan: at each context the answer fits, one more sequence does
    not (both by the evaluated plan), and the longest context at each batch likewise."""
    from graphmem.ranges.serving import total
    model = rm.save(rm.decode_step(), tmp_path / "decode.onnx")
    budget = 4 << 20
    assert main(["fit", model, "--budget", str(budget), "--dim", "batch=1..256",
                 "--dim", "past_seq=0..8192", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch_dim"] == "batch"
    built, rp, _ = _build(model, {"batch": (1, 256), "past_seq": (0, 8192)})
    answered = [r for r in data["by_context"] if r["value"] is not None]
    assert answered and any(r["value"] < 256 for r in answered)
    for r in answered:
        at = {**r["context"], "batch": r["value"]}
        assert total(rp, at)["total_bytes"] == r["total_bytes"] <= budget
        if r["value"] < 256:
            assert total(rp, {**at, "batch": r["value"] + 1})["total_bytes"] > budget
    for r in data["by_batch"]:
        if r["value"] is not None and r["value"] < 8192:
            assert total(rp, {"batch": r["batch"], "past_seq": r["value"] + 1})[
                "total_bytes"] > budget


def test_dim_following_the_range(tmp_path, capsys):
    """A Llama-style decode step (GroupQueryAttention, a KV cache) whose
    total_sequence_length is an independent dim of the model: --dim NAME=EXPR binds it
    to the free dims at every binding; verify passes at both ends."""
    from models import decoder
    from graphmem.ranges.formulas import parse_formula
    model = str(tmp_path / "llm.onnx")
    import onnx
    onnx.save(decoder.build(layers=2, hidden=64), model)
    out = tmp_path / "llm.rangeplan.json"
    dims = ["--dim", "batch_size=1..8", "--dim", "sequence_length=1",
            "--dim", "past_sequence_length=1..200",
            "--dim", "total_sequence_length=past_sequence_length + 1"]
    assert main(["plan", model, *dims, "-o", str(out), "-q"]) == 0
    for past in (1, 200):
        assert main(["verify", model, "--plan", str(out), "--dim", "batch_size=3",
                     "--dim", "sequence_length=1", "--dim", f"past_sequence_length={past}",
                     "--dim", f"total_sequence_length={past + 1}"]) == 0
    capsys.readouterr()
    assert main(["verify", model, "--plan", str(out), "--dim", "batch_size=3",
                 "--dim", "sequence_length=1", "--dim", "past_sequence_length=5",
                 "--dim", "total_sequence_length=5"]) == 2
    assert "the range plan has total_sequence_length=6 there" in capsys.readouterr().err
    with pytest.raises(ValueError):
        parse_formula("__import__('os')", ("past",))
    assert parse_formula("2*(past + 1)**2", ("past",)).text() == "2*past**2 + 4*past + 2"


@pytest.mark.parametrize("text", ["[]", '{"format": "graphmem.rangeplan/1"}',
                                  '{"format": "graphmem.rangeplan/1", "dims": {"s": [5, 1]}}',
                                  "[" * 100000, '{"format": "graphmem.rangeplan/1", "x": ' + "9" * 5000 + "}"])
def test_hostile_range_plan_refused(tmp_path, capsys, text):
    model = rm.save(rm.attention(), tmp_path / "attention.onnx")
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    assert main(["verify", model, "--plan", str(bad), "--dim", "seq=4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graphmem: ")


def test_report_and_export_at_a_binding(tmp_path, capsys):
    """report and export read a range plan with --plan and --at: the plan evaluated
    there, as any saved plan."""
    model = rm.save(rm.decode_step(), tmp_path / "decode.onnx")
    out = tmp_path / "decode.rangeplan.json"
    assert main(["plan", model, "--dim", "batch=1..8", "--dim", "past_seq=0..1000",
                 "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["report", model, "--plan", str(out), "--at", "batch=2", "--at",
                 "past_seq=300", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rp = RangePlan.load(out)
    assert data["totals"]["arena_bytes"] == evaluate(rp, {"batch": 2, "past_seq": 300}).arena_bytes
    html = tmp_path / "p.html"
    assert main(["export", model, "--plan", str(out), "--at", "batch=2", "--at",
                 "past_seq=300", "--html", str(html)]) == 0
    assert html.stat().st_size > 0
    capsys.readouterr()
    assert main(["report", model, "--at", "batch=2"]) == 2
    assert "--at needs a range plan" in capsys.readouterr().err


def test_report_html_plot(tmp_path, capsys):
    model = rm.save(rm.decode_step(), tmp_path / "decode.onnx")
    page = tmp_path / "r.html"
    assert main(["report", model, "--dim", "batch=1..8", "--dim", "past_seq=0..1000",
                 "--budget", "1MiB", "--html", str(page), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    text = page.read_text()
    assert data["budget_bytes"] == 1 << 20
    assert text.count("<svg") == 2 and "budget" in text
    assert "bytes against past_seq" in text and data["input_bytes"] in text


def test_strided_convolutions_floor_dims(tmp_path, capsys):
    """Lengths a strided convolution computes are floors of divisions: computed dims,
    named by their arithmetic; the plan is exact and verify passes at odd and even
    lengths, the ends included; the arena formula equals the evaluated arena."""
    import random
    from graphmem.ranges.memory import aliased_peak, arena, arena_at, max_at
    path = rm.save(rm.strided_convs(), tmp_path / "convs.onnx")
    built, rp, load_at = _build(path, {"batch": (1, 8), "seq": (1, 3000)})
    assert rp.aux == ("floor((seq + 1)/2)", "floor((seq + 3)/4)")
    assert rp.tensors["h1"].bytes.text() == "64*batch*floor((seq + 1)/2)"
    assert range_problems(rp, built.formulas.graph) == []
    assert structural_problems(rp, load_at, evaluate) == []
    rng = random.Random(7)
    for b in [{"batch": 1, "seq": 1}, {"batch": 8, "seq": 3000}] + [
            {"batch": rng.randint(1, 8), "seq": rng.randint(1, 3000)} for _ in range(6)]:
        plan, _ = _check_at(rp, load_at, b)
        i = rp.segment_at(b)
        assert arena_at(arena(rp, i), b, rp.alignment) == plan.arena_bytes
        assert max_at(aliased_peak(rp, i), b) == plan.stats["aliased_peak_bytes"]
    out = tmp_path / "r.json"
    rp.save(out)
    for seq in (1, 2, 3, 2999):
        assert main(["verify", path, "--plan", str(out), "--dim", "batch=2",
                     "--dim", f"seq={seq}"]) == 0


def test_plan_verify_at(tmp_path, capsys):
    model = rm.save(rm.decode_step(), tmp_path / "decode.onnx")
    out = tmp_path / "p.json"
    dims = ["--dim", "batch=1..4", "--dim", "past_seq=0..100"]
    assert main(["plan", model, *dims, "--at", "batch=2", "--at", "past_seq=9", "--verify",
                 "-o", str(out), "-q"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert main(["plan", model, *dims, "--verify", "-o", str(tmp_path / "q.json")]) == 2
    assert "give it with --at" in capsys.readouterr().err
    assert not (tmp_path / "q.json").exists()


def test_control_flow_refused_in_one_line(tmp_path, capsys):
    """A model with If bodies is not planned over a range yet: one line, exit 2."""
    import onnx
    from onnx import TensorProto, helper
    F = TensorProto.FLOAT

    def branch(op, name):
        return helper.make_graph([helper.make_node(op, ["x"], [name + "_y"])], name, [],
                                 [helper.make_tensor_value_info(name + "_y", F, ["seq", 4])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("Relu", "t"),
                            else_branch=branch("Neg", "e"))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                        helper.make_tensor_value_info("x", F, ["seq", 4])],
                          [helper.make_tensor_value_info("y", F, ["seq", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "if.onnx"
    onnx.save(m, str(path))
    out = tmp_path / "r.json"
    assert main(["plan", str(path), "--dim", "seq=1..100", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "If/Loop/Scan" in err[0]
    assert not out.exists()


def test_checkpoint_graph_from_formulas_plans_as_the_loaded_one(tmp_path):
    """The builder plans its checkpoints on the graph the formulas give there (no load):
    the same shapes, dims and plan, byte for byte, as the loader's graph."""
    from graphmem.ranges.build import graph_from_formulas
    from graphmem.ranges.sizes import size_formulas
    path = rm.save(rm.decode_step(), tmp_path / "decode.onnx")
    sf = size_formulas(lambda b: load(path, b), {"batch": (1, 32), "past_seq": (0, 8192)})
    for b in ({"batch": 3, "past_seq": 0}, {"batch": 17, "past_seq": 4099}):
        loaded, made = load(path, b), graph_from_formulas(sf, b)
        assert {n: t.shape for n, t in made.tensors.items()} == \
            {n: t.shape for n, t in loaded.tensors.items()}
        assert dict(made.bindings) == dict(loaded.bindings)
        assert plan_graph(made, **OPTIONS).plan.to_json() == \
            plan_graph(loaded, **OPTIONS).plan.to_json()


def test_cli_box_the_model_cannot_load_at_everywhere_names_the_binding(tmp_path, capsys):
    """x[seq, 4] + w[8, 4] loads at seq 1 and 8 only (a table of 8 positions, as BERT's
    position embeddings past 512): refused in one line naming the binding and tensor."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
        [numpy_helper.from_array(np.ones((8, 4), np.float32), "w")])
    path = tmp_path / "table.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    out = tmp_path / "t.rangeplan.json"
    assert main(["plan", str(path), "--dim", "seq=1..8", "-o", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "at seq=" in err[0] and "(in seq=1..8)" in err[0] \
        and "'y'" in err[0], err
    assert not out.exists()


def test_range_plan_text_one_line_per_entry(attention):
    """The file reads back as the plan it was written from, with each segment's tensors
    and blocks one compact line each (not an indented line per formula term)."""
    built, rp, _ = attention
    text = built.plan.to_json()
    assert json.loads(text) == built.plan.to_dict()
    seg = built.plan.segments[0]
    lines = text.splitlines()
    for name in seg.placed:
        assert sum(line.strip().startswith(json.dumps(name) + ': {"live"') for line in lines) \
            == len(built.plan.segments)
    assert len(lines) < 12 * (len(built.plan.tensors) + len(seg.blocks)) * len(
        built.plan.segments) + 100
