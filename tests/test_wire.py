"""graphmem.wire (graphmem/wire.c) against its specification, the onnx Python API.

parse_model reads a serialized ModelProto straight from the protobuf wire format; every
test here parses the same bytes with onnx (protobuf) and compares: both accept with the
same content, or both refuse (:func:`agree`), on hand-built data and on thousands of
mutants of real models. It also checks that the byte spans it reports re-parse as the
right entries and tile the graph.
"""
from __future__ import annotations

import mmap
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from graphmem import wire
from tools.faults.fuzz_reader import varint  # the wire encoding the hand-built data below uses
from models import generate, transformer

F = TensorProto.FLOAT
LIGHT = sorted((Path(onnx.__file__).parent / "backend/test/data/light").glob("*.onnx"))
KINDS = {"sequence_type": ("sequence", 0, None), "map_type": ("map", 0, None),
         "optional_type": ("optional", 0, None),
         "sparse_tensor_type": ("sparse_tensor", 0, None), "opaque_type": ("opaque", 0, None)}


# ---- the specification: the same data through the onnx API ----

def expect_type(v: onnx.ValueInfoProto):
    if not v.HasField("type"):
        return None
    kind = v.type.WhichOneof("value")
    if kind is None:
        return None
    if kind != "tensor_type":
        return KINDS[kind]
    tt = v.type.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.WhichOneof("value") == "dim_value"
                      else d.dim_param if d.WhichOneof("value") == "dim_param" else None
                      for d in tt.shape.dim)
    return ("tensor", tt.elem_type, shape)


def expect_attr(a: onnx.AttributeProto):
    item = (a.name, a.type, a)
    if a.type == onnx.AttributeProto.GRAPH:
        return item + ([expect_graph(a.g)] if a.HasField("g") else [],)
    if a.type == onnx.AttributeProto.GRAPHS:
        return item + ([expect_graph(g) for g in a.graphs],)
    return item + ((),)


def expect_graph(g: onnx.GraphProto):
    return {
        "name": g.name,
        "nodes": [(n.name, n.op_type, n.domain, tuple(n.input), tuple(n.output),
                   tuple(expect_attr(a) for a in n.attribute)) for n in g.node],
        "initializers": [(t.name, t.data_type, tuple(t.dims), t.data_location, len(t.raw_data),
                          tuple((e.key, e.value) for e in t.external_data))
                         for t in g.initializer],
        "inputs": [(v.name, expect_type(v)) for v in g.input],
        "outputs": [(v.name, expect_type(v)) for v in g.output],
        "value_info": [(v.name, expect_type(v)) for v in g.value_info],
        "sparse_initializers": len(g.sparse_initializer),
    }


def expect_model(data: bytes):
    m = onnx.ModelProto.FromString(data)
    return {"ir_version": m.ir_version,
            "opsets": [(o.domain, o.version) for o in m.opset_import],
            "graph": expect_graph(m.graph) if m.HasField("graph") else None}


GRAPH_FIELDS = ("name", "nodes", "initializers", "inputs", "outputs", "value_info",
                "sparse_initializers")  # a wire.Graph's, but its spans


def comparable(g):
    """A parsed GRAPH without its spans, each attribute's raw bytes parsed (recursively)."""
    out = {k: getattr(g, k) for k in GRAPH_FIELDS}
    nodes = []
    for name, op, domain, ins, outs, attrs in g.nodes:
        got = []
        for a in attrs:
            subs = [comparable(s) for s in a.subgraphs] if a.type in (5, 10) else a.subgraphs
            got.append((a.name, a.type, onnx.AttributeProto.FromString(a.raw), subs))
        nodes.append((name, op, domain, ins, outs, tuple(got)))
    out["nodes"] = nodes
    return out


# ---- checks on one parse ----

def _varint(data, pos):
    value, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


# (field, wire type) pairs protobuf reads as GraphProto's own fields
KNOWN_IN_GRAPH = {(1, 2), (2, 2), (5, 2), (10, 2), (11, 2), (12, 2), (13, 2), (14, 2), (15, 2),
                  (16, 2)}
