"""Comparing the plan's run with the reference: bit for bit (or within the spread of a
provider that is not deterministic); the whole-model line at per-dtype tolerances."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from graphmem.core.ir import Graph
from graphmem.core.records import record

# (rtol, atol) per dtype for the whole-model line (one-node sessions against the whole
# model, whose kernels and fusions may differ). Integer and bool tensors match exactly.
# The plan's verdict uses none of these: see :func:`same`.
TOLERANCES = {"float16": (1e-2, 1e-3), "bfloat16": (1e-1, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12),
              "complex64": (1e-4, 1e-5), "complex128": (1e-9, 1e-12)}
# cuDNN may pick other algorithms for a lone node than inside the whole model.
CUDA_TOLERANCES = {"float16": (2e-2, 1e-2), "float32": (1e-3, 1e-4)}


# float dtypes from the most precise to the least
_PRECISION = {"float64": 0, "complex128": 0, "float32": 1, "complex64": 1, "float16": 2,
              "bfloat16": 3}


def tolerance_dtypes(graph: Graph) -> dict[str, str]:
    """Per float tensor computed by a node: the dtype whose tolerance its comparison
    uses, the least precise float type among its own and those of every tensor it is
    computed from. The whole-model reference may skip a rounding the one-node run
    makes: ONNX Runtime runs a float16 Add or Sigmoid in float32 between inserted
    Casts, and removes the Cast pair before a following Cast to float32, so a float32
    tensor downstream differs from the node-by-node value by a float16 rounding.
    Integer and bool tensors still compare exactly. ``graph.nodes`` is in a
    topological order, so every input is settled before its readers.
    """
    tensors = graph.tensors
    out: dict[str, str] = {}
    for node in graph.nodes:
        worst = max((out.get(t, tensors[t].dtype) for t in node.reads if t in tensors),
                    key=lambda d: _PRECISION.get(d, -1), default=None)
        for o in node.outputs:
            own = tensors[o].dtype if o in tensors else None
            if own in _PRECISION and worst in _PRECISION and _PRECISION[worst] > _PRECISION[own]:
                out[o] = worst
    return out


@record
class OutputCheck:
    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs_diff: float
    ok: bool


@np.errstate(invalid="ignore", over="ignore")  # NaN and inf are handled below, not warned
def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b|; NaN where exactly one side is NaN, 0 where both are."""
    if a.size == 0:
        return 0.0
    if _floaty(a.dtype):
        a64, b64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), \
            b.astype(np.complex128 if b.dtype.kind == "c" else np.float64)
        both = np.isnan(a64) & np.isnan(b64)
        one = np.isnan(a64) ^ np.isnan(b64)
        if one.any():
            return float("nan")
        d = np.abs(np.where(both, 0, a64 - b64))
        d = np.where(np.isinf(a64) & np.isinf(b64) & (a64 == b64), 0, d)
        return float(np.nanmax(d))
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _floaty(dtype: np.dtype) -> bool:
    """Floating or complex, ml_dtypes' bfloat16 and 8-bit floats included."""
    return dtype.kind in "fc" or dtype.name == "bfloat16" or dtype.name.startswith("float8")


def identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit the same values (NaN equal to NaN)."""
    return bool(np.array_equal(a, b, equal_nan=np.asarray(a).dtype.kind in "fc"))


def same(got: np.ndarray, want: np.ndarray, spread: float = 0.0,
         values: tuple[np.ndarray, np.ndarray] | None = None) -> bool:
    """The plan's verdict on one tensor: ``got`` and ``want`` (raw bytes) equal bit for
    bit; where the reference showed a ``spread`` between two runs, the values
    (``values``: both as numbers) within twice that, NaN where NaN."""
    if got.shape == want.shape and np.array_equal(got, want):
        return True
    if not spread or values is None:
        return False
    a, b = values
    if np.isnan(spread):
        return False
    d = max_abs_diff(a, b)
    return bool(d <= 2 * spread)


@np.errstate(invalid="ignore", over="ignore")
def close(a: np.ndarray, b: np.ndarray, dtype: str, provider: str = "cpu") -> bool:
    """Equal within the tolerance of ``dtype`` on ``provider``; integers exactly."""
    if a.shape != b.shape:
        return False
    if not _floaty(a.dtype):
        return bool(np.array_equal(a, b))
    if a.dtype.kind not in "fc":  # bfloat16, float8 (ml_dtypes): compared as float64
        a, b = a.astype(np.float64), b.astype(np.float64)
    table = CUDA_TOLERANCES if provider == "cuda" else {}
    rtol, atol = table.get(dtype, TOLERANCES.get(dtype, (1e-4, 1e-5)))
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def compare_outputs(graph: Graph, got: Mapping[str, np.ndarray],
                    reference: Mapping[str, np.ndarray], provider: str = "cpu",
                    tolerance: Mapping[str, str] | None = None) -> list[OutputCheck]:
    """One OutputCheck per graph output, in the graph's order. ``tolerance``:
    :func:`tolerance_dtypes` of the graph (computed if not given)."""
    if tolerance is None:
        tolerance = tolerance_dtypes(graph)
    out = []
    for name in graph.outputs:
        t = graph.tensors[name]
        a, b = got[name], np.asarray(reference[name])
        ok = close(a, b, tolerance.get(name, t.dtype), provider)
        diff = max_abs_diff(a, b) if a.shape == b.shape else float("inf")
        out.append(OutputCheck(name, t.dtype, t.shape, diff, ok))
    return out
