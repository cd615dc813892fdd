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
    found |= {"graphmem.passes." + ".".join(p.parent.relative_to(ROOT / "passes").parts)
              for p in (ROOT / "passes").rglob("*/__init__.py")}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages"
    assert config["package-dir"]["graphmem.passes"] == "passes"


def test_the_compiled_extension_is_declared_required_with_its_source():
    """graphmem/fitloops.c (best fit and the storage pool) is built at install and required:
    the passes have no second, Python, implementation (their specifications are
    tests/reference_place.py and tests/reference_share.py)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    (ext,) = config["ext-modules"]
    assert ext["name"] == "graphmem.fitloops" and ext["optional"] is False
    assert all((ROOT / s).is_file() for s in ext["sources"])