ENTRY_TYPES = {1: onnx.NodeProto, 5: onnx.TensorProto, 11: onnx.ValueInfoProto,
               12: onnx.ValueInfoProto, 13: onnx.ValueInfoProto, 15: onnx.SparseTensorProto}


def check_spans(data: bytes, parsed: dict, proto: onnx.GraphProto, content: bytes | None = None):
    """Every span is a whole entry of its field; sorted, they tile the graph's content."""
    spans = parsed.spans
    flat = sorted((off, n) for entries in spans.values() for off, n in entries)
    if flat:
        for (o1, n1), (o2, _) in zip(flat, flat[1:]):
            assert o1 + n1 == o2, "the spans leave a gap"
        whole = data[flat[0][0]:flat[-1][0] + flat[-1][1]]
    else:
        whole = b""
    if content is not None:
        assert whole == content
    assert onnx.GraphProto.FromString(whole) == proto
    repeated = {1: proto.node, 5: proto.initializer, 11: proto.input, 12: proto.output,
                13: proto.value_info, 15: proto.sparse_initializer}
    for field, entries in spans.items():
        assert entries == sorted(entries)
        for i, (off, n) in enumerate(entries):
            entry = data[off:off + n]
            tag, pos = _varint(entry, 0)
            if field == 0:  # a known field number with another wire type: unknown to protobuf
                number = tag >> 3
                assert number in onnx.GraphProto.DESCRIPTOR.fields_by_number
                assert (number, tag & 7) not in KNOWN_IN_GRAPH
                continue
            assert tag >> 3 == field
            if field in ENTRY_TYPES:
                assert tag & 7 == 2
                length, pos = _varint(entry, pos)
                assert pos + length == n
                assert ENTRY_TYPES[field].FromString(entry[pos:]) == repeated[field][i]
            elif field == 2 and i == len(entries) - 1:  # the last name is the name
                length, pos = _varint(entry, pos)
                name = proto.name
                assert entry[pos:] == (name.encode() if isinstance(name, str) else name)
        if field in repeated:
            assert len(entries) == len(repeated[field])
    for node, pnode in zip(parsed.nodes, proto.node):
        for attr, pattr in zip(node.attrs, pnode.attribute):
            if attr.type in (5, 10):
                subs = [pattr.g] if pattr.type == onnx.AttributeProto.GRAPH else list(pattr.graphs)
                for sub, psub in zip(attr.subgraphs, subs):
                    check_spans(data, sub, psub)


def names_are_interned(parsed):
    seen = {}

    def see(s):
        assert seen.setdefault(s, s) is s, f"{s!r} is two objects"

    def walk(g):
        see(g.name)
        for name, op, domain, ins, outs, attrs in g.nodes:
            for s in (name, op, domain, *ins, *outs):
                see(s)
            for a in attrs:
                see(a.name)
                for sub in a.subgraphs:
                    walk(sub)
        for t in g.initializers:
            see(t.name)
        for v in g.inputs + g.outputs + g.value_info:
            see(v.name)

    if parsed.graph is not None:
        walk(parsed.graph)


def check(data: bytes):
    """parse_model(data) against onnx, with its spans and its interning."""
    got = wire.parse_model(data)
    want = expect_model(data)
    assert type(got) is wire.Model and got.graph is None or type(got.graph) is wire.Graph
    if got.graph is not None and got.not_utf8 == 0:
        # the loader skips its scan for names that are not text when the count is 0
        from graphmem.frontend.structure import invalid_name
        assert invalid_name(got.graph) is None
    assert got.ir_version == want["ir_version"]
    assert got.opsets == want["opsets"]
    if want["graph"] is None:
        assert got.graph is None and got.graph_span is None
        return got
    assert comparable(got.graph) == want["graph"]
    off, n = got.graph_span
    proto = onnx.ModelProto.FromString(data).graph
    assert onnx.GraphProto.FromString(data[off:off + n]) == proto
    check_spans(data, got.graph, proto, data[off:off + n])
    names_are_interned(got)
    return got


# ---- hand-built wire data ----

