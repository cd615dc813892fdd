"""``graphmem plan MODEL``: plan the arena and write the plan file."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from graphmem.pipeline import Result
from graphmem.commands.common import (add_model_args, add_pass_args, add_runtime_args,
                                      exported_arena, input_paths, load_graph, model_stem,
                                      plan_from_args, shown)
from graphmem.plan.io import check_output

if TYPE_CHECKING:
    from rich.console import Console


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="plan the memory of a model and write graphmem.plan/1 JSON",
                       description="Plan every tensor of MODEL at an offset in one arena.")
    add_model_args(p)
    add_pass_args(p)
    add_runtime_args(p)
    p.add_argument("-o", "--output", metavar="PATH",
                   help="plan file to write (default: <model>.plan.json; '-' prints it)")
    p.add_argument("--quiet", "-q", action="store_true", help="print no summary")
    p.add_argument("--verify", action="store_true",
                   help="then run the model inside the planned arena on ONNX Runtime (CPU) "
                        "and compare with a plain run (see `graphmem verify`); exit 1 on FAIL")
    p.set_defaults(func=run)


def run(args) -> int:
    out = args.output or f"{model_stem(args)}.plan.json"
    inputs = input_paths(args)
    if out != "-":
        check_output(out, inputs)  # before the work: a bad output fails at once
    graph, load_seconds = load_graph(args)
    result = plan_from_args(args, graph)
    runtime = runtime_summary(args)
    if out == "-":
        sys.stdout.write(result.plan.to_json())
    else:
        result.plan.save(out, inputs=inputs)
    if not args.quiet:
        from rich.console import Console
        console = Console(stderr=out == "-")
        print_summary(console, result, load_seconds, None if out == "-" else out, runtime)
    if args.verify:
        from argparse import Namespace
        from graphmem.commands.verify import Heartbeat, print_report, run_verify
        from rich.console import Console
        with Heartbeat(enabled=not Console(stderr=True).is_terminal) as beat:
            beat.status = "checking the plan, then the reference run on ONNX Runtime"
            report = run_verify(result.plan, graph, Namespace(
                provider=args.provider, runtime_only=False, check_all=False, seed=0,
                force=False), beat)
        print_report(Console(stderr=out == "-"), report)
        return 0 if report.passed else 1
    return 0


def mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


def runtime_summary(args) -> dict | None:
    """With ``--ort-optimize``: the level, provider, what ONNX Runtime took to optimize,
    and the arena of the model as exported (planned with the same options)."""
    optimized = getattr(args, "optimized", None)
    if optimized is None:
        return None
    exported = exported_arena(args)
    return {"level": optimized.level, "provider": optimized.provider,
            "optimize_seconds": optimized.seconds,
            "exported_arena_bytes": exported["arena_bytes"],
            "exported_nodes": exported["nodes"], "exported_error": exported.get("error")}


def print_summary(console: Console, result: Result, load_seconds: float, written: str | None,
                  runtime: dict | None = None):
    plan, graph = result.plan, result.graph
    s = plan.stats
    from rich.table import Table
    table = Table(title=f"graphmem plan: {shown(plan.model)}", show_header=True,
                  header_style="bold")
    table.add_column("", style="bold")
    table.add_column("bytes", justify="right")
    table.add_column("MiB", justify="right")
    table.add_column("note")
    table.add_row("nodes", str(len(plan.order)), "",
                  f"{graph.node_count} in the file, {len(graph.folded_nodes)} folded")
    table.add_row("weights", f"{graph.weight_bytes():,}", mib(graph.weight_bytes()),
                  f"{len(graph.weight_names())} tensors read by running nodes "
                  f"({len(graph.constants)} folded constants)")
    table.add_row("naive activations", f"{s['naive_bytes']:,}", mib(s["naive_bytes"]),
                  f"{len(plan.tensors)} tensors, one buffer each")
    table.add_row("lower bound", f"{s['lower_bound_bytes']:,}", mib(s["lower_bound_bytes"]),
                  "largest total live at one step, no aliasing")
    table.add_row("aliased peak", f"{s['aliased_peak_bytes']:,}", mib(s["aliased_peak_bytes"]),
                  "the same, aliased tensors counted once")
    frag = (plan.arena_bytes / s["aliased_peak_bytes"] - 1) * 100 if s["aliased_peak_bytes"] else 0
    table.add_row("[green]arena", f"[green]{plan.arena_bytes:,}", f"[green]{mib(plan.arena_bytes)}",
                  f"{frag:+.2f}% over the aliased peak"
                  + (f"; as the runtime runs it (ONNX Runtime, level {runtime['level']}, "
                     f"{runtime['provider']})" if runtime else ""))
    if runtime:
        exported = runtime["exported_arena_bytes"]
        took = f"optimizing took ONNX Runtime {runtime['optimize_seconds']:.2f} s"
        if exported is None:
            table.add_row("arena as exported", "", "",
                          f"the model as given does not plan: {shown(runtime['exported_error'])}"
                          f"; {took}")
        else:
            table.add_row("arena as exported", f"{exported:,}", mib(exported),
                          f"the model as given, {runtime['exported_nodes']} running nodes, "
                          f"planned the same way; {took}")
    for r in result.reports:
        note = ", ".join(f"{k} {v}" for k, v in r.detail.items() if not isinstance(v, dict))
        table.add_row(f"  pass {r.name}", f"-{r.bytes_saved:,}", mib(r.bytes_saved),
                      f"{shown(note)}; {r.seconds * 1000:.0f} ms")
    if plan.scopes:
        bodies = list(_bodies(plan))
        sizes = ", ".join(f"{s.attr} of node {s.node}: {s.plan.arena_bytes:,} B"
                          for s in bodies[:4]) + (", ..." if len(bodies) > 4 else "")
        noun = "body" if len(bodies) == 1 else "bodies"
        table.add_row("bodies", "", "",
                      f"{len(bodies)} {noun} of If/Loop/Scan nodes, "
                      f"{sum(len(s.plan.tensors) for s in bodies):,} tensors, each planned "
                      f"into its node's workspace ({sizes})")
    table.add_row("time", "", "", f"load {load_seconds:.2f} s, plan {result.seconds:.3f} s")
    console.print(table)
    if written:
        console.print(f"wrote {shown(written)}")


def _bodies(plan):
    """Every scope of a plan, nested ones after their parent."""
    for s in plan.scopes:
        yield s
        yield from _bodies(s.plan)
