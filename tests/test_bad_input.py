"""Bad input: one line ``graphmem: ...`` on stderr, exit 2, and the output file untouched.

Every case goes through the CLI (``graphmem plan MODEL -o OUT``) with OUT created
beforehand, so a partial write or a truncation would show.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np

import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphmem
from graphmem.cli import main
from graphmem.errors import GraphmemError
from graphmem.plan.format import Plan

from conftest import F, make_model

SENTINEL = "an older plan that must survive\n"


def relu_model():
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 3])],
                      [("y", F, [2, 3])])


def refused(capsys, tmp_path, model, *extra, out=None) -> str:
    """Run ``graphmem plan`` and return its one error line, checking exit 2 and OUT intact."""
    out = out or tmp_path / "out.plan.json"
    keep = out.parent.is_dir() and not out.is_dir()
    if keep:
        out.write_text(SENTINEL)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["plan", str(model), "-o", str(out), "-q", *extra])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("graphmem: "), err
    assert "Traceback" not in err
    if keep:
        assert out.read_text() == SENTINEL
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temp file left
    return lines[0]


def save(model, path):
    onnx.save(model, str(path))  # onnx.save does not run the checker
    return path


def test_missing_file(capsys, tmp_path):
    line = refused(capsys, tmp_path, tmp_path / "nowhere.onnx")
    assert "nowhere.onnx: no such file" in line


def test_directory(capsys, tmp_path):
    (tmp_path / "adir").mkdir()
    assert "is a directory" in refused(capsys, tmp_path, tmp_path / "adir")


def test_empty_file(capsys, tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert "empty file" in refused(capsys, tmp_path, tmp_path / "empty.onnx")


def test_text_file(capsys, tmp_path):
    (tmp_path / "notes.onnx").write_text("these are notes,\nnot a model\n")
    assert "not an ONNX model" in refused(capsys, tmp_path, tmp_path / "notes.onnx")


def test_truncated_file(capsys, tmp_path):
    data = relu_model().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    assert "not an ONNX model" in refused(capsys, tmp_path, tmp_path / "cut.onnx")


def test_every_truncation_is_refused_or_planned(tmp_path):
    """No prefix of a model file gives a traceback (some prefixes are valid models)."""
    data = relu_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    planned = 0
    for n in range(len(data)):
        path.write_bytes(data[:n])
        try:
            graphmem.load(path)
            planned += 1
        except GraphmemError as exc:
            assert "\n" not in str(exc)
    assert planned < len(data) // 2


def test_corrupt_bytes(capsys, tmp_path):
    data = bytearray(relu_model().SerializeToString())
    data[5:25] = b"\xff" * 20
    (tmp_path / "bad.onnx").write_bytes(bytes(data))
    assert "graphmem: " in refused(capsys, tmp_path, tmp_path / "bad.onnx")


def test_fails_onnx_checker(capsys, tmp_path):
    m = make_model([helper.make_node("NoSuchOp", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    line = refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))
    assert "onnx.checker" in line and "NoSuchOp" in line


def test_cycle_names_the_loop(capsys, tmp_path):
    m = make_model([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Add", ["a", "x"], ["b"]),
                    helper.make_node("Relu", ["a"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    line = refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))
    assert "cycle" in line
    assert "node 0 (Relu) -> 'a' -> node 1 (Add)" in line and "'b'" in line


def test_tensor_nobody_produces(capsys, tmp_path):
    m = make_model([helper.make_node("Add", ["x", "ghost"], ["y"])], [("x", F, [2])],
                   [("y", F, [2])])
    line = refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))
    assert "'ghost'" in line and "node 0 (Add)" in line and "no node produces" in line


def test_graph_output_nobody_produces(capsys, tmp_path):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])],
                   [("y", F, [2]), ("z", F, [2])])
    assert "'z'" in refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))


def test_duplicate_tensor_names(capsys, tmp_path):
    m = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["y"])],
                   [("x", F, [2])], [("y", F, [2])])
    line = refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))
    assert "duplicate tensor name 'y'" in line and "node 1 (Sigmoid)" in line


def test_node_overwrites_graph_input_name(capsys, tmp_path):
    m = make_model([helper.make_node("Relu", ["x"], ["x"])], [("x", F, [2])], [("x", F, [2])])
    assert "duplicate tensor name 'x'" in refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))


@pytest.mark.parametrize("case, message", [
    ("two initializers", "duplicate tensor name 'w': two initializers"),
    ("two inputs", "duplicate tensor name 'x': two graph inputs"),
    ("a node writes one twice", "duplicate tensor name 'y': node 0 (Split) writes it, but "
                                "it is already the output of node 0 (Split)"),
    ("a node writes an initializer", "duplicate tensor name 'w': node 1 (Relu) writes it, "
                                     "but it is already an initializer"),
])
def test_every_kind_of_name_clash_is_worded(case, message):
    from graphmem.frontend.reader import from_model
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    inputs, inits = [("x", F, [2])], [w]
    nodes = [helper.make_node("Split", ["x"], ["y", "z"], axis=0, num_outputs=2),
             helper.make_node("Relu", ["y"], ["r"])]
    if case == "two initializers":
        inits = [w, numpy_helper.from_array(np.ones(2, np.float32), "w")]
    elif case == "two inputs":
        inputs = [("x", F, [2]), ("x", F, [2])]
    elif case == "a node writes one twice":
        nodes[0] = helper.make_node("Split", ["x"], ["y", "y"], axis=0, num_outputs=2)
    else:
        nodes[1] = helper.make_node("Relu", ["y"], ["w"])
    m = make_model(nodes, inputs, [("z", F, [1])], inits, opset=18)
    with pytest.raises(GraphmemError) as err:
        from_model(m, check=False)
    assert str(err.value) == message


def test_blank_outputs_may_repeat():
    from graphmem.frontend.reader import from_model
    nodes = [helper.make_node("Dropout", ["x"], ["a", ""]),
             helper.make_node("Dropout", ["a"], ["b", ""])]
    g = from_model(make_model(nodes, [("x", F, [2])], [("b", F, [2])]))
    assert [n.outputs for n in g.nodes] == [("a", ""), ("b", "")]


def unknown_domain_model(with_shape: bool):
    nodes = [helper.make_node("Foo", ["x"], ["t"], domain="com.example"),
             helper.make_node("Relu", ["t"], ["y"])]
    m = make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])],
                   value_info=[("t", F, [4, 3])] if with_shape else ())
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    return m


def test_unknown_domain_without_shapes_names_the_op(capsys, tmp_path):
    line = refused(capsys, tmp_path, save(unknown_domain_model(False), tmp_path / "m.onnx"))
    assert "'t'" in line and "Foo" in line and "com.example" in line and "value_info" in line


def test_unknown_domain_with_shapes_plans_as_opaque(tmp_path):
    path = save(unknown_domain_model(True), tmp_path / "m.onnx")
    assert main(["plan", str(path), "-o", str(tmp_path / "p.json"), "-q"]) == 0
    plan = Plan.load(tmp_path / "p.json")
    graph = graphmem.load(path)
    graphmem.validate(plan, graph)
    assert plan.tensors["t"].bytes == 4 * 3 * 4  # the shape value_info gives
    assert plan.tensors["t"].alias_of is None  # opaque: never shares with its input


def test_output_in_missing_folder(capsys, tmp_path):
    path = save(relu_model(), tmp_path / "m.onnx")
    line = refused(capsys, tmp_path, path, out=tmp_path / "no" / "such" / "p.json")
    assert "does not exist" in line
    assert not (tmp_path / "no").exists()


def test_unbound_dim_names_itself(capsys, tmp_path):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["batch", 3])],
                   [("y", F, ["batch", 3])])
    line = refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))
    assert "'batch'" in line and "--dim batch=" in line


def test_unknown_dim_name_is_a_note(capsys, tmp_path):
    # one command line serves a family of models (issue 34): a --dim the model lacks is
    # a note, and the plan is made
    path = save(relu_model(), tmp_path / "m.onnx")
    assert main(["plan", str(path), "-o", str(tmp_path / "p.json"), "-q", "--dim", "seq=4"]) == 0
    assert "--dim seq: the model has no symbolic dimension of that name; ignored" in \
        capsys.readouterr().err


def test_bad_dim_syntax(capsys, tmp_path):
    path = save(relu_model(), tmp_path / "m.onnx")
    assert "NAME=VALUE" in refused(capsys, tmp_path, path, "--dim", "seq")


def test_string_tensor_names_itself(capsys, tmp_path):
    m = make_model([helper.make_node("Identity", ["words"], ["y"])],
                   [("words", TensorProto.STRING, [3])], [("y", TensorProto.STRING, [3])])
    line = refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))
    assert "'words'" in line and "strings" in line


# ---------------------------------------------------------------- plan files
# Read by `graphmem verify MODEL --plan PLAN` (the verify branch). The API-level tests
# run now; the CLI tests switch on by themselves once the verify command is merged.

def test_plan_file_of_another_format(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps({"format": "someone.else/3", "tensors": {}}))
    with pytest.raises(GraphmemError, match="unknown plan format 'someone.else/3'"):
        Plan.load(tmp_path / "p.json")
    (tmp_path / "q.json").write_text("[1, 2, 3]")
    with pytest.raises(GraphmemError, match="not a graphmem plan"):
        Plan.load(tmp_path / "q.json")
    (tmp_path / "r.json").write_text("{not json")
    with pytest.raises(GraphmemError, match="not a JSON plan file"):
        Plan.load(tmp_path / "r.json")
    (tmp_path / "s.json").write_text(json.dumps({"format": "graphmem.plan/1", "model": "m"}))
    with pytest.raises(GraphmemError, match="missing field"):
        Plan.load(tmp_path / "s.json")


def two_models(tmp_path):
    a = save(relu_model(), tmp_path / "a.onnx")
    b = save(make_model([helper.make_node("Sigmoid", ["inp"], ["out"])], [("inp", F, [5])],
                        [("out", F, [5])]), tmp_path / "b.onnx")
    return a, b


def test_plan_for_another_model_is_refused_not_judged(tmp_path):
    a, b = two_models(tmp_path)
    from graphmem.plan.graph_digest import PlanForAnotherGraph
    with pytest.raises(PlanForAnotherGraph, match="^this plan was made for another graph: "):
        graphmem.problems(graphmem.plan_model(a).plan, graphmem.load(b))
    # a plan without the digest (written before graphmem recorded it) breaks the rules
    old = dataclasses.replace(graphmem.plan_model(a).plan, graph=None)
    found = graphmem.problems(old, graphmem.load(b))
    assert found and "'x'" in found[0]
    assert not graphmem.problems(graphmem.plan_model(a).plan, graphmem.load(a))


@pytest.mark.parametrize("field", ["offset", "bytes", "live"])
def test_plan_with_an_integer_past_64_bits_is_refused_by_name(tmp_path, field):
    a, _ = two_models(tmp_path)
    d = json.loads(graphmem.plan_model(a).plan.to_json())
    huge = 2 ** 70
    if field == "live":
        d["tensors"]["x"]["live"] = [0, huge]
    else:
        d["tensors"]["x"][field] = huge
    found = graphmem.problems(Plan.from_dict(d), graphmem.load(a))
    assert found and all("'x'" in f for f in found)  # named, not an OverflowError


def test_plan_whose_arena_is_past_64_bits_is_refused_by_name(tmp_path):
    a, _ = two_models(tmp_path)
    d = json.loads(graphmem.plan_model(a).plan.to_json())
    d["arena_bytes"] = d["stats"]["arena_bytes"] = 2 ** 80
    d["tensors"]["x"]["offset"] = 2 ** 70  # inside that arena: only the size is absurd
    assert graphmem.problems(Plan.from_dict(d), graphmem.load(a)) == [
        f"arena_bytes {2 ** 80} is out of range"]


def test_graph_too_large_to_plan_is_refused_by_name(capsys, tmp_path):
    """Tensors of 2**66 bytes: no 64-bit arena holds them. Refused before planning (the
    placement arrays would overflow), naming the largest tensor."""
    huge = [2 ** 31, 2 ** 31, 16]
    model = make_model([helper.make_node("Relu", ["x"], ["h"]),
                        helper.make_node("Sigmoid", ["h"], ["y"])],
                       [("x", F, huge)], [("y", F, huge)])
    line = refused(capsys, tmp_path, save(model, tmp_path / "huge.onnx"))
    assert "past the 2**62 bytes graphmem can plan" in line and "'x'" in line


@pytest.mark.parametrize("content", [json.dumps({"format": "someone.else/3"}), "[1, 2]",
                                     "{not json", ""])
def test_verify_refuses_a_plan_file_of_another_format(capsys, tmp_path, content):
    a, _ = two_models(tmp_path)
    (tmp_path / "p.json").write_text(content)
    assert main(["verify", str(a), "--plan", str(tmp_path / "p.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: ") and "p.json" in lines[0]


def test_verify_refuses_a_plan_for_another_model(capsys, tmp_path):
    a, b = two_models(tmp_path)
    graphmem.plan_model(a).plan.save(tmp_path / "a.plan.json")
    assert main(["verify", str(b), "--plan", str(tmp_path / "a.plan.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: ") and "another model" in lines[0]


# ---------------------------------------------------------------- corrupt bytes, fuzzed

def _fuzz_base():
    from test_model_features import if_model
    return if_model().SerializeToString()


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), min_size=1,
                      max_size=4))
def test_corrupted_bytes_never_give_a_traceback(tmp_path, edits):
    """Any byte changes to a model with subgraphs: a plan or a one-line refusal."""
    data = bytearray(_fuzz_base())
    for pos, value in edits:
        data[pos % len(data)] = value
    path = tmp_path / "fuzzed.onnx"
    path.write_bytes(bytes(data))
    try:
        graph = graphmem.load(path)
        graphmem.validate(graphmem.plan_graph(graph).plan, graph)
    except GraphmemError as exc:
        assert "\n" not in str(exc) and str(exc)


def test_invalid_utf8_name_is_named(capsys, tmp_path):
    data = relu_model().SerializeToString()
    i = data.index(b"Relu")
    corrupt = data[:i] + b"R\xdelu" + data[i + 4:]
    (tmp_path / "m.onnx").write_bytes(corrupt)
    line = refused(capsys, tmp_path, tmp_path / "m.onnx")
    assert "not valid UTF-8" in line and "node 0" in line


def test_node_reading_its_own_output(capsys, tmp_path):
    m = make_model([helper.make_node("Add", ["x", "a"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
                   [("x", F, [2])], [("y", F, [2])])
    line = refused(capsys, tmp_path, save(m, tmp_path / "m.onnx"))
    assert "cycle: node 0 (Add) -> 'a' -> node 0 (Add)" in line


def test_output_path_is_a_directory(capsys, tmp_path):
    path = save(relu_model(), tmp_path / "m.onnx")
    (tmp_path / "outdir").mkdir()
    line = refused(capsys, tmp_path, path, out=tmp_path / "outdir")
    assert "is a directory" in line and (tmp_path / "outdir").is_dir()


def test_write_failure_leaves_nothing(capsys, tmp_path, monkeypatch):
    """A failing write (disk full, permissions) is one line, and no temp file stays."""
    path = save(relu_model(), tmp_path / "m.onnx")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("graphmem.plan.io.os.replace", full)
    line = refused(capsys, tmp_path, path)
    assert "No space left on device" in line


def test_a_size_that_depends_on_the_data_is_named(capsys, tmp_path):
    """A Range whose limit is data (the largest value of the input), which the graph
    does not bound: the unknown tensor's message names the Range and the --bound to
    pass (a NonZero plans at its bound: tests/test_data_bounds.py)."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["limit"], to=TensorProto.INT64),
             helper.make_node("Range", ["zero", "limit", "one"], ["r"], name="count"),
             helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    model = make_model(nodes, [("x", F, [4, 5])], [("y", F, ["k"])],
                       initializers=[numpy_helper.from_array(np.array(0, np.int64), "zero"),
                                     numpy_helper.from_array(np.array(1, np.int64), "one")])
    line = refused(capsys, tmp_path, save(model, tmp_path / "m.onnx"))
    assert "Range 'count', node 2" in line and "--bound Range_2=N" in line, line


def test_a_failed_command_leaves_notes_printing_at_once(tmp_path, capsys):
    """A command that stops on bad input drops its held notes and stops holding: a note
    the Python API makes later in the same process is printed at once, not held for a
    command that never comes (the order of the test files decided it once)."""
    from graphmem import notes
    from graphmem.cli import main
    assert main(["plan", str(tmp_path / "missing.onnx")]) == 2
    capsys.readouterr()
    notes.note("later")
    assert capsys.readouterr().err == "graphmem: later\n"
