"""``--capacity SIZE`` of ``plan``, ``report`` and ``fit``: place the arena within a
device's memory, or say it cannot, proven where it is.

The place pass runs its placement and, where the arena is larger than the capacity,
the complete search at the capacity (``passes/placement/algorithm.within``); its
report carries the verdict, which :func:`verdict` reads and :func:`sentence` says in
one line. Exit status of ``plan`` and ``report`` with ``--capacity``
(:data:`EXIT_STATUS`):

- 0: the arena fits (``plan`` writes the plan within the capacity);
- 1: it does not fit, proven: the max-live floor of the plan's order and aliases is
  above the capacity (no placement is smaller), or the complete search proved that
  no placement of its storage groups fits (``plan`` writes no plan);
- 3: not decided: no placement within the capacity was found in the search's budget,
  and none was proven impossible (``plan`` writes no plan).

``report`` prints its report as usual, the verdict line on stderr, and exits the same.

Bad input (a size that does not read, a negative one) stays exit 2. ``fit --capacity``
gives the largest batch whose arena fits, and says why the next one does not.
"""
from __future__ import annotations

from graphmem.errors import GraphmemError
from graphmem.passes.placement.verdicts import FITS, NO_FIT, UNDECIDED
EXIT_STATUS = {FITS: 0, NO_FIT: 1, UNDECIDED: 3}
HELP = ("the device's memory for the arena (1MiB, 512MiB, 12GiB or bytes): the arena is "
        "placed within it (the complete placement search where the heuristics miss it), "
        "or the command says it cannot, proven where it is (exit 1; 3 when not decided "
        "in the search's budget)")


def add_capacity_arg(p, help_text: str = HELP) -> None:
    p.add_argument("--capacity", metavar="SIZE", default=None, help=help_text)


def capacity_of(args) -> int | None:
    """The ``--capacity`` bytes of a command's arguments (None where not given)."""
    text = getattr(args, "capacity", None)
    if text is None:
        return None
    from graphmem.commands.sizes import parse_bytes
    return parse_bytes(text, "--capacity")


def refuse_with_ranges(args) -> None:
    """--capacity is about one plan: refused with a range of dims (``--dim N=1..8``,
    ``--at``)."""
    from graphmem.commands import ranges
    if getattr(args, "capacity", None) is not None and (ranges.wanted(args)
                                                       or getattr(args, "at", None)):
        raise GraphmemError("--capacity places one plan's arena; it does not apply to a "
                            "range of dims (give --dim NAME=VALUE)")


def place_detail(reports) -> dict | None:
    """The place pass's capacity verdict among a plan's pass ``reports`` (None where no
    place pass ran, or it ran without a capacity)."""
    got = None
    for r in reports:
        if r.name == "place" and isinstance(r.detail.get("capacity"), dict):
            got = r.detail["capacity"]
    return got


def verdict(detail: dict | None, arena: int, floor: int, cap: int) -> dict:
    """Whether an arena of ``arena`` bytes fits ``cap``: the place pass's ``detail``
    (:func:`place_detail`), or, where there is none, the arena against the capacity
    and ``floor`` (the aliased peak) below it. Keys: ``bytes``, ``status``, ``proven``,
    ``by`` (placement, floor or search), ``floor``, ``nodes``, and ``arena``."""
    got = dict(detail) if detail else None
    if got is None or (got["status"] == FITS) != (arena <= cap):
        status, by = ((FITS, "placement") if arena <= cap else
                      (NO_FIT, "floor") if floor > cap else (UNDECIDED, "search"))
        got = {"bytes": cap, "status": status, "proven": status != UNDECIDED, "by": by,
               "floor": floor, "nodes": 0}
    got["arena"] = arena
    return got


def sentence(v: dict, what: str) -> str:
    """The verdict in one line, about ``what`` (the model's name)."""
    cap, floor = v["bytes"], v["floor"]
    if v["status"] == FITS:
        how = " (placed by the complete search)" if v["by"] == "search" else ""
        return (f"{what}: fits in {cap:,} bytes: arena {v['arena']:,} bytes{how}, "
                f"max-live floor {floor:,}")
    if v["status"] == NO_FIT and v["by"] == "floor":
        return (f"{what}: does not fit in {cap:,} bytes, proven: the max-live floor "
                f"{floor:,} bytes (the most live at one step in this order, aliases "
                f"counted once) is {floor - cap:,} above it")
    if v["status"] == NO_FIT:
        return (f"{what}: does not fit in {cap:,} bytes, proven by the complete placement "
                f"search ({v['nodes']:,} nodes) for this order and these aliases; the "
                f"max-live floor is {floor:,}, the best arena {v['arena']:,}")
    return (f"{what}: no placement within {cap:,} bytes found, not proven impossible "
            f"(the search stopped after {v['nodes']:,} nodes); best arena {v['arena']:,} "
            f"bytes, max-live floor {floor:,}")