def entry(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def scalar(field: int, value: int) -> bytes:
    return varint(field << 3) + varint(value)


def model_bytes(graph: bytes, head: bytes = b"") -> bytes:
    return (scalar(1, 8) + entry(8, entry(1, b"") + scalar(2, 17)) + head + entry(7, graph))


def small_model() -> onnx.ModelProto:
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [1, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [1, 4])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
         helper.make_node("Clip", ["y", "", "m"], ["z"], name="clip")],
        "small",
        [helper.make_tensor_value_info("x", F, ["n", 4]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", F, None)],
        [numpy_helper.from_array(np.array(6.0, np.float32), "m")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# ---- models ----

@pytest.mark.parametrize("path", LIGHT, ids=[p.stem for p in LIGHT])
def test_onnx_light_models(path):
    assert LIGHT
    check(path.read_bytes())


@pytest.mark.parametrize("build", [
    lambda: transformer.build(layers=1, d_model=32, heads=2, d_ff=64, vocab=50),
    lambda: generate.randwire(nodes=12, seed=3),
    lambda: generate.inception_cell(),
    lambda: generate.unet(depth=2),
], ids=["transformer", "randwire", "inception_cell", "unet"])
def test_generated_models(build):
    check(build().SerializeToString())


def test_types_and_shapes():
    seq = helper.make_tensor_sequence_value_info("seq", F, [2, 3])
    mapped = onnx.ValueInfoProto(name="map")
    mapped.type.map_type.key_type = TensorProto.INT64
    opt = helper.make_value_info("opt", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F, [1])))
    sparse = helper.make_sparse_tensor_value_info("sp", F, [3, 3])
    opaque = onnx.ValueInfoProto(name="opaque")
    opaque.type.opaque_type.domain = "d"
    untyped = onnx.ValueInfoProto(name="untyped")
    empty_type = onnx.ValueInfoProto(name="empty_type")
    empty_type.type.denotation = "IMAGE"
    no_shape = helper.make_tensor_value_info("no_shape", F, None)
    scalar_shape = helper.make_tensor_value_info("scalar", F, [])
    dims = helper.make_tensor_value_info("dims", F, ["batch", 3, None, -1])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["dims"], ["r"])], "types",
        [dims, seq, mapped, opt], [helper.make_tensor_value_info("r", F, ["batch", 3, None, -1])],
        value_info=[sparse, opaque, untyped, empty_type, no_shape, scalar_shape])
    got = check(helper.make_model(graph).SerializeToString()).graph
    assert got.inputs[0] == ("dims", ("tensor", F, ("batch", 3, None, -1)))
    assert [v.type.kind for v in got.inputs[1:]] == ["sequence", "map", "optional"]
    assert [v.type for v in got.value_info] == [
        ("sparse_tensor", 0, None), ("opaque", 0, None), None, None, ("tensor", F, None),
        ("tensor", F, ())]
    assert got.inputs[0].type.shape == ("batch", 3, None, -1)


def test_subgraphs_if_loop_and_graphs_attribute():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("If", ["cond_in"], ["v"], then_branch=helper.make_graph(
             [helper.make_node("Neg", ["x"], ["inner"])], "inner_then", [],
             [helper.make_tensor_value_info("inner", F, [4])]),
             else_branch=helper.make_graph(
             [helper.make_node("Abs", ["x"], ["inner2"])], "inner_else", [],
             [helper.make_tensor_value_info("inner2", F, [4])]))],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", F, [4])])
    loop = helper.make_node("Loop", ["n", ""], ["out"], name="loop", body=body)
    many = helper.make_node("Custom", ["x"], ["w"], domain="my.domain",
                            branches=[body, helper.make_graph([], "empty", [], [])])
    plain = helper.make_node("Custom", ["x"], ["u"], domain="my.domain", alpha=0.5, ints=[1, 2],
                             s="text", t=numpy_helper.from_array(np.arange(6, dtype=np.int64)))
    graph = helper.make_graph([loop, many, plain], "main",
                              [helper.make_tensor_value_info("x", F, [4])],
                              [helper.make_tensor_value_info("out", F, [None, 4])])
    got = check(helper.make_model(graph).SerializeToString()).graph
    loop_attr = got.nodes[0].attrs[0]
    assert (loop_attr.name, loop_attr.type) == ("body", onnx.AttributeProto.GRAPH)
    (parsed_body,) = loop_attr.subgraphs
    assert parsed_body.name == "body"
    assert [len(a.subgraphs) for a in parsed_body.nodes[1].attrs] == [1, 1]
    assert [g.name for g in got.nodes[1].attrs[0].subgraphs] == ["body", "empty"]
    assert all(a.subgraphs == () for a in got.nodes[2].attrs)
    assert got.nodes[0].inputs == ("n", "")


