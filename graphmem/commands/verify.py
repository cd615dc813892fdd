"""``graphmem verify MODEL``: run the model inside its planned arena on ONNX Runtime."""
from __future__ import annotations

from typing import TYPE_CHECKING

from graphmem.errors import GraphmemError
from graphmem.commands.progress import Heartbeat
from graphmem.commands import range_options as ranges
from graphmem.commands.common import (add_model_args, add_pass_args, add_runtime_args,
                                      console, load_graph, model_source, non_negative_int,
                                      plan_source, shown)

# rich and the verifier (numpy, onnx, ONNX Runtime) are imported where they are used:
# building the parser (``graphmem verify --help``) needs neither
if TYPE_CHECKING:
    from rich.console import Console

    from graphmem.verify.verifier import VerifyReport


def add_parser(sub) -> None:
    p = sub.add_parser(
        "verify", help="run the model inside its planned arena on ONNX Runtime and compare",
        description="Plan MODEL (or read --plan), run every node on ONNX Runtime with its "
                    "tensors bound at their arena offsets, and compare with a plain run. "
                    "Exit 0 on PASS, 1 when the plan is wrong, 2 on unusable input.")
    add_model_args(p)
    add_pass_args(p)
    add_runtime_args(p)
    p.add_argument("--plan", metavar="PATH", help="verify this plan file instead of planning")
    add_verify_args(p)
    ranges.add_range_args(p)
    p.set_defaults(func=run)


def add_verify_args(p) -> None:
    """Options shared by ``verify`` and ``plan --verify``."""
    from graphmem.commands.option_names import PROVIDER_NAMES
    if "--provider" not in p._option_string_actions:  # argparse has no public lookup
        p.add_argument("--provider", choices=list(PROVIDER_NAMES), default="cpu",
                       help="ONNX Runtime execution provider (default cpu; cuda needs "
                            "onnxruntime-gpu and a GPU)")
    p.add_argument("--force", action="store_true",
                   help="run a plan made for another provider's in-place table anyway")
    p.add_argument("--runtime-only", action="store_true",
                   help="skip the plan-format rules and trust the plan: only the run decides")
    p.add_argument("--check-all", action="store_true",
                   help="compare every output with the reference as soon as it is written "
                        "(every read is compared in any case)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the random inputs (default 0)")
    p.add_argument("--inputs", metavar="DIR|FILE.npz",
                   help="use these inputs instead of random ones: an ONNX test-data folder "
                        "(input_0.pb, ...) or one .npz file with an array per input name")


def _check_plan_names_model(plan, source, plan_file: str) -> None:
    """A plan that records no graph digest (written before graphmem recorded one) is
    checked by the model it names, its file name (or its zoo name): refused in one line
    when that is not this model's, before the model is loaded (a plan of another model
    can pass the layout checks where their tensors happen to match). A plan with a digest
    is left to the digest (:func:`~graphmem.plan.graph_digest.check_graph`, in the
    verifier): the graph decides, not the file's name, so the same graph saved under
    another name (``plan --save-graph``) is its graph, and another graph gets that one
    refusal alone."""
    from pathlib import Path
    if plan.graph is not None:
        return
    planned = plan.model
    names = {Path(source.given).name, Path(source.file).name, Path(source.path).name,
             source.plan_name}
    stems = {Path(n).stem for n in names}
    stems |= {stem.removeprefix("light_") for stem in stems}  # a zoo graph's file
    if planned not in names and Path(planned).stem not in stems:
        raise GraphmemError(f"{plan_file}: the plan was made for another model, "
                            f"{planned!r} (its \"model\" field), not "
                            f"{Path(source.given).name!r}; give this model's plan")


def run(args) -> int:
    from rich.console import Console
    from graphmem.commands.progress import clear_early
    clear_early()  # the stages and the bar over the nodes show from here
    with Heartbeat(enabled=not Console(stderr=True).is_terminal,
                   stages=2 if args.plan else 3) as beat:
        if args.plan:
            beat.status = "reading the plan and the model"
            source = model_source(args)
            plan = ranges.read_plan_at(args, source)  # a range plan: at --at/--dim
            _check_plan_names_model(plan, source, args.plan)  # a plan without a digest
            dims = dict(plan.bindings)
            for name, value in source.dims.items():
                if name in dims and dims[name] != value:
                    raise GraphmemError(f"--dim {name}={value}, but the plan was made with "
                                        f"{name}={dims[name]}")
                dims[name] = value
            # issue 53: the model's data-dependent sizes at the plan's bounds
            bounds = {k: v["bound"] for k, v in (plan.bounds or {}).items()}
            # its progress waits for the plan's check against the graph (run_verify)
            graph = source.load(dims, dim_default=False, bounds=bounds, accept=False)
        else:
            beat.status = "loading the model"
            source = model_source(args)
            graph, _ = load_graph(args, source)
            beat.status = "planning"
            plan = plan_source(args, source, graph).plan
        beat.status = "checking the plan, then the reference run on ONNX Runtime"
        report = run_verify(plan, graph, args, beat)
    print_report(console(), report)
    return 0 if report.passed else 1


def verify(*args, **kwargs):
    """:func:`graphmem.verify.verifier.verify`, imported when a command verifies
    (building the parser, ``graphmem --help``, imports no part of the verifier)."""
    from graphmem.verify.verifier import verify as run
    return run(*args, **kwargs)


