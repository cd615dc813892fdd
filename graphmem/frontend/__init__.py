"""ONNX in: read a model file, bind symbolic dims, infer shapes, fold constants, and make
the IR (:mod:`graphmem.core.ir`); the Model Zoo graphs that ship with onnx, by name.

What this may import is the table of docs/architecture.md, which
tests/test_architecture_contracts.py enforces.

The loader's modules: ``reader`` (the public surface and the stages in order),
``structure``, ``binding``, ``splice``, ``checking``, ``inference``,
``shape_strategies``, ``constant_nodes``, ``building``, ``protos``, ``lazy``;
``control_flow``, ``folding``, ``attributes``, ``onnx_c``, ``zoo``.
"""
