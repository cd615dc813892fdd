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
