"""`graphmem --version` answers without the planner's imports (numpy, onnx, the passes)."""
from __future__ import annotations

import subprocess
import sys

import graphmem


def test_version_imports_no_command():
    code = ("import sys\n"
            "from graphmem.cli import main\n"
            "try:\n"
            "    main(['--version'])\n"
            "except SystemExit as exc:\n"
            "    assert exc.code in (0, None), exc.code\n"
            "heavy = sorted(m for m in ('numpy', 'onnx', 'onnxruntime', 'graphmem.pipeline',\n"
            "                           'graphmem.commands.plan') if m in sys.modules)\n"
            "print('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"graphmem {graphmem.__version__}" in out.stdout
    assert "HEAVY []" in out.stdout
