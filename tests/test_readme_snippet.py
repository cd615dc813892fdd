"""The README's Python snippets, run exactly as printed, one after the other (as a
reader pastes them into one session), with the files they name: the Model Zoo graph
onnx ships, and ``gpt2.onnx``, for which the corpus's small GPT-2 decode step stands."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_python_snippets_run_as_printed(tmp_path, monkeypatch, capsys):
    code = snippets()
    assert len(code) >= 2, "README.md lost a ```python block"
    shutil.copy(ROOT / "tests" / "data" / "corpus" / "gpt2-past-dynamo.onnx",
                tmp_path / "gpt2.onnx")
    monkeypatch.chdir(tmp_path)
    session = {"__name__": "__readme__"}
    for block in code:
        exec(compile(block, str(README), "exec"), session)
    out = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("inplace ") for line in out)
    assert (tmp_path / "resnet50.plan.json").is_file()
    assert (tmp_path / "gpt2.rangeplan.json").is_file()
    import graphmem
    graph = graphmem.load("resnet50")
    planned = next(line.split() for line in out if line.startswith(graph.outputs[0]))
    assert int(planned[2]) > 0
    assert out[-1] == "128*batch*past_seq + 128*batch"
