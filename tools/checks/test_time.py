"""The README's test command timed: ``python -m pytest -q`` (the default run), optionally
while other processes keep every core busy, and its wall time written into README.md.

    python -m tools.checks.test_time [--busy N] [--write] [-- PYTEST ARGS]

``--busy N`` starts N processes that spin on the CPU for the whole run (N = the number
of cores: "another process keeps both cores busy" on a 2-core machine); the machine's
load average is read before and after. ``--write`` rewrites README.md's ``test-time``
section with the wall time, pytest's summary line and the conditions it ran under.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time

from tools import ROOT
from tools.docs.sections import cpu_name, write_doc

README = ROOT / "README.md"
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|error|skipped).*?)\s*=*$")

# a process that spins on the CPU until it is ended
_SPIN = "while True:\n    pass\n"


def _busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(n)]


def run(pytest_args: list[str], busy: int) -> dict:
    """The default test run, timed: wall seconds, exit status, pytest's last line, the
    load averages before and after and the spinning processes beside it."""
    spinners = _busy(busy)
    try:
        before = os.getloadavg()[0]
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", *pytest_args],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace")
        wall = time.perf_counter() - start
        after = os.getloadavg()[0]
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    summary = next((m.group(1) for ln in reversed(lines) if (m := SUMMARY.match(ln))),
                   lines[-1] if lines else "")
    return {"wall": wall, "code": proc.returncode, "summary": summary, "before": before,
            "after": after, "busy": busy, "output": proc.stdout}


def section(result: dict, pytest_args: list[str]) -> str:
    cmd = "python -m tools.checks.test_time" + (f" --busy {result['busy']}"
                                                 if result["busy"] else "") + " --write"
    if pytest_args:
        cmd += " -- " + " ".join(pytest_args)
    stamp = (f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} "
             f"by `{cmd}` on {cpu_name()}, {os.cpu_count()} CPUs, Python "
             f"{platform.python_version()}.")
    beside = (f"with {result['busy']} processes spinning on the CPU beside it"
              if result["busy"] else "with nothing of its own beside it")
    minutes, seconds = divmod(round(result["wall"]), 60)
    return (f"{stamp}\n\nThe default run (`python -m pytest -q`) took {minutes} min "
            f"{seconds:02d} s of wall time, {beside} (the machine's 1-minute load average: "
            f"{result['before']:.1f} at the start, {result['after']:.1f} at the end); "
            f"exit status {result['code']}: {result['summary']}.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=0,
                    help="processes spinning on the CPU during the run (default 0)")
    ap.add_argument("--write", action="store_true",
                    help="rewrite README.md's test-time section")
    ap.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = ap.parse_args(argv)
    result = run(args.pytest_args, args.busy)
    body = section(result, args.pytest_args)
    tail = "\n".join(result["output"].splitlines()[-40:])
    print(tail, file=sys.stderr)
    print(body)
    if args.write:
        write_doc(README, "test-time", body)
    return result["code"]


if __name__ == "__main__":
    sys.exit(main())
