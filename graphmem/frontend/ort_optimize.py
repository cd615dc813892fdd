"""The graph ONNX Runtime runs: the model optimized offline by ORT, for one provider.

``--ort-optimize LEVEL`` has ONNX Runtime build a session for the model with graph
optimizations at LEVEL and save the graph it would run
(``SessionOptions.optimized_model_filepath``) into a temporary folder; graphmem plans
that file and removes the folder when the command ends (:func:`cleanup`, called by the
CLI on every way out). What each level fuses is in docs/ort-graphs.md.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from graphmem.core.records import record
from graphmem.errors import GraphmemError

LEVELS = ("basic", "extended", "all")
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}

# ORT writes the optimized model's weights of at least this many bytes into a file
# beside it in the temporary folder. Inline, a model over protobuf's 2 GiB could not be
# saved; and left to itself, ORT saves a source's external weights that it does not
# change as references to the source's files by their relative names, which the
# temporary folder does not hold. graphmem plans without reading the weights; verify
# reads them from there, and `export --annotated` writes them inside the annotated model.
EXTERNAL_MIN_BYTES = 1024

_FOLDERS: list[str] = []


@record
class Optimized:
    """An optimized model: where it lies, what made it, and what it cost to make."""
    path: Path
    source: Path
    level: str
    provider: str
    seconds: float  # ORT's session build, optimization and save


def ort_level(level: str):
    """ONNX Runtime's GraphOptimizationLevel for ``level`` ("off" or one of LEVELS)."""
    import onnxruntime as ort
    return {"off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]


def optimize(source: str | os.PathLike, level: str, provider: str = "cpu") -> Optimized:
    """``source`` optimized by ONNX Runtime at ``level`` for ``provider``, saved into a
    temporary folder that :func:`cleanup` removes."""
    if level not in LEVELS:
        raise GraphmemError(f"--ort-optimize {level!r}: choose one of {', '.join(LEVELS)}")
    src = Path(source)
    import onnxruntime as ort
    ep = PROVIDERS.get(provider)
    if ep is None:
        raise GraphmemError(f"--ort-optimize: no ONNX Runtime provider for {provider!r}")
    if ep not in ort.get_available_providers():
        raise GraphmemError(f"--ort-optimize for --provider {provider} needs ONNX Runtime's "
                            f"{ep}, which this installation lacks (it has "
                            f"{', '.join(ort.get_available_providers())})")
    out = Path(temporary_folder()) / f"{_stem(src)}.{level}.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort_level(level)
    so.optimized_model_filepath = str(out)
    # its warnings (unused initializers removed) and errors (a provider library that
    # does not load) are not the user's: graphmem says in one line what failed
    so.log_severity_level = 4
    ort.set_default_logger_severity(4)
    weights_beside(so, out)
    t0 = time.perf_counter()
    try:
        session = ort.InferenceSession(str(src), so, providers=[ep])
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise GraphmemError(f"{src}: ONNX Runtime cannot optimize it at level {level} for "
                            f"{provider} ({text[:300]})") from None
    seconds = time.perf_counter() - t0
    if ep not in session.get_providers():  # ORT falls back to the CPU when CUDA fails
        raise GraphmemError(f"--ort-optimize for --provider {provider}: ONNX Runtime could "
                            f"not start its {ep} here (no GPU, or its CUDA libraries are "
                            f"missing) and would have optimized for the CPU instead")
    if not out.is_file():
        raise GraphmemError(f"{src}: ONNX Runtime saved no optimized model at level {level}")
    return Optimized(path=out, source=src, level=level, provider=provider, seconds=seconds)


def weights_beside(so, out: Path) -> None:
    """Have the session of ``so`` save the optimized model ``out`` with its weights of
    EXTERNAL_MIN_BYTES or more in ``out.stem + ".weights"`` beside it."""
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", out.stem + ".weights")
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes",
        str(EXTERNAL_MIN_BYTES))


def temporary_folder() -> str:
    """A new temporary folder, removed by :func:`cleanup`."""
    folder = tempfile.mkdtemp(prefix="graphmem-ort-")
    _FOLDERS.append(folder)
    return folder


def cleanup() -> None:
    """Remove every folder :func:`optimize` made in this process."""
    while _FOLDERS:
        shutil.rmtree(_FOLDERS.pop(), ignore_errors=True)


def _stem(path: Path) -> str:
    name = path.name
    return name[:-5] if name.endswith(".onnx") else name
