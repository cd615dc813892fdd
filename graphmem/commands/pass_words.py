"""What each planning pass did, in words a deployment engineer reads.

A pass reports a dict of internal fields (``method floor, file_peak 7225344, peak
7225344, bound 7225344, reordered False``); :func:`describe` turns the fields of the
passes graphmem ships into a sentence, sizes in the unit that reads best
(:func:`~graphmem.analysis.footprint.format_bytes`). A field it has no words for (a
pass added later) is still shown, its name with spaces for underscores.
"""
from __future__ import annotations

from graphmem.analysis.footprint import format_bytes


def size(n) -> str:
    return format_bytes(int(n))


def strategy_words(name: str) -> str:
    """A placement strategy's name as words: ``greedy_by_size`` -> ``largest first``."""
    return STRATEGY_WORDS.get(name, str(name).replace("_", " "))


# the placement strategies (passes/placement/*.py NAME) as a reader says them
STRATEGY_WORDS = {
    "greedy_by_size": "largest buffer first",
    "greedy_by_duration": "longest-lived buffer first",
    "greedy_by_area": "largest size x lifetime first",
    "greedy_by_breadth": "buffers that cross the most live bytes first",
    "greedy_by_end": "last-freed buffer first",
    "greedy_in_order": "in execution order",
    "greedy_kept_first": "buffers kept to the end first",
    "optimal": "exact solver (CP-SAT)",
    "search": "complete search",
    "sweep_best_fit": "sweep best fit",
    "storage_blocks": "shared storage blocks stacked",
}

# how the reorder pass found its order (passes/reorder.py ``method``)
ORDER_METHODS = {
    "floor": "the model's own order already meets the lowest peak any order can have",
    "gap": "not searched: no order can lower the peak by more than 1%",
    "exact": "exact search",
    "exact+local": "exact search, then local moves",
    "beam": "beam search",
    "beam+local": "beam search, then local moves",
    "beam (meets the layer floor)": "beam search (reaches the lowest possible peak)",
}


def _order(d: dict) -> list[str]:
    out = []
    method = str(d.pop("method", ""))
    if method.startswith("skipped"):
        out.append("not searched: " + method.removeprefix("skipped").strip(" ()")
                   .replace(">", "over the limit of"))
    elif method:
        out.append(ORDER_METHODS.get(method, method))
    file_peak, peak = d.pop("file_peak", None), d.pop("peak", None)
    if file_peak is not None and peak is not None and peak != file_peak:
        out.append(f"peak {size(file_peak)} in the model's order, {size(peak)} in the "
                   f"order found")
    elif file_peak is not None:
        out.append(f"peak {size(file_peak)}")
    bound = d.pop("bound", None)
    if bound is not None and bound != file_peak:
        out.append(f"no order below {size(bound)}")
    reordered = d.pop("reordered", None)
    in_file = d.pop("arena_file_order", None)
    if reordered:
        out.append("new order used" + (f" (arena {size(in_file)} in the model's order)"
                                       if in_file is not None else ""))
    elif reordered is not None:
        out.append("model's order kept" + (
            f" (the order found planned {size(in_file)} or more)"
            if in_file is not None and method not in ("floor", "gap") else ""))
    return out


def _concat(d: dict) -> list[str]:
    concats, slices = d.pop("concats", None), d.pop("slices", None)
    saved = d.pop("copy_bytes_saved", None)
    if concats is None:
        return []
    if not concats:
        return ["no Concat written in place"]
    return [f"{concats} Concat node{'s' if concats != 1 else ''} built in place "
            f"({slices} input{'s' if slices != 1 else ''} written straight into the "
            f"output), {size(saved or 0)} of copies saved"]


def _inplace(d: dict) -> list[str]:
    views, over = d.pop("views", None), d.pop("inplace", None)
    if views is None and over is None:
        return []
    over, views = over or 0, views or 0
    return [f"{over} op{'s write' if over != 1 else ' writes'} over its input, "
            f"{views} output{'s share' if views != 1 else ' shares'} its input's memory "
            f"(a view)"]


def _share(d: dict) -> list[str]:
    blocks, total = d.pop("blocks", None), d.pop("total_bytes", None)
    match = d.pop("match_range", None)
    if blocks is None:
        return []
    return [f"{blocks} shared storage block{'s' if blocks != 1 else ''}, "
            f"{size(total or 0)} in all (MXNet's pool; a buffer reuses a block up to "
            f"{match}x its size)"]


def _place(d: dict) -> list[str]:
    out = []
    used = d.pop("strategy", None)
    tried = d.pop("tried", None)
    if used is not None:
        out.append(f"placement: {strategy_words(used)}")
    if isinstance(tried, dict) and len(tried) > 1:
        out.append(f"best of {len(tried)} tried")
    share = d.pop("share_bytes", None)
    if share is not None:
        out.append(f"the shared blocks stacked would take {size(share)}")
    reason = d.pop("reason", None)
    if reason:
        out.append(f"placed without pairwise checks: {reason}")
    for key in ("solver", "branches", "conflicts", "wall_time", "mip_gap", "nodes",
                "status"):
        d.pop(key, None)  # the solver's own counters: in the plan file, not the summary
    return out


def _trial(name: str, d: dict) -> list[str]:
    """A trial pass (concat) planned with and without its choices: which was kept."""
    with_it = d.pop(f"arena_with_{name}", None)
    without = d.pop(f"arena_without_{name}", None)
    kept = d.pop("kept", None)
    if with_it is None or without is None:
        return []
    if kept:
        return [f"kept (arena {size(with_it)} with it, {size(without)} without)"]
    return [f"not used: the arena is smaller without it ({size(without)} against "
            f"{size(with_it)})"]


PASS_WORDS = {"reorder": _order, "concat": _concat, "inplace": _inplace,
              "share": _share, "place": _place}


def describe(name: str, detail: dict) -> str:
    """The report ``detail`` of pass ``name`` as one line of words; the placement's
    proof (``proven_optimal``, ``lower_bound``, ``gap``) is said by the caller, which
    knows the arena the plan kept."""
    d = {k: v for k, v in detail.items()
         if k not in ("proven_optimal", "lower_bound", "gap")}
    words = PASS_WORDS.get(name, lambda d: [])(d)
    words += _trial(name, d)
    for key, value in d.items():  # fields with no words above
        if isinstance(value, dict):
            continue
        label = key.replace("_", " ")
        if key.endswith("bytes") and isinstance(value, int):
            value = size(value)
        words.append(f"{label} {value}")
    return ", ".join(words)
