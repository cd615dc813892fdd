"""Per-op tables: which ops are views, which may overwrite an input.

The passes contain no op names; they ask these tables. Deny by default: an op not
listed here never shares storage with its inputs.

- ``VIEW``: output ``out`` is the data of input ``in`` unchanged (same bytes, same
  layout). It may share storage even when the input has other readers later.
- ``OVERWRITE``: the kernel may write output ``out`` over input ``in`` element by
  element. Allowed only when this op is the last reader of that storage, the sizes
  match in bytes and the dtypes match. Every entry here is exercised on ONNX Runtime
  by the verifier (tests/test_verify*.py), since the claim is about the kernel.
"""
from __future__ import annotations

from functools import lru_cache
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from graphmem.core.ir import Graph, Node
from graphmem.core.index import topology

_STD_DOMAINS = frozenset(("", "ai.onnx"))

# op_type -> list of (input index, output index); standard ONNX domain only.
VIEW: dict[str, list[tuple[int, int]]] = {
    "Reshape": [(0, 0)],
    "Flatten": [(0, 0)],
    "Squeeze": [(0, 0)],
    "Unsqueeze": [(0, 0)],
    "Identity": [(0, 0)],
    "Dropout": [(0, 0)],  # inference: the output is the input; the mask is separate
}

_UNARY = [
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "Sigmoid",
    "HardSigmoid", "HardSwish", "Tanh", "Softplus", "Softsign", "Exp", "Log", "Abs", "Neg",
    "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Erf", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Clip", "Not",
    "Mish", "Shrink",
]
# Not Gelu: ONNX Runtime's CPU kernel (onnxruntime/core/providers/cpu/tensor/gelu.cc)
# declares no MayInplace, and it writes its output before it has read all of its input:
# run in place it gives wrong results on AMD x86-64 CPUs (max abs diff 0.26, issue 20).
_BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "And", "Or",
           "Xor", "BitShift", "Mod"]

OVERWRITE: dict[str, list[tuple[int, int]]] = {op: [(0, 0)] for op in _UNARY}
# Variadic and binary element-wise ops may overwrite any input of the output's size.
OVERWRITE.update({op: [(i, 0) for i in range(8)] for op in _BINARY})
# Inference BatchNormalization is y = x * scale' + bias' per element.
OVERWRITE["BatchNormalization"] = [(0, 0)]


def _std(node: Node) -> bool:
    return node.domain in _STD_DOMAINS


def view_pairs(node: Node) -> list[tuple[int, int]]:
    """(input, output) index pairs where the output is a view of the input."""
    if not _std(node):
        return []
    if node.op_type == "Dropout" and _training_dropout(node):
        return []
    return list(_pairs(False, node.op_type, len(node.inputs), len(node.outputs)))


def overwrite_pairs(node: Node) -> list[tuple[int, int]]:
    """(input, output) index pairs where the kernel may write the output over the input."""
    if not _std(node):
        return []
    if node.op_type == "BatchNormalization" and len([o for o in node.outputs if o]) > 1:
        return []  # training mode: also writes running statistics
    return list(_pairs(True, node.op_type, len(node.inputs), len(node.outputs)))


@lru_cache(maxsize=4096)
def _pairs(overwrite: bool, op_type: str, n_in: int, n_out: int) -> tuple[tuple[int, int], ...]:
    """The table's pairs that exist for a node of this op with so many inputs and
    outputs (cached: a large graph asks for the same few combinations each node)."""
    table = OVERWRITE if overwrite else VIEW
    return tuple((i, o) for i, o in table.get(op_type, []) if i < n_in and o < n_out)


def _training_dropout(node: Node) -> bool:
    # Opset 12+: a third input training_mode; anything but a missing input is treated
    # as possibly training, where the output differs from the input.
    return len(node.inputs) > 2 and bool(node.inputs[2])


class AliasEdges(NamedTuple):
    """The pairs :func:`view_pairs` and :func:`overwrite_pairs` give for every node of
    an order, as topology ids, sorted by position, then views before overwrites, then
    each node's pairs in the order those functions list them."""

    pos: np.ndarray  # the node's position in the order
    overwrite: np.ndarray  # bool: an overwrite pair (else a view pair)
    src: np.ndarray  # the input's topology id (-1: a name the topology lacks, a weight)
    out: np.ndarray  # the output's topology id