def test_external_data_and_initializers():
    ext = TensorProto(name="w", data_type=F, dims=[1024, 16])
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "4096"), ("length", "65536")):
        ext.external_data.add(key=k, value=v)
    typed = helper.make_tensor("typed", TensorProto.INT64, [3], [1, -2, 3])
    strings = helper.make_tensor("strings", TensorProto.STRING, [2], [b"a", b"bc"])
    raw = numpy_helper.from_array(np.zeros((2, 3), np.float32), "raw")
    graph = helper.make_graph([helper.make_node("Add", ["w", "raw"], ["y"])], "ext", [],
                              [helper.make_tensor_value_info("y", F, None)],
                              [ext, typed, strings, raw])
    got = check(helper.make_model(graph).SerializeToString()).graph
    assert got.initializers[0] == ("w", F, (1024, 16), 1, 0, (
        ("location", "weights.bin"), ("offset", "4096"), ("length", "65536")))
    assert got.initializers[3] == ("raw", F, (2, 3), 0, 24, ())


def test_non_utf8_names_come_back_as_bytes_and_interned():
    model = small_model()
    model.graph.node[1].input[0] = "@@bad@@"
    model.graph.node[0].output[0] = "@@bad@@"
    model.graph.node[1].name = "@@bad@@"
    data = model.SerializeToString().replace(b"@@bad@@", b"\xff\xfe\x80bad\xc3")
    parsed = check(data)
    got = parsed.graph
    assert got.nodes[1].inputs[0] == b"\xff\xfe\x80bad\xc3"
    assert got.nodes[1].inputs[0] is got.nodes[0].outputs[0] is got.nodes[1].name
    assert parsed.not_utf8 == 1  # one distinct string; the loader scans names only then
    assert wire.parse_model(small_model().SerializeToString()).not_utf8 == 0


def test_packed_and_unpacked_dims_and_negative_values():
    packed = (entry(1, b"".join(varint(d) for d in (2, -1, 300)))  # dims, packed
              + scalar(1, 7)  # one more dim, unpacked
              + scalar(2, F) + entry(8, b"packed") + entry(9, b"\0" * 12))
    negative_type = scalar(2, -5)  # data_type: an int32 written as a 10-byte varint
    graph = (entry(1, entry(1, b"packed") + entry(2, b"out") + entry(4, b"Identity"))
             + entry(5, packed) + entry(5, entry(8, b"neg") + negative_type)
             + entry(11, entry(1, b"packed") + entry(2, entry(1, scalar(1, F) + entry(2, (
                 entry(1, scalar(1, -3)) + entry(1, b"") + entry(1, entry(2, b"n"))))))))
    got = check(model_bytes(graph)).graph
    assert got.initializers[0] == ("packed", F, (2, -1, 300, 7), 0, 12, ())
    assert got.initializers[1][1] == -5
    assert got.inputs[0] == ("packed", ("tensor", F, (-3, None, "n")))


