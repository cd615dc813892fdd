"""Exact placement: the smallest arena for a fixed order, by a mixed-integer program.

For records (bytes, first, last) the offsets are integers (multiples of the
alignment) and every two records whose lives overlap get a binary "which one is
below" variable with a big-M disjunction::

    minimise  Z
    subject to  offset_i + bytes_i <= Z                                 for every i
                offset_i + bytes_i <= offset_j + M (1 - below_ij)       for overlapping i, j
                offset_j + bytes_j <= offset_i + M below_ij

with M the best heuristic arena, which is also the warm start. HiGHS solves it
under a time limit; the result is the proven optimum or the best arena found and
the gap to the solver's lower bound (never below the max-live floor). All sizes are
divided by their common divisor first so the big-M stays small and the solver's
tolerances cannot let two buffers touch. Every solution is checked here before use.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from graphmem.core.liveness import overlapping_pairs
from graphmem.errors import GraphmemError
from graphmem.planning.groups import Record
from graphmem.passes.placement.search import max_live, place_records

DEFAULT_TIME_LIMIT = 10.0


@dataclass(frozen=True)
class ExactResult:
    offsets: dict[int, int]
    total: int
    optimal: bool  # proven: no arena for this order can be smaller
    lower_bound: int  # bytes; the solver's bound, at least the max-live floor
    heuristic_total: int  # the warm start: best of the heuristics
    heuristic: str
    seconds: float
    status: str
    pairs: int = 0
    detail: dict = field(default_factory=dict)

    @property
    def gap(self) -> float:
        """(total - lower bound) / total: 0 when proven optimal."""
        return 0.0 if self.optimal or not self.total else (self.total - self.lower_bound) / self.total


def place_optimal(recs: Sequence[Record], alignment: int = 1,
                  time_limit: float = DEFAULT_TIME_LIMIT, threads: int = 1) -> ExactResult:
    """The smallest arena for these records (or the best within ``time_limit`` seconds)."""
    if time_limit <= 0:
        raise GraphmemError(f"--time-limit must be positive, not {time_limit}")
    start = time.perf_counter()
    h_offsets, h_total, h_name, _ = place_records(recs, "best", alignment)
    floor = max_live(recs)
    ids = [r.id for r in recs]
    first = np.fromiter((r.first for r in recs), np.int64, len(recs))
    last = np.fromiter((r.last for r in recs), np.int64, len(recs))
    pairs = sorted((min(ids[i], ids[j]), max(ids[i], ids[j]))
                   for a, b in overlapping_pairs(first, last)
                   for i, j in zip(a.tolist(), b.tolist()))
    if h_total <= floor:  # the heuristic is at the floor: optimal, nothing to solve
        return ExactResult(dict(h_offsets), h_total, True, floor, h_total, h_name,
                           time.perf_counter() - start, "heuristic at max-live floor", len(pairs))
    try:
        import highspy
    except ImportError:  # pragma: no cover - highspy is a declared dependency
        raise GraphmemError("placement 'optimal' needs highspy (pip install highspy)") from None

    unit = math.gcd(alignment, *(r.bytes for r in recs))
    step = alignment // unit  # an offset is step * y_i units, y_i an integer
    size = {r.id: r.bytes // unit for r in recs}
    big_m = h_total // unit
    col = {r.id: k for k, r in enumerate(recs)}
    n, z = len(recs), len(recs)
    inf = highspy.kHighsInf

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("threads", int(threads))
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.999)  # the arena in units is an integer
    # columns: y_i (integer), Z, below_ij (binary)
    lower = [0.0] * n + [float(-(-floor // unit))] + [0.0] * len(pairs)
    upper = [float((big_m - size[r.id]) // step) for r in recs] + [float(big_m)] + [1.0] * len(pairs)
    cost = [0.0] * n + [1.0] + [0.0] * len(pairs)
    h.addVars(len(cost), lower, upper)
    h.changeColsCost(len(cost), list(range(len(cost))), cost)
    integer = [k for k in range(len(cost)) if k != z]
    h.changeColsIntegrality(len(integer), integer,
                            [highspy.HighsVarType.kInteger] * len(integer))
    row_lo, row_hi, starts, index, value = [], [], [], [], []

    def row(hi: float, coefs: list[tuple[int, float]]) -> None:
        starts.append(len(index))
        row_lo.append(-inf)
        row_hi.append(hi)
        for k, v in coefs:
            index.append(k)
            value.append(v)

    for r in recs:  # step * y_i + size_i <= Z
        row(-size[r.id], [(col[r.id], step), (z, -1.0)])
    for p, (a, b) in enumerate(pairs):
        ya, yb, below = col[a], col[b], n + 1 + p
        row(big_m - size[a], [(ya, step), (yb, -step), (below, big_m)])   # a below b
        row(-size[b], [(yb, step), (ya, -step), (below, -big_m)])         # b below a
    h.addRows(len(row_hi), row_lo, row_hi, len(index), starts, index, value)

    # warm start from the heuristic's offsets
    warm = [h_offsets[r.id] // alignment for r in recs] + [h_total // unit]
    warm += [1.0 if h_offsets[a] < h_offsets[b] else 0.0 for a, b in pairs]
    sol = highspy.HighsSolution()
    sol.col_value = [float(v) for v in warm]
    sol.value_valid = True
    h.setSolution(sol)
    h.run()

    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    bound = max(floor, int(math.ceil(info.mip_dual_bound - 1e-6)) * unit) \
        if math.isfinite(info.mip_dual_bound) else floor
    best = (dict(h_offsets), h_total, h_name)
    if info.primal_solution_status >= 1:  # a feasible solution exists
        values = h.getSolution().col_value
        offsets = {r.id: int(round(values[col[r.id]])) * alignment for r in recs}
        total = max((offsets[r.id] + r.bytes for r in recs), default=0)
        if total < best[1] and not _clash(recs, offsets, pairs):
            best = (offsets, total, "optimal")
    # proven only when the bound (rounded up: the arena is a whole number of units)
    # meets the arena; HiGHS's own "optimal" allows a tolerance
    bound = min(bound, best[1])
    optimal = best[1] <= bound
    return ExactResult(best[0], best[1], optimal, bound, h_total, h_name,
                       time.perf_counter() - start, status, len(pairs),
                       {"mip_gap": info.mip_gap, "nodes": info.mip_node_count})


def _clash(recs: Sequence[Record], offsets: dict[int, int], pairs) -> bool:
    """True when two records that live at the same time share a byte (a bad solution)."""
    size = {r.id: r.bytes for r in recs}
    return any(offsets[a] < offsets[b] + size[b] and offsets[b] < offsets[a] + size[a]
               for a, b in pairs)
