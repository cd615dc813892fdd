"""Names are data: rich markup, ANSI/OSC escapes and NUL in tensor and graph names are
shown as text, never obeyed, and GraphML stays well-formed XML (issue 25)."""
from __future__ import annotations

from conftest import runtime_model
import networkx as nx
import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.cli import main

HOSTILE = "[bold red]x[/] [/] [link=http://evil]y[/link]\x1b]0;pwned\x07\x1b[31m\x00\x01"


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    nodes = [helper.make_node("Relu", ["x"], [HOSTILE]), helper.make_node("Neg", [HOSTILE], ["y"])]
    graph = helper.make_graph(nodes, "g" + HOSTILE,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    onnx.save(runtime_model(graph, 17), "names.onnx")
    return tmp_path / "names.onnx"


@pytest.mark.parametrize("argv", [["plan", "names.onnx", "-o", "p.json"], ["report", "names.onnx"],
                                  ["verify", "names.onnx"]])
def test_hostile_names_are_printed_as_text(model, capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr()
    for text in (out.out, out.err):
        assert "\x1b" not in text and "\x00" not in text and "\x07" not in text
    if argv[0] == "report":  # the tensor is in the peak table, shown as text
        assert "[link=http://evil]" in out.out and "\\x1b" in out.out


def test_hostile_names_make_well_formed_graphml(model):
    assert main(["export", "names.onnx", "--graphml", "g.graphml"]) == 0
    g = nx.read_graphml("g.graphml")
    tensors = {d for _, _, d in g.edges(data="tensor")}
    assert any("\\x1b" in t and "\\x00" in t for t in tensors)


def test_a_hostile_dim_name_is_printed_as_text(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    dim = "\x1b[31mRED\x1b]8;;http://evil\x1b\\click\x07"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4])])
    onnx.save(runtime_model(graph, 17), "dim.onnx")
    assert main(["plan", "dim.onnx", "-o", "p.json"]) == 2  # unbound: named in the error
    assert main(["plan", "dim.onnx", "-o", "p.json", "-q", "--dim-default", "3"]) == 0
    err = capsys.readouterr().err
    assert "symbolic dimension not bound" in err and "bound \\x1b[31mRED" in err
    assert "\x1b" not in err and "\x07" not in err
