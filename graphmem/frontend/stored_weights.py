"""Weights as the file stores them: the tensors a folded dequantization is made from.

Folding a weight's ``DequantizeLinear`` gives the planner a float constant (no arena
tensor, as ONNX Runtime's CPU provider runs a QDQ Conv: QLinearConv on the int8 weight),
but the model holds the int8 (or int4, ...) tensor, its scale and zero point, not the
float one. :func:`dequantized_sources` maps each constant that folding computes through
a dequantization to the stored tensors it is computed from, so that the weights are
counted at their stored size and the dequantized float bytes apart
(:mod:`graphmem.analysis.breakdown`).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from graphmem.core.ir import standard_domain

# ops that make a float tensor out of a quantized one (in the standard domain or ORT's)
DEQUANTIZE_OPS = frozenset(("DequantizeLinear",))
MS = "com.microsoft"


def dequantized_sources(folded: Iterable[tuple[str, str, Sequence[str], Sequence[str]]]
                        ) -> dict[str, tuple[str, ...]]:
    """``{constant: stored tensors}`` for the outputs of folded nodes, given in a
    topological order as ``(op_type, domain, inputs, outputs)``, that a dequantization
    computes (a DequantizeLinear, or a folded node reading its result: a Transpose or
    Reshape of a dequantized weight). The stored tensors are the inputs not themselves
    computed by a dequantization (initializers, Constant outputs), each once."""
    sources: dict[str, tuple[str, ...]] = {}
    for op, domain, inputs, outputs in folded:
        reads = [i for i in inputs if i]
        if not (op in DEQUANTIZE_OPS and (standard_domain(domain) or domain == MS)) and not any(
                i in sources for i in reads):
            continue
        stored: list[str] = []
        for i in reads:
            stored.extend(sources.get(i, (i,)))
        made = tuple(dict.fromkeys(stored))
        for o in outputs:
            if o:
                sources[o] = made
    return sources
