"""Exact placement: the smallest arena for a fixed order, proven by a solver.

Records are (bytes, first, last); two records whose lives overlap must not share a
byte, and the arena top is minimised. Two exact models, both warm-started by the best
heuristic placement (``place_records(..., "best")``), whose arena is also the upper
bound, with the max-live floor as the lower bound:

- ``"cpsat"`` (the default): OR-tools CP-SAT. Each record is a box, fixed in time
  (``[first, last + 1)``) and free in memory (``[offset, offset + bytes)``); one
  ``AddNoOverlap2D`` over all boxes, plus the time-indexed cumulative (at every step
  the live bytes fit under the top: redundant, the max-live bound in the model).
  Minimise the top. One worker by default (the model's form and the worker count
  were chosen by measurement: docs/benchmarks.md, "Exact placement").
- ``"mip"``: a big-M MIP solved by HiGHS: every two overlapping records get a binary
  "which one is below" variable::

      minimise  Z
      subject to  offset_i + bytes_i <= Z                                 for every i
                  offset_i + bytes_i <= offset_j + M (1 - below_ij)       for overlapping i, j
                  offset_j + bytes_j <= offset_i + M below_ij

  with M the best heuristic arena.

``tools/bench/exact.py`` compares them (docs/benchmarks.md, "Exact placement: MIP and
CP-SAT on dense random record sets"): on dense random sets CP-SAT proves the optimum
where the MIP often stops at its time limit, so it is the default.

Record sizes are expected to be multiples of the alignment (the planning context
pads them; the heuristics assume it too). In both models offsets are integers in
units of the common divisor of the sizes and the alignment (an offset is a multiple
of the alignment), so the numbers stay small and no tolerance can let two buffers
touch. Both are deterministic: ``threads`` workers (1 by default) and a fixed seed.
Either solver stops at ``time_limit`` with the best arena found and the gap to its
lower bound (never below the max-live floor); ``optimal`` is set only when that
bound, rounded up to a whole unit, meets the arena. Every solution is checked here
(aligned, no two live-at-once records share a byte) before use.
"""
from __future__ import annotations

import math
import time
from dataclasses import field
from typing import NamedTuple, Sequence

import numpy as np

from graphmem.core.liveness import overlapping_pairs
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.planning.groups import Record
from graphmem.passes.placement.search import max_live, place_records

DEFAULT_TIME_LIMIT = 10.0
SOLVERS = ("cpsat", "mip")
DEFAULT_SOLVER = "cpsat"


@record
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


class _Model(NamedTuple):
    """What both solvers are given: sizes in units, the bounds and the warm start."""

    recs: Sequence[Record]
    unit: int  # bytes: the common divisor of the sizes and the alignment
    step: int  # units: an offset is step * y_i units, y_i an integer
    size: dict[int, int]  # units per record id
    floor: int  # units: the max-live floor rounded up
    top: int  # units: the heuristic's arena (an upper bound)
    hint: dict[int, int]  # y_i of the heuristic placement
    pairs: list[tuple[int, int]]  # ids of the records that overlap in time
    time_limit: float
    threads: int


class _Found(NamedTuple):
    offsets: dict[int, int] | None  # bytes; None when the solver found no solution
    bound: float  # units: the solver's lower bound on the top (-inf when it has none)
    status: str
    detail: dict