def test_protobuf_semantics_later_wins_oneofs_closed_enums_unknown_fields():
    dim = entry(1, scalar(1, 5) + entry(2, b"p"))  # dim_value then dim_param: the param
    dim2 = entry(1, entry(2, b"p") + scalar(1, 5))  # and the other way round
    tensor_then_seq = entry(1, scalar(1, F)) + entry(4, b"")
    unknown = (scalar(99, 1) + varint(98 << 3 | 1) + b"\0" * 8 + varint(97 << 3 | 5) + b"\0" * 4
               + entry(96, b"junk"))
    attr = (entry(1, b"axis") + scalar(20, 2) + scalar(3, 1) + scalar(20, 99)  # 99: not a type
            + unknown)
    node = (entry(3, b"first") + entry(1, b"x") + unknown + entry(4, b"Relu") + entry(3, b"second")
            + entry(5, attr) + entry(2, b"y"))
    tensor = entry(8, b"t") + scalar(14, 1) + scalar(14, 7) + entry(9, b"ab") + entry(9, b"c")
    graph = (entry(2, b"g1") + entry(1, node) + unknown + entry(2, b"g2") + entry(5, tensor)
             + entry(11, entry(1, b"x") + entry(2, entry(1, scalar(1, F) + entry(2, dim + dim2))))
             + entry(13, entry(1, b"s") + entry(2, tensor_then_seq))
             + entry(15, b"") + entry(15, b""))
    data = model_bytes(graph, head=scalar(1, 3) + unknown)
    got = check(data)
    assert got.ir_version == 3 and got.opsets == [("", 17)]
    g = got.graph
    assert g.name == "g2" and g.sparse_initializers == 2
    assert g.nodes[0][:5] == ("second", "Relu", "", ("x",), ("y",))
    assert g.nodes[0].attrs[0][:2] == ("axis", 2)
    assert g.initializers[0] == ("t", 0, (), 1, 1, ())
    assert g.inputs[0].type == ("tensor", F, ("p", 5))
    assert g.value_info[0].type == ("sequence", 0, None)
    assert set(g.spans) == {1, 2, 5, 11, 13, 15, 96, 97, 98, 99}


def test_buffer_objects_are_read_in_place(tmp_path):
    data = small_model().SerializeToString()
    want = wire.parse_model(data)
    assert wire.parse_model(bytearray(data)) == want
    assert wire.parse_model(memoryview(data)) == want
    padded = b"\0" * 10 + data
    shifted = wire.parse_model(memoryview(padded)[10:])  # offsets are relative to the view
    assert shifted == want
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert wire.parse_model(mm) == want
    empty = wire.parse_model(b"")
    assert type(empty) is wire.Model and tuple(empty) == (0, [], None, None, 0)
    assert (empty.ir_version, empty.opsets, empty.graph, empty.graph_span,
            empty.not_utf8) == (0, [], None, None, 0)
    with pytest.raises(TypeError):
        wire.parse_model("not bytes")


# ---- malformed and unusual data: as protobuf reads it ----

def agree(data: bytes) -> str:
    """parse_model and protobuf on the same bytes: both accept with the same content
    ("both"), or both refuse ("neither"), or the one documented exception: a graph in two
    pieces (ModelProto.graph or a GRAPH attribute's g written twice), which protobuf
    merges and the loader, which edits graphs by their entries' byte spans, refuses."""
    try:
        onnx.ModelProto.FromString(data)
    except Exception:  # DecodeError
        with pytest.raises(ValueError):
            wire.parse_model(data)
        return "neither"
    try:
        check(data)
    except ValueError as exc:
        assert "appears twice (a graph in pieces" in str(exc), str(exc)
        return "graph in pieces"
    return "both"


