"""graphmem.frontend.protowire reads and writes what onnx's Python package does: a
TensorProto's value (raw_data or the typed fields, packed or not), an array as a
TensorProto, a tensor's TypeProto."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, TypeProto, helper, numpy_helper

from graphmem.frontend import protowire
from graphmem.frontend.protowire import NUMPY_TYPES, NotDecoded

ELEMS = sorted(NUMPY_TYPES)


def _values(elem: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(NUMPY_TYPES[elem])
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    if dtype.kind == "f":
        return (rng.standard_normal(n) * 1e3).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def _typed(array: np.ndarray, elem: int) -> TensorProto:
    """``array`` in its element type's typed field (as helper.make_tensor writes it)."""
    return helper.make_tensor("t", elem, array.shape, array.reshape(-1).tolist()
                              if array.dtype != np.float16 else array.reshape(-1))


@settings(max_examples=60, deadline=None)
@given(elem=st.sampled_from(ELEMS), shape=st.lists(st.integers(0, 4), max_size=3),
       seed=st.integers(0, 2**16), raw=st.booleans())
def test_a_tensors_value_is_numpy_helpers(elem, shape, seed, raw):
    array = _values(elem, int(np.prod(shape)), seed).reshape(shape)
    t = numpy_helper.from_array(array, "t") if raw else _typed(array, elem)
    want = numpy_helper.to_array(t)
    got = protowire.tensor_array(t.SerializeToString())
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@settings(max_examples=60, deadline=None)
@given(elem=st.sampled_from(ELEMS), shape=st.lists(st.integers(0, 4), max_size=3),
       seed=st.integers(0, 2**16), name=st.sampled_from(["", "x", "a/b:0"]))
def test_an_array_as_a_tensor_is_from_arrays_bytes(elem, shape, seed, name):
    array = _values(elem, int(np.prod(shape)), seed).reshape(shape)
    want = numpy_helper.from_array(array, name).SerializeToString()
    assert protowire.tensor_bytes(array, name) == want
    flipped = array.T  # not contiguous: written in C order all the same
    assert protowire.tensor_bytes(flipped, name) == \
        numpy_helper.from_array(flipped, name).SerializeToString()


def test_unpacked_repeated_fields_and_negative_int32s():
    """protobuf accepts a repeated number field packed or not, and writes an int32 as a
    ten-byte varint when negative."""
    for elem, values in ((TensorProto.INT32, [-1, 2**31 - 1, -2**31]),
                         (TensorProto.INT8, [-128, 127, -1]),
                         (TensorProto.INT64, [-2**63, 2**63 - 1, 0]),
                         (TensorProto.UINT64, [2**64 - 1, 0, 5]),
                         (TensorProto.FLOAT, [1.5, -0.0, 3e38])):
        t = helper.make_tensor("t", elem, [3], values)
        data = t.SerializeToString()
        assert protowire.tensor_array(data).tolist() == numpy_helper.to_array(t).tolist()
    # dims and int64_data one varint at a time (field 1 and 7, wire type 0)
    data = b"\x08\x02\x10\x07\x38\x05\x38" + protowire.varint((1 << 64) - 3)
    assert protowire.tensor_array(data).tolist() == [5, -3]
    assert numpy_helper.to_array(TensorProto.FromString(data)).tolist() == [5, -3]


def test_what_it_does_not_read_is_said():
    strings = helper.make_tensor("s", TensorProto.STRING, [1], [b"a"])
    bf16 = helper.make_tensor("b", TensorProto.BFLOAT16, [1], [1.0])
    external = numpy_helper.from_array(np.zeros(2, np.float32), "e")
    external.data_location = TensorProto.EXTERNAL
    short = helper.make_tensor("f", TensorProto.FLOAT, [2], [1.0, 2.0])
    short.dims[0] = 3  # its data does not fill its dims
    for t in (strings, bf16, external, short):
        with pytest.raises(NotDecoded):
            protowire.tensor_array(t.SerializeToString())
    with pytest.raises(NotDecoded):
        protowire.tensor_array(b"\x08")  # cut short
    with pytest.raises(NotDecoded):
        protowire.tensor_bytes(np.array(["a"]))


