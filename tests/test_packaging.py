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


def test_the_compiled_extensions_are_declared_required_with_their_sources():
    """graphmem/fitloops.c (best fit and the storage pool), graphmem/orderloops.c (the
    reorder pass's searches), graphmem/capsearch.c (the complete placement search) and
    graphmem/wire.c (the model reader) are built at install
    and required: there is no second, Python, implementation (their specifications are
    tests/reference_place.py, tests/reference_share.py, tests/reference_reorder.py,
    tests/reference_capacity.py and,
    for the reader, the onnx Python API in tests/test_wire.py)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    exts = {ext["name"]: ext for ext in config["ext-modules"]}
    assert set(exts) == {"graphmem.fitloops", "graphmem.orderloops", "graphmem.capsearch",
                         "graphmem.wire"}
    for ext in exts.values():
        assert ext["optional"] is False
        assert all((ROOT / s).is_file() for s in ext["sources"])
