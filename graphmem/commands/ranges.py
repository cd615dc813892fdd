"""Range plans on the command line: ``plan MODEL --dim seq=1..4096 [--dim batch=1..32]``
writes one plan for every binding of the box (``graphmem.rangeplan/1``), ``--at seq=N``
the range plan evaluated at one binding, an ordinary ``graphmem.plan/1`` plan; ``report``
and ``fit`` with a range give memory as formulas and the serving fit. The options, and a
saved range plan read at a binding (verify, report, export), are in
:mod:`graphmem.commands.range_options`."""
from __future__ import annotations

import dataclasses
import sys

from graphmem.errors import GraphmemError
from graphmem.plan.io import check_output
from graphmem.commands.common import (console, input_paths, model_source, model_stem,
                                      plan_options, shown, stages)
from graphmem.commands.progress import accept
from graphmem.commands.range_options import (add_range_args, at_binding, split_dims,  # noqa: F401
                                             wanted)


def _built(args):
    """The range plan of the command's model over its ``--dim`` box, proved; with the
    fixed dims and the loader at a binding."""
    from graphmem.frontend.reader import load
    from graphmem.ranges.api import plan_range
    box, fixed, derived = split_dims(args.dim)
    if not box:
        raise GraphmemError("--at needs a range of dims: --dim NAME=LO..HI")
    if getattr(args, "bound", None):  # issue 53's --bound: a plan at one binding
        raise GraphmemError("--bound goes with a plan at one binding, not with a range of "
                            "dims (--dim NAME=LO..HI): a range plan sizes what depends on "
                            "the data at the bounds the graph proves")
    source = model_source(args, dims=fixed)  # the file planned (--ort-optimize's copy)
    path = source.path
    default = getattr(args, "dim_default", None)
    for name, f in derived.items():
        lo = {n: a for n, (a, b) in box.items()}
        if f.at(lo) < 0:
            raise GraphmemError(f"--dim {name}: {f.text()} is negative at {lo}")
    with stages(args, "planning the range") as stage:
        def stage_after_sizes(name: str) -> None:
            if name != "size formulas":  # the model loaded at the grid's bindings
                accept()  # its progress lines may start
            stage(name)
        built = plan_range(path, box, fixed=fixed, follow=derived, dim_default=default,
                           model_name=source.plan_name, progress=stage_after_sizes,
                           **plan_options(args))

    def load_at(binding: dict):
        return load(path, {**fixed, **{n: f.at(binding) for n, f in derived.items()},
                           **binding}, dim_default=default)
    return built, fixed, load_at


def run_plan(args) -> int:
    """``plan`` with a range of dims: the range plan, proved, written (or with ``--at``
    the plan at that binding, validated against the model loaded there)."""
    from graphmem.plan.graph_digest import graph_digest
    from graphmem.plan.validate import validate
    from graphmem.ranges.evaluate import evaluate, free_binding
    at = at_binding(args)
    ext = ".plan.json" if at else ".rangeplan.json"
    out = args.output or f"{model_stem(args.model)}{ext}"
    inputs = input_paths(args)
    if out != "-":
        check_output(out, inputs)
    if getattr(args, "verify", False) and not at:
        raise GraphmemError("--verify with a range of dims runs one binding: give it with "
                            "--at NAME=VALUE")
    if at:  # before the work: an --at outside the box fails at once
        from graphmem.ranges.rangeplan import check_in_box
        check_in_box(split_dims(args.dim)[0], at)
    built, fixed, load_at = _built(args)
    rp = built.plan
    binding = None
    if at:
        binding = free_binding(rp, {**at, **{k: v for k, v in fixed.items() if k in rp.bindings}})
        graph = load_at(binding)
        # the plan at the binding pins the graph it is valid for, as a plan of it does
        plan = dataclasses.replace(evaluate(rp, binding), graph=graph_digest(graph))
        validate(plan, graph)
        _write(plan.to_json() if out == "-" else plan, out, inputs)
    else:
        _write(rp.to_json() if out == "-" else rp, out, inputs)
    if not args.quiet:
        print_summary(console(stderr=out == "-"), built, None if out == "-" else out, binding)
    if getattr(args, "verify", False):  # the plan at --at, run in its arena
        from argparse import Namespace
        from graphmem.commands.verify import print_report, run_verify
        report = run_verify(plan, graph, Namespace(
            provider=args.provider, runtime_only=False, check_all=False, seed=0, force=False))
        print_report(console(stderr=out == "-"), report)
        return 0 if report.passed else 1
    return 0


