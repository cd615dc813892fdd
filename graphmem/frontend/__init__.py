"""ONNX in: read a model file, bind symbolic dims, infer shapes, fold constants, and make
the IR (:mod:`graphmem.core.ir`); the Model Zoo graphs that ship with onnx, by name.

May import: onnx, onnxruntime (its symbolic shape inference), numpy, :mod:`graphmem.core`,
:mod:`graphmem.errors`, :mod:`graphmem.notes` (what the loader caught and went on past).

The loader's modules: ``reader`` (the public surface and the stages in order),
``structure``, ``binding``, ``splice``, ``checking``, ``inference``,
``shape_strategies``, ``constant_nodes``, ``building``, ``protos``, ``lazy``;
``control_flow``, ``folding``, ``attributes``, ``onnx_c``, ``zoo``.
"""