@pytest.mark.parametrize("data, message", [
    (model_bytes(entry(1, varint(1 << 3 | 2) + varint(50) + b"x")),
     "NodeProto.input: length past the end of the data"),
    (varint(1 << 3) + b"\xff\xff", "ModelProto.ir_version: truncated varint"),
    (varint(1 << 3) + b"\xff" * 11, "ModelProto.ir_version: varint longer than 10 bytes"),
    (model_bytes(entry(5, entry(1, b"\x80"))), "TensorProto.dims: truncated varint"),
    (model_bytes(varint(3 << 3 | 3) + varint(4 << 3 | 4)),
     "GraphProto field 3: group ended by another field's end-group tag"),
    (model_bytes(varint(3 << 3 | 3) + scalar(5, 1)), "GraphProto field 3: group without its end"),
    (model_bytes(varint(3 << 3 | 4)), "GraphProto field 3: end of a group that was not started"),
    (model_bytes(varint(3 << 3 | 6)), "GraphProto: invalid tag"),
    (model_bytes(b"\x00"), "GraphProto: invalid tag"),
    (model_bytes(b"\x8a\x80\x80\x80\x80\x00"), "GraphProto: invalid tag"),  # 6 bytes for 10
    (model_bytes(varint(9 << 3 | 1) + b"\0\0"), "GraphProto field 9: fixed-size value past"),
    (model_bytes(b"") + b"\x3a", "ModelProto.graph: truncated varint"),
    # what the loader reads nothing of is parsed all the same
    (model_bytes(entry(15, entry(1, entry(1, b"\x80")))), "TensorProto field 1: truncated"),
    (model_bytes(b"", head=entry(25, entry(7, entry(5, b"\xff")))), "AttributeProto.tag: truncated varint"),
    (model_bytes(entry(5, entry(4, b"\0\0\0"))), "TensorProto field 4: packed run not a whole"),
    (model_bytes(entry(11, entry(2, entry(4, entry(1, entry(1, b"\x08")))))),
     "TypeProto.Tensor field 1: truncated varint"),
    (model_bytes(b"") + entry(7, b""), "ModelProto.graph: appears twice"),
])
def test_malformed_data_is_refused_as_protobuf_refuses_it(data, message):
    with pytest.raises(ValueError, match="^" + message.replace(".", r"\.")):
        wire.parse_model(data)
    assert agree(data) == ("graph in pieces" if "appears twice" in message else "neither")


@pytest.mark.parametrize("data", [
    model_bytes(entry(1, scalar(1, 5))),  # NodeProto.input as a varint: an unknown field
    scalar(7, 1),  # ModelProto.graph as a varint
    model_bytes(entry(5, scalar(1, 3) + varint(1 << 3 | 5) + b"\0\0\0\0")),  # dims as fixed32
    model_bytes(varint(3 << 3 | 3) + varint(3 << 3 | 4)),  # an empty group of an unknown field
    model_bytes(varint(3 << 3 | 3) + scalar(1, 4) + varint(7 << 3 | 3) + entry(2, b"x")
                + varint(7 << 3 | 4) + varint(3 << 3 | 4)),  # nested groups
    model_bytes(varint(1 << 3 | 3) + varint(1 << 3 | 4)),  # GraphProto.node as a group
    model_bytes(entry(1, entry(1, b"x") + varint(1 << 3 | 3) + varint(1 << 3 | 4))),
    # merged, as protobuf merges a message field written twice
    model_bytes(entry(11, entry(1, b"x") + entry(2, entry(1, scalar(1, 1)))
                      + entry(2, entry(1, entry(2, entry(1, scalar(1, 3))))))),
    model_bytes(entry(11, entry(2, entry(1, entry(2, entry(1, scalar(1, 3))))
                                + entry(4, b"") + entry(1, scalar(1, 7))))),  # oneof: fresh
    model_bytes(entry(11, entry(2, entry(1, entry(2, entry(1, scalar(1, 2)))
                                          + entry(2, entry(1, entry(2, b"n"))))))),
    # the attribute's g, when its type is not GRAPH, is parsed and may be in pieces
    model_bytes(entry(1, entry(5, entry(1, b"a") + scalar(20, 2) + entry(6, b"") + entry(6, b"")))),
    # a closed enum keeps the low 32 bits of its varint: 2^32 + 1 is EXTERNAL
    model_bytes(entry(5, entry(8, b"w") + scalar(14, (1 << 32) + 1))),
    model_bytes(entry(5, entry(8, b"w") + scalar(14, 1) + scalar(14, 2))),  # 2: kept aside
    model_bytes(entry(1, entry(5, entry(1, b"g") + scalar(20, (1 << 32) + 5)))),  # GRAPH
    model_bytes(entry(1, entry(5, entry(1, b"g") + scalar(20, -1)))),
    model_bytes(entry(5, entry(8, b"t") + scalar(2, (1 << 40) + 7))),  # int32: low 32 bits
    # a varint's 10th byte: only its lowest bit is kept
    varint(1 << 3) + b"\xff" * 9 + b"\x7f",
    varint(5 << 3) + b"\x80" * 9 + b"\x01",
    # a length of 5 and more bytes, and a tag of 5
    model_bytes(b"\x12\x81\x80\x80\x80\x00x"),
    model_bytes(b"\x92\x80\x80\x80\x00\x01x"),
    model_bytes(b"", head=entry(25, entry(1, b"f") + entry(7, entry(4, b"Relu")))),
])
def test_unusual_data_is_read_as_protobuf_reads_it(data):
    assert agree(data) == "both"


