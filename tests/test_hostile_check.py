"""A fast part of tools/faults/hostile_check.py (issue 25's independent checker) in the default
run; the whole of it (signals, a 40,000-output fan-out) is a tool: see its docstring."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = [sys.executable, "-m", "tools.faults.hostile_check"]  # run from ROOT


def test_the_checker_passes_its_fast_cases():
    for only in ("read-only output", "devices and FIFOs"):
        proc = subprocess.run([*TOOL, "--only", only], capture_output=True, text=True,
                              timeout=300, cwd=ROOT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "| ok |" in proc.stdout and "**FAIL**" not in proc.stdout
