"""The README's Python snippet, run exactly as printed."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_python_snippet_runs_as_printed(tmp_path, monkeypatch, capsys):
    code = snippets()
    assert code, "README.md has no ```python block"
    monkeypatch.chdir(tmp_path)
    for block in code:
        exec(compile(block, str(README), "exec"), {"__name__": "__readme__"})
    out = capsys.readouterr().out
    assert "inplace" in out and "place" in out
    assert (tmp_path / "resnet50.plan.json").is_file()
    import graphmem
    graph = graphmem.load("resnet50")
    last = out.strip().splitlines()[-1].split()
    assert last[0] == graph.outputs[0] and int(last[2]) > 0
