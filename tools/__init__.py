"""graphmem's tools: benchmarks, the generated tables of README.md and docs/, model
corpora, fault campaigns and the checks a refactor runs (tools/README.md lists them).

Every tool is a module run from the repository root, ``python -m tools.GROUP.TOOL``
(``python -m tools.bench`` for the zoo benchmark); tools import each other and
``models`` by their package names and never edit the module search path.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository root
