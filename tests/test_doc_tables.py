"""The tables of numbers in README.md and docs/ say what their tools compute today
(tools/docs/doctables.py): a few rows of each checkable section, recomputed."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
from tools.docs import doctables

CHECKED = [s for s in doctables.SECTIONS if s.rows is not None]


@pytest.mark.parametrize("sec", CHECKED, ids=[s.name for s in CHECKED])
def test_a_section_agrees_with_its_tool(sec):
    assert doctables.check(sec, keys=list(sec.sample)) == []


def test_an_arena_edited_by_hand_is_caught():
    """The check reads the document: a README arena changed by hand is named, with the
    row, the column, the two values and the tool that writes the table."""
    sec = doctables.section("zoo-table")
    text = (ROOT / sec.doc).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("| resnet50 |"))
    cells = line.split("|")
    arena = cells[8]  # | model | nodes | naive | unaliased | aliased | share | file order | arena
    assert arena.strip() == "**6.89**"
    edited = text.replace(line, "|".join(cells[:8] + [" **6.50** "] + cells[9:]))
    found = doctables.check(sec, edited, keys=["resnet50"])
    assert found == ["README.md: resnet50, arena MiB: '6.50' in the doc, '6.89' computed by "
                     "`python -m tools.docs.zoo_table --readme`"]
    report = doctables.section("report-table")
    text = (ROOT / report.doc).read_text()
    edited = text.replace("| shufflenet | 1,393,320 | 5.42 | 55.00 | 2.75 |",
                          "| shufflenet | 1,393,320 | 5.42 | 55.00 | 2.97 |")
    assert edited != text
    assert [p.split(":")[1].strip() for p in doctables.check(report, edited, ["shufflenet"])] \
        == ["shufflenet, arena MiB"]


def test_every_table_of_numbers_is_in_a_section():
    """A table with numeric cells outside every marked section was typed by hand."""
    problems = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        problems += doctables.numeric_tables_outside_sections(path, path.read_text())
    assert problems == []
    typed = "intro\n\n| model | arena MiB |\n|---|---:|\n| resnet50 | 6.89 |\n"
    assert doctables.numeric_tables_outside_sections(ROOT / "README.md", typed)


def test_every_section_is_in_its_document():
    for sec in doctables.SECTIONS:
        text = (ROOT / sec.doc).read_text()
        assert text.count(sec.begin) == 1 and text.count(sec.end) == 1, sec.name
        assert sec.rows is not None or sec.why_unchecked, sec.name


def test_replace_marked_keeps_the_rest(tmp_path):
    from tools.docs.sections import write_doc
    doc = tmp_path / "README.md"
    sec = doctables.section("zoo-table")
    doc.write_text(f"before\n{sec.begin}\nold\n{sec.end}\nafter\n")
    write_doc(doc, "zoo-table", "new $1 \\g<0>")
    assert doc.read_text() == f"before\n{sec.begin}\nnew $1 \\g<0>\n{sec.end}\nafter\n"
