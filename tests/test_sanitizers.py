"""graphmem's C code under AddressSanitizer and UndefinedBehaviorSanitizer (issue 38).

tools/faults/sanitize.py --quick builds graphmem/fitloops.c, graphmem/wire.c and
graphmem/orderloops.c with -fsanitize=address,undefined in a scratch folder and runs, in a
process that loads those builds: a self-test (a read past a heap block must be reported),
the bounds tests of the modules, the order searches against their specification, issue
38's fitloops reproducers, and wire.parse_model on nesting 20,000 deep, floods and
mutants. The whole workload: ``python -m tools.faults.sanitize``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = [sys.executable, "-m", "tools.faults.sanitize"]  # run from ROOT


def test_the_compiled_code_gives_no_sanitizer_report():
    check = subprocess.run([*TOOL, "--check"], capture_output=True, text=True, cwd=ROOT)
    if check.returncode == 3:
        pytest.skip(check.stderr.strip())  # names the missing compiler or runtime
    assert check.returncode == 0, check.stderr
    proc = subprocess.run([*TOOL, "--quick"], capture_output=True, text=True, timeout=900,
                          cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "self-test: a read out of bounds: exit 9" in out  # the report was seen
    assert "sanitize: no sanitizer report" in out
