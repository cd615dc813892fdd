"""The names an If/Loop/Scan body reads from the scopes around it."""
from __future__ import annotations

import onnx


def outer_reads(body: onnx.GraphProto) -> set[str]:
    """Names a body reads from enclosing scopes (its nested bodies' included)."""
    defined = {vi.name for vi in body.input} | {i.name for i in body.initializer}
    outer: set[str] = set()
    for nd in body.node:
        reads = [t for t in nd.input if t]
        for a in nd.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                reads.extend(sorted(outer_reads(a.g)))
        outer.update(t for t in reads if t not in defined)
        defined.update(o for o in nd.output if o)
    outer.update(o.name for o in body.output if o.name not in defined)
    return outer
