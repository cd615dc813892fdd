"""Real exports without torch (issue 21): small BERT and GPT-2 decode-step graphs written
by PyTorch's TorchScript (``-ts``) and dynamo (``-dynamo``) exporters, kept with their
weights in tests/data/corpus (hidden 32, 2 layers, vocabulary 100; made by
``python -m tools.corpus.export_corpus export --tiny --models bert,gpt2-past --out DIR``).
Each is planned, checked by an independent validation, verified on ONNX Runtime CPU and
reported with only ``--dim`` bindings, as a user would run them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import graphmem
from graphmem.cli import main
from graphmem.frontend.dim_expressions import is_expression, parse

CORPUS = Path(__file__).parent / "data" / "corpus"
BERT = {"batch": 1, "seq": 16}
GPT2_PAST = {"batch": 1, "seq": 1, "past_seq": 16}
CASES = {
    "bert-ts": BERT, "bert-dynamo": BERT,
    "gpt2-past-ts": GPT2_PAST, "gpt2-past-dynamo": GPT2_PAST,
}
def dim_args(dims: dict[str, int]) -> list[str]:
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]


def double(dims: dict[str, int]) -> dict[str, int]:
    """The second binding: batch and the (past) sequence doubled; a decode step's seq stays 1."""
    return {k: (v if v == 1 and k == "seq" else 2 * v) for k, v in dims.items()}


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """name -> the plan file `graphmem plan MODEL --dim ...` wrote."""
    out = tmp_path_factory.mktemp("corpus")
    plans = {}
    for name, dims in CASES.items():
        path = out / f"{name}.plan.json"
        assert main(["plan", str(CORPUS / f"{name}.onnx"), *dim_args(dims), "-o", str(path),
                     "--quiet"]) == 0
        plans[name] = path
    return plans


def test_fixtures_are_small_and_symbolic():
    import onnx
    for name, dims in CASES.items():
        path = CORPUS / f"{name}.onnx"
        assert path.stat().st_size < 1 << 20
        m = onnx.load(str(path))
        names = {d.dim_param for vi in m.graph.input for d in vi.type.tensor_type.shape.dim
                 if d.dim_param}
        assert names == set(dims), name


@pytest.mark.parametrize("name", list(CASES))
def test_plan_passes_an_independent_check(planned, name):
    graph = graphmem.load(CORPUS / f"{name}.onnx", dims=CASES[name])  # a fresh load
    plan = graphmem.Plan.load(planned[name])
    graphmem.validate(plan, graph)
    assert plan.arena_bytes > 0
    # the dims bound, and those written as expressions of them evaluated (bert-dynamo's
    # 'Min(64, seq)')
    given = {k: v for k, v in plan.bindings.items() if not is_expression(k)}
    assert given == CASES[name]
    for k, v in plan.bindings.items():
        if is_expression(k):
            assert parse(k).value(CASES[name]) == v


@pytest.mark.parametrize("name", list(CASES))
def test_verify_passes_on_onnx_runtime_cpu(planned, name, capsys):
    code = main(["verify", str(CORPUS / f"{name}.onnx"), *dim_args(CASES[name]),
                 "--plan", str(planned[name])])
    assert code == 0, capsys.readouterr()


@pytest.mark.parametrize("name", list(CASES))
def test_weights_do_not_change_with_batch_or_sequence(name, capsys):
    totals = []
    for dims in (CASES[name], double(CASES[name])):
        assert main(["report", str(CORPUS / f"{name}.onnx"), *dim_args(dims), "--json",
                     "--no-layers"]) == 0
        out = json.loads(capsys.readouterr().out)
        totals.append((out["totals"]["params"], out["totals"]["weight_bytes"]))
    assert totals[0] == totals[1]
    assert totals[0][0] > 10_000  # the embeddings and both layers are counted as weights


@pytest.mark.parametrize("name", list(CASES))
def test_fit_finds_a_batch(name, capsys):
    # the exporters size masks and position ids from Shape arithmetic (a Range over the
    # batch grows with no data path from an input; a Shape of a growing input does not)
    code = main(["fit", str(CORPUS / f"{name}.onnx"), *dim_args(CASES[name]),
                 "--budget", "256MiB", "--json"])
    assert code == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out)["batch"] > 1


@pytest.mark.parametrize("name", list(CASES))
def test_train_builds_with_dims(name, capsys):
    # BERT has last_hidden_state and pooler_output, the decode step logits and the
    # present keys and values: the loss is taken of the first output
    dims = {**CASES[name], "batch": 2}
    code = main(["train", str(CORPUS / f"{name}.onnx"), *dim_args(dims), "--json"])
    assert code == 0, capsys.readouterr()
    out = json.loads(capsys.readouterr().out)
    assert out["batch"] == 2 and out["arena_bytes"] > 0 and out["weight_bytes"] > 0


def test_export_failure_names_the_cause_not_the_wrapper():
    """A dynamo export that fails is recorded with torch.export's own error (the exception
    the exporter's wrapper was raised from) and the line of code it names, without the
    wrapper's advice or terminal colours: the corpus table shows why the model failed."""
    from tools.corpus.export_corpus import _export_reason

    class GuardOnDataDependentSymNode(RuntimeError):
        pass

    class TorchExportError(RuntimeError):
        pass

    inner = GuardOnDataDependentSymNode(
        "Could not guard on data-dependent expression Eq(u0, 0)\n\nconsider using ...\n"
        "Caused by: (torchvision/ops/boxes.py:103 in _batched_nms_coordinate_trick)\n"
        "For more information, run with TORCH_LOGS=\"dynamic\"")
    try:
        try:
            raise inner
        except GuardOnDataDependentSymNode as exc:
            raise TorchExportError("Failed to export the model with torch.export. "
                                   "\x1b[96mThis is step 1/3\x1b[0m of exporting") from exc
    except TorchExportError as outer:
        line = _export_reason(outer)
    assert line == ("GuardOnDataDependentSymNode: Could not guard on data-dependent "
                    "expression Eq(u0, 0) Caused by: (torchvision/ops/boxes.py:103 in "
                    "_batched_nms_coordinate_trick)")
    assert _export_reason(ValueError("\x1b[1mbad\x1b[0m shape")) == "ValueError: bad shape"
