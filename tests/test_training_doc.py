"""docs/training.md's numbers are generated: its measured figures sit in marked sections
that tools/training/doc_figures.py (and the table tools) write, and the slow tests
recompute every doc_figures section and compare it with the document, line for line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.training import doc_figures

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "training.md"

# A measurement as the docs write one: a decimal, a size, a time, a share, a ratio.
MEASURED = re.compile(r"\d[\d,]*\.\d+(?:e-?\d+)?|\d[\d,]* ?(?:MiB|MB|GiB|GB|KiB|ms|%)"
                      r"|\b\d+(?:\.\d+)?x\b|\b\d+ G\b")
# What prose may still hold: a version, the constants of a formula, an option's default
# or an example value of an option.
ALLOWED = {"0.3", "0.5", "64 KiB", "64KiB", "25 GB", "2GiB", "8GiB"}


def outside_sections(text: str) -> str:
    """``text`` without its marked sections (``<!-- name -->`` ... ``<!-- /name -->``)."""
    return re.sub(r"<!-- ([\w:-]+) -->.*?<!-- /\1 -->", "", text, flags=re.S)


def typed_numbers(text: str) -> list[str]:
    return [m.group(0) for m in MEASURED.finditer(outside_sections(text))
            if m.group(0) not in ALLOWED]


def marked(text: str, name: str) -> str:
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    assert text.count(begin) == 1 and text.count(end) == 1, name
    return text[text.index(begin) + len(begin):text.index(end)].strip()


def test_training_docs_hold_no_typed_measurements():
    """Every measured number of docs/training.md, and of the README's training section,
    lies in a generated section."""
    assert typed_numbers(DOC.read_text()) == []
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Training memory"):readme.index("## What models plan")]
    assert typed_numbers(section) == []
    # the check sees a number typed into the prose
    assert typed_numbers("resnet50 plans 943.0 MiB\n<!-- a -->\n1.5 MiB\n<!-- /a -->") \
        == ["943.0"]


def test_every_figures_section_is_in_the_document_and_filled():
    text = DOC.read_text()
    for s in doc_figures.SECTIONS:
        body = marked(text, s.name)
        assert "|---" in body, s.name  # a table, written by the tool


def test_the_per_device_rows_of_the_corpus_bert_are_what_train_says():
    """The corpus BERT's rows of the per-device section, recomputed (seconds); its ZeRO-3
    weights, gradients and optimizer state are the single device's split eight ways."""
    run = doc_figures.Runner()
    label, args = doc_figures.PER_DEVICE[1]
    rows = doc_figures.per_device_rows(run, label, args)
    body = marked(DOC.read_text(), "training:per-device").splitlines()
    assert [r for r in rows if r not in body] == []
    one = run(*args)
    d = run(*args, "--devices", "8", "--zero", "3")["per_device"]
    share = lambda b: -(-b // 8)  # noqa: E731
    assert d["weight_bytes"] == share(one["weight_bytes"])
    assert d["optimizer_bytes"] == share(one["optimizer_bytes"])
    assert share(one["gradient_bytes"]) <= d["gradient_bytes"] < one["gradient_bytes"]
    assert d["arena_bytes"] <= one["arena_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [s.name for s in doc_figures.SECTIONS])
def test_a_figures_section_is_what_its_commands_say_today(name):
    """Minutes a section (full resnet50 training plans): the section recomputed equals
    the document's."""
    body = doc_figures.section(name).make(doc_figures.Runner())
    assert marked(DOC.read_text(), name) == body.strip()
