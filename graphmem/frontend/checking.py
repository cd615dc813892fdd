"""onnx.checker on the model as the loader will use it: its large weights stripped, its
nodes in a topological order, initializers without data here as typed graph inputs
(ONNX Runtime runs graphs whose nodes are not sorted, and the checker would look for
the external files)."""
from __future__ import annotations

from graphmem import wire
from graphmem.core.memory import release_freed
from graphmem.errors import GraphmemError
from graphmem.frontend import onnx_c
from graphmem.frontend.protos import invalid_text, one_line, to_proto
from graphmem.frontend.protowire import message
from graphmem.frontend.splice import (INITIALIZER, INPUT, NODE, entry, entry_message, splice,
                                      tensor_value_info)
from graphmem.frontend.structure import EXTERNAL


# Ops ONNX Runtime registers in the ONNX domain itself, since version 1
# (onnxruntime/core/graph/contrib_ops/contrib_defs.cc, ``SetDomain(kOnnxDomain)``), which
# onnx's checker does not know there: its transformer optimizer writes RMSNorm as an
# ONNX-domain SimplifiedLayerNormalization, and LayerNormalization below opset 17 is
# ORT's. The checker sees such nodes in ORT's contrib domain, where it checks the node's
# structure but not its schema (graphmem's shape rules know them:
# frontend/contrib_rules.py).
ORT_ONNX_DOMAIN = frozenset(("LayerNormalization", "SimplifiedLayerNormalization"))
ORT_DOMAIN = "com.microsoft"


def ort_own_ops(nodes, opset: int) -> frozenset[str]:
    """The ops of :data:`ORT_ONNX_DOMAIN` that ``nodes`` (wire records) use in the ONNX
    domain at ``opset``, where ONNX itself defines none of that name."""
    used = {n.op_type for n in nodes
            if n.op_type in ORT_ONNX_DOMAIN and n.domain in ("", "ai.onnx")}
    if not used:
        return frozenset()
    defs = onnx_c.core().defs  # not onnx's Python package: asked on every such model
    return frozenset(op for op in used if not defs.has_schema(op, opset, ""))


def as_ort_contrib(data: bytes, parsed: wire.Model, own: frozenset[str]) -> bytes:
    """The model's ONNX-domain nodes of the ops ``own`` moved to ORT's contrib domain (a
    domain field written after a node's others replaces its domain: the last value of a
    field wins), and ORT's domain imported at version 1 where it is not."""
    g = parsed.graph
    changes = [(NODE, i, message(NODE, entry_message(data, g, NODE, i) +
                                 message(_NODE_DOMAIN, ORT_DOMAIN.encode())))
               for i, n in enumerate(g.nodes)
               if n.op_type in own and n.domain in ("", "ai.onnx")]
    data = splice(data, parsed, changes)
    if all(domain != ORT_DOMAIN for domain, _ in parsed.opsets):
        data += message(_MODEL_OPSET_IMPORT, message(1, ORT_DOMAIN.encode()) + b"\x10\x01")
    return data


_NODE_DOMAIN, _MODEL_OPSET_IMPORT = 7, 8  # NodeProto.domain, ModelProto.opset_import


def check(data: bytes, parsed: wire.Model, stripped, order: list[int]) -> None:
    """onnx.checker on the model with its ``stripped`` weights (splice changes) and its
    nodes in ``order``."""
    g = parsed.graph
    identity = order == list(range(len(g.nodes)))
    # Before IR version 4 an initializer had to be a graph input too; ONNX Runtime's
    # optimizer keeps an old model's IR version and adds initializers that are not
    # (folded and fused weights), and runs the file it saved: checked as inputs
    legacy = parsed.ir_version < 4
    own = ort_own_ops(g.nodes, max((v for d, v in parsed.opsets
                                        if d in ("", "ai.onnx")), default=1))
    if (not stripped and identity and not legacy and not own
            and all(t.data_location != EXTERNAL for t in g.initializers)):
        run_checker(data)
        return
    work = splice(data, parsed, stripped)
    parsed = wire.parse_model(work)
    g = parsed.graph
    if not identity:  # each node's entry written in the place of the k-th in order
        spans = g.spans[NODE]
        work = splice(work, parsed, [(NODE, k, work[off:off + size]) for k, (off, size)
                                     in enumerate(spans[i] for i in order)])
        parsed = wire.parse_model(work)
        g = parsed.graph
    if own:  # ORT's transformer optimizer's RMSNorm, LayerNormalization below opset 17
        work = as_ort_contrib(work, parsed, own)
        parsed = wire.parse_model(work)
        g = parsed.graph
    inputs = {vi.name for vi in g.inputs}
    changes = []
    for i, init in enumerate(g.initializers):
        if init.data_location == EXTERNAL:
            changes.append((INITIALIZER, i, None))
        if (init.data_location == EXTERNAL or legacy) and init.name not in inputs:
            changes.append((INPUT, -1, entry(INPUT, tensor_value_info(
                init.name, init.data_type, init.dims))))
    run_checker(splice(work, parsed, changes))


def run_checker(work: bytes) -> None:
    try:
        onnx_c.check_model(work)
        release_freed()  # the checker's copy of the model
    except onnx_c.core().checker.ValidationError as exc:
        raise GraphmemError(f"the model fails onnx.checker: {one_line(exc)}") from None
    except UnicodeDecodeError as exc:
        # the checker's own message quotes the corrupt text and cannot be decoded
        where = invalid_text(to_proto(work)) or one_line(exc)
        raise GraphmemError(f"the model is corrupt: {where} is not valid UTF-8 text") from None
    except ValueError as exc:  # protobuf's own parser refuses what ours let through
        raise GraphmemError(f"the model is corrupt: {one_line(exc)}") from None