def run_report(args) -> int:
    """``report`` with a range of dims: weights, graph inputs and outputs (a KV cache
    among them), and per segment the aliased peak and the arena, as formulas."""
    import json
    from graphmem.ranges.memory import memory
    if at_binding(args) or getattr(args, "plan", None):
        raise GraphmemError("report --dim NAME=LO..HI gives the formulas; for the report at "
                            "one binding pass the range plan: --plan RANGE.json --at NAME=VALUE")
    if getattr(args, "html", None):
        check_output(args.html, input_paths(args))
    built, _, _ = _built(args)
    data = memory(built.plan)
    data["model"] = built.plan.model
    budget = None
    if getattr(args, "budget", None):
        from graphmem.commands.sizes import parse_bytes
        budget = data["budget_bytes"] = parse_bytes(args.budget, "--budget")
    if getattr(args, "html", None):
        from graphmem.commands.ranges_html import page
        from graphmem.plan.io import write_atomic
        write_atomic(args.html, page(built.plan, data, budget), inputs=input_paths(args))
        print(f"wrote {args.html}", file=sys.stderr)
    data["checkpoints"] = [{"binding": c.binding, "arena_bytes": c.arena_bytes,
                            "fresh_arena_bytes": c.fresh_bytes} for c in built.checkpoints]
    if args.json:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        return 0
    from rich.table import Table
    con = console()
    box = ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in built.plan.dims.items())
    table = Table(title=f"graphmem report: {shown(built.plan.model)} over {box} (bytes)",
                  header_style="bold")
    table.add_column("")
    table.add_column("formula")
    table.add_row("weights", shown(data["weights_bytes"]))
    table.add_row("graph inputs", shown(data["input_bytes"]))
    table.add_row("graph outputs", shown(data["output_bytes"]))
    for s in data["segments"]:
        where = ", ".join(f"{n}={a}..{b}" for n, (a, b) in s["dims"].items())
        table.add_row(f"aliased peak, {where}", shown(s["aliased_peak_bytes"] or
                                                      "evaluated per binding"))
        table.add_row(f"arena, {where}", shown(s["arena_bytes"] or
                                               "evaluated per binding"))
    con.print(table)
    worst = max(built.checkpoints, key=lambda c: c.ratio)
    con.print(f"the range plan's arena is at most {_over(worst.ratio)} larger than a plan "
              f"made for one binding, at {len(built.checkpoints)} bindings checked (the "
              f"most at {_binding(worst.binding)})")
    return 0


