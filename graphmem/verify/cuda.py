"""Can ONNX Runtime run its CUDA provider on this machine? One answer, one line why not.

``onnxruntime-gpu`` lists ``CUDAExecutionProvider`` among its providers whether or not
the machine has the CUDA libraries and a GPU; a session asked for it then falls back to
the CPU after printing a coloured log. So "available" is not "usable": :func:`cuda_problem`
loads the provider's library itself (its error names the first missing library, e.g.
``libcublasLt.so.13``) and opens a one-node session, with ONNX Runtime's logging
silenced. Nothing is tried, and nothing printed, until a command asks for CUDA.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os


@functools.cache
def cuda_problem() -> str | None:
    """None when the CUDA provider runs here; else one line naming what is missing."""
    import onnxruntime as ort
    from graphmem.verify.node_sessions import quiet_runtime
    quiet_runtime()
    version = getattr(ort, "__version__", "?")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (f"--provider cuda needs onnxruntime-gpu, but this onnxruntime ({version}) "
                "has no CUDA provider (pip install onnxruntime-gpu, with a CUDA device)")
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:  # CUDA libraries from pip wheels (the [cuda] extra) or PyTorch
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                preload()
            except Exception:  # it reports what it cannot load; the checks below say more
                pass
    missing = _library_problem(ort)
    if missing:
        return (f"--provider cuda: onnxruntime-gpu {version} cannot load its CUDA provider "
                f"here: {missing} (install CUDA and cuDNN, or pip install "
                "'graphmem[cuda]' for NVIDIA's runtime wheels)")
    try:
        session = _tiny_session(ort)
    except Exception as exc:
        line = " ".join(str(exc).split())[:300]
        return f"--provider cuda: no CUDA session can be made here: {line}"
    if session.get_providers()[:1] != ["CUDAExecutionProvider"]:
        return ("--provider cuda: ONNX Runtime's CUDA provider loads but found no usable "
                "CUDA device (driver libcuda.so or a GPU missing)")
    return None


def _library_problem(ort) -> str | None:
    """The loader's error for the CUDA provider library, or None when it loads."""
    import ctypes
    capi = os.path.join(os.path.dirname(ort.__file__), "capi")
    shared = os.path.join(capi, "libonnxruntime_providers_shared.so")
    cuda = os.path.join(capi, "libonnxruntime_providers_cuda.so")
    if not os.path.exists(cuda):
        return None  # not Linux's layout: let the session say
    try:
        if os.path.exists(shared):
            ctypes.CDLL(shared, mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(cuda)
    except OSError as exc:
        return " ".join(str(exc).split())
    return None


def _tiny_session(ort):
    """A Relu on two floats on the CUDA provider (CPU as ORT's fallback, as it does)."""
    from onnx import helper
    x = helper.make_tensor_value_info("x", 1, [2])
    y = helper.make_tensor_value_info("y", 1, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "cuda_check", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


def cuda_usable() -> bool:
    """Does the CUDA provider run here (for tests and benchmarks to decide)?"""
    return cuda_problem() is None
