"""graphmem.frontend.working_model.WorkingModel: the model the shape strategies share,
each form made when asked and kept until a change makes it stale."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphmem import wire
from graphmem.frontend import inference
from graphmem.frontend.splice import (OUTPUT, VALUE_INFO, entry, splice, stripped_weights,
                                      tensor_value_info)
from graphmem.frontend.working_model import WorkingModel

F = TensorProto.FLOAT


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    shape = numpy_helper.from_array(np.array([8, 64], np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("Reshape", ["y", "shape"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [8, 64])],
                              [helper.make_tensor_value_info("z", F, None)], [w, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)


def _working(model: onnx.ModelProto) -> WorkingModel:
    data = model.SerializeToString()
    view = wire.parse_model(data)
    return WorkingModel(data, view, splice(data, view, stripped_weights(view.graph)), ".")


def test_each_form_is_made_once_and_a_change_makes_the_others_stale():
    m = _working(_model())
    work = m.bytes
    assert m.proto is m.proto and m.view is m.view  # made once, kept
    assert m.proto.SerializeToString() == work
    proto = onnx.ModelProto()
    proto.CopyFrom(m.proto)
    proto.graph.name = "changed"
    m.set_proto(proto)
    assert m.proto is proto and m.view.graph.name == "changed"
    assert onnx.ModelProto.FromString(m.bytes).graph.name == "changed"
    m.set_bytes(work)
    assert m.proto is not proto and m.proto.graph.name == "g" and m.view.graph.name == "g"


def test_a_splice_of_value_infos_reads_no_node():
    """add_types' change (a value info added, an output's type written over) is spliced
    by a wire view without the nodes: the one tensors() read, not a new parse."""
    m = _working(_model())
    assert "z" not in m.tensors()
    m.splice([(VALUE_INFO, -1, entry(VALUE_INFO, tensor_value_info("y", F, (8, 64)))),
              (OUTPUT, m.output_index()["z"],
               entry(OUTPUT, tensor_value_info("z", F, (8, 64))))])
    assert m._view is None  # no full parse was made for it
    tensors = m.tensors()
    assert tensors["y"].shape == (8, 64) and tensors["z"].shape == (8, 64)
    assert tensors == inference.tensors(m.bytes)
    assert [n.op_type for n in m.view.graph.nodes] == ["MatMul", "Reshape"]


def test_the_model_as_read_keeps_its_weights():
    """The working model carries the large weight without data; the model as read has
    it, its proto parsed once; a small weight's value comes from the bytes as read."""
    m = _working(_model())
    w = next(t for t in m.proto.graph.initializer if t.name == "w")
    assert w.data_location == TensorProto.EXTERNAL and not w.raw_data
    assert m.source_proto is m.source_proto
    read = next(t for t in m.source_proto.graph.initializer if t.name == "w")
    assert numpy_helper.to_array(read)[1, 2] == 66.0
    back = next(t for t in m.with_small_weights().graph.initializer if t.name == "w")
    assert numpy_helper.to_array(back)[1, 2] == 66.0
    assert m.proto.graph.initializer[0].data_location == TensorProto.EXTERNAL  # a copy
    assert m.stored_values(["w", "shape", "nothing"]).keys() == {"w"}