def alias_edges(graph: Graph, order) -> AliasEdges:
    """:class:`AliasEdges` of ``order`` (node indices) in one numpy pass per table entry.

    A node whose pairs are the table's alone (standard domain, no blank input or output,
    not Dropout or BatchNormalization, whose pairs depend on the node's mode) is read
    from the topology's arrays; the few others ask ``view_pairs`` / ``overwrite_pairs``.
    The edges of the last order asked for are kept on the graph (the in-place pass and
    the plan's validation ask for the same).
    """
    order = tuple(order)
    kept = graph.__dict__.get("_alias_edges")
    if kept is not None and kept[0] == order:
        return kept[1]
    edges = _alias_edges(graph, order)
    graph.__dict__["_alias_edges"] = (order, edges)  # Graph is frozen: not a field
    return edges


def _alias_edges(graph: Graph, order: tuple[int, ...]) -> AliasEdges:
    topo = topology(graph)
    nodes = graph.nodes
    rows = topo.rows(order)
    op_types = list(map(_OP_TYPE, nodes))
    codes = {op: k for k, op in enumerate(dict.fromkeys(op_types))}
    code = np.fromiter(map(codes.__getitem__, op_types), np.int64, len(nodes))[rows]
    n_in = np.fromiter(map(len, map(_INPUTS, nodes)), np.int64, len(nodes))[rows]
    n_out = np.fromiter(map(len, map(_OUTPUTS, nodes)), np.int64, len(nodes))[rows]
    read_start, write_start = topo.read_start[rows], topo.write_start[rows]
    regular = ((topo.read_start[rows + 1] - read_start == n_in)
               & (topo.write_start[rows + 1] - write_start == n_out))
    domains = list(map(_DOMAIN, nodes))
    if any(d not in _STD_DOMAINS for d in dict.fromkeys(domains)):
        regular &= np.fromiter(map(_STD_DOMAINS.__contains__, domains), bool, len(nodes))[rows]
    for op in _MODAL:
        if op in codes:
            regular &= code != codes[op]
    parts = []  # (pos, overwrite, rank, src, out) arrays
    for overwrite, table in ((False, VIEW), (True, OVERWRITE)):
        for op, pairs in table.items():
            if op not in codes:
                continue
            of_op = regular & (code == codes[op])
            for rank, (i, o) in enumerate(pairs):
                pos = np.flatnonzero(of_op & (n_in > i) & (n_out > o))
                parts.append((pos, np.full(len(pos), overwrite), np.full(len(pos), rank),
                              topo.reads[read_start[pos] + i], topo.writes[write_start[pos] + o]))
    # the nodes of a table's op that are not regular: their pairs one node at a time
    odd = np.flatnonzero(~regular & np.isin(code, [codes[op] for op in _TABLE_OPS
                                                   if op in codes]))
    get = topo.ids.get
    extra = []
    for pos, row in zip(odd.tolist(), rows[odd].tolist()):
        node = nodes[row]
        for overwrite, pairs in ((False, view_pairs(node)), (True, overwrite_pairs(node))):
            extra += [(pos, overwrite, rank, get(node.inputs[i], -1), get(node.outputs[o], -1))
                      for rank, (i, o) in enumerate(pairs)]
    if extra:
        parts.append(tuple(np.array(c, dtype=d) for c, d in zip(
            zip(*extra), (np.int64, bool, np.int64, np.int64, np.int64))))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return AliasEdges(empty, empty.astype(bool), empty, empty)
    pos, overwrite, rank, src, out = (np.concatenate(c) for c in zip(*parts))
    by = np.lexsort((rank, overwrite, pos))
    return AliasEdges(pos[by], overwrite[by], src[by], out[by])


_OP_TYPE, _DOMAIN = attrgetter("op_type"), attrgetter("domain")
_INPUTS, _OUTPUTS = attrgetter("inputs"), attrgetter("outputs")
_MODAL = ("Dropout", "BatchNormalization")  # pairs that depend on the node, not the op
_TABLE_OPS = tuple(dict.fromkeys([*VIEW, *OVERWRITE]))
