"""What planning the bodies of control-flow nodes costs and saves, on models/control_flow.py.

For each model: the arena with every body planned into its node's workspace (the
default), with each body opaque (its workspace as large as all its tensors one buffer
each, what a planner that does not look inside must reserve), and the arena of the
top-level tensors alone (the bodies invisible, as graphmem planned before: too small
to run). Prints a Markdown table (docs/plan-format.md quotes it).

    python tools/control_flow_table.py
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graphmem.frontend.reader import from_model  # noqa: E402
from graphmem.pipeline import plan_graph  # noqa: E402
from graphmem.planning.scopes import opaque_graph  # noqa: E402
from models.control_flow import MODELS  # noqa: E402


def main() -> None:
    print("| model | arena, bodies planned | arena, bodies opaque | saved | "
          "top level only (bodies invisible) | plan time |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, build in MODELS.items():
        graph = from_model(build(), model_path=f"{name}.onnx")
        t0 = time.perf_counter()
        nested = plan_graph(graph).plan.arena_bytes
        seconds = time.perf_counter() - t0
        opaque = plan_graph(opaque_graph(graph)).plan.arena_bytes
        invisible = plan_graph(dataclasses.replace(graph, scopes={})).plan.arena_bytes
        print(f"| {name} | {nested:,} | {opaque:,} | {1 - nested / opaque:.1%} | "
              f"{invisible:,} | {seconds * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