def test_the_external_location_of_a_huge_enum_is_seen():
    """issue 38: a data_location of 2^32 + 1 is EXTERNAL to onnx, so its location is
    checked like any other (the loader refuses a location outside the model's folder)."""
    data = model_bytes(entry(5, entry(8, b"w") + scalar(14, (1 << 32) + 1)
                             + entry(13, entry(1, b"location") + entry(2, b"../x"))))
    (init,) = wire.parse_model(data).graph.initializers
    assert init[3] == onnx.TensorProto.EXTERNAL == onnx.ModelProto.FromString(
        data).graph.initializer[0].data_location


def _nested_ifs(depth: int) -> bytes:
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "leaf", [],
                              [helper.make_tensor_value_info("y", F, [1])])
    for level in range(depth):
        graph = helper.make_graph(
            [helper.make_node("If", ["c"], [f"y{level}"], then_branch=graph)],  # one branch: linear size
            f"level{level}", [], [helper.make_tensor_value_info(f"y{level}", F, [1])])
    return helper.make_model(graph).SerializeToString()


def test_nesting_depth_is_limited_as_protobuf_limits_it():
    got = check(_nested_ifs(8))
    assert got.graph.name == "level7"
    # each If is three messages deeper (graph, node, attribute), and the innermost output's
    # shape four more: protobuf's limit of 100 below the ModelProto falls after 31 levels
    assert agree(_nested_ifs(31)) == "both"
    assert agree(_nested_ifs(32)) == "neither"
    with pytest.raises(ValueError, match="nesting deeper than 100"):
        wire.parse_model(_nested_ifs(32))


def _nested_types(depth: int) -> bytes:
    """A graph input whose type is a sequence of sequences ``depth`` deep: messages the
    loader does not read, parsed all the same."""
    t = onnx.TypeProto()
    cur = t
    for _ in range(depth):
        cur = cur.sequence_type.elem_type
    cur.tensor_type.elem_type = F
    m = onnx.ModelProto()
    m.graph.input.add(name="x").type.CopyFrom(t)
    return m.SerializeToString()


@pytest.mark.parametrize("depth", [47, 48, 49, 50])
def test_depth_in_messages_the_loader_skips(depth):
    agree(_nested_types(depth))


def test_groups_nest_as_deep_as_messages():
    def groups(k):
        return model_bytes(varint(3 << 3 | 3) * k + varint(3 << 3 | 4) * k)
    assert [agree(groups(k)) for k in (98, 99, 100)] == ["both", "both", "neither"]


def _outcome(data):
    try:
        return wire.parse_model(data)
    except ValueError:
        return None


def test_every_prefix_of_a_small_model():
    data = small_model().SerializeToString()
    assert 200 <= len(data) <= 600
    outcomes = [agree(data[:n]) for n in range(len(data) + 1)]
    assert outcomes[-1] == "both" and "neither" in outcomes


SMALL = small_model().SerializeToString()


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(SMALL) - 1), st.integers(0, 255)),
                min_size=1, max_size=6))
def test_random_byte_flips_never_crash(flips):
    data = bytearray(SMALL)
    for pos, value in flips:
        data[pos] = value
    data = bytes(data)
    agree(data)


def _tool(name: str):
    """A module of tools/ (the campaign and schema tools the tests run)."""
    import importlib
    return importlib.import_module(name)


@pytest.mark.parametrize("seed_model, count", [("small", 400), ("squeezenet", 100),
                                               ("rnn_loop_ts", 60)])
