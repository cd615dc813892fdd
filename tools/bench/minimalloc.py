"""graphmem's placement against MiniMalloc's solver on MiniMalloc's 11 challenging
instances (tests/data/minimalloc), side by side in one run, CPU seconds, interleaved.

    python -m tools.bench.minimalloc [--minimalloc-src DIR | --minimalloc BIN] [--write]

``--minimalloc-src``: a checkout of google/minimalloc; its ``src/`` is compiled here
(g++, C++20, -O2 -DNDEBUG) against the system's abseil (Debian ``libabsl-dev``) in a
temporary folder, nothing of it kept. Where that abseil lacks ``absl/log`` (before
20230125) three small headers stand in for it (MiniMalloc logs only in its command
line front end and in debug builds), and where abseil's ``string_view`` is not
``std::string_view`` one loop variable of its CSV reader is declared as abseil's.
Without either option only graphmem runs.

Per instance, in turn: MiniMalloc at the capacity (its child process's CPU time, CSV
reading included), graphmem's ``place_buffers(..., capacity)`` (this process's CPU time,
preparation included), and graphmem's smallest arena (``place_buffers`` without a
capacity: the heuristics, then the search from the max-live floor up). Every placement
is checked with ``check_placement`` (MiniMalloc's output file too). ``--write`` puts
the table into docs/benchmarks.md (the bench:minimalloc section).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graphmem.passes.placement import capacity
from graphmem.passes.placement.buffers import check_placement, place_buffers
from tools import ROOT

DATA = ROOT / "tests" / "data" / "minimalloc"
CAPACITY = 1_048_576

LOG_SHIM = {
    "log.h": "#pragma once\n#include <iostream>\n#define LOG(severity) std::cerr\n"
             "#define DLOG(severity) if (true) {} else std::cerr\n",
    "initialize.h": "#pragma once\nnamespace absl { inline void InitializeLog() {} }\n",
    "globals.h": '#pragma once\n#include "absl/base/log_severity.h"\nnamespace absl {\n'
                 "inline void SetStderrThreshold(absl::LogSeverityAtLeast) {}\n"
                 "inline void EnableLogPrefix(bool) {}\n}\n",
}
ABSL = ("absl_flags", "absl_flags_parse", "absl_statusor", "absl_status", "absl_strings",
        "absl_time", "absl_hash", "absl_raw_hash_set")


def build_minimalloc(src: Path, work: Path) -> Path:
    """MiniMalloc's binary, compiled from ``src`` (a checkout) in ``work``."""
    if not shutil.which("g++") or not shutil.which("pkg-config"):
        raise SystemExit("building MiniMalloc needs g++ and pkg-config")
    code = work / "src"
    shutil.copytree(src / "src", code)
    include = ["-I", str(code)]
    if not Path("/usr/include/absl/log/log.h").exists():
        shim = work / "shim" / "absl" / "log"
        shim.mkdir(parents=True)
        for name, text in LOG_SHIM.items():
            (shim / name).write_text(text)
        include += ["-I", str(work / "shim")]
    reader = code / "converter.cc"
    reader.write_text(reader.read_text().replace(
        "for (const std::string_view& record : records)",
        "for (absl::string_view record : records)"))
    libs = subprocess.run(["pkg-config", "--libs", *ABSL], check=True, capture_output=True,
                          text=True).stdout.split()
    binary = work / "minimalloc"
    sources = [str(code / f"{n}.cc") for n in
               ("converter", "minimalloc", "solver", "sweeper", "validator", "main")]
    subprocess.run(["g++", "-O2", "-DNDEBUG", "-std=c++20", *include, *sources, "-o",
                    str(binary), *libs], check=True)
    return binary


def read(path: Path) -> dict[str, list[int]]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {c: [int(r[c]) for r in rows] for c in ("lower", "upper", "size")} | {
        "offset": [int(r["offset"]) for r in rows] if rows and "offset" in rows[0] else None}


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_minimalloc(binary: Path, path: Path, work: Path) -> tuple[float, bool]:
    """(CPU seconds, placement valid within the capacity)."""
    out = work / f"{path.stem}.out.csv"
    before = child_cpu()
    done = subprocess.run([str(binary), f"--capacity={CAPACITY}", f"--input={path}",
                           f"--output={out}"], capture_output=True, text=True)
    seconds = child_cpu() - before
    if done.returncode != 0 or not out.exists():
        return seconds, False
    got = read(out)
    return seconds, not check_placement(got["size"], got["lower"], got["upper"],
                                        got["offset"], CAPACITY)


