"""Plan the nine zoo graphs with the default passes and print (or write) the table.

    python tools/zoo_table.py            # print a Markdown table
    python tools/zoo_table.py --readme   # also rewrite the table in README.md
"""
from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import graphmem
from graphmem.frontend.zoo import ZOO, zoo_path

MIB = 2 ** 20


def rows() -> list[str]:
    out = ["| model | nodes | naive MiB | lower bound MiB | aliased peak MiB | share (MXNet) MiB "
           "| file order, inplace+place MiB | arena MiB | arena / aliased peak | load s | plan s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ZOO:
        t0 = time.perf_counter()
        graph = graphmem.load(zoo_path(name))
        load_s = time.perf_counter() - t0
        result = graphmem.plan_graph(graph, model_name=f"{name}.onnx")
        s = result.plan.stats
        share = next(r.detail["total_bytes"] for r in result.reports if r.name == "share")
        # the core MXNet-style pipeline at the file's order, for comparison
        classic = graphmem.plan_graph(graph, ["inplace", "share", "place"]).plan.arena_bytes
        out.append(
            f"| {name} | {len(result.plan.order)} | {s['naive_bytes'] / MIB:.2f} "
            f"| {s['lower_bound_bytes'] / MIB:.2f} | {s['aliased_peak_bytes'] / MIB:.2f} "
            f"| {share / MIB:.2f} | {classic / MIB:.2f} | **{s['arena_bytes'] / MIB:.2f}** "
            f"| {s['arena_bytes'] / s['aliased_peak_bytes']:.4f} | {load_s:.2f} "
            f"| {result.seconds:.3f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", action="store_true", help="rewrite the table in README.md")
    args = ap.parse_args()
    table = "\n".join(rows())
    print(table)
    if args.readme:
        readme = Path(__file__).resolve().parent.parent / "README.md"
        text = readme.read_text()
        text = re.sub(r"<!-- zoo-table -->.*<!-- /zoo-table -->",
                      f"<!-- zoo-table -->\n{table}\n<!-- /zoo-table -->", text, flags=re.S)
        readme.write_text(text)


if __name__ == "__main__":
    main()
