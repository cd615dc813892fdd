"""``graphmem plan MODEL``: plan the arena and write the plan file."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from graphmem.commands.common import (ModelSource, add_model_args, add_pass_args,
                                      add_runtime_args, console, exported_arena, input_paths,
                                      load_graph, model_source, model_stem, plan_options,
                                      plan_source, shown)
from graphmem.errors import GraphmemError
from graphmem.plan.io import check_output, write_all
from graphmem.commands import capacity_args, ranges

if TYPE_CHECKING:
    from rich.console import Console

    from graphmem.pipeline import Result


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="plan the memory of a model and write graphmem.plan/1 JSON",
                       description="Plan every tensor of MODEL at an offset in one arena.")
    add_model_args(p)
    add_pass_args(p)
    add_runtime_args(p)
    p.add_argument("-o", "--output", metavar="PATH",
                   help="plan file to write (default: <model>.plan.json; '-' prints it)")
    p.add_argument("--save-graph", metavar="PATH", dest="save_graph",
                   help="also write the graph planned as an ONNX file, its weights inside "
                        "it (with --ort-optimize: ONNX Runtime's optimized graph in the "
                        "canonical node order the plan's indices refer to; a model past "
                        "protobuf's 2 GiB keeps its weights in PATH.weights beside it), so "
                        "that `graphmem verify PATH --plan` and a runtime use that very graph")
    p.add_argument("--quiet", "-q", action="store_true", help="print no summary")
    p.add_argument("--verify", action="store_true",
                   help="then run the model inside the planned arena on ONNX Runtime (CPU) "
                        "and compare with a plain run (see `graphmem verify`); exit 1 on FAIL")
    ranges.add_range_args(p)
    capacity_args.add_capacity_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    capacity_args.refuse_with_ranges(args)
    capacity_args.capacity_of(args)  # a bad --capacity fails before the work
    if ranges.wanted(args) or args.at:  # --dim seq=1..4096: one plan for the range
        return ranges.run_plan(args)
    out = args.output or f"{model_stem(args.model)}.plan.json"
    inputs = input_paths(args)
    for path in (out, args.save_graph):  # before the work: a bad output fails at once
        if path is not None and path != "-":
            check_output(path, inputs)
    if args.save_graph == "-":
        raise GraphmemError("--save-graph -: the graph is an ONNX file; give a file name")
    if args.save_graph and out != "-" and check_output(args.save_graph).key == \
            check_output(out).key:
        raise GraphmemError(f"--save-graph {args.save_graph} and the plan file name the "
                            "same file")
    source = model_source(args)
    graph, load_seconds = load_graph(args, source)
    result = plan_source(args, source, graph)
    fits = capacity_args.judged(args, result, source.plan_name)
    if fits is not None and fits[1]:  # over the capacity: the line, and no plan written
        print(fits[0], file=sys.stderr)
        return fits[1]
    runtime = runtime_summary(source, plan_options(args, warn=False))
    files = [] if out == "-" else [(out, result.plan.json_chunks())]
    if args.save_graph:
        files += graph_files(source.path, args.save_graph)
    write_all(files, inputs=inputs)  # the plan and the graph, all or none
    if out == "-":
        sys.stdout.write(result.plan.to_json())
    if not args.quiet:
        print_summary(console(stderr=out == "-"), result, load_seconds,
                      None if out == "-" else out, runtime)
    if fits is not None and not args.quiet:
        print(fits[0], file=sys.stderr)
    if args.verify:
        from argparse import Namespace
        from graphmem.commands.verify import Heartbeat, print_report, run_verify
        from rich.console import Console
        with Heartbeat(enabled=not Console(stderr=True).is_terminal) as beat:
            beat.status = "checking the plan, then the reference run on ONNX Runtime"
            report = run_verify(result.plan, graph, Namespace(
                provider=args.provider, runtime_only=False, check_all=False, seed=0,
                force=False), beat)
        print_report(console(stderr=out == "-"), report)
        return 0 if report.passed else 1
    return 0


def graph_files(model: Path, out: str) -> list[tuple[str, bytes]]:
    """The ONNX file ``out`` of the model file ``model`` (the graph planned), its weights
    read in: one file, or past protobuf's 2 GiB the model and ``out + ".weights"`` (its
    weights of EXTERNAL_MIN_BYTES or more, referred to by that name)."""
    from graphmem.frontend.reader import read_model
    from graphmem.frontend.ort_optimize import EXTERNAL_MIN_BYTES
    proto = read_model(model, load_weights=True)
    if proto.ByteSize() < 2 ** 31 - 1:
        return [(out, proto.SerializeToString())]
    import tempfile
    from onnx.external_data_helper import (convert_model_to_external_data,
                                           write_external_data_tensors)
    location = Path(out).name + ".weights"
    convert_model_to_external_data(proto, all_tensors_to_one_file=True, location=location,
                                   size_threshold=EXTERNAL_MIN_BYTES)
    with tempfile.TemporaryDirectory(prefix="graphmem-save-") as folder:
        write_external_data_tensors(proto, folder)
        weights = (Path(folder) / location).read_bytes()
    return [(out, proto.SerializeToString()),
            (str(Path(out).with_name(location)), weights)]


def mib(n: int) -> str:
    """A size in the unit that reads best (``6.89 MiB``, ``784.00 KiB``)."""
    from graphmem.analysis.footprint import format_bytes
    return format_bytes(n)


def runtime_summary(source: ModelSource, options: dict) -> dict | None:
    """With ``--ort-optimize``: the level, provider, what ONNX Runtime took to optimize,
    and the arena of the model as exported (planned with the same ``options``)."""
    optimized = source.optimized
    if optimized is None:
        return None
    exported = exported_arena(source, options)
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
    table.add_column("size", justify="right")
    table.add_column("note")
    table.add_row("nodes", str(len(plan.order)), "",
                  f"{graph.node_count} in the file, {len(graph.folded_nodes)} folded")
    table.add_row("weights", f"{graph.weight_bytes():,}", mib(graph.weight_bytes()),
                  f"{len(graph.weight_names())} tensors read by running nodes "
                  f"({len(graph.constants)} folded constants)")
    table.add_row("naive activations", f"{s['naive_bytes']:,}", mib(s["naive_bytes"]),
                  f"{len(plan.tensors)} tensors, one buffer each")
    table.add_row("unaliased peak", f"{s['unaliased_peak_bytes']:,}",
                  mib(s["unaliased_peak_bytes"]),
                  "most bytes live at one step, every tensor counted alone (views and "
                  "in-place outputs too): no bound; the arena is smaller where they alias")
    table.add_row("aliased peak", f"{s['aliased_peak_bytes']:,}", mib(s["aliased_peak_bytes"]),
                  "the same, storage shared by aliases counted once: no arena for this "
                  "order and these aliases can be smaller")
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
        # a pass's row is what it took off the arena: both columns negative (or 0)
        saved = f"-{r.bytes_saved:,}" if r.bytes_saved else "0"
        table.add_row(f"  pass {r.name}", saved, mib(-r.bytes_saved) if r.bytes_saved else
                      mib(0), f"{shown(pass_note(r, plan))}; {r.seconds * 1000:.0f} ms")
    if plan.scopes:
        bodies = list(_bodies(plan))
        sizes = ", ".join(f"{s.attr} of node {s.node}: {s.plan.arena_bytes:,} B"
                          for s in bodies[:4]) + (", ..." if len(bodies) > 4 else "")
        noun = "body" if len(bodies) == 1 else "bodies"
        table.add_row("bodies", "", "",
                      f"{len(bodies)} {noun} of If/Loop/Scan nodes, "
                      f"{sum(len(s.plan.tensors) for s in bodies):,} tensors, each planned "
                      f"into its node's workspace ({sizes})")
    if plan.bounds:  # issue 53: the sizes that depend on the data
        from graphmem.commands.bounds_text import bounded_row
        table.add_row(*bounded_row(plan))
    table.add_row("time", "", "", f"load {load_seconds:.2f} s, plan {result.seconds:.3f} s")
    console.print(table)
    if written:
        console.print(f"wrote {shown(written)}")


def pass_note(report, plan) -> str:
    """What a pass did, in words (:func:`~graphmem.commands.pass_words.describe`); the
    exact placement's bound and gap are those of the arena the plan reports
    (:func:`placement_bound`)."""
    from graphmem.commands.pass_words import describe, size
    detail = dict(report.detail)
    note = describe(report.name, detail)
    if "proven_optimal" in detail:
        bound = placement_bound(detail, plan)
        if bound["proven"]:
            extra = (f"{bound['words']}: no placement in this order is smaller than "
                     f"{size(plan.arena_bytes)}")
        else:
            extra = (f"{bound['words']}: the smallest possible is at least "
                     f"{size(bound['bound_bytes'])}, so the arena is at most "
                     f"{100 * bound['gap']:.2f}% above it")
        note = f"{note}; {extra}" if note else extra
    return note


def placement_bound(detail: dict, plan) -> dict:
    """The bound under the arena ``--placement optimal`` reports, and the gap to it.

    The exact solver places the storage groups as plain records (a group with Concat
    slices as one block for its whole life); its bound is a bound on that problem. When
    the solver's or the complete search's placement is kept, it bounds the arena; when
    the best heuristic with the Concat slices planned smaller (a ``(with slices)`` entry
    in ``tried``, and ``strategy`` is not ``optimal``), the solver's
    bound is of a more constrained problem and may exceed the arena, and the bound that
    holds is the aliased peak (no arena for this order and these aliases is smaller).
    Returns ``proven`` (the arena meets its bound), ``bound_bytes``, ``gap`` (arena -
    bound) / arena and ``words`` (what it is, for the summary)."""
    floor = plan.stats.get("aliased_peak_bytes", 0)
    arena = plan.arena_bytes
    # the placement the proof is about was kept: the solver's, the search's, or a
    # heuristic's the search proved (its bound then at most the arena)
    sliced = any(k.endswith(" (with slices)") for k in detail.get("tried", {}))
    if detail.get("strategy") in ("optimal", "search") or (
            not sliced and int(detail.get("lower_bound", 0)) <= arena):
        bound = max(int(detail.get("lower_bound", 0)), floor)
        proven = bool(detail.get("proven_optimal")) or bound >= arena
        words = "exact placement, " + ("proven optimal" if proven else
                                       "best found in the time limit")
    else:
        bound = floor
        proven = floor >= arena
        from graphmem.commands.pass_words import size
        words = (f"a heuristic placement that builds Concat outputs in place was kept "
                 f"(the exact solver, which places each Concat whole, planned "
                 f"{size(detail.get('tried', {}).get('optimal', 0))}, and no less than "
                 f"{size(int(detail.get('lower_bound', 0)))} that way); its bound is the "
                 f"aliased peak")
    bound = min(bound, arena)
    return {"proven": proven, "bound_bytes": bound,
            "gap": 0.0 if proven or not arena else (arena - bound) / arena, "words": words}


def _bodies(plan):
    """Every scope of a plan, nested ones after their parent."""
    for s in plan.scopes:
        yield s
        yield from _bodies(s.plan)
