"""Options shared by the commands: the model, symbolic dims, the passes."""
from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from graphmem.errors import GraphmemError, printable
from graphmem.frontend.dim_expressions import is_expression
from graphmem.frontend.reader import load
from graphmem.passes.registry import DEFAULT_PASSES, PASSES
from graphmem.passes.placement.search import STRATEGIES
from graphmem.pipeline import Result, plan_graph
from graphmem.plan.format import Plan
from graphmem.frontend.zoo import resolve




def shown(text) -> str:
    """Text that comes from a model or a plan (a name, an op type), made safe to print
    through rich: its markup escaped, and control characters (ANSI and OSC escapes,
    NUL) written as ``\\xNN``, so a name is shown, never obeyed."""
    from rich.markup import escape
    return escape(printable(text).replace("\n", "\\x0a").replace("\r", "\\x0d"))


# Columns of a table written to a file or a pipe: rich assumes 80 there and cuts cells
# ("BatchNormaliz..."); a file keeps every column whole.
FILE_WIDTH = 1000


def console(stderr: bool = False):
    """A rich Console for a command's tables: a terminal's own width, else
    :data:`FILE_WIDTH` (``graphmem probe > probe.txt`` keeps whole columns)."""
    from rich.console import Console
    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=FILE_WIDTH)


