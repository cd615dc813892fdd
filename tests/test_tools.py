"""tools/ as tools/README.md describes it: a package of modules run from the repository
root, none of which edits the module search path, every one importable, and a README
that names every tool and every generated section with the command that writes it."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tools.docs import doctables

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
MODULES = sorted(p for p in TOOLS.rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_no_tool_edits_the_module_search_path():
    assert [str(p.relative_to(ROOT)) for p in MODULES if "sys.path" in p.read_text()] == []


@pytest.mark.parametrize("path", [p for p in MODULES if p.name != "__main__.py"],
                         ids=lambda p: str(p.relative_to(TOOLS)))
def test_every_tool_imports_as_a_module(path):
    """Importing runs no tool (its work is behind ``__main__``) and needs no torch."""
    importlib.import_module(module_name(path))


def test_the_readme_names_every_tool():
    readme = (TOOLS / "README.md").read_text()
    tools = [p for p in MODULES if p.name not in ("__init__.py", "__main__.py")
             and p.parent != TOOLS]
    assert [p.name for p in tools if f"`{p.name}`" not in readme] == []
    assert {p.parent.name for p in tools} == set(re.findall(r"^\*\*(\w+)/\*\*", readme, re.M))


def test_the_readme_names_every_generated_section_and_its_command():
    rows = {}
    for line in (TOOLS / "README.md").read_text().splitlines():
        m = re.match(r"\| (\S+) \| `([^`]+)` \| `([^`]+)`", line)
        if m:
            rows[m.group(2)] = (m.group(1), m.group(3))
    assert rows == {s.name: (s.doc, s.tool) for s in doctables.SECTIONS}


def test_every_marked_section_of_the_docs_is_listed():
    """A pair of markers in README.md or docs/ is a generated section doctables knows."""
    listed = {(s.doc, s.name) for s in doctables.SECTIONS}
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for name in re.findall(r"<!-- /([\w:-]+) -->", text):
            if f"<!-- {name} -->" in text:
                found.add((path.relative_to(ROOT).as_posix(), name))
    assert found - listed == set()


def test_publish_writes_the_rows_the_section_and_prints_it(tmp_path, capsys):
    from tools.docs.sections import publish
    doc = tmp_path / "corpus.md"
    doc.write_text("intro\n<!-- deploy -->\nold\n<!-- /deploy -->\nend\n")
    assert publish(doc, "deploy", "| a | 1 |", False, [{"a": 1}], str(tmp_path / "r.json")) == 0
    assert "old" in doc.read_text() and (tmp_path / "r.json").read_text() == '[\n {\n  "a": 1\n }\n]'
    assert publish(doc, "deploy", "| a | 2 |", True) == 0
    assert doc.read_text() == "intro\n<!-- deploy -->\n| a | 2 |\n<!-- /deploy -->\nend\n"
    assert capsys.readouterr().out == "| a | 1 |\n| a | 2 |\n"


def test_every_tool_the_docs_and_code_name_exists():
    """Each ``python -m tools.GROUP.TOOL`` and ``tools/GROUP/TOOL.py`` in README.md, docs/,
    tests/, graphmem/, passes/ and tools/ names a module that is there (the contract
    test's made-up trees aside)."""
    missing = set()
    texts = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("tests", "graphmem", "passes", "tools"):
        texts += sorted((ROOT / folder).rglob("*.py")) + sorted((ROOT / folder).rglob("*.md"))
    texts.remove(ROOT / "tests" / "test_architecture_contracts.py")
    for path in texts:
        text = path.read_text()
        for dotted in re.findall(r"python -m (tools(?:\.[a-z_]+)+)", text):
            file = ROOT / dotted.replace(".", "/")
            if not (file.with_suffix(".py").is_file() or (file / "__main__.py").is_file()):
                missing.add(f"{path.relative_to(ROOT)}: python -m {dotted}")
        for rel in re.findall(r"(?<![\w/.])(tools/[a-z_/]+\.py)", text):
            if not (ROOT / rel).is_file():
                missing.add(f"{path.relative_to(ROOT)}: {rel}")
    assert sorted(missing) == []
