"""Options shared by the commands: the model, symbolic dims, the passes."""
from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from graphmem.commands.option_names import (DEFAULT_PASS_NAMES as DEFAULT_PASSES,
                                             PASS_NAMES as PASSES,
                                             STRATEGY_NAMES as STRATEGIES)
from graphmem.errors import GraphmemError, printable
from graphmem.frontend.dim_expressions import is_expression
from graphmem.plan.format import Plan
from graphmem.frontend.zoo import resolve
from graphmem.core.records import record
from graphmem.commands.progress import accept as input_accepted, hold

# the loader, the planner and the in-place tables (numpy, onnx) are imported where they
# are used: building the parser (``graphmem --help``) needs none of them
if TYPE_CHECKING:
    from graphmem.frontend.ort_optimize import Optimized
    from graphmem.pipeline import Result
    from graphmem.planning.target import InplaceTable




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
    from graphmem.notes import release
    release()  # the notes held so far come before the command's tables
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
    from graphmem.commands.option_names import PROVIDER_NAMES
    p.add_argument("--provider", choices=list(PROVIDER_NAMES), default="cpu",
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


@record
class ModelSource:
    """The model a command reads, resolved once per command (:func:`model_source`) and
    passed to what needs it, so that no command keeps state in its argparse namespace.

    ``given`` is MODEL as the user wrote it (a path or a Model Zoo name), ``file`` the
    file it names, ``dims`` and ``dim_default`` the ``--dim`` and ``--dim-default``
    bindings, ``path`` the file planned: ``file`` itself, or the copy of it made once
    for the command (``--ort-optimize``: ONNX Runtime's optimized graph, described by
    ``optimized``; ``--infer-by-running``: the model with the types of one run),
    ``bounds`` the ``--bound`` values (issue 53: data-dependent sizes by symbol). A
    record: a command that binds more dims itself (``report --batch``) passes them to
    :func:`model_source`; a new option that changes what is planned is a new field here,
    resolved in :func:`model_source`.
    """
    given: str
    file: Path
    dims: Mapping[str, int]
    dim_default: int | None
    path: Path
    optimized: Optimized | None = None
    bounds: Mapping[str, int] | None = None  # issue 53: --bound NAME=N

    @property
    def stem(self) -> str:
        """The model's name without ``.onnx`` (:func:`model_stem`)."""
        return model_stem(self.given)

    @property
    def plan_name(self) -> str:
        """The plan's ``model``: the name of the file planned, or for a Model Zoo name
        ``<name>.onnx``."""
        if Path(self.given).exists() or self.optimized is not None:
            return Path(self.path).name
        return self.stem + ".onnx"

    def load(self, dims: Mapping[str, int] | None = None, *, dim_default: bool = True,
             bounds: Mapping[str, int] | None = None, accept: bool = True):
        """The planned file loaded (:func:`~graphmem.frontend.reader.load`) at ``dims``
        (default: the source's), with ``--dim-default`` unless ``dim_default`` is False
        (a saved plan's bindings are complete), its data-dependent sizes at ``bounds``
        (default: the source's ``--bound`` values; a saved plan's are its own). With
        ``accept`` the command's input is taken as read and checked (its progress lines
        may start: :func:`graphmem.commands.progress.accept`); a command that checks a saved plan against the
        graph next passes False and accepts once it has."""
        from graphmem.frontend.reader import load
        graph = load(self.path, self.dims if dims is None else dims,
                     dim_default=self.dim_default if dim_default else None,
                     bounds=(self.bounds if bounds is None else bounds) or None)
        if accept:
            input_accepted()
        return graph

    def read_model(self, **kwargs):
        """The planned file's ModelProto (:func:`~graphmem.frontend.reader.read_model`),
        read and checked: the command's input accepted. ``check=True``: the file checked
        first as plan checks it (:func:`~graphmem.frontend.reader.check_file`)."""
        from graphmem.frontend.reader import read_model
        model = read_model(self.path, **kwargs)
        input_accepted()
        return model

    def plan_size_limit(self) -> int:
        """The most bytes a plan file for this model can need (see
        :func:`plan_size_bound`), from the planned file's structure."""
        return plan_size_bound(self.path)


def model_stem(model: str) -> str:
    """MODEL's name without ``.onnx``: the default plan file is ``<stem>.plan.json``."""
    name = Path(model).name
    return name[:-5] if name.endswith(".onnx") else name


def model_source(args, dims: Mapping[str, int] | None = None) -> ModelSource:
    """The command's model, resolved once: MODEL (a path or a Model Zoo name), the
    ``--dim`` bindings (``dims`` when the command bound more itself), and the file
    planned, made here once where ``--ort-optimize`` or ``--infer-by-running`` asks
    for a copy. Options a command's parser lacks take their defaults."""
    hold()  # no progress line through a pipe until the model (and plan) are read
    bound = parse_dims(args.dim) if dims is None else dict(dims)
    dim_default = getattr(args, "dim_default", None)
    file = resolve(args.model, quiet=getattr(args, "json", False)
                   or getattr(args, "quiet", False))
    path, optimized = file, None
    level = getattr(args, "ort_optimize", None)
    if level:
        from graphmem.frontend.ort_optimize import optimize
        if not file.is_file():
            raise GraphmemError(f"{file}: no such file")
        optimized = optimize(file, level, getattr(args, "provider", "cpu"))
        path = optimized.path
    if getattr(args, "infer_by_running", False):
        from graphmem.frontend.ort_run_shapes import annotated_by_running
        path = annotated_by_running(path, bound, dim_default)
    return ModelSource(given=args.model, file=file, dims=bound, dim_default=dim_default,
                       path=path, optimized=optimized,
                       bounds=parse_bounds(getattr(args, "bound", None) or []) or None)


def exported_arena(source: ModelSource, options: dict) -> dict:
    """With ``--ort-optimize``, for the "as exported" line: the arena of the model as
    given (not optimized) planned with the command's ``options`` and its running nodes,
    or why it does not plan (``error``: the graph ONNX Runtime runs may plan where the
    model as given does not)."""
    try:
        from graphmem.frontend.reader import load
        from graphmem.pipeline import plan_graph
        graph = load(source.file, source.dims, dim_default=source.dim_default)
        result = plan_graph(graph, **options, model_name=Path(source.given).name,
                            bindings=graph.bindings)
    except GraphmemError as exc:
        return {"arena_bytes": None, "nodes": None, "error": str(exc)}
    return {"arena_bytes": result.plan.arena_bytes, "nodes": len(result.plan.order)}


def input_paths(args) -> list[Path]:
    """The files the command reads (its model, a saved --plan): no output may be one."""
    paths = [resolve(args.model, quiet=True)] if getattr(args, "model", None) else []
    return paths + [Path(p) for p in (getattr(args, "plan", None),
                                      getattr(args, "plan_from", None)) if p]


@contextmanager
def stages(args, what: str = "", passes: list[str] | None = None
           ) -> Iterator[Callable[[str], None]]:
    """A callback naming the stage under way (the loader's, the planner's), shown on
    stderr while it runs, not with --quiet or --json: on a terminal a transient line,
    through a pipe :class:`~graphmem.commands.progress.Progress`'s timed lines (``what``
    the command is doing: ``graphmem: plan: planning, pass 3 of 5: inplace, 2 s``).
    Loading and planning a large graph take seconds. Inside a command's own Progress
    the stages are reported there. ``passes``: the passes planned, to number them."""
    from graphmem.commands.progress import Progress, active
    numbered = _numbered_passes(passes)
    shown_now = active()
    if shown_now is not None:
        part = shown_now.callback()
        yield lambda stage: part(numbered(stage))
        return
    if getattr(args, "quiet", False) or getattr(args, "json", False):
        yield lambda stage: None
        return
    from rich.console import Console
    from rich.markup import escape
    console = Console(stderr=True)
    if not console.is_terminal:
        with Progress(getattr(args, "command", None) or "graphmem", terminal=False) as p:
            p.title = what or "working"
            part = p.callback()
            yield lambda stage: part(numbered(stage))
        return
    from graphmem.commands.progress import clear_early
    clear_early()
    with console.status("graphmem") as status:
        yield lambda stage: status.update(f"graphmem: {escape(numbered(stage))}")


def _numbered_passes(passes: list[str] | None) -> Callable[[str], str]:
    """``pass inplace`` -> ``pass 3 of 5: inplace`` (the planner names a pass's stage
    ``pass NAME``, and ``pass NAME (without concat)`` when it plans again)."""
    if not passes:
        return lambda stage: stage
    index = {name: k for k, name in enumerate(passes, 1)}

    def numbered(stage: str) -> str:
        if stage.startswith("pass "):
            name, _, rest = stage[5:].partition(" ")
            if name in index:
                return f"pass {index[name]} of {len(passes)}: {name}" + (
                    f" {rest}" if rest else "")
        return stage
    return numbered


def load_graph(args, source: ModelSource):
    """(graph, seconds): ``source`` loaded at its bindings, the stage shown as
    :func:`stages` says (``args``: the command's --quiet and --json)."""
    t0 = time.perf_counter()
    with stages(args, "reading the model") as stage:
        stage(f"loading {Path(source.path).name}")
        graph = source.load()
    # dims written as expressions (past_seq + 1) are computed, not defaulted
    default = source.dim_default
    defaulted = [f"{k}={v}" for k, v in graph.bindings.items()
                 if k not in source.dims and default is not None and not is_expression(k)]
    if defaulted:
        from graphmem.notes import note
        note(f"--dim-default {default} bound {', '.join(defaulted)}")
    return graph, time.perf_counter() - t0


def plan_options(args, *, warn: bool = True) -> dict:
    """The ``plan_graph`` keywords that :func:`add_pass_args` options choose (their
    defaults on a parser without them): ``passes``, ``alignment``, ``placement``,
    ``time_limit``, ``capacity`` (only where ``--capacity`` is given) and ``table``, the :class:`~graphmem.planning.target.InplaceTable` of
    ``--provider`` and ``--inplace-table``. With ``--inplace-table probed`` and ``warn``
    it says once on stderr which entries the plan then trusts that the runtime does not
    declare."""
    table = inplace_table(args)
    if warn and table.which == "probed":
        warn_probed(table.provider)
    return {"passes": chosen_passes(args) if hasattr(args, "passes") else list(DEFAULT_PASSES),
            "alignment": getattr(args, "alignment", 64),
            "placement": getattr(args, "placement", "best"),
            "time_limit": getattr(args, "time_limit", 10.0), "table": table,
            **capacity_option(args)}


def capacity_option(args) -> dict:
    """``{"capacity": bytes}`` where the command has ``--capacity`` and it is given
    (``commands/capacity_args.py``)."""
    text = getattr(args, "capacity", None)
    if text is None:
        return {}
    from graphmem.commands.sizes import parse_bytes
    return {"capacity": parse_bytes(text, "--capacity")}


def inplace_table(args) -> InplaceTable:
    """The in-place table the command's ``--provider`` and ``--inplace-table`` name."""
    from graphmem.planning.target import InplaceTable
    return InplaceTable(getattr(args, "provider", "cpu"),
                        getattr(args, "inplace_table", "default"))


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


def plan_source(args, source: ModelSource, graph=None) -> Result:
    """Plan ``source`` (loaded here unless ``graph`` is given) with the command's pass
    options."""
    if graph is None:
        graph, _ = load_graph(args, source)
    from graphmem.pipeline import plan_graph
    options = plan_options(args)
    with stages(args, "planning", options["passes"]) as stage:
        return plan_graph(graph, **options, model_name=source.plan_name,
                          bindings=graph.bindings, progress=stage)


def read_plan(path: str, source: ModelSource | None = None) -> Plan:
    """A plan file; with ``source``, a file larger than any plan for that model can be
    is refused before it is parsed (a hostile file must not take the machine's
    memory)."""
    return Plan.load(path, None if source is None else source.plan_size_limit())


def plan_size_bound(path: str | Path) -> int:
    """The most bytes a plan file for the model at ``path`` can take as JSON: every
    tensor name written escaped (up to 6 characters each) with its fields, and every
    node in the order. Read by the compiled wire reader from the file's bytes (mapped
    where large): the names and the node count, not the weights, and no onnx proto."""
    from graphmem import wire
    from graphmem.frontend.protos import one_line
    from graphmem.frontend.reader import file_contents, model_file
    p = model_file(path)
    try:  # a large file mapped: the weights' pages are never read
        g = wire.parse_model(file_contents(p)).graph
    except OSError as exc:
        raise GraphmemError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise GraphmemError(f"{p}: not an ONNX model ({one_line(exc)})") from None
    if g is None or (not g.nodes and not g.outputs):
        raise GraphmemError(f"{p}: not an ONNX model (no graph in the file)")
    names = {t for n in g.nodes for t in n.outputs} | {v.name for v in g.inputs}
    return (1 << 20) + sum(6 * len(t) + 256 for t in names) + 24 * len(g.nodes)
