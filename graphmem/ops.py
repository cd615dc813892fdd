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

from .ir import Node

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
    "Gelu", "Mish", "Shrink",
]
_BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "And", "Or",
           "Xor", "BitShift", "Mod"]

OVERWRITE: dict[str, list[tuple[int, int]]] = {op: [(0, 0)] for op in _UNARY}
# Variadic and binary element-wise ops may overwrite any input of the output's size.
OVERWRITE.update({op: [(i, 0) for i in range(8)] for op in _BINARY})
# Inference BatchNormalization is y = x * scale' + bias' per element.
OVERWRITE["BatchNormalization"] = [(0, 0)]


def _std(node: Node) -> bool:
    return node.domain in ("", "ai.onnx")


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