def plan_verdict(result, cap: int) -> dict:
    """:func:`verdict` of a planning ``Result``."""
    plan = result.plan
    return verdict(place_detail(result.reports), plan.arena_bytes,
                   int(plan.stats.get("aliased_peak_bytes", 0)), cap)


def planned_view(args, source):
    """``export.planned_view`` (the report's plan), and with ``--capacity`` the plan
    made here under the capacity and its :func:`verdict` (None without)."""
    from graphmem.commands import export
    cap = capacity_of(args)
    if cap is None:
        return (*export.planned_view(args, source), None)
    if getattr(args, "plan", None):
        raise GraphmemError("--capacity places the arena; with --plan the plan is given "
                            "(give one or the other)")
    from graphmem.commands.common import plan_options
    from graphmem.pipeline import plan_graph
    from graphmem.plan.view import build
    graph = source.load()
    result = plan_graph(graph, **plan_options(args, warn=False), model_name=source.plan_name,
                        bindings=graph.bindings)
    return build(result.plan, result.graph), result.graph, plan_verdict(result, cap)


def judged(args, result, what: str) -> tuple[str, int] | None:
    """With ``--capacity``: the verdict line on a planning ``result`` and its exit status
    (the line begins ``graphmem:`` where it does not fit); None without."""
    cap = capacity_of(args)
    if cap is None:
        return None
    from graphmem.errors import printable
    v = plan_verdict(result, cap)
    line = sentence(v, printable(what))  # printed plainly: a name shown, never obeyed
    return (line if v["status"] == FITS else f"graphmem: {line}"), EXIT_STATUS[v["status"]]


def report_status(data: dict, what: str) -> int:
    """``report``'s exit status for the report object ``data``: with ``--capacity``
    (``data["capacity"]``) its verdict line said on stderr and :data:`EXIT_STATUS`;
    0 without."""
    import sys
    v = data.get("capacity")
    if v is None:
        return 0
    from graphmem.errors import printable
    line = sentence(v, printable(what))
    print(line if v["status"] == FITS else f"graphmem: {line}", file=sys.stderr)
    return EXIT_STATUS[v["status"]]


FIT_HELP = ("the device's memory for the arena alone (1MiB, 512MiB, 12GiB or bytes), "
            "instead of --budget: the largest batch whose arena is placed within it (the "
            "complete placement search where the heuristics miss it), and why the next "
            "batch does not fit, proven where it is")


def one_limit(args, cap: int | None) -> None:
    """``fit`` takes ``--budget`` (weights + arena + workspace) or ``--capacity`` (the
    arena), one of them; ``--capacity`` not with ``--train``."""
    if cap is None and getattr(args, "budget", None) is None:
        raise GraphmemError("fit needs --budget SIZE (weights + arena + workspace) or "
                            "--capacity SIZE (the arena alone)")
    if cap is not None and getattr(args, "budget", None) is not None:
        raise GraphmemError("give --budget (weights + arena + workspace) or --capacity "
                            "(the arena alone), not both")
    if cap is not None and getattr(args, "train", False):
        raise GraphmemError("--capacity fits an inference arena; with --train give --budget")


def fit_answer(answer: dict, parts: dict[int, dict], cap: int, dtype: str) -> dict:
    """``fit --capacity``'s answer from the search over batches (``answer``, whose
    totals are arenas) and each probed batch's footprint (``parts``): the largest
    batch, its verdict (``fits``) and the next batch's (``next``: why it does not)."""
    def at(batch: int) -> dict:
        p = parts[batch]
        return verdict(p.get("capacity"), p["arena_bytes"], p["aliased_peak_bytes"], cap)

    batch = answer["batch"]
    nxt = batch + 1 if (batch + 1) in parts else 1
    return {"batch": batch, "capacity_bytes": cap, "dtype": dtype,
            "arena_bytes": parts[batch]["arena_bytes"] if batch else None,
            "fits": at(batch) if batch else None, "next": at(nxt),
            "probed": answer["probed"]}


def print_fit(out: dict) -> None:
    """``fit --capacity``'s answer in two lines."""
    cap = out["capacity_bytes"]
    if out["batch"]:
        print(f"batch {out['batch']} fits ({out['dtype']}): arena {out['arena_bytes']:,} "
              f"bytes <= capacity {cap:,}" + (" (placed by the complete search)"
                                              if out["fits"]["by"] == "search" else ""))
    nxt = out["next"]
    print(sentence(nxt, f"batch {out['batch'] + 1}") + f"; {len(out['probed'])} plans made")
