"""What planning the bodies of control-flow nodes costs and saves, on models/control_flow.py.

For each model: the arena with every body planned into its node's workspace (the
default), with each body opaque (its workspace as large as all its tensors one buffer
each, what a planner that does not look inside must reserve), and the arena of the
top-level tensors alone (the bodies invisible, as graphmem planned before: too small
to run). Prints a Markdown table; ``--doc`` writes it (without the times) into
docs/plan-format.md, where tools/docs/doctables.py checks it.

    python -m tools.docs.control_flow_table
    python -m tools.docs.control_flow_table --doc
"""
from __future__ import annotations

import argparse
import dataclasses
import time


from graphmem.frontend.reader import from_model
from graphmem.pipeline import plan_graph
from graphmem.planning.scopes import opaque_graph
from models.control_flow import MODELS


HEADER = ["| model | arena, bodies planned | arena, bodies opaque | saved | "
          "top level only (bodies invisible) |", "|---|---:|---:|---:|---:|"]


def row(name: str, seconds: list | None = None) -> str:
    """The table's row of one model of models/control_flow.py (its plan time appended
    to ``seconds`` when given)."""
    graph = from_model(MODELS[name](), model_path=f"{name}.onnx")
    t0 = time.perf_counter()
    nested = plan_graph(graph).plan.arena_bytes
    if seconds is not None:
        seconds.append(time.perf_counter() - t0)
    opaque = plan_graph(opaque_graph(graph)).plan.arena_bytes
    invisible = plan_graph(dataclasses.replace(graph, scopes={})).plan.arena_bytes
    return (f"| {name} | {nested:,} | {opaque:,} | {1 - nested / opaque:.1%} | "
            f"{invisible:,} |")


def main() -> None:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--doc", action="store_true",
                    help="write the table into docs/plan-format.md")
    args = ap.parse_args()
    lines, seconds = list(HEADER), []
    print(HEADER[0] + " plan time |")
    print(HEADER[1] + "---:|")
    for name in MODELS:
        lines.append(row(name, seconds))
        print(f"{lines[-1]} {seconds[-1] * 1000:.0f} ms |")
    if args.doc:
        from tools import ROOT
        from tools.docs.sections import write_doc
        write_doc(ROOT / "docs" / "plan-format.md", "control-flow-table", "\n".join(lines))


if __name__ == "__main__":
    main()
