"""`graphmem report` on the nine zoo graphs at batch 1, float32, default passes: the
README's table of parameters, weights, activations, workspace and MACs.

    python -m tools.docs.report_table            # print the Markdown table
    python -m tools.docs.report_table --readme   # also rewrite it in README.md

Every figure is what `python -m graphmem report MODEL --json` gives (``totals``);
tools/docs/doctables.py checks the README's copy.
"""
from __future__ import annotations

import argparse


import graphmem
from graphmem.analysis.breakdown import report
from graphmem.frontend.zoo import ZOO, zoo_path

MIB = 2 ** 20
HEADER = ["| model | params | weights MiB | naive act MiB | arena MiB | workspace MiB "
          "| GMACs all ops | GMACs (matrix ops) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]


def row(name: str) -> str:
    """The table's row of one zoo model."""
    graph = graphmem.load(zoo_path(name))
    plan = graphmem.plan_graph(graph, model_name=f"{name}.onnx").plan
    t = report(graph, plan)["totals"]
    return (f"| {name} | {t['params']:,} | {t['weight_bytes'] / MIB:.2f} "
            f"| {t['activation_bytes_naive'] / MIB:.2f} | {t['arena_bytes'] / MIB:.2f} "
            f"| {t['workspace_bytes'] / MIB:.2f} | {t['macs'] / 1e9:.3f} "
            f"| {t['matrix_macs'] / 1e9:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--readme", action="store_true", help="rewrite the table in README.md")
    args = ap.parse_args()
    table = "\n".join(HEADER + [row(name) for name in ZOO])
    print(table)
    if args.readme:
        from tools import ROOT
        from tools.docs.sections import write_doc
        write_doc(ROOT / "README.md", "report-table", table)


if __name__ == "__main__":
    main()
