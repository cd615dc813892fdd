"""ONNX in: read a model file, bind symbolic dims, infer shapes, fold constants, and make
the IR (:mod:`graphmem.core.ir`); the Model Zoo graphs that ship with onnx, by name.

May import: onnx, onnxruntime (its symbolic shape inference), numpy, :mod:`graphmem.core`,
:mod:`graphmem.errors`.
"""
