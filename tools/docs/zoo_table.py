"""Plan the nine zoo graphs with the default passes and print (or write) the table.

    python -m tools.docs.zoo_table            # print a Markdown table
    python -m tools.docs.zoo_table --readme   # also rewrite the table in README.md

The columns: nodes that run; naive (one buffer per tensor); the unaliased peak (most
bytes live at one step, every tensor counted alone); the aliased peak (storage shared
by aliases counted once: no arena for that order is smaller); the MXNet-style share
pass's storage total; the plain MXNet pipeline (inplace, share, place) at the file's
order; graphmem's arena. tools/docs/doctables.py checks the README's copy.
"""
from __future__ import annotations

import argparse
import time


import graphmem
from graphmem.frontend.zoo import ZOO, zoo_path

MIB = 2 ** 20
HEADER = ["| model | nodes | naive MiB | unaliased peak MiB | aliased peak MiB | share (MXNet) MiB "
          "| file order, inplace+place MiB | arena MiB | arena / aliased peak | load s | plan s |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def row(name: str) -> str:
    """The table's row of one zoo model."""
    t0 = time.perf_counter()
    graph = graphmem.load(zoo_path(name))
    load_s = time.perf_counter() - t0
    result = graphmem.plan_graph(graph, model_name=f"{name}.onnx")
    s = result.plan.stats
    # the share pass's own storage total, in the plan's pipeline
    share = next(r.detail["total_bytes"] for r in result.reports if r.name == "share")
    # the core MXNet-style pipeline at the file's order, for comparison
    classic = graphmem.plan_graph(graph, ["inplace", "share", "place"]).plan.arena_bytes
    return (f"| {name} | {len(result.plan.order)} | {s['naive_bytes'] / MIB:.2f} "
            f"| {s['unaliased_peak_bytes'] / MIB:.2f} | {s['aliased_peak_bytes'] / MIB:.2f} "
            f"| {share / MIB:.2f} | {classic / MIB:.2f} | **{s['arena_bytes'] / MIB:.2f}** "
            f"| {s['arena_bytes'] / s['aliased_peak_bytes']:.4f} | {load_s:.2f} "
            f"| {result.seconds:.3f} |")


def rows() -> list[str]:
    return HEADER + [row(name) for name in ZOO]


def main() -> None:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--readme", action="store_true", help="rewrite the table in README.md")
    args = ap.parse_args()
    table = "\n".join(rows())
    print(table)
    if args.readme:
        from tools import ROOT
        from tools.docs.sections import write_doc
        write_doc(ROOT / "README.md", "zoo-table", table)


if __name__ == "__main__":
    main()
