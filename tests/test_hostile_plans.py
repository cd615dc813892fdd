"""A plan file is never trusted: hostile JSON ends in one line and exit 2, an arena
larger than its tensors is refused, and verify refuses a run the machine cannot hold
before allocating it (issue 25)."""
from __future__ import annotations

import json
import shutil

import pytest

import graphmem
from graphmem.cli import main
from graphmem.frontend.zoo import zoo_path


@pytest.fixture
def planned(tmp_path, monkeypatch):
    """(model path, plan dict) for squeezenet in a scratch folder."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(zoo_path("squeezenet"), "m.onnx")
    assert main(["plan", "m.onnx", "-o", "p.json", "-q"]) == 0
    return tmp_path / "m.onnx", json.loads((tmp_path / "p.json").read_text())


def _verify_says(capsys, text: str) -> list[str]:
    with open("bad.json", "w") as f:
        f.write(text)
    assert main(["verify", "m.onnx", "--plan", "bad.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graphmem: bad.json: "), err
    return err


def test_deeply_nested_json(planned, capsys):
    assert "nested too deeply" in _verify_says(capsys, "[" * 100_000 + "]" * 100_000)[0]


def test_an_integer_of_thousands_of_digits(planned, capsys):
    text = json.dumps(planned[1]).replace(f'"arena_bytes": {planned[1]["arena_bytes"]}',
                                          '"arena_bytes": ' + "9" * 5000, 1)
    assert "not a JSON plan file" in _verify_says(capsys, text)[0]


@pytest.mark.parametrize("field, value", [("alias_of", ["x"]), ("slice_of", {"a": 1}),
                                          ("alias", 3), ("kind", None)])
def test_a_name_that_is_not_a_string(planned, capsys, field, value):
    d = planned[1]
    name = next(iter(d["tensors"]))
    d["tensors"][name][field] = value
    assert f"{field} must be a string" in _verify_says(capsys, json.dumps(d))[0]


def test_passes_that_are_not_objects(planned, capsys):
    d = planned[1]
    d["passes"] = [1, 2]
    assert "passes must be a list of objects" in _verify_says(capsys, json.dumps(d))[0]


def test_an_arena_past_its_last_tensor_is_refused(planned):
    path, d = planned
    d["arena_bytes"] = d["stats"]["arena_bytes"] = 2 ** 32
    found = graphmem.problems(graphmem.Plan.from_dict(d), graphmem.load(path))
    assert found == [f"arena_bytes {2 ** 32} is past the end of its last tensor "
                     f"({planned[1]['stats']['aliased_peak_bytes']} bytes, "
                     f"{planned[1]['stats']['aliased_peak_bytes']} aligned)"]


def test_verify_refuses_a_run_the_machine_cannot_hold(planned, capsys, monkeypatch):
    import graphmem.verify.arena as arena
    monkeypatch.setattr(arena, "available_memory", lambda: 1_000_000)
    assert main(["verify", "m.onnx", "--plan", "p.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "this machine has 1,000,000 bytes available" in err[0]


def test_a_plan_file_larger_than_its_model_can_need_is_not_parsed(planned, capsys):
    d = planned[1]
    d["order"] = list(range(2_000_000))  # 16 MB of order for a 66-node model
    with open("big.json", "w") as f:
        json.dump(d, f)
    for argv in (["verify", "m.onnx", "--plan", "big.json"],
                 ["report", "m.onnx", "--plan", "big.json"],
                 ["export", "m.onnx", "--plan", "big.json", "--html", "h.html"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "more than any plan for this model needs" in err[0], err


@pytest.mark.parametrize("passes, says", [
    ([{"name": "x", "bytes_saved": "x"}], "expected an integer"),
    ([{"name": 5}], "a pass's name must be a string"),
    ([{"name": "a", "bytes_saved": [1]}], "expected an integer")])
def test_pass_entries_of_the_wrong_type(planned, capsys, passes, says):
    d = planned[1]
    d["passes"] = passes
    with open("bad.json", "w") as f:
        json.dump(d, f)
    for argv in (["export", "m.onnx", "--plan", "bad.json", "--html", "o.html"],
                 ["report", "m.onnx", "--plan", "bad.json"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0]


def _annotated_with(text: str) -> None:
    """An annotated model (export --annotated) whose embedded plan is ``text``."""
    import onnx
    from graphmem.export.annotate import PLAN_KEY
    assert main(["export", "m.onnx", "--annotated", "A.onnx"]) == 0
    model = onnx.load("A.onnx")
    entry = next(p for p in model.metadata_props if p.key == PLAN_KEY)
    entry.value = text
    onnx.save(model, "A.onnx")


@pytest.mark.parametrize("kind", ["nested", "digits", "large"])
def test_a_hostile_plan_inside_an_annotated_model(planned, capsys, kind):
    d = planned[1]
    text = {"nested": "[" * 100_000 + "]" * 100_000,
            "digits": json.dumps(d).replace(f'"arena_bytes": {d["arena_bytes"]}',
                                            '"arena_bytes": ' + "9" * 5000, 1),
            "large": json.dumps({**d, "padding": "x" * (4 << 20)})}[kind]
    _annotated_with(text)
    capsys.readouterr()
    for argv in (["export", "--plan-from", "A.onnx", "--plan-out", "o.json"],
                 ["report", "m.onnx", "--plan", "A.onnx"],
                 ["export", "m.onnx", "--plan", "A.onnx", "--html", "o.html"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("graphmem: A.onnx (embedded plan): "), err
    assert not any(p.name.startswith("o.") for p in planned[0].parent.iterdir())
