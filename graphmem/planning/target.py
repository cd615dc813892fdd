"""What a plan is made for: the ONNX Runtime execution provider, the in-place table it
trusts, and the runtime's version (the plan's ``target``, docs/plan-format.md)."""
from __future__ import annotations

import functools

from graphmem.core.ops import provider_of, table_id, table_key
from graphmem.core.records import record
from graphmem.errors import GraphmemError

# The ONNX Runtime execution provider of each in-place table
PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


@record
class InplaceTable:
    """Which in-place table a plan trusts: the ONNX Runtime execution ``provider`` whose
    kernels it is about ("cpu" or "cuda") and ``which`` of its tables ("default": only
    the entries the runtime's kernels declare or their source backs; "probed": every
    element-wise candidate, checked by ``graphmem probe``: :mod:`graphmem.core.ops`).
    The planner, the commands and the what-ifs pass this record, under the one name
    ``table``; :attr:`key` is its :data:`~graphmem.core.ops.INPLACE_TABLES` key."""
    provider: str = "cpu"
    which: str = "default"

    def __post_init__(self) -> None:
        if self.provider not in PROVIDER_NAMES:
            raise GraphmemError(f"no execution provider {self.provider!r}; choose "
                                f"{', '.join(PROVIDER_NAMES)}")
        try:
            table_key(self.provider, self.which)
        except ValueError as exc:
            raise GraphmemError(str(exc)) from None

    @property
    def key(self) -> str:
        """The table's :data:`~graphmem.core.ops.INPLACE_TABLES` key ("cpu", "cpu-probed",
        ...)."""
        return table_key(self.provider, self.which)


DEFAULT_INPLACE = InplaceTable()


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
