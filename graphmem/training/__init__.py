"""Training memory: build a forward+backward ONNX graph, plan it, recompute, offload.

- ``build``: the training step from an inference model (``build_training``), with
  ``prepare`` (inference model cleaned for differentiation), ``rules`` (our reverse
  rules, patched into onnx-ad while it runs: Conv weight gradients without overhang,
  ConvTranspose's weight, AveragePool with ``ceil_mode``, training-mode
  BatchNormalization), ``grouped_conv`` (the grouped Conv weight gradient) and
  ``rewrites`` (graph rewrites after reversal);
- ``report``: plan the step and account weights, gradients, optimizer state, saved
  activations; ``schedule``: orders that keep helper nodes out of the long lives;
- ``recompute`` (Chen et al. 2016) and ``offload`` (vDNN). MACs per phase are counted
  by :mod:`graphmem.analysis.macs`, as for inference graphs.

All use of the third-party ``onnx_ad`` package lives in :mod:`.build`, :mod:`.rules`
and :mod:`.grouped_conv`, so a rule we fix or add (:mod:`.rules`, :mod:`.rewrites`)
lives in our code. May import everything but the CLI.
"""
