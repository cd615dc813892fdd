"""Packaging: every subpackage is listed, so a non-editable install has all commands."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_packaged():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {"graphmem." + ".".join(p.parent.relative_to(ROOT / "graphmem").parts)
             for p in (ROOT / "graphmem").rglob("__init__.py")}
    found = {f.rstrip(".") for f in found} | {"graphmem.passes"}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages"
    assert config["package-dir"]["graphmem.passes"] == "passes"
