"""What the benchmarks share: the repository root, docs/benchmarks.md and its sections,
and the line naming the machine and the versions a run was measured with.
tools/bench.py and tools/scale.py both write through this module."""
from __future__ import annotations

import datetime
import platform
import re
import sys
from pathlib import Path

import numpy as np
import onnx

import graphmem
from graphmem.plan.io import write_atomic

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"


def environment() -> str:
    import onnxruntime
    try:
        import highspy  # noqa: F401
        from importlib.metadata import version
        hv = version("highspy")
    except Exception:
        hv = "n/a"
    try:
        from importlib.metadata import version
        otv = version("onnx-tool")
    except Exception:
        otv = "n/a"
    cpu = cpu_name()
    import os
    return (f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by "
            f"`{' '.join(['python tools/bench.py', *sys.argv[1:]])}` on {cpu}, "
            f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python "
            f"{platform.python_version()}; graphmem {getattr(graphmem, '__version__', '0.1.0')}, "
            f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, onnx-tool {otv}, "
            f"highspy {hv}, numpy {np.__version__}.")


def write_section(key: str, body: str, doc: Path = DOC) -> None:
    """Replace the text between ``<!-- bench:KEY -->`` and ``<!-- /bench:KEY -->``, keeping the rest."""
    begin, end = f"<!-- bench:{key} -->", f"<!-- /bench:{key} -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(doc, text)


def replace_marked(doc: Path, name: str, body: str) -> None:
    """Write ``body`` between ``<!-- name -->`` and ``<!-- /name -->`` in ``doc``, keeping
    the rest (tools/doctables.py lists every such section and checks it)."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    text = doc.read_text()
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise SystemExit(f"{doc}: no {begin} ... {end} markers to write between")
    write_atomic(doc, text[:start + len(begin)] + "\n" + body.strip() + "\n" + text[stop:])


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