def run_graphmem(cols: dict, cap: int | None):
    start = time.process_time()
    got = place_buffers(cols["size"], cols["lower"], cols["upper"], cap)
    seconds = time.process_time() - start
    ok = got.offsets is not None and not check_placement(
        cols["size"], cols["lower"], cols["upper"], got.offsets.tolist(), cap)
    return seconds, got, ok


def environment(argv: list[str], mm: bool) -> str:
    from tools.docs.sections import cpu_name
    import numpy
    cc = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout \
        .splitlines()[0] if mm else ""
    # the folders given are this machine's: the command is written with their names
    shown = [("DIR" if a.startswith("/") else a) for a in argv]
    return (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by "
            f"`{' '.join(['python -m tools.bench.minimalloc', *shown])}` on {cpu_name()}, "
            f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python "
            f"{platform.python_version()}, numpy {numpy.__version__}"
            + (f"; MiniMalloc built with {cc}" if mm else "") + ".")


def section(rows: list[list[str]], env: str) -> str:
    header = ["instance", "buffers", "max-live floor", "MiniMalloc fits", "MiniMalloc CPU s",
              "graphmem fits", "graphmem CPU s", "graphmem by", "search nodes",
              "graphmem smallest arena", "proven optimal", "CPU s"]
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if h in ("instance", "graphmem by") else "---:"
                            for h in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    table = "\n".join(lines)
    return f"""## Placement at a fixed capacity: MiniMalloc's challenging instances

Generated {env}

MiniMalloc's 11 challenging instances (tests/data/minimalloc: 154 to 454 buffers from
production ML workloads), each to be placed in 1,048,576 bytes. MiniMalloc: its own
solver built from its source, default options, at that capacity (CPU seconds of its
process). graphmem at that capacity: `place_buffers(size, lower, upper, 1048576)`
(passes/placement/buffers.py, what `graphmem place --capacity` runs: the heuristics,
then the complete search of passes/placement/capacity.py), CPU seconds in this
process. graphmem's smallest arena: `place_buffers` without a capacity (the search at
the max-live floor first), 'proven optimal' when the search proves no smaller arena
exists. Run one after the other per instance; every placement is checked pairwise
(`check_placement`), and a 'yes' means it was found and valid.

{table}"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m tools.bench.minimalloc",
                                description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--minimalloc-src", metavar="DIR", help="a google/minimalloc checkout")
    g.add_argument("--minimalloc", metavar="BIN", help="MiniMalloc's binary, built already")
    p.add_argument("--only", metavar="A,B", help="these instances only")
    p.add_argument("--write", action="store_true",
                   help="write the table into docs/benchmarks.md (bench:minimalloc)")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list("ABCDEFGHIJK")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        binary = None
        if args.minimalloc_src:
            binary = build_minimalloc(Path(args.minimalloc_src), work)
        elif args.minimalloc:
            binary = Path(args.minimalloc)
        for name in names:
            path = DATA / f"{name}.{CAPACITY}.csv"
            cols = read(path)
            floor = capacity.prepare(cols["size"], cols["lower"], cols["upper"]).floor
            mm = run_minimalloc(binary, path, work) if binary else None
            g_s, got, g_ok = run_graphmem(cols, CAPACITY)
            m_s, best, m_ok = run_graphmem(cols, None)
            row = [name, f"{len(cols['size']):,}", f"{floor:,}",
                   ("yes" if mm[1] else "no") if mm else "n/a",
                   f"{mm[0]:.2f}" if mm else "n/a",
                   "yes" if g_ok else f"no ({got.status})", f"{g_s:.2f}", got.method,
                   f"{got.nodes:,}", f"{best.total:,}" if m_ok else "invalid",
                   "yes" if best.proven else "no", f"{m_s:.2f}"]
            print(" | ".join(row), file=sys.stderr, flush=True)
            rows.append(row)
    env = environment(argv, binary is not None)
    body = section(rows, env)
    print(body)
    if args.write:
        from tools.docs.sections import BENCHMARKS, write_doc
        write_doc(BENCHMARKS, "bench:minimalloc", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
