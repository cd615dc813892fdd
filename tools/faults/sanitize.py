"""Build graphmem's C extensions with AddressSanitizer and UndefinedBehaviorSanitizer
and run them on hostile input (issue 38).

    python -m tools.faults.sanitize            # the whole workload (about a minute)
    python -m tools.faults.sanitize --quick    # what tests/test_sanitizers.py runs
    python -m tools.faults.sanitize --check    # exit 3 when no compiler here can build them

graphmem/fitloops.c, graphmem/wire.c, graphmem/orderloops.c and graphmem/capsearch.c
are compiled into a
scratch folder with ``-fsanitize=address,undefined -fno-sanitize-recover=all``; a Python
process then loads those builds in place of the installed ones (ASan's runtime
preloaded, Python's own allocator off so that ASan sees every PyMem block) and runs:

- the tests of the compiled code: tests/test_fitloops_bounds.py, tests/test_wire.py,
  tests/test_reorder_reference.py (the order searches against their specification, and
  the schedules and orders they refuse), tests/test_place_capacity.py (the placement
  search against its specification, and the columns it refuses) and, without --quick,
  tests/test_place_reference.py and tests/test_share_reference.py;
- the reproducers of issue 38: ``fitloops.run`` with a plain item that has no parts, and
  values near 2^63;
- wire.parse_model on the generated cases of tools/faults/fuzz_reader.py (nesting 20,000 deep,
  floods of millions of entries) and on mutants of every seed model.

Any sanitizer report ends that process with an error and this script with exit 1.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from tools import ROOT

FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
         "-g", "-O1", "-shared", "-fPIC"]
MODULES = ("fitloops", "wire", "orderloops", "capsearch")

# runs inside the sanitized process: the scratch builds stand in for graphmem's modules
PRELUDE = """
import importlib.util, sys
import graphmem
for name in {modules!r}:
    spec = importlib.util.spec_from_file_location('graphmem.' + name, {folder!r} + '/' + name + {suffix!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules['graphmem.' + name] = module
    setattr(graphmem, name, module)
from graphmem import capsearch, fitloops, orderloops, wire
assert all(m.__file__.startswith({folder!r}) for m in (fitloops, orderloops, wire, capsearch))
"""

REPRODUCERS = """
import numpy as np
from graphmem import fitloops
I = np.int64
def run(tied, start, rel, nbytes, owner, a=(), b=(), alignment=64):
    base = np.zeros(len(tied), I)
    return fitloops.run(np.arange(len(tied), dtype=I), np.array(tied, np.uint8), np.array(start, I),
                        np.array(rel, I), np.array(nbytes, I), np.array(owner, np.int32),
                        np.array(a, np.int32), np.array(b, np.int32), alignment, base)
MAX = (1 << 63) - 1
cases = [([0, 0], [0, 0, 1], [0], [64], [1]), ([0], [0, 0], [], [], []),
         ([0, 0], [0, 1, 2], [0, 0], [MAX - 8, MAX - 8], [0, 1], [0], [1]),
         ([1], [0, 1], [MAX - 10], [64], [0]), ([0, 1], [0, 1, 2], [0, MAX], [64, MAX], [0, 1], [0], [1])]
for case in cases:
    try:
        run(*case)
    except ValueError as exc:
        print('refused:', exc)
share = fitloops.share
n = np.array([MAX, MAX, 1], I)
print('share blocks', share(np.array([0, 1, 2], I), np.array([5, 5, 5], I), n, MAX, np.zeros(3, I), np.zeros(3, I)))
"""

FUZZ = """
import random, sys
from tools.faults import fuzz_reader as fz
from graphmem import wire
import onnx
def parse(data):
    try:
        wire.parse_model(data)
        wire.parse_values(data)
    except ValueError:
        pass
import time
start = time.time()
for name, data in fz.generated({scale}).items():
    parse(data)
    print('generated', name, len(data), f'{{time.time() - start:.1f}} s', flush=True)
rng = random.Random(38)
for name, data in fz.seeds().items():
    if {only!r} and name not in {only!r}:
        continue
    m = fz.Mutator(data)
    for _ in range({mutants}):
        what, d = m.mutant(rng)
        parse(d)
        for cut in range(0, len(d), max(1, len(d) // 50)):
            parse(d[:cut])
    print('mutants of', name, f'{{time.time() - start:.1f}} s', flush=True)
"""


# a C extension that reads one byte past a heap block, built like the others
OOB_C = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
static PyObject *oob(PyObject *self, PyObject *arg)
{
    volatile char *p = malloc(8);
    char c = p[PyLong_AsLong(arg)];
    free((void *)p);
    return PyLong_FromLong(c);
}
static PyMethodDef methods[] = {{"oob", oob, METH_O, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "oob", "", -1, methods};
PyMODINIT_FUNC PyInit_oob(void) { return PyModule_Create(&def); }
"""
SELF_TEST = """
spec = importlib.util.spec_from_file_location('oob', {folder!r} + '/oob' + {suffix!r})
oob = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oob)
oob.oob(8)
"""


def compiler() -> str | None:
    """A C compiler that builds and runs a sanitized shared object, or None."""
    for cc in (os.environ.get("CC"), "gcc", "clang", "cc"):
        if cc and shutil.which(cc) and _runtime(cc):
            return cc
    return None


def _runtime(cc: str) -> str | None:
    """The ASan runtime ``cc`` links against (to preload into Python), or None."""
    try:
        out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not out or not os.path.isabs(out) or not os.path.exists(out):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.c"
        src.write_text("int f(int x) { return x + 1; }\n")
        try:
            ok = subprocess.run([cc, *FLAGS, str(src), "-o", str(Path(tmp) / "t.so")],
                                capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return None
    return os.path.realpath(out) if ok else None


def build(cc: str, folder: Path) -> str:
    """The extensions, sanitized, into ``folder``; returns their file suffix."""
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for name in MODULES:
        subprocess.run([cc, *FLAGS, f"-I{include}", str(ROOT / "graphmem" / f"{name}.c"),
                        "-o", str(folder / f"{name}{suffix}")], check=True)
    (folder / "oob.c").write_text(OOB_C)
    subprocess.run([cc, *FLAGS, f"-I{include}", str(folder / "oob.c"),
                    "-o", str(folder / f"oob{suffix}")], check=True)
    return suffix


def run_sanitized(cc: str, folder: Path, suffix: str, body: str, title: str) -> int:
    env = dict(os.environ,
               LD_PRELOAD=_runtime(cc),
               PYTHONMALLOC="malloc",
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1:exitcode=99",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=98",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                           os.environ.get("PYTHONPATH", "")]))
    code = PRELUDE.format(modules=MODULES, folder=str(folder), suffix=suffix) + body
    print(f"== {title}", flush=True)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env)
    if proc.returncode != 0:
        print(f"== {title}: exit {proc.returncode}"
              + (" (a sanitizer report)" if proc.returncode in (98, 99) else ""), flush=True)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small workload (the test's)")
    ap.add_argument("--check", action="store_true",
                    help="only say whether a sanitizing compiler is here (exit 3 if not)")
    args = ap.parse_args(argv)
    cc = compiler()
    if cc is None:
        print("sanitize: no C compiler here builds with -fsanitize=address,undefined "
              "(gcc or clang with libasan and libubsan)", file=sys.stderr)
        return 3
    if args.check:
        print(f"sanitize: {cc} ({_runtime(cc)})")
        return 0
    tests = ["tests/test_fitloops_bounds.py", "tests/test_wire.py",
             "tests/test_reorder_reference.py", "tests/test_place_capacity.py"]
    if not args.quick:
        tests += ["tests/test_place_reference.py", "tests/test_share_reference.py"]
    with tempfile.TemporaryDirectory(prefix="graphmem-sanitize-") as tmp:
        folder = Path(tmp)
        suffix = build(cc, folder)
        pytest_args = ["-q", "-x", "-p", "no:cacheprovider", *tests]
        if args.quick:  # the bounds tests and the hand-built wire cases
            pytest_args += ["-k", "not mutants and not light and not generated and not zoo"]
        steps = [
            (f"import pytest; sys.exit(pytest.main({pytest_args!r}))", "tests: " + " ".join(tests)),
            (REPRODUCERS, "issue 38's fitloops reproducers"),
            (FUZZ.format(mutants=30 if args.quick else 300,
                         scale=0.05 if args.quick else 1.0,
                         only=["small", "squeezenet", "rnn_loop_ts"] if args.quick else []),
             "wire.parse_model on generated cases and mutants"),
        ]
        # first, that a report is seen at all: a read past a heap block must fail the run
        if run_sanitized(cc, folder, suffix, SELF_TEST.format(
                folder=str(folder), suffix=suffix), "self-test: a read out of bounds") not in (98, 99):
            print("sanitize: the self-test's read out of bounds was not reported",
                  file=sys.stderr)
            return 1
        failed = [title for body, title in steps
                  if run_sanitized(cc, folder, suffix, body, title) != 0]
    if failed:
        print("sanitize: failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    print("sanitize: no sanitizer report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
