"""``graphmem probe``: run each element-wise candidate in place on this machine's ONNX
Runtime, say whether the kernel gives the plain run's results (see
:mod:`graphmem.verify.probe`) and whether the runtime declares it in place (see
:func:`graphmem.core.ops.evidence`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from graphmem.commands.common import shown
from graphmem.errors import GraphmemError

if TYPE_CHECKING:  # the CLI imports every command module at start: numpy and onnx wait
    from graphmem.verify.probe import Case, Outcome


def add_parser(sub) -> None:
    p = sub.add_parser("probe", help="does each in-place kernel hold on this machine?",
                       description="Run every element-wise candidate (the provider's "
                                   "in-place table, the probed table and the ops left out of "
                                   "both) in place on ONNX Runtime at sizes that reach vector "
                                   "tails and blocks, compare with a plain run, and say "
                                   "whether the runtime's kernel declares the pair. Exit 1 "
                                   "when an entry of the default table fails.")
    p.add_argument("--provider", choices=["cpu", "cuda"], default="cpu",
                   help="execution provider to probe (default cpu)")
    p.add_argument("--ops", metavar="LIST",
                   help="comma-separated ops to probe, contrib ops as domain:op "
                        "(e.g. com.microsoft:FusedConv; default all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from rich.table import Table
    from graphmem.core.ops import ELEMENTWISE, INPLACE_TABLES, PROBE_CANDIDATES, table_key
    from graphmem.verify.probe import (declared_by_runtime, declared_text, has_probe_model,
                                       summary)
    if args.provider == "cuda":  # before any case: one line where CUDA cannot run
        from graphmem.verify.cuda import cuda_problem
        if problem := cuda_problem():
            raise GraphmemError(problem)
    default = INPLACE_TABLES[table_key(args.provider)]
    probed = INPLACE_TABLES[table_key(args.provider, "probed")]
    # the candidates, and the tables' contrib entries (domain:op keys) as the tables give them
    table = {**PROBE_CANDIDATES, **ELEMENTWISE,
             **{op: pairs for op, pairs in {**probed, **default}.items() if ":" in op}}
    if args.ops:
        wanted = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = [o for o in wanted if o not in table]
        if unknown:
            raise GraphmemError(f"--ops: no overwrite entry for {', '.join(unknown)}; "
                                f"known: {', '.join(sorted(table))}")
        if bare := [o for o in wanted if not has_probe_model(o)]:
            raise GraphmemError(f"--ops: no probe model for {', '.join(bare)}: its table "
                                f"entry rests on the kernel's declaration alone")
        table = {o: table[o] for o in wanted}
    unprobed = sorted(op for op in table if not has_probe_model(op))
    from graphmem.commands.progress import Progress
    with Progress("probe", stages=1) as progress:  # a spinner, or lines through a pipe
        progress(f"running each in-place kernel on ONNX Runtime ({args.provider})")
        outcomes = probe(table, args.provider,
                         on_case=lambda done, total: progress.on_step(done, total, "cases"))
    rows = summary(outcomes)
    declared = {op: declared_by_runtime(args.provider, op, table[op]) for op in rows}
    failed_entries = [op for op, s in rows.items() if op in default and s["passed"] < s["cases"]]
    if args.json:
        sys.stdout.write(json.dumps({
            "provider": args.provider,
            "ops": {op: {**s, "in_table": op in default, "in_probed_table": op in probed,
                         "pairs": [list(p) for p in table[op]],
                         "declared": declared[op]} for op, s in rows.items()},
            "unprobed": unprobed, "table_holds": not failed_entries}, indent=1) + "\n")
    else:
        from graphmem.commands.common import console
        out = console()
        t = Table(title=f"graphmem probe: in-place kernels on {args.provider}",
                  header_style="bold")
        for col in ("op", "in table", "declared by the runtime", "cases passed",
                    "first failure"):
            t.add_column(col)
        for op, s in rows.items():
            ok = s["passed"] == s["cases"]
            verdict = f"[green]{s['passed']}/{s['cases']}" if ok else \
                f"[red]{s['passed']}/{s['cases']}"
            in_table = "yes" if op in default else "probed only" if op in probed else "no"
            t.add_row(shown(op), in_table, shown(declared_text(declared[op])), verdict,
                      shown(s["first_failure"] or "")[:160])
        out.print(t)
        if unprobed:
            out.print(f"not probed (no probe model; the kernel's declaration is the "
                      f"evidence): {shown(', '.join(unprobed))}")
        if failed_entries:
            out.print(f"[red]FAIL[/]: in the table but not in place on this machine: "
                      f"{shown(', '.join(failed_entries))}")
    return 1 if failed_entries else 0


def run_case(case: Case, provider: str = "cpu", folder: str | Path | None = None) -> Outcome:
    """Run one case: its model written to ``folder`` (a temporary one if not given),
    loaded, planned with one buffer per tensor (no passes) and checked in place
    (:func:`graphmem.verify.probe.check_case`)."""
    import tempfile

    import onnx

    from graphmem.frontend.reader import load
    from graphmem.pipeline import plan_graph
    from graphmem.verify.probe import case_model, check_case
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="graphmem-probe-") as tmp:
            return run_case(case, provider, tmp)
    path = Path(folder) / f"{case.op}.onnx"
    onnx.save(case_model(case), str(path))
    graph = load(path)
    return check_case(case, graph, plan_graph(graph, []).plan, provider)


def probe(table: Mapping[str, Sequence[tuple[int, int]]], provider: str = "cpu",
          shapes: Sequence[tuple[int, ...]] | None = None,
          on_case: Callable[[int, int], None] | None = None) -> list[Outcome]:
    """Run every case of ``table`` (op -> [(input, output)]) at ``shapes`` (default
    :data:`graphmem.verify.probe.SHAPES`); ``on_case(done, total)`` reports progress."""
    import tempfile

    from graphmem.verify.probe import SHAPES, cases
    todo = cases(table, SHAPES if shapes is None else shapes)
    out = []
    if on_case:
        on_case(0, len(todo))
    with tempfile.TemporaryDirectory(prefix="graphmem-probe-") as tmp:
        for k, case in enumerate(todo):
            out.append(run_case(case, provider, tmp))
            if on_case:
                on_case(k + 1, len(todo))
    return out