def test_mutants_are_read_as_protobuf_reads_them(seed_model, count):
    """The differential campaign of tools/faults/fuzz_reader.py, a few hundred mutants of a
    model each (truncations at field boundaries, varints that overflow, lengths past the
    end, wrong wire types, groups, floods, swapped values): protobuf and wire accept the
    same mutants with the same content and refuse the same ones."""
    import random
    fuzz = _tool("tools.faults.fuzz_reader")
    mutator = fuzz.Mutator(fuzz.seeds()[seed_model])
    rng = random.Random(seed_model)
    verdicts = Counter()
    for _ in range(count):
        what, data = mutator.mutant(rng)
        verdict = agree(data)
        verdicts[verdict] += 1
    assert verdicts["both"] > count // 4 and verdicts["neither"] > count // 20, verdicts


def test_the_schema_in_wire_c_is_the_installed_onnx_s():
    """wire.c knows every message and field of onnx-ml.proto from a table that
    tools/upstream/wire_schema.py writes from onnx's descriptors: it must be that of this onnx
    (a newer onnx with new fields: run the tool)."""
    root = Path(__file__).resolve().parent.parent
    tool = _tool("tools.upstream.wire_schema")
    assert tool.current_block((root / "graphmem/wire.c").read_text()) == tool.schema_block()


def test_parse_values_is_parse_model_without_the_main_graphs_nodes():
    """The loader reads a shape-inferred model's value infos with parse_values."""
    squeezenet = next(p for p in LIGHT if p.name == "light_squeezenet.onnx")
    for model in (small_model(), onnx.load(str(squeezenet))):
        data = model.SerializeToString()
        full, values = wire.parse_model(data), wire.parse_values(data)
        assert values.graph.nodes == [] and 1 not in values.graph.spans
        full.graph.nodes.clear()
        del full.graph.spans[1]
        assert values == full


def test_records_are_named():
    """Every record the parser returns is a tuple whose items also have names."""
    model = check(small_model().SerializeToString())
    assert isinstance(model, wire.Model) and isinstance(model, tuple)
    assert (model.ir_version, model.opsets, model.graph, model.graph_span,
            model.not_utf8) == tuple(model)
    got = model.graph
    assert isinstance(got, wire.Graph) and (
        got.name, got.nodes, got.initializers, got.inputs, got.outputs, got.value_info,
        got.sparse_initializers, got.spans) == tuple(got)
    assert all(isinstance(s, wire.Graph) for s in got.nodes[0].attrs[0].subgraphs)
    import gc  # the records that hold lists and dicts are the cycle collector's, as those are
    assert gc.is_tracked(model) and gc.is_tracked(got)
    node, vi = got.nodes[0], got.inputs[0]
    assert isinstance(node, wire.Node) and isinstance(node, tuple)
    assert (node.name, node.op_type, node.domain, node.inputs, node.outputs) == node[:5]
    assert node.attrs is node[5]
    assert isinstance(vi, wire.Value) and isinstance(vi.type, wire.ValueType)
    assert (vi.name, vi.type.kind) == (vi[0], "tensor")
    assert vi.type.elem_type == vi.type[1] and vi.type.shape == vi.type[2]
    for init in got.initializers:
        assert isinstance(init, wire.Initializer)
        assert (init.name, init.data_type, init.dims, init.data_location, init.raw_bytes,
                init.external_data) == tuple(init)
    for a in (a for n in got.nodes for a in n.attrs):
        assert isinstance(a, wire.Attribute) and (a.name, a.type, a.raw, a.subgraphs) == tuple(a)


def test_wire_types_are_protobufs():
    """wire.wire_types: each field's wire types as onnx's descriptors give them (the
    table graphmem.frontend.attributes reads attributes by)."""
    numbers = {1: 1, 6: 1, 16: 1, 2: 5, 7: 5, 15: 5, 9: 2, 11: 2, 12: 2}  # else varint
    for message in (onnx.AttributeProto, onnx.TensorProto, onnx.NodeProto):
        expected = {}
        for f in message.DESCRIPTOR.fields:
            wt = numbers.get(f.type, 0)
            repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
            expected[f.number] = (wt, 2) if repeated and wt != 2 else (wt,)
        assert wire.wire_types(message.DESCRIPTOR.name) == expected
    with pytest.raises(KeyError):
        wire.wire_types("NoSuchProto")
