"""The command-line options of range plans, shared by the commands: ``--dim
NAME=LO..HI`` and ``NAME=EXPR`` (:func:`split_dims`), ``--at`` (:func:`add_range_args`),
and a saved range plan read at a binding (:func:`read_plan_at`, :func:`evaluated`) for
verify, report and export. It imports no command, so that every command may import it."""
from __future__ import annotations

from pathlib import Path

from graphmem.errors import GraphmemError
from graphmem.plan.format import Plan
from graphmem.commands.common import MAX_DIM, parse_dims, read_plan

# A range plan holds up to 16 segments, each a plan's tensors with formulas: a file more
# than this many times the largest plan of its model is refused before it is parsed.
RANGE_PLAN_FACTOR = 256


def add_range_args(p) -> None:
    """``--at`` (and, on ``plan``, the segment options)."""
    p.add_argument("--at", action="append", default=[], metavar="NAME=VALUE",
                   help="with a range of dims (--dim seq=1..4096, or a range plan given "
                        "to verify's --plan): the range plan evaluated at this binding, "
                        "an ordinary graphmem.plan/1 plan (repeatable)")


def split_dims(items: list[str]):
    """``--dim`` items: ``NAME=LO..HI`` ranges (the box), ``NAME=VALUE`` bindings, and
    ``NAME=EXPR`` dims that follow the free ones (``total_sequence_length=past+1``:
    integers, the free dims' names, ``+ - *`` and ``**`` by an integer), returned as
    (box, fixed, derived: name -> Formula)."""
    box: dict[str, tuple[int, int]] = {}
    fixed: list[str] = []
    exprs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        lo, dots, hi = value.partition("..")
        if not dots:
            if sep and name and value.strip() and not value.strip().lstrip("-").isdigit():
                exprs[name] = value
            else:
                fixed.append(item)
            continue
        if not sep or not name:
            raise GraphmemError(f"--dim {item!r}: expected NAME=LO..HI, e.g. --dim seq=1..4096")
        try:
            lo_v, hi_v = int(lo), int(hi)
        except ValueError:
            raise GraphmemError(f"--dim {item!r}: {lo!r}..{hi!r} is not a range of "
                                f"integers") from None
        if not 0 <= lo_v <= hi_v <= MAX_DIM:
            raise GraphmemError(f"--dim {item!r}: expected 0 <= LO <= HI <= 2**40")
        box[name] = (lo_v, hi_v)
    from graphmem.ranges.formulas import parse_formula
    derived = {}
    for name, text in exprs.items():
        try:
            derived[name] = parse_formula(text, tuple(box))
        except ValueError as exc:
            raise GraphmemError(f"--dim {name}={text}: {exc}") from None
    return box, parse_dims(fixed), derived


def wanted(args) -> bool:
    """Does the command line ask for a range (a ``--dim NAME=LO..HI``)?"""
    return any(".." in item for item in getattr(args, "dim", ()) or ())


def at_binding(args) -> dict[str, int]:
    return parse_dims(getattr(args, "at", []) or [])


def evaluated(args, source) -> Plan | None:
    """For report and export's ``--plan``: a range plan evaluated at the binding ``--at``
    and ``--dim`` give; None for any other file (read as before)."""
    from graphmem.ranges.rangeplan import is_range_plan
    saved = getattr(args, "plan", None)
    if not saved or not is_range_plan(saved):
        if at_binding(args):
            raise GraphmemError("--at needs a range plan: --plan RANGE.json (graphmem plan "
                                "MODEL --dim NAME=LO..HI writes one)")
        return None
    return read_plan_at(args, source)


def read_plan_at(args, source) -> Plan:
    """``verify --plan``: an ordinary plan file as it is, or a range plan evaluated at the
    binding ``--at`` and ``--dim`` give."""
    from graphmem.ranges.rangeplan import RangePlan, is_range_plan
    if not is_range_plan(args.plan):
        if at_binding(args):
            raise GraphmemError(f"--at: {args.plan} is not a range plan "
                                f"(graphmem plan MODEL --dim NAME=LO..HI writes one)")
        return read_plan(args.plan, source)
    from graphmem.ranges.evaluate import evaluate, free_binding
    limit = RANGE_PLAN_FACTOR * source.plan_size_limit()
    size = Path(args.plan).stat().st_size
    if size > limit:
        raise GraphmemError(f"{args.plan}: {size:,} bytes, more than any range plan for this "
                            f"model needs ({limit:,}); not read")
    rp = RangePlan.load(args.plan)
    return evaluate(rp, free_binding(rp, {**parse_dims(args.dim), **at_binding(args)}))
