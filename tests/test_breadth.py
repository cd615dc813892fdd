"""Breadth: every model of onnx's backend test sets plans and validates, or is refused
with a stated reason; none gives a traceback.

The sets ship inside the onnx package (``onnx/backend/test/data``): ``pytorch-converted``
(82 models), ``pytorch-operator`` (35) and ``simple`` (23). This onnx build has no
``node/`` folder; it is picked up when present.
"""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import graphmem
from graphmem.planning.context import align_up
from graphmem.errors import GraphmemError

from verify_hook import verify_or_skip

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
SETS = ("pytorch-converted", "pytorch-operator", "simple", "node")
MODELS = sorted(f"{s}/{d.name}" for s in SETS if (DATA / s).is_dir()
                for d in (DATA / s).iterdir() if (d / "model.onnx").is_file())

# Models graphmem refuses, and the words its one-line refusal must contain. The plan
# format places dense tensors of a fixed size only.
_SEQ = "is a sequence; graphmem plans only dense tensors"
_STR = "holds strings, which have no fixed size"
REFUSED = {
    **{f"simple/test_sequence_model{i}": _SEQ for i in range(1, 9)},
    **{f"simple/test_strnorm_model_{n}": _STR for n in (
        "monday_casesensintive_lower", "monday_casesensintive_nochangecase",
        "monday_casesensintive_upper", "monday_empty_output",
        "monday_insensintive_upper_twodim", "nostopwords_nochangecase")},
}
# Symbolic dimensions some models need bound.
DIMS = {"simple/test_sequence_model8": {"n": 2}}

# Models ONNX Runtime CPU cannot load (graphmem still plans them): they cannot be
# verified on it. Checked below, so the list cannot go stale silently.
_OPSET6 = "ONNX Runtime has no CPU kernel for this opset-6 {} (it supports opset 7 and up)"
ORT_CANNOT = {
    **{f"pytorch-converted/test_{n}": _OPSET6.format("AveragePool") for n in (
        "AvgPool1d", "AvgPool1d_stride", "AvgPool2d", "AvgPool2d_stride", "AvgPool3d",
        "AvgPool3d_stride", "AvgPool3d_stride1_pad0_gpu_input")},
    **{f"pytorch-converted/test_{n}": _OPSET6.format("BatchNormalization") for n in (
        "BatchNorm1d_3d_input_eval", "BatchNorm2d_eval", "BatchNorm2d_momentum_eval",
        "BatchNorm3d_eval", "BatchNorm3d_momentum_eval")},
    **{f"pytorch-converted/test_{n}": _OPSET6.format("PRelu") for n in (
        "PReLU_1d", "PReLU_1d_multiparam", "PReLU_2d", "PReLU_2d_multiparam", "PReLU_3d",
        "PReLU_3d_multiparam")},
    **{f"pytorch-converted/test_{n}": _OPSET6.format("Mul") for n in (
        "GLU", "GLU_dim", "PoissonNLLLLoss_no_reduce")},
    "pytorch-converted/test_Linear": _OPSET6.format("Gemm"),
    "pytorch-converted/test_Softsign": _OPSET6.format("Add"),
    **{f"pytorch-operator/test_operator_{n}": _OPSET6.format("Add") for n in (
        "add_broadcast", "add_size1_broadcast", "add_size1_right_broadcast",
        "add_size1_singleton_broadcast", "addconstant", "basic", "non_float_params",
        "params")},
    **{f"pytorch-operator/test_operator_{n}": _OPSET6.format("Gemm") for n in ("addmm", "mm")},
    "pytorch-operator/test_operator_pow": "ONNX Runtime has no CPU kernel for Pow opset 1",
    **{f"simple/test_gradient_of_{n}": "ai.onnx.preview.training Gradient is a training "
       "op ONNX Runtime does not register" for n in ("add", "add_and_mul")},
}


def path_of(name: str) -> Path:
    return DATA / name / "model.onnx"


def ort_load_error(path: Path) -> str | None:
    """None when ONNX Runtime CPU builds a session for the model, else its error."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises several exception types for a bad model
        return " ".join(str(exc).split())[:300]
    return None


@pytest.mark.parametrize("name", MODELS)
def test_plans_and_validates(name):
    path = path_of(name)
    if name in REFUSED:
        with pytest.raises(GraphmemError) as exc:
            graphmem.load(path, DIMS.get(name))
        assert REFUSED[name] in str(exc.value) and "\n" not in str(exc.value)
        return
    graph = graphmem.load(path, DIMS.get(name))
    result = graphmem.plan_graph(graph)
    graphmem.validate(result.plan, graph)
    naive_aligned = sum(align_up(t.bytes, 64) for t in result.plan.tensors.values())
    assert result.plan.stats["aliased_peak_bytes"] <= result.plan.arena_bytes <= naive_aligned


# graphmem refuses the REFUSED models (test_plans_and_validates checks that): nothing to
# verify, so they are not cases here
@pytest.mark.parametrize("name", [m for m in MODELS if m not in REFUSED])
def test_verifies_on_onnxruntime(name):
    path = path_of(name)
    error = ort_load_error(path)
    if name in ORT_CANNOT:
        assert error is not None, f"ONNX Runtime loads {name} now: remove it from ORT_CANNOT"
        pytest.skip(f"ONNX Runtime CPU cannot load it: {ORT_CANNOT[name]}")
    assert error is None, f"ONNX Runtime cannot load {name}: {error}"
    dims = DIMS.get(name, {})
    verify_or_skip(path, graphmem.plan_graph(graphmem.load(path, dims)))


def test_the_sets_are_there():
    counts = {s: sum(m.startswith(s + "/") for m in MODELS) for s in SETS}
    assert counts["pytorch-converted"] == 82 and counts["simple"] == 23
    assert set(REFUSED) | set(ORT_CANNOT) <= set(MODELS)