def add_model_args(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """The model and its dimension options: every command that loads a model takes these."""
    p.add_argument("model", nargs="?" if optional else None,
                   help="an .onnx file, or a Model Zoo name (see `graphmem models`)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                   help="bind a symbolic dimension (repeatable), e.g. --dim N=8")
    p.add_argument("--dim-default", type=_dim_value, default=None, metavar="N",
                   help="bind every symbolic dimension that no --dim binds to N "
                        "(off unless given; says on stderr which it bound)")
    p.add_argument("--bound", action="append", default=[], metavar="NAME=N",  # issue 53
                   help="plan a size that depends on the data (NonZero_3, the op and its "
                        "node) at most N: tightens the bound the graph proves, or gives "
                        "one it cannot (repeatable)")


# The largest value a symbolic dimension may be bound to: past it, one tensor of a
# single dimension alone would pass the bytes any device has.
MAX_DIM = 2 ** 40


def _dim_value(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError("a dimension cannot be negative")
    if v > MAX_DIM:
        raise argparse.ArgumentTypeError(f"{v} is past the largest dimension graphmem "
                                         f"plans (2**40)")
    return v


def non_negative_int(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} is negative")
    return v


def add_pass_args(p: argparse.ArgumentParser) -> None:
    names = ", ".join(PASSES)
    p.add_argument("--passes", metavar="LIST", default=None,
                   help=f"comma-separated passes to run (default: {','.join(DEFAULT_PASSES)}; "
                        f"known: {names}); 'none' runs none")
    for name in PASSES:
        p.add_argument(f"--no-{name}", dest=f"no_{name}", action="store_true",
                       help=f"switch the {name} pass off")
    p.add_argument("--placement", default="best", choices=["best", *STRATEGIES, "optimal"],
                   help="placement strategy for the place pass (default: best of all; "
                        "optimal: exact CP-SAT placement for this order, warm-started by best; "
                        "proven optimum or best found and its gap)")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="SECONDS",
                   help="time limit of --placement optimal (default 10)")
    p.add_argument("--alignment", type=int, default=64, metavar="BYTES",
                   help="offset alignment in bytes (default 64)")
    p.add_argument("--provider", choices=["cpu", "cuda"], default="cpu",
                   help="ONNX Runtime execution provider the plan is for: its in-place "
                        "table decides which kernels may overwrite their input (default "
                        "cpu; see `graphmem probe`)")
    p.add_argument("--inplace-table", choices=["default", "probed"], default="default",
                   help="the provider's in-place table to trust: default (only kernels "
                        "ONNX Runtime's sources show may run in place: docs/inplace-"
                        "evidence.md) or probed (also every other element-wise op, as "
                        "checked on this machine by `graphmem probe`; opt-in, never the "
                        "default)")


def parse_dims(items: list[str]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise GraphmemError(f"--dim {item!r}: expected NAME=VALUE, e.g. --dim N=8")
        try:
            v = int(value)
        except ValueError:
            raise GraphmemError(f"--dim {item!r}: {value!r} is not an integer") from None
        if v < 0:
            raise GraphmemError(f"--dim {item!r}: a dimension cannot be negative")
        if v > MAX_DIM:
            raise GraphmemError(f"--dim {item!r}: past the largest dimension graphmem "
                                f"plans (2**40)")
        dims[name] = v
    return dims


def parse_bounds(items: list[str]) -> dict[str, int]:
    """``--bound NAME=N`` values (issue 53), refused in one line as ``--dim``'s are."""
    try:
        return parse_dims(items)
    except GraphmemError as exc:
        raise GraphmemError(str(exc).replace("--dim", "--bound").replace(
            "e.g. --bound N=8", "e.g. --bound NonZero_3=100").replace(
            "a dimension cannot", "a bound cannot")) from None


def chosen_passes(args) -> list[str]:
    if args.passes is None:
        names = list(DEFAULT_PASSES)
    elif args.passes.strip() in ("", "none"):
        names = []
    else:
        names = [n.strip() for n in args.passes.split(",") if n.strip()]
    return [n for n in names if not getattr(args, f"no_{n}", False)]


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    """``--ort-optimize`` and ``--infer-by-running``: plan the graph ONNX Runtime runs."""
    from graphmem.frontend.ort_optimize import LEVELS
    p.add_argument("--ort-optimize", choices=LEVELS, default=None, metavar="LEVEL",
                   help="plan the graph ONNX Runtime runs: the model optimized offline by "
                        "ONNX Runtime at this level (basic, extended, all) for --provider, "
                        "in a temporary folder removed afterwards (docs/ort-graphs.md)")
    p.add_argument("--infer-by-running", action="store_true",
                   help="take the shapes graphmem has no rule for from one ONNX Runtime "
                        "run of the model at the bound dims (seeded inputs)")


def model_path(args) -> Path:
    """The file the command plans: the model as given, or (``--ort-optimize``,
    ``--infer-by-running``) the copy of it made once for this command."""
    found = getattr(args, "runtime_model", None)
    if found is None:
        found = _runtime_model(args)
        args.runtime_model = found
    return found


def _runtime_model(args) -> Path:
    path = resolve(args.model, quiet=getattr(args, "json", False))
    level = getattr(args, "ort_optimize", None)
    if level:
        from graphmem.frontend.ort_optimize import optimize
        if not path.is_file():
            raise GraphmemError(f"{path}: no such file")
        args.optimized = optimize(path, level, getattr(args, "provider", "cpu"))
        path = args.optimized.path
    if getattr(args, "infer_by_running", False):
        from graphmem.frontend.ort_run_shapes import annotated_by_running
        path = annotated_by_running(path, parse_dims(args.dim),
                                    getattr(args, "dim_default", None))
    return path


def exported_arena(args, options: dict | None = None) -> dict:
    """With ``--ort-optimize``, for the "as exported" line: the arena of the model as
    given (not optimized) planned with the command's options and its running nodes, or
    why it does not plan (``error``: the graph ONNX Runtime runs may plan where the
    model as given does not)."""
    try:
        graph = load(resolve(args.model, quiet=True), parse_dims(args.dim),
                     dim_default=getattr(args, "dim_default", None))
        result = plan_graph(graph, **(options if options is not None else plan_options(args)),
                            model_name=Path(args.model).name, bindings=graph.bindings)
    except GraphmemError as exc:
        return {"arena_bytes": None, "nodes": None, "error": str(exc)}
    return {"arena_bytes": result.plan.arena_bytes, "nodes": len(result.plan.order)}


def input_paths(args) -> list[Path]:
    """The files the command reads (its model, a saved --plan): no output may be one."""
    paths = [resolve(args.model, quiet=True)] if getattr(args, "model", None) else []
    return paths + [Path(p) for p in (getattr(args, "plan", None),
                                      getattr(args, "plan_from", None)) if p]


def model_stem(args) -> str:
    name = Path(args.model).name
    return name[:-5] if name.endswith(".onnx") else name


@contextmanager
def stages(args) -> Iterator[Callable[[str], None]]:
    """A callback naming the stage under way, shown as a transient line on stderr while
    it runs: only on a terminal, and not with --quiet or --json (pipes and tests see
    nothing). Loading and planning a large graph take seconds. Inside a command's own
    :class:`~graphmem.commands.progress.Progress` the stages are reported there."""
    from graphmem.commands.progress import active
    shown_now = active()
    if shown_now is not None:
        yield shown_now.callback()
        return
    if getattr(args, "quiet", False) or getattr(args, "json", False):
        yield lambda stage: None
        return
    from rich.console import Console
    from rich.markup import escape
    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda stage: None
        return
    from graphmem.commands.progress import clear_early
    clear_early()
    with console.status("graphmem") as status:
        yield lambda stage: status.update(f"graphmem: {escape(stage)}")


def load_graph(args):
    """(graph, seconds) for the command's model and --dim bindings."""
    t0 = time.perf_counter()
    dims = parse_dims(args.dim)
    default = getattr(args, "dim_default", None)
    path = model_path(args)
    with stages(args) as stage:
        stage(f"loading {Path(path).name}")
        graph = load(path, dims, dim_default=default,
                     bounds=parse_bounds(getattr(args, "bound", [])))  # issue 53
    # dims written as expressions (past_seq + 1) are computed, not defaulted
    defaulted = [f"{k}={v}" for k, v in graph.bindings.items()
                 if k not in dims and default is not None and not is_expression(k)]
    if defaulted:
        from graphmem.notes import note
        note(f"--dim-default {default} bound {', '.join(defaulted)}")
    return graph, time.perf_counter() - t0


def plan_options(args) -> dict:
    """The ``plan_graph`` keywords that :func:`add_pass_args` options choose; ``provider``
    is the in-place table's key ("cpu", "cpu-probed", ...: :func:`inplace_table_key`), which
    ``plan_graph`` and the helpers that pass it on accept. With ``--inplace-table
    probed`` it says once on stderr which entries the plan then trusts that the runtime
    does not declare."""
    if getattr(args, "inplace_table", "default") == "probed":
        warn_probed(getattr(args, "provider", "cpu"))
    return {"passes": chosen_passes(args), "alignment": args.alignment,
            "placement": args.placement, "time_limit": getattr(args, "time_limit", 10.0),
            "provider": inplace_table_key(args)}


def inplace_table_key(args) -> str:
    """The in-place table the command's ``--provider`` and ``--inplace-table`` name (a
    key of :data:`graphmem.core.ops.INPLACE_TABLES`, which ``plan_graph`` takes as its
    ``provider``), without plan_options' warning."""
    from graphmem.core.ops import table_key
    return table_key(getattr(args, "provider", "cpu"), getattr(args, "inplace_table", "default"))


def warn_probed(provider: str) -> None:
    """One stderr line: the probed table trusts entries no kernel of ``provider``
    declares, checked only by `graphmem probe` on a machine."""
    from graphmem.core.ops import table_key, unproven
    extra = unproven(table_key(provider, "probed"))
    pairs = sum(map(len, extra.values()))
    from graphmem.notes import note
    note(f"--inplace-table probed trusts {pairs} in-place pairs of {len(extra)} ops "
         f"that ONNX Runtime's {provider} kernels do not declare (e.g. "
         f"{', '.join(sorted(extra)[:4])}); check them with `graphmem probe --provider "
         f"{provider}` on the machine that runs the plan")


def plan_from_args(args, graph=None) -> Result:
    """Plan the command's model with the command's pass options."""
    if graph is None:
        graph, _ = load_graph(args)
    with stages(args) as stage:
        return plan_graph(graph, **plan_options(args),
                          model_name=Path(model_path(args)).name
                          if Path(args.model).exists() or getattr(args, "ort_optimize", None)
                          else model_stem(args) + ".onnx",
                          bindings=graph.bindings, progress=stage)


def read_plan(path: str, model: str | Path | None = None) -> Plan:
    """A plan file; with ``model``, a file larger than any plan for that model can be is
    refused before it is parsed (a hostile file must not take the machine's memory)."""
    return Plan.load(path, None if model is None else plan_size_limit(model))


def plan_size_limit(model: str | Path) -> int:
    """The most bytes a plan file for ``model`` can need: every tensor name written
    escaped (up to 6 characters each) with its fields, and every node in the order."""
    from graphmem.frontend.reader import plan_size_bound, read_model
    return plan_size_bound(read_model(model))
