"""``python tools/plan_digest.py ...``: the path the house rules give for the plan digest,
kept as an entry to ``python -m tools.checks.plan_digest ...`` (tools/checks/plan_digest.py),
which it runs with the same arguments and working directory and this checkout's tools.

A file run by path has its own folder, not the repository root, on Python's search path,
so it cannot import ``tools.*`` or ``models``; instead of editing the path this entry
starts the module in a new process with this checkout on ``PYTHONPATH``.
"""
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONHASHSEED": "0",
           "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    os.execve(sys.executable, [sys.executable, "-m", "tools.checks.plan_digest", *sys.argv[1:]], env)
