"""onnx's Python package and sympy, imported on first use.

The common path of :func:`graphmem.frontend.reader.load` (a model whose every shape
onnx infers) needs none of it, only onnx's compiled core
(:mod:`graphmem.frontend.onnx_c`); the shape fallbacks and the proto-level helpers use
it through :data:`onnx` and :data:`helper`. sympy (a quarter of a second to import)
is needed only to solve a dim expression that is not linear in the name it determines
(:mod:`.dim_expressions`).
"""
from __future__ import annotations

import importlib


class Later:
    """A module imported on first use of one of its attributes."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        module = importlib.import_module(self._name)
        setattr(self, attr, getattr(module, attr))
        return getattr(module, attr)


onnx = Later("onnx")
helper = Later("onnx.helper")
sympy = Later("sympy")
