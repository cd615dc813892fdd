"""`graphmem --help` and `graphmem CMD --help` answer without the planner's imports
(numpy, onnx, ONNX Runtime, the pipeline, the verifier): building the parser imports
none of them, and the names its options offer are those of what they name."""
from __future__ import annotations

import subprocess
import sys

import pytest

from graphmem.cli import COMMANDS

HEAVY = ("numpy", "onnx", "onnxruntime", "graphmem.pipeline", "graphmem.verify",
         "graphmem.passes.registry")


@pytest.mark.parametrize("argv", [["--help"], *[[c, "--help"] for c in COMMANDS]],
                         ids=lambda a: " ".join(a))
def test_help_imports_no_planner(argv):
    code = ("import sys\n"
            "from graphmem.cli import main\n"
            "try:\n"
            f"    main({argv!r})\n"
            "except SystemExit as exc:\n"
            "    assert exc.code in (0, None), exc.code\n"
            f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
            "print('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: graphmem"), out.stdout[:200]
    assert "HEAVY []" in out.stdout


def test_the_option_names_are_those_of_what_they_name():
    from graphmem.commands import option_names as names
    from graphmem.passes.placement.search import STRATEGIES
    from graphmem.passes.registry import DEFAULT_PASSES, PASSES
    from graphmem.training.selective import CHOICES
    from graphmem.verify.verifier import PROVIDERS
    assert names.PASS_NAMES == tuple(PASSES)
    assert names.DEFAULT_PASS_NAMES == tuple(DEFAULT_PASSES)
    assert names.STRATEGY_NAMES == tuple(STRATEGIES)
    assert names.PROVIDER_NAMES == tuple(PROVIDERS)
    assert names.SELECTIVE_CHOICES == tuple(CHOICES)


def test_plan_help_lists_every_pass_and_strategy():
    from graphmem.cli import build_parser
    from graphmem.passes.placement.search import STRATEGIES
    from graphmem.passes.registry import PASSES
    text = build_parser(["plan"]).commands.choices["plan"].format_help()
    for name in PASSES:
        assert f"--no-{name}" in text
    for name in STRATEGIES:
        assert name in text
