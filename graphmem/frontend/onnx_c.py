"""onnx's compiled core (checker, shape inference), loaded without onnx's Python package.

``import onnx`` takes about 60 ms (protobuf's Python runtime, its generated classes,
numpy helpers), a third of a whole ``graphmem plan`` on a small model, while the loader
needs only two functions of the extension module under it, ``onnx.onnx_cpp2py_export``,
which loads in about 4 ms. :func:`core` loads that module by its file under its own
name and registers it in ``sys.modules``, so that a later ``import onnx`` (by graphmem's
fallbacks, by ONNX Runtime, by the user's code) finds it there and uses the same module
instead of loading the extension a second time (which nanobind refuses). When onnx is
already imported, or the file is not where onnx keeps it, it is a plain import. Either
way a Ctrl-C during the load waits until it is done (:mod:`graphmem.interrupts`): one
that landed inside it crashed the process.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

from graphmem.interrupts import deferred

NAME = "onnx.onnx_cpp2py_export"
MAXIMUM_PROTOBUF = 2**31  # onnx.checker's own limit for a model given as bytes


def core() -> ModuleType:
    """The module ``onnx.onnx_cpp2py_export`` (``.checker``, ``.shape_inference``)."""
    module = sys.modules.get(NAME)
    if module is not None:
        return module
    with deferred():
        if "onnx" not in sys.modules:
            module = _load_alone()
            if module is not None:
                return module
        import onnx.onnx_cpp2py_export as module
        return module


def _load_alone() -> ModuleType | None:
    try:
        spec = importlib.util.find_spec("onnx")
        folders = list(spec.submodule_search_locations or ()) if spec else []
        for folder in folders:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, "onnx_cpp2py_export" + suffix)
                if os.path.isfile(path):
                    ext = importlib.util.spec_from_file_location(NAME, path)
                    module = importlib.util.module_from_spec(ext)
                    sys.modules[NAME] = module
                    try:
                        ext.loader.exec_module(module)
                    except BaseException:
                        del sys.modules[NAME]
                        raise
                    return module
    except ImportError:
        return None
    return None


def check_model(data: bytes) -> None:
    """``onnx.checker.check_model`` on serialized bytes (same defaults, same errors:
    ``ValidationError`` is ``core().checker.ValidationError``)."""
    if len(data) > MAXIMUM_PROTOBUF:
        raise ValueError("This protobuf of onnx model is too large (>2GiB). "
                         "Call check_model with model path instead.")
    core().checker.check_model(bytes(data), False, False, False)


def infer_shapes(data: bytes, data_prop: bool = True) -> bytes:
    """onnx's shape inference on serialized bytes, without type checks or strict mode."""
    return core().shape_inference.infer_shapes(bytes(data), False, False, data_prop)
