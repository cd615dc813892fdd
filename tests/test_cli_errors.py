"""Bad input to `graphmem plan`: one line, exit 2, no plan file left behind."""
from __future__ import annotations

import onnx
from onnx import helper

from graphmem.cli import main
from conftest import F, make_model


def run_plan(args, capsys):
    code = main(["plan", *args])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def test_missing_file(tmp_cwd, capsys):
    code, err = run_plan(["nothere.onnx"], capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("graphmem: ")
    assert "no such file" in err[0]
    assert not list(tmp_cwd.iterdir())


def test_not_onnx(tmp_cwd, capsys):
    (tmp_cwd / "notes.onnx").write_text("hello, this is not a protobuf\n" * 20)
    code, err = run_plan(["notes.onnx"], capsys)
    assert code == 2 and len(err) == 1 and "not an ONNX model" in err[0]
    assert not (tmp_cwd / "notes.plan.json").exists()


def test_unbound_symbolic_dim_names_itself(tmp_cwd, capsys):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["N", 3])], [("y", F, ["N", 3])])
    onnx.save(m, tmp_cwd / "sym.onnx")
    code, err = run_plan(["sym.onnx"], capsys)
    assert code == 2 and len(err) == 1 and "'N'" in err[0] and "--dim N=" in err[0]
    assert not (tmp_cwd / "sym.plan.json").exists()
    assert main(["plan", "sym.onnx", "--dim", "N=8", "-q"]) == 0
    import json
    plan = json.loads((tmp_cwd / "sym.plan.json").read_text())
    assert plan["bindings"] == {"N": 8} and plan["tensors"]["x"]["bytes"] == 8 * 3 * 4


def test_shape_that_cannot_be_inferred(tmp_cwd, capsys):
    # an op from an unknown domain with no value_info: its output shape is unknowable
    m = make_model([helper.make_node("Mystery", ["x"], ["m"], domain="com.example"),
                    helper.make_node("Relu", ["m"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, tmp_cwd / "odd.onnx")
    (tmp_cwd / "odd.plan.json").write_text("previous plan")
    code, err = run_plan(["odd.onnx"], capsys)
    assert code == 2 and len(err) == 1
    assert "'m'" in err[0] and "Mystery" in err[0]
    assert (tmp_cwd / "odd.plan.json").read_text() == "previous plan"


def test_output_in_missing_folder(tmp_cwd, capsys):
    code, err = run_plan(["squeezenet", "-o", "no/such/dir/p.json"], capsys)
    assert code == 2 and "does not exist" in err[-1]


def test_a_command_imports_only_what_it_uses(tmp_path):
    """`plan` builds only its own parser: the verifier, ONNX Runtime and the training
    code stay unimported (a process that plans squeezenet spent 0.08 s importing them)."""
    import subprocess
    import sys
    code = ("import sys; from graphmem.cli import main; "
            f"rc = main(['plan', 'squeezenet', '-o', {str(tmp_path / 'p.json')!r}, '-q']); "
            "print(rc, sorted(m for m in ('graphmem.verify.verifier', 'onnxruntime', "
            "'graphmem.training.build', 'onnx.reference') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["0", "[]"]