def run_fit(args) -> int:
    """``fit`` with a range of dims: the largest batch at each context length (and the
    longest context at each batch) whose weights + arena fit ``--budget``, from the
    range plan."""
    import json
    from graphmem.commands.sizes import parse_bytes
    from graphmem.ranges.serving import serving_fit
    budget = parse_bytes(args.budget, "--budget")
    built, _, _ = _built(args)
    try:
        data = serving_fit(built.plan, budget)
    except ValueError as exc:
        raise GraphmemError(f"fit: {exc}") from None
    data["model"] = built.plan.model
    if args.json:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        return 0
    from rich.table import Table
    con = console()
    b = data["batch_dim"]
    table = Table(title=f"graphmem fit: {shown(built.plan.model)} in {budget:,} bytes",
                  header_style="bold")
    for col in ("context", f"largest {b}", "total bytes", f"with one more {b}",
                "largest part"):
        table.add_column(col, justify="right" if "bytes" in col or "more" in col else "left")
    for r in data["by_context"]:
        ctx = ", ".join(f"{n}={v}" for n, v in r["context"].items()) or "-"
        table.add_row(shown(ctx), "none fits" if r["value"] is None else str(r["value"]),
                      f"{r.get('total_bytes', 0):,}" if r["value"] is not None else "",
                      "" if r["next_total_bytes"] is None else f"{r['next_total_bytes']:,}",
                      r.get("dominant", ""))
    con.print(table)
    if data["by_batch"]:
        c = data["by_batch"][0]["context_dim"]
        t2 = Table(title=f"the longest {c} at each {b}", header_style="bold")
        for col in (b, f"longest {c}", "total bytes", "largest part"):
            t2.add_column(col, justify="right" if "bytes" in col else "left")
        for r in data["by_batch"]:
            t2.add_row(str(r["batch"]), "none fits" if r["value"] is None else str(r["value"]),
                       f"{r.get('total_bytes', 0):,}" if r["value"] is not None else "",
                       r.get("dominant", ""))
        con.print(t2)
    return 0


def _write(what, out: str, inputs) -> None:
    if out == "-":
        sys.stdout.write(what)
    else:
        what.save(out, inputs=inputs)


def print_summary(con, built, written: str | None, at: dict | None) -> None:
    from rich.table import Table
    rp = built.plan
    box = ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in rp.dims.items())
    table = Table(title=f"graphmem range plan: {shown(rp.model)} over {box}",
                  header_style="bold")
    for col in ("dims", "nodes in order", "storage blocks", "arena at the smallest dims",
                "arena at the largest dims"):
        table.add_column(col, justify="right" if "arena" in col else "left")
    from graphmem.ranges.build import arena_at
    for s in rp.segments:
        lo = {n: a for n, (a, b) in s.dims.items()}
        hi = {n: b for n, (a, b) in s.dims.items()}
        table.add_row(", ".join(f"{n}={a}..{b}" for n, (a, b) in s.dims.items()),
                      f"{len(s.order):,}", str(len(s.blocks)),
                      f"{arena_at(s, lo, rp.alignment):,}", f"{arena_at(s, hi, rp.alignment):,}")
    con.print(table)
    worst = max(built.checkpoints, key=lambda c: c.ratio)
    weights = rp.weights_bytes.text()
    con.print(f"{len(rp.tensors):,} tensors, their sizes formulas of {', '.join(rp.dims)}; "
              f"weights {int(weights):,} bytes" if weights.isdigit() else
              f"weights {weights} bytes")
    con.print("proved for every binding in the range, from the formulas (not sampled): "
              "no two tensors live at once overlap, every tensor aligned and in its block")
    con.print(f"against a plan made for one binding, at {len(built.checkpoints)} bindings: "
              f"at most {_over(worst.ratio)} larger (at {_binding(worst.binding)}: "
              f"{worst.arena_bytes:,} against {worst.fresh_bytes:,} bytes); built in "
              f"{built.seconds:.2f} s")
    if built.dropped:
        con.print(f"{len(built.dropped)} tensors sharing memory in a one-binding plan do "
                  f"not share it over the whole range and were given their own (e.g. "
                  f"{shown(built.dropped[0])})")
    if at:
        con.print(f"evaluated at {_binding(at)}: an ordinary plan")
    if written:
        con.print(f"wrote {shown(written)}")


def _binding(binding: dict) -> str:
    """``past_seq=5, batch=2``: a binding as the --dim options write it."""
    return shown(", ".join(f"{n}={v}" for n, v in binding.items()))


def _over(ratio: float) -> str:
    """1.045 -> ``4.5%``."""
    return f"{100 * (ratio - 1):.1f}%"
