"""The precision a training step runs at, as the planner sees it: the element size of
every floating tensor, and what the optimizer keeps beside the step.

- ``fp32``: every floating tensor 4 bytes, as the model is written.
- ``fp16`` / ``bf16``: every floating tensor of the step (weights, activations,
  gradients) 2 bytes, and the optimizer state in the same type.
- ``mixed``: the step runs in float16 (activations, gradients and the weight copy it
  reads, 2 bytes), while the optimizer updates float32 master weights and keeps float32
  state (Micikevicius et al. 2018; with Adam, 2 + 2 + 4 + 8 = 16 bytes per parameter,
  as ZeRO counts it). The float16 weight copy and the float16 gradients are what the
  step reads and writes; the master weights and the state sit beside it.

The graph is retyped in the IR before planning (as ``report --dtype`` does), so the
arena is planned at the real sizes and alignment; the ops that a framework keeps in
float32 under autocast (losses, softmax, normalisation statistics) are planned in half
here too, a few small tensors against the convolution and matrix outputs.
"""
from __future__ import annotations

from dataclasses import replace

from graphmem.core.dtypes import BITS_BY_NAME
from graphmem.core.ir import Graph, Tensor

PRECISIONS = ("fp32", "fp16", "bf16", "mixed")
# The element type of the step's floating tensors under each precision
STEP_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "mixed": "float16"}
FLOATING = frozenset({"float32", "float64", "float16", "bfloat16"})


def retype(graph: Graph, precision: str) -> Graph:
    """``graph`` with every floating tensor in the step's type under ``precision``
    (the graph itself for ``fp32``)."""
    dtype = STEP_DTYPE[precision]
    if dtype == "float32":
        return graph
    bits = BITS_BY_NAME[dtype]
    tensors = {name: (Tensor(t.name, dtype, t.shape, bits) if t.dtype in FLOATING else t)
               for name, t in graph.tensors.items()}
    return replace(graph, tensors=tensors)


def master_bytes(precision: str, numel: int) -> int:
    """Bytes of the float32 master weights kept beside the step (``mixed`` only)."""
    return 4 * numel if precision == "mixed" else 0


def state_element_bytes(precision: str) -> int:
    """Bytes of one element of optimizer state: float32 for fp32 and mixed, else half."""
    return 4 if precision in ("fp32", "mixed") else 2