@pytest.mark.parametrize("shape", [[], [0], [1, 3, 224, 224], [2**40, 7]])
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.INT64, TensorProto.BFLOAT16])
def test_a_type_is_make_tensor_type_protos(elem, shape):
    want = helper.make_tensor_type_proto(elem, shape)
    data = protowire.type_bytes(elem, shape)
    assert data == want.SerializeToString()
    assert protowire.static_type(data) == (elem, tuple(shape))
    # a tuple shape's bytes are kept: made, then found, the same
    assert protowire.type_bytes(elem, tuple(shape)) == data
    assert protowire.type_bytes(elem, tuple(shape)) == data


@pytest.mark.parametrize("shape", [("batch", None, 3), (None,), None])
def test_a_type_with_named_or_open_dims_is_make_tensor_type_protos(shape):
    want = helper.make_tensor_type_proto(TensorProto.FLOAT, shape).SerializeToString()
    for _ in range(2):  # made, then found
        assert protowire.type_bytes(TensorProto.FLOAT, shape) == want


def test_a_type_that_is_not_a_static_tensor_has_none():
    symbolic = helper.make_tensor_type_proto(TensorProto.FLOAT, ["n", 3])
    unknown = helper.make_tensor_type_proto(TensorProto.FLOAT, [None, 3])
    unranked = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    untyped = helper.make_tensor_type_proto(0, [3])
    sequence = helper.make_sequence_type_proto(helper.make_tensor_type_proto(1, [3]))
    negative = TypeProto()
    negative.tensor_type.elem_type = 1
    negative.tensor_type.shape.dim.add().dim_value = -1
    for tp in (symbolic, unknown, unranked, untyped, sequence, negative):
        assert protowire.static_type(tp.SerializeToString()) is None
    # a dim_param set after a dim_value replaces it (a oneof)
    again = helper.make_tensor_type_proto(TensorProto.FLOAT, [3])
    data = again.SerializeToString() + TypeProto(
        tensor_type=TypeProto.Tensor(shape=helper.make_tensor_type_proto(
            1, ["n"]).tensor_type.shape)).SerializeToString()
    merged = TypeProto.FromString(data)
    assert [d.WhichOneof("value") for d in merged.tensor_type.shape.dim] == \
        ["dim_value", "dim_param"]
    assert protowire.static_type(data) is None


@pytest.mark.parametrize("shape", [None, [], [3, "n", None, 0, 1 << 40], ["ä"]])
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.INT64, TensorProto.BFLOAT16, 0])
def test_a_value_info_is_written_as_onnx_writes_it(shape, elem):
    """Dims that are names or unknown, and no shape at all (what the binding writes)."""
    from graphmem.frontend.splice import tensor_value_info
    assert tensor_value_info("tensor", elem, None if shape is None else tuple(shape)) == \
        helper.make_tensor_value_info("tensor", elem, shape).SerializeToString()


@given(st.one_of(st.integers(0, 1 << 15), st.integers(0, (1 << 64) - 1)))
@settings(max_examples=300, deadline=None)
def test_varint_is_protobufs(n):
    """A varint as protobuf writes it (a dim of a TensorProto: tag 0x08, then the
    varint), around the one- and two-byte fast paths and up to 2**64 - 1 (a negative
    int64 as protobuf writes it)."""
    t = TensorProto()
    t.dims.append(n - (1 << 64) if n >= 1 << 63 else n)
    assert protowire.varint(n) == t.SerializeToString()[1:]


def test_varint_refuses_a_negative_number():
    with pytest.raises(ValueError):
        protowire.varint(-1)
