"""What the bounds rules (issue 53: graphmem/frontend/data_bounds.py, value_sizes.py)
read of a node and of the loader's state: a symbol's name, a node's attributes (a
top-level wire node's or a body's NodeProto's), a tensor's element type and shape, the
values of the graph's small constants."""
from __future__ import annotations

from graphmem.core.dtypes import ENUM_BY_NAME
from graphmem.core.ir import standard_domain


def symbol_name(op: str, index: int) -> str:
    return f"{op}_{index}"


def attr_of(node, name: str, default=None):
    from graphmem.frontend import attributes
    if hasattr(node, "attribute"):  # a body's node (body_bounds.ProtoNode)
        from onnx import helper
        return next((helper.get_attribute_value(a) for a in node.attribute
                     if a.name == name), default)
    for a in node.attrs:
        if a.name == name:
            v = attributes.decode(a.type, a.raw)
            return default if v is attributes.NOT_DECODED else v
    return default


def elem_of(state, name: str) -> int:
    return ENUM_BY_NAME[state.tensors[name].dtype]


def shape_of(state, name: str):
    t = state.tensors.get(name) if name else None
    return None if t is None else tuple(t.shape)


def constant_int(state, name: str) -> int | None:
    """The one integer value of a constant input (an initializer or a Constant's
    output), or None where it is computed or absent."""
    values = graph_constants(state)
    v = values.get(name)
    if v is None:
        return None
    import numpy as np
    flat = np.asarray(v).reshape(-1)
    return int(flat[0]) if flat.size == 1 else None


def graph_constants(state) -> dict:
    found = getattr(state, "_data_bound_constants", None)
    if found is not None:
        return found
    from onnx import numpy_helper
    model = state.model.source_proto
    found = {}
    for t in model.graph.initializer:
        if t.data_location != 1 and len(t.raw_data) <= 64 and len(t.dims) <= 1:
            found[t.name] = numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and standard_domain(n.domain):
            for a in n.attribute:
                if a.name == "value" and a.HasField("t"):
                    found[n.output[0]] = numpy_helper.to_array(a.t)
                elif a.name in ("value_int", "value_ints"):
                    found[n.output[0]] = a.i if a.name == "value_int" else list(a.ints)
    state._data_bound_constants = found
    return found
