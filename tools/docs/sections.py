"""The one writer of the generated sections of README.md and docs/, and the line naming
the machine, the command and the versions a measurement was made with.

A generated section sits between ``<!-- NAME -->`` and ``<!-- /NAME -->`` (the benchmarks'
names begin with ``bench:``); tools/docs/doctables.py lists every section and the tool
that writes it, and tools/README.md says the same for readers.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path

from graphmem.plan.io import write_atomic
from tools import ROOT

BENCHMARKS = ROOT / "docs" / "benchmarks.md"


def write_doc(doc: Path, name: str, body: str) -> None:
    """Write ``body`` between ``<!-- name -->`` and ``<!-- /name -->`` in ``doc``, keeping
    the rest of the file; a section not in the file yet is added at its end. The body is
    written as it is (no regular-expression escapes), and the file is replaced whole."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    text = doc.read_text()
    start, stop = text.find(begin), text.find(end)
    if start >= 0 and stop > start:
        text = text[:start + len(begin)] + "\n" + body.strip() + "\n" + text[stop:]
    elif start < 0 and stop < 0:
        text = text.rstrip() + f"\n\n{begin}\n{body.strip()}\n{end}\n"
    else:
        raise SystemExit(f"{doc}: the markers {begin} ... {end} are out of order or one is missing")
    write_atomic(doc, text)


def publish(doc: Path, name: str, body: str, write: bool, rows: list | None = None,
            json_path: str | None = None) -> int:
    """What a tool does with a section it made: ``rows`` as JSON at ``json_path`` where
    given, the section written into ``doc`` where ``write``, the body printed; exit 0."""
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1, default=str))
    if write:
        write_doc(doc, name, body)
    print(body)
    return 0


def command() -> str:
    """The command line of this run, as a user types it from the repository root
    (``python -m tools.bench --scale``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = spec.name.removesuffix(".__main__") if spec is not None else Path(sys.argv[0]).name
    return " ".join(["python", "-m", name, *map(shlex.quote, sys.argv[1:])])


def environment() -> str:
    """``Generated <UTC time> by `<command>` on <machine>; <versions>.``"""
    import numpy as np
    import onnx
    import onnxruntime
    from importlib.metadata import PackageNotFoundError, version

    import graphmem

    def installed(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "n/a"

    return (f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by "
            f"`{command()}` on {cpu_name()}, "
            f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python "
            f"{platform.python_version()}; graphmem {getattr(graphmem, '__version__', '0.1.0')}, "
            f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, onnx-tool "
            f"{installed('onnx-tool')}, highspy {installed('highspy')}, numpy {np.__version__}.")


def cpu_name() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what platform knows."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu
