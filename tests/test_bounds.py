"""graphmem/frontend/bounds.py: the sizes a model's values give the outputs of Reshape,
Expand, ConstantOfShape, Tile, Range, OneHot, Pad and Resize, checked before anything
is allocated from them (issue 38)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from graphmem.errors import GraphmemError
from graphmem.frontend import bounds
from graphmem.planning.context import MAX_PLAN_BYTES


def test_the_bound_is_the_planners():
    assert bounds.MAX_TENSOR_BYTES == MAX_PLAN_BYTES


V = {"t": np.array([2, -1, 0, 3]), "big": np.array([1 << 40, 1 << 30]), "r": np.array([3, 2]),
     "s": np.array(1), "l": np.array(11), "d": np.array(2), "zero": np.array(0),
     "depth": np.array([5]), "pads": np.array([1, 0, 1, 2]), "sizes": np.array([1, 3, 8, 8])}
SHAPES = {"x": (4, 1), "idx": (2, 3)}


@pytest.mark.parametrize("op, inputs, want", [
    ("Reshape", ("x", "t"), 6),  # 0 and -1 left out
    ("Expand", ("x", "r"), 4 * 2),  # broadcast with the input's (4, 1)
    ("Expand", ("y", "r"), 6),  # the input's shape unknown
    ("ConstantOfShape", ("big",), 1 << 70),
    ("Tile", ("x", "r"), 4 * 6),
    ("Range", ("s", "l", "d"), 5),
    ("Range", ("s", "l", "zero"), None),  # no count: onnx refuses it
    ("OneHot", ("idx", "depth"), 30),
    ("Pad", ("x", "pads"), 6 * 3),
    ("Resize", ("x", "", "", "sizes"), 3 * 64),
    ("Resize", ("x", "", "r"), None),  # scales: left to inference
    ("Reshape", ("x", "unknown"), None),
    ("Relu", ("x",), None),
])
def test_output_elements(op, inputs, want):
    assert bounds.output_elements(op, inputs, V, SHAPES.get) == want


def test_check_names_the_node_and_the_size():
    node = SimpleNamespace(op_type="ConstantOfShape", inputs=("big",), name="c", attrs=())
    with pytest.raises(GraphmemError, match=r"^node 7 \(ConstantOfShape\): its output would "
                       r"hold 1180591620717411303424 elements of 4 bytes \(from 'big' = "
                       r"\[1099511627776, 1073741824\]\), past the 2\*\*62 bytes"):
        bounds.check([(7, node)], V)
    small = SimpleNamespace(op_type="Reshape", inputs=("x", "t"), name="r", attrs=())
    bounds.check([(1, small)], V)  # within bounds: nothing raised
