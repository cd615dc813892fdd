"""Training memory: build a forward+backward ONNX graph, plan it, recompute, offload.

All use of the third-party ``onnx_ad`` package lives in :mod:`.build` and
:mod:`.grouped_conv`, so a rule we fix (:mod:`.rewrites`) or add (the grouped Conv
weight gradient) lives in our code.
"""
from graphmem.training.build import TrainingGraph, build_training
from graphmem.training.prepare import prepare_inference

__all__ = ["TrainingGraph", "build_training", "prepare_inference"]
