"""The loader's common path without onnx's Python package: attributes read from their
bytes as onnx.helper reads them, onnx's compiled core loaded alone and shared with a
later ``import onnx``, and a plan that imports neither onnx nor rich (issue 23)."""
from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, helper

from graphmem.frontend import attributes
from graphmem.frontend.zoo import ZOO, zoo_path


def onnx_value(attr: AttributeProto):
    """What the loader made of an attribute before it read the bytes itself."""
    value = helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return f"<tensor {list(value.dims)}>"
    return value


@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_attribute_decodes_as_onnx_helper_reads_it(name):
    model = onnx.load(str(zoo_path(name)), load_external_data=False)
    seen = 0
    for node in model.graph.node:
        for attr in node.attribute:
            got = attributes.decode(attr.type, attr.SerializeToString())
            assert got is not attributes.NOT_DECODED, (node.op_type, attr.name)
            assert got == onnx_value(attr), (node.op_type, attr.name)
            seen += 1
    assert seen > 0


int64 = st.integers(-2**63, 2**63 - 1)
f32 = st.floats(width=32, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.builds(lambda v: helper.make_attribute("a", v), int64),
    st.builds(lambda v: helper.make_attribute("a", v), f32),
    st.builds(lambda v: helper.make_attribute("a", v), st.binary(max_size=20)),
    st.builds(lambda v: helper.make_attribute("a", v, attr_type=AttributeProto.INTS),
              st.lists(int64, max_size=6)),
    st.builds(lambda v: helper.make_attribute("a", v, attr_type=AttributeProto.FLOATS),
              st.lists(f32, max_size=6)),
    st.builds(lambda v: helper.make_attribute("a", v, attr_type=AttributeProto.STRINGS),
              st.lists(st.binary(max_size=5), max_size=4)),
    st.builds(lambda dims: helper.make_attribute("a", helper.make_tensor(
        "t", onnx.TensorProto.FLOAT, dims, [0.0] * (0 if 0 in dims else
                                                  __import__("math").prod(dims)))),
        st.lists(st.integers(0, 3), max_size=3)),
))
def test_random_attributes_decode_as_onnx_helper_reads_them(attr):
    got = attributes.decode(attr.type, attr.SerializeToString())
    assert got == onnx_value(attr)


def test_unpacked_repeated_numbers_and_a_repeated_singular_field():
    # ints written one by one (not packed) and an int written twice: the last one wins
    raw = b"\x0a\x01a" + b"\x40\x05\x40\x7f" + b"\x18\x01\x18\x02" + b"\xa0\x01\x07"
    attr = AttributeProto.FromString(raw)
    assert attributes.decode(AttributeProto.INTS, raw) == list(attr.ints) == [5, 127]
    assert attributes.decode(AttributeProto.INT, raw) == attr.i == 2


def test_bytes_protobuf_refuses_are_left_to_onnx():
    assert attributes.decode(AttributeProto.INT, b"\x18") is attributes.NOT_DECODED
    assert attributes.decode(AttributeProto.INT, b"\x1d\x00\x00\x00\x00") \
        is attributes.NOT_DECODED  # field i as fixed32
    assert attributes.decode(AttributeProto.GRAPH, b"") is attributes.NOT_DECODED


def run_python(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_plan_imports_neither_onnx_nor_rich(tmp_path):
    path, out = zoo_path("squeezenet"), tmp_path / "p.json"
    seen = run_python(
        "import json, sys\n"
        "from graphmem.cli import main\n"
        f"rc = main(['plan', {str(path)!r}, '-o', {str(out)!r}, '-q'])\n"
        "mods = [m for m in sys.modules if m == 'onnx' or m.startswith(('onnx.', 'rich'))\n"
        "        and not m.startswith('onnx.onnx_cpp2py_export')]\n"
        "print(json.dumps({'rc': rc, 'mods': mods}))\n")
    assert seen == {"rc": 0, "mods": []}
    assert json.loads(out.read_text())["arena_bytes"] > 0


def test_onnx_imported_after_its_core_shares_it():
    seen = run_python(
        "import json, sys\n"
        "from graphmem.frontend import onnx_c\n"
        "core = onnx_c.core()\n"
        "assert 'onnx' not in sys.modules\n"
        "import onnx, onnx.checker, onnx.shape_inference\n"
        "from graphmem.frontend.zoo import zoo_path\n"
        "m = onnx.load(str(zoo_path('squeezenet')))\n"
        "onnx.checker.check_model(m)\n"
        "n = len(onnx.shape_inference.infer_shapes(m).graph.value_info)\n"
        "import onnxruntime\n"
        "same = sys.modules['onnx.onnx_cpp2py_export'] is core\n"
        "print(json.dumps({'same': same, 'n': n}))\n")
    assert seen["same"] and seen["n"] > 0


def test_dtype_enums_are_onnx_s():
    from graphmem.core.dtypes import _TYPES, STRING
    assert STRING == onnx.TensorProto.STRING
    for enum, (onnx_name, _, _) in _TYPES.items():
        if hasattr(onnx.TensorProto, onnx_name):
            assert getattr(onnx.TensorProto, onnx_name) == enum, onnx_name


def test_string_attributes_reach_the_ir_as_text():
    from conftest import runtime_model
    from graphmem.frontend.reader import from_model
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", 1, [2, 3]),
                                            helper.make_tensor_value_info("b", 1, [3, 4])],
                              [helper.make_tensor_value_info("y", 1, [2, 4])])
    assert from_model(runtime_model(graph, 17)).nodes[0].attrs["equation"] == "ij,jk->ik"


def test_repeated_attributes_are_equal_and_each_node_s_own():
    """Each distinct attribute is decoded once a load; two nodes with the same list get
    equal lists, not one list (changing one node's leaves the other's)."""
    from conftest import runtime_model
    from graphmem.frontend.reader import from_model
    nodes = [helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]),
             helper.make_node("Transpose", ["t"], ["y"], perm=[1, 0])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", 1, [2, 3])],
                              [helper.make_tensor_value_info("y", 1, [2, 3])])
    first, second = from_model(runtime_model(graph, 17)).nodes
    assert first.attrs["perm"] == second.attrs["perm"] == [1, 0]
    first.attrs["perm"].append(5)
    assert second.attrs["perm"] == [1, 0]