def place_optimal(recs: Sequence[Record], alignment: int = 1,
                  time_limit: float = DEFAULT_TIME_LIMIT, threads: int = 1,
                  solver: str = DEFAULT_SOLVER) -> ExactResult:
    """The smallest arena for these records (or the best within ``time_limit`` seconds).

    ``solver``: ``"cpsat"`` (OR-tools CP-SAT, the default) or ``"mip"`` (HiGHS); both
    are deterministic (``threads`` workers, fixed seed)."""
    if time_limit <= 0:
        raise GraphmemError(f"--time-limit must be positive, not {time_limit}")
    if solver not in SOLVERS:
        raise GraphmemError(f"unknown exact solver {solver!r}; choose from {', '.join(SOLVERS)}")
    start = time.perf_counter()
    h_offsets, h_total, h_name, *_ = place_records(recs, "best", alignment)
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
    unit = math.gcd(alignment, *(r.bytes for r in recs))
    model = _Model(recs, unit, alignment // unit, {r.id: r.bytes // unit for r in recs},
                   -(-floor // unit), h_total // unit,
                   {r.id: h_offsets[r.id] // alignment for r in recs}, pairs,
                   float(time_limit), max(int(threads), 1))
    found = (_solve_cpsat if solver == "cpsat" else _solve_mip)(model)

    bound = max(floor, int(math.ceil(found.bound - 1e-6)) * unit) \
        if math.isfinite(found.bound) else floor
    best = (dict(h_offsets), h_total, h_name)
    if found.offsets is not None:
        offsets = found.offsets
        total = max((offsets[r.id] + r.bytes for r in recs), default=0)
        if total < best[1] and not _clash(recs, offsets, pairs) \
                and all(o % alignment == 0 and o >= 0 for o in offsets.values()):
            best = (offsets, total, "optimal")
    # proven only when the bound (rounded up: the arena is a whole number of units)
    # meets the arena; a solver's own "optimal" may allow a tolerance
    bound = min(bound, best[1])
    optimal = best[1] <= bound
    return ExactResult(best[0], best[1], optimal, bound, h_total, h_name,
                       time.perf_counter() - start, found.status, len(pairs),
                       {"solver": solver, **found.detail})


def _solve_cpsat(m: _Model) -> _Found:
    """CP-SAT: boxes fixed in time, free in memory, no two overlapping; minimise the top."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:  # pragma: no cover - ortools is a declared dependency
        raise GraphmemError("placement 'optimal' needs ortools (pip install ortools)") from None
    model = cp_model.CpModel()
    top = model.new_int_var(m.floor, m.top, "top")
    y, times, spaces = {}, [], []
    for r in m.recs:
        size = m.size[r.id]
        y[r.id] = model.new_int_var(0, (m.top - size) // m.step, f"y{r.id}")
        times.append(model.new_fixed_size_interval_var(r.first, r.last - r.first + 1, f"t{r.id}"))
        spaces.append(model.new_fixed_size_interval_var(m.step * y[r.id], size, f"m{r.id}"))
        model.add(m.step * y[r.id] + size <= top)
        model.add_hint(y[r.id], m.hint[r.id])
    model.add_no_overlap_2d(times, spaces)
    # redundant: at every step the live bytes fit under the top
    model.add_cumulative(times, [m.size[r.id] for r in m.recs], top)
    model.add_hint(top, m.top)
    model.minimize(top)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = m.time_limit
    solver.parameters.num_workers = m.threads
    solver.parameters.random_seed = 0
    if m.threads > 1:
        solver.parameters.interleave_search = True  # deterministic with several workers
    status = solver.solve(model)
    name = solver.status_name(status)
    detail = {"branches": solver.num_branches, "conflicts": solver.num_conflicts,
              "wall_time": solver.wall_time}
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _Found(None, -math.inf, name, detail)
    offsets = {r.id: solver.value(y[r.id]) * m.step * m.unit for r in m.recs}
    return _Found(offsets, solver.best_objective_bound, name, detail)


def _solve_mip(m: _Model) -> _Found:
    """HiGHS on the big-M MIP of the module docstring."""
    try:
        import highspy

        from graphmem.core.highs import quiet_highs
    except ImportError:  # pragma: no cover - highspy is a declared dependency
        raise GraphmemError("placement 'optimal' with the MIP needs highspy "
                            "(pip install highspy)") from None
    recs, pairs, step, size, big_m = m.recs, m.pairs, m.step, m.size, m.top
    col = {r.id: k for k, r in enumerate(recs)}
    n, z = len(recs), len(recs)
    inf = highspy.kHighsInf

    h = quiet_highs()
    h.setOptionValue("time_limit", m.time_limit)
    h.setOptionValue("threads", m.threads)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.999)  # the arena in units is an integer
    # columns: y_i (integer), Z, below_ij (binary)
    lower = [0.0] * n + [float(m.floor)] + [0.0] * len(pairs)
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
    warm = [m.hint[r.id] for r in recs] + [m.top]
    warm += [1.0 if m.hint[a] < m.hint[b] else 0.0 for a, b in pairs]
    sol = highspy.HighsSolution()
    sol.col_value = [float(v) for v in warm]
    sol.value_valid = True
    h.setSolution(sol)
    h.run()

    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    detail = {"mip_gap": info.mip_gap, "nodes": info.mip_node_count}
    offsets = None
    if info.primal_solution_status >= 1:  # a feasible solution exists
        values = h.getSolution().col_value
        offsets = {r.id: int(round(values[col[r.id]])) * step * m.unit for r in recs}
    return _Found(offsets, info.mip_dual_bound, status, detail)


def _clash(recs: Sequence[Record], offsets: dict[int, int], pairs) -> bool:
    """True when two records that live at the same time share a byte (a bad solution)."""
    size = {r.id: r.bytes for r in recs}
    return any(offsets[a] < offsets[b] + size[b] and offsets[b] < offsets[a] + size[a]
               for a, b in pairs)
