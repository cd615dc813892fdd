"""A missing or broken in-place evidence file is an error naming it, not an empty table
(every default in-place table is made from it: an empty one would plan silently without
any in-place write)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from graphmem.core import ops
from graphmem.errors import GraphmemError


@pytest.fixture
def evidence_at(monkeypatch):
    """Point the evidence file elsewhere for one test (the cached reading forgotten
    before and after)."""
    def move(path):
        monkeypatch.setattr(ops, "_EVIDENCE_FILE", path)
        ops.evidence_file.cache_clear()
    yield move
    ops.evidence_file.cache_clear()


def test_a_missing_evidence_file_is_an_error(evidence_at, tmp_path):
    evidence_at(tmp_path / "inplace_evidence.json")
    with pytest.raises(GraphmemError, match=r"cannot read the in-place evidence file "
                                            r".*inplace_evidence\.json \(No such file"):
        ops.evidence("cpu", "Relu")


@pytest.mark.parametrize("text, says", [("{not json", "is not valid JSON"),
                                        ('{"format": 1}', 'has no "providers" object')])
def test_a_broken_evidence_file_is_an_error(evidence_at, tmp_path, text, says):
    path = tmp_path / "inplace_evidence.json"
    path.write_text(text, encoding="utf-8")
    evidence_at(path)
    with pytest.raises(GraphmemError, match=says):
        ops.evidence_file()


def test_the_cli_says_so_in_one_line(tmp_path):
    """Without the file the tables cannot be made: the command stops with one line and
    exit 2, writing nothing (the process looks for the file under another name, one
    that does not exist, instead of moving the package's own file aside)."""
    code = ("import pathlib, sys, graphmem.cli\n"
            "orig = pathlib.Path.with_name\n"
            "def moved(self, name):\n"
            "    return orig(self, 'absent.json' if name == 'inplace_evidence.json' else name)\n"
            "pathlib.Path.with_name = moved\n"
            "sys.exit(graphmem.cli.main(['plan', 'squeezenet', '-o', sys.argv[1]]))\n")
    out = tmp_path / "plan.json"
    run = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: cannot read the in-place "
                                                   "evidence file"), run.stderr
    assert "absent.json" in lines[0] and not out.exists()