def run_verify(plan, graph, args, beat: Heartbeat | None = None) -> VerifyReport:
    """Verify with progress over the nodes on stderr: a bar on a terminal, else the
    heartbeat's lines (see :class:`Heartbeat`)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from graphmem.verify.verifier import read_inputs
    err = Console(stderr=True)
    with Progress(TextColumn("[bold]verify"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("nodes"), TimeElapsedColumn(), console=err,
                  transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("nodes", total=len(plan.order))
        if err.is_terminal:
            on_step = lambda done, total: progress.update(task, completed=done)  # noqa: E731
        else:
            on_step = None if beat is None else _accepting(beat.on_step)
        inputs = read_inputs(args.inputs, graph) if getattr(args, "inputs", None) else None
        return verify(plan, graph, provider=args.provider, runtime_only=args.runtime_only,
                      force=getattr(args, "force", False),
                      check_all=args.check_all, seed=args.seed, inputs=inputs,
                      on_step=on_step)


def _accepting(on_step):
    """``on_step``, the plan accepted by its first call: the nodes run once the plan has
    been checked against the graph, so progress lines may start (a plan refused before
    is the command's one line)."""
    from graphmem.commands.progress import accept

    def step(done: int, total: int) -> None:
        accept()
        on_step(done, total)
    return step


# The most graph outputs the table lists that matched (every one that differs is listed):
# a table of 40,000 rows took longer to print than the run took to check them.
OUTPUT_ROWS = 50


def _rows_shown(outputs: list) -> list:
    """Every output that differs, and the first OUTPUT_ROWS of the rest, in order."""
    left = OUTPUT_ROWS
    rows = []
    for o in outputs:
        if not o.ok or left > 0:
            rows.append(o)
            left -= o.ok
    return rows


def print_whole_model(console: Console, r: VerifyReport) -> None:
    """The second line: the one-node sessions against the whole-model session. It warns;
    the verdict is the comparison above."""
    if r.whole_model_problem and r.whole_model_problem.startswith("skipped"):
        console.print(f"whole model   not compared, {shown(r.whole_model_problem)}",
                      highlight=False, soft_wrap=True)
        return
    if r.whole_model_problem:
        console.print(f"[yellow]whole model[/]  not compared: {shown(r.whole_model_problem)} "
                      "(this does not decide the verdict)", highlight=False, soft_wrap=True)
        return
    if not r.whole_model:
        return
    worst = max(r.whole_model, key=lambda o: (not o.ok, o.max_abs_diff))
    if all(o.ok for o in r.whole_model):
        console.print(f"whole model   agrees with the node-by-node run within per-dtype "
                      f"tolerance (max abs diff {worst.max_abs_diff:.3g})")
    else:
        bad = sum(not o.ok for o in r.whole_model)
        console.print(f"[yellow]whole model[/]  {bad} graph output(s) differ from the "
                      f"node-by-node run past per-dtype tolerance ({shown(worst.name)}: max abs "
                      f"diff {worst.max_abs_diff:.3g}): the one-node kernels differ from the "
                      "whole model's; this warns, it does not decide the verdict",
                      highlight=False, soft_wrap=True)


def print_report(console: Console, r: VerifyReport) -> None:
    from rich.table import Table
    console.print(f"[bold]graphmem verify[/]: {shown(r.model)}")
    console.print(f"provider      {r.provider}")
    from graphmem.analysis.footprint import format_bytes
    console.print(f"arena         {r.arena_bytes:,} bytes ({format_bytes(r.arena_bytes)})")
    if r.problems:
        console.print("[red]FAIL[/]: the plan breaks the rules of graphmem.plan/1:")
        for p in r.problems:
            console.print(f"  - {shown(p)}", highlight=False, soft_wrap=True)
        return
    skipped = (f", {r.nodes_skipped} Concat skipped (inputs already in their slices)"
               if r.nodes_skipped else "")
    console.print(f"nodes run     {r.nodes_run} of {r.nodes_total}{skipped}; "
                  f"{r.sessions_built} one-node sessions")
    written = (f"; {r.intermediates_checked:,} outputs as they were written"
               if r.intermediates_checked else "")
    exact = ("bit for bit" if not r.spread_tensors else
             f"bit for bit, {r.spread_tensors:,} within the spread of two reference runs")
    console.print(f"compared      {r.reads_checked:,} reads{written}, with a run of the same "
                  f"one-node sessions where every tensor has its own buffer ({exact})")
    table = Table(show_header=True, header_style="bold")
    for col in ("graph output", "type", "max abs diff", ""):
        table.add_column(col)
    rows = _rows_shown(r.outputs)
    for o in rows:
        table.add_row(shown(o.name), f"{o.dtype}{list(o.shape)}", f"{o.max_abs_diff:.3g}",
                      "[green]ok" if o.ok else "[red]differs")
    if r.outputs:
        console.print(table)
    if len(rows) < len(r.outputs):
        console.print(f"... and {len(r.outputs) - len(rows):,} more graph outputs, all ok")
    print_whole_model(console, r)
    if r.bounded or r.overflow or r.symbol_counts:  # issue 53
        from graphmem.commands.bounds_text import print_bounded
        print_bounded(console, r)
    if r.overflow:
        console.print("[red]FAIL[/]: " + shown(r.overflow), highlight=False, soft_wrap=True)
    elif r.mismatch:
        console.print("[red]FAIL[/]: " + shown(r.mismatch.describe()), highlight=False,
                      soft_wrap=True)
        if r.in_place_op:
            op = shown(r.in_place_op)
            console.print(f"[yellow]note[/]: the plan wrote {op}'s output over its input "
                          f"there; `graphmem probe --ops {op}` checks whether {op}'s kernel "
                          "runs in place on this machine", highlight=False, soft_wrap=True)
    elif r.passed:
        console.print(f"[green]PASS[/] ({r.seconds:.2f} s)")
    else:
        console.print("[red]FAIL[/]: a graph output differs from the reference")
