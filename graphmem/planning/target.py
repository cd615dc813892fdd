"""What a plan is made for: the ONNX Runtime execution provider, the in-place table it
trusts, and the runtime's version (the plan's ``target``, docs/plan-format.md)."""
from __future__ import annotations

import functools

from graphmem.core.ops import INPLACE_TABLES, provider_of, table_id, table_key
from graphmem.errors import GraphmemError

# The ONNX Runtime execution provider of each in-place table
PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def inplace_table(provider: str, which: str = "default") -> str:
    """The :data:`~graphmem.core.ops.INPLACE_TABLES` key a plan for ``provider`` ("cpu"
    or "cuda") trusts: its ``which`` ("default" or "probed") table. ``provider`` may
    also be a table's own key ("cpu-probed"), as
    :func:`graphmem.commands.common.plan_options` passes it, with ``which`` "default"."""
    if provider in INPLACE_TABLES and provider not in PROVIDER_NAMES and which == "default":
        return provider
    if provider not in PROVIDER_NAMES:
        raise GraphmemError(f"no execution provider {provider!r}; choose "
                            f"{', '.join(PROVIDER_NAMES)}")
    try:
        return table_key(provider, which)
    except ValueError as exc:
        raise GraphmemError(str(exc)) from None


def target(table: str) -> dict[str, str]:
    """The plan's ``target``: the runtime, its provider and the in-place table trusted
    (``table``: an :data:`~graphmem.core.ops.INPLACE_TABLES` key, "cpu", "cpu-probed", ...)."""
    return {"runtime": _runtime(), "provider": PROVIDER_NAMES[provider_of(table)],
            "inplace_table": table_id(table)}


@functools.cache
def _runtime() -> str:
    """"onnxruntime VERSION" of the installed ONNX Runtime (either wheel: both install the
    package ``onnxruntime``), read from its ``__init__.py`` where it is written as text:
    importing onnxruntime, or importlib.metadata's scan of every installed package, would
    cost more than planning a small model."""
    import importlib.util
    import re
    try:
        spec = importlib.util.find_spec("onnxruntime")
        if spec is not None and spec.origin:
            with open(spec.origin, encoding="utf-8") as f:
                found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", f.read(), re.M)
            if found:
                return f"onnxruntime {found.group(1)}"
    except (OSError, ImportError, ValueError):
        pass
    from importlib.metadata import PackageNotFoundError, version
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            return f"onnxruntime {version(dist)}"
        except PackageNotFoundError:
            continue
    return "onnxruntime"
