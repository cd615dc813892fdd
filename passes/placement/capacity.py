"""The complete placement search at a fixed capacity, and the smallest arena by it.

:func:`fit` answers whether buffers fit in ``capacity`` bytes: ``"fits"`` with their
offsets, ``"does not fit"`` (proven: the search is complete), or ``"undecided"`` when
its node budget ran out first. The search (``graphmem/capsearch.c``, specified by
``tests/reference_capacity.py``) follows MiniMalloc (Moffitt, ASPLOS 2023): it explores
canonical solutions only (each buffer on top of the highest placed buffer it meets in
time), chooses the next buffer as it goes (the lowest offset any buffer left can
take), prunes by the bytes still to place in every time section, by dominance, and
solves independent time partitions apart. Here it runs round robin over three
preorderings (the tie-breaks), doubling a node limit each round, as MiniMalloc does.

:func:`minimize` runs it at capacities below an arena already found, down to the
max-live floor (the floor first, then a binary search): the result is proven optimal
when the capacity just below it is proven not to fit (or it is at the floor).

Buffers are given as columns: ``size`` bytes, live over the half-open step interval
``[lower, upper)`` (MiniMalloc's CSV form). Offsets are multiples of ``alignment``.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from graphmem import capsearch
from graphmem.core.liveness import overlapping_pairs
from graphmem.passes.placement.verdicts import FITS, NO_FIT, UNDECIDED

# the preorderings the rounds take turns with (MiniMalloc's defaults): W the lifespan's
# width, A the area (bytes times width), T the most bytes still to place in a section
# the buffer spans, each larger first; ties by index (tests/reference_capacity.py)
PREORDERS = ("WAT", "TAW", "TWA")
# The most buffers :func:`fit` searches: the compiled search recurses once per buffer
# placed (a few hundred bytes of C stack each); above it the answer is UNDECIDED.
MAX_ITEMS = 5_000
# :func:`fit`'s node budget when none is given (each node a few microseconds)
DEFAULT_NODES = 2_000_000


class Fit(NamedTuple):
    """The answer of :func:`fit`."""

    status: str  # FITS, NO_FIT or UNDECIDED
    offsets: np.ndarray | None  # per buffer, when it fits
    nodes: int  # search nodes visited


class Problem(NamedTuple):
    """The columns the compiled search reads (see graphmem/capsearch.c), made once for
    many capacities."""

    size: np.ndarray  # the buffers with bytes, in their order
    slo: np.ndarray
    shi: np.ndarray
    nsec: int
    adj_start: np.ndarray
    adj: np.ndarray
    sec_start: np.ndarray
    sec: np.ndarray
    width: np.ndarray  # each lifespan's length
    keep: np.ndarray  # indices of the buffers with bytes among those given
    n: int  # buffers given
    floor: int  # the max-live floor: no capacity below it fits


# every value of a buffer must stay well inside 64-bit sums (``graphmem place``'s limit)
VALUE_LIMIT = 2 ** 52


def columns(size, lower, upper) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three columns as int64, checked: one dimension each, of one length, integers
    within +-2**52, ``upper > lower`` and ``size >= 0`` for every buffer. Raises
    ValueError naming the first buffer (by index) that is wrong."""
    out = []
    for name, c in (("size", size), ("lower", lower), ("upper", upper)):
        a = np.asarray(c)
        if a.ndim != 1:
            raise ValueError(f"{name}: expected one value per buffer, got an array of "
                             f"shape {a.shape}")
        if a.size and a.dtype.kind not in "iu":  # floats with no fraction pass
            bad = next((i for i, v in enumerate(a.tolist()) if isinstance(v, bool) or not (
                isinstance(v, int) or (isinstance(v, float) and v.is_integer()))), None)
            if bad is not None:
                raise ValueError(f"buffer {bad}: {name} {a.tolist()[bad]!r} is not an "
                                 "integer")
        if a.size and np.abs(a.astype(np.float64)).max() >= VALUE_LIMIT:
            bad = int(np.argmax(np.abs(a.astype(np.float64)) >= VALUE_LIMIT))
            raise ValueError(f"buffer {bad}: {name} {a.tolist()[bad]} is past 2**52")
        out.append(a.astype(np.int64))
    size, lower, upper = out
    if not len(size) == len(lower) == len(upper):
        raise ValueError(f"size, lower and upper have {len(size)}, {len(lower)} and "
                         f"{len(upper)} values: one per buffer each")
    for bad in np.flatnonzero(upper <= lower)[:1].tolist():
        raise ValueError(f"buffer {bad}: upper {upper[bad]} is not after lower {lower[bad]} "
                         "(lifespans are half-open)")
    for bad in np.flatnonzero(size < 0)[:1].tolist():
        raise ValueError(f"buffer {bad}: size {size[bad]} is negative")
    return size, lower, upper


def prepare(size, lower, upper) -> Problem:
    """The search's columns for buffers of ``size`` bytes live over ``[lower, upper)``
    (checked by :func:`columns`). Zero-sized buffers are left out (they sit at 0)."""
    size, lower, upper = columns(size, lower, upper)
    n = len(size)
    keep = np.flatnonzero(size > 0)
    size, lower, upper = size[keep], lower[keep], upper[keep]
    points = np.unique(np.concatenate((lower, upper)))
    slo = np.searchsorted(points, lower).astype(np.int64)
    shi = np.searchsorted(points, upper).astype(np.int64)
    nsec = max(len(points) - 1, 0)
    m = len(size)
    # the buffers live in each section, section by section
    span = shi - slo
    sec_buf = np.repeat(np.arange(m, dtype=np.int64), span)
    sec_of = np.repeat(slo - np.cumsum(span) + span, span) + np.arange(int(span.sum()))
    by_sec = np.argsort(sec_of, kind="stable")
    sec = sec_buf[by_sec]
    sec_start = np.zeros(nsec + 1, dtype=np.int64)
    np.cumsum(np.bincount(sec_of, minlength=nsec)[:nsec], out=sec_start[1:])
    totals = np.bincount(sec_of, weights=size[sec_buf], minlength=nsec)[:nsec]
    # every pair of buffers live at one step, both ways
    a_parts, b_parts = [], []
    for a, b in overlapping_pairs(lower, upper - 1):
        a_parts.append(a)
        b_parts.append(b)
    a = np.concatenate(a_parts) if a_parts else np.zeros(0, dtype=np.int64)
    b = np.concatenate(b_parts) if b_parts else np.zeros(0, dtype=np.int64)
    # each buffer's neighbours in increasing order: one sort of src * m + dst (a
    # plain sort of int64 keys, several times faster than lexsort's on dense inputs)
    src = np.concatenate((a, b)).astype(np.int64)
    key = src * m
    key += np.concatenate((b, a))
    key.sort()
    adj = key % m if m else key
    adj_start = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=m), out=adj_start[1:])
    floor = int(totals.max()) if nsec else 0
    return Problem(size, slo, shi, nsec, adj_start, adj, sec_start, sec, upper - lower,
                   keep, n, floor)


def fit(problem: Problem, capacity: int, alignment: int = 1,
        nodes: int | None = DEFAULT_NODES) -> Fit:
    """Whether the buffers fit in ``capacity`` bytes (see the module docstring), within
    ``nodes`` search nodes in all (None: no limit). More than MAX_ITEMS buffers with
    bytes are not searched (UNDECIDED, unless the floor decides). Raises ValueError for
    a negative capacity, an alignment below 1 or a negative node budget."""
    _check_limits(capacity, alignment, nodes)
    return Search(problem, capacity, alignment).run(nodes)


class Search:
    """:func:`fit` in installments: each :meth:`run` goes on from the round and
    preordering where the last one stopped, so that runs of n1, n2, ... nodes find what
    one :func:`fit` of n1 + n2 + ... nodes finds (a preordering's run cut short by the
    budget is run again in full by the next call). Its answer stays once decided."""

    def __init__(self, problem: Problem, capacity: int, alignment: int = 1):
        _check_limits(capacity, alignment, None)
        self.problem, self.capacity, self.alignment = problem, int(capacity), int(alignment)
        m = len(problem.size)
        self.limit, self.turn = 2 * m, 0  # the node limit of this round, its preordering
        self.offsets = np.zeros(m, dtype=np.int64)
        self.answer: Fit | None = None
        if capacity < problem.floor:
            self.answer = Fit(NO_FIT, None, 0)
        elif m == 0:
            self.answer = Fit(FITS, np.zeros(problem.n, dtype=np.int64), 0)

    def run(self, nodes: int | None) -> Fit:
        """The answer within ``nodes`` more search nodes (None: no limit); ``nodes`` of
        the Fit are those this call visited."""
        p = self.problem
        if self.answer is not None:
            return self.answer._replace(nodes=0)
        if len(p.size) > MAX_ITEMS:
            return Fit(UNDECIDED, None, 0)
        used = 0
        while True:
            run = self.limit if nodes is None else min(self.limit, nodes - used)
            if run <= 0:
                return Fit(UNDECIDED, None, used)
            status, visited = capsearch.solve(p.size, p.slo, p.shi, p.nsec, p.adj_start, p.adj,
                                              p.sec_start, p.sec, p.width,
                                              PREORDERS[self.turn], self.capacity,
                                              self.alignment, int(run), self.offsets)
            used += visited
            if status == 1:
                out = np.zeros(p.n, dtype=np.int64)
                out[p.keep] = self.offsets
                self.answer = Fit(FITS, out, 0)
                return self.answer._replace(nodes=used)
            if status == 0:
                self.answer = Fit(NO_FIT, None, 0)
                return self.answer._replace(nodes=used)
            if run == self.limit:  # this preordering's round done: the next
                self.turn = (self.turn + 1) % len(PREORDERS)
                if self.turn == 0:
                    self.limit *= 2


def _check_limits(capacity, alignment, nodes) -> None:
    for name, v, least in (("capacity", capacity, 0), ("alignment", alignment, 1),
                           ("nodes", 0 if nodes is None else nodes, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, not {v!r}")
        if v < least:
            raise ValueError(f"{name} must be at least {least}, not {v}")
        if v >= 2 ** 62:
            raise ValueError(f"{name} {v} is past 2**62")


class Minimum(NamedTuple):
    """The answer of :func:`minimize`."""

    offsets: np.ndarray | None  # per buffer; None when nothing below ``top`` was found
    total: int  # the arena: the top of the highest buffer (``top`` when none was found)
    proven: bool  # no smaller arena exists
    lower_bound: int  # bytes: no arena below this fits (proven)
    nodes: int


def minimize(problem: Problem, top: int, alignment: int = 1,
             nodes: int | None = DEFAULT_NODES, above: int | None = None,
             tried: int | None = None) -> Minimum:
    """The smallest arena below ``top`` (the arena of a placement already found, e.g.
    the best heuristic's) the search reaches: at the max-live floor first, then a
    binary search between the lowest capacity not ruled out and the best arena found.
    A capacity proven not to fit rules out every one below it, for good; one left
    undecided is passed over unproven (of ``nodes`` in all, None: no limit; the probe
    at the floor may use half, each later one a third of what is left). ``above``: a
    capacity already proven not to fit (the search starts just above it, where that is
    above the floor); ``tried``: one left undecided already (no probe at or below it:
    the binary search starts above it, unproven)."""
    p = problem
    _check_limits(top, alignment, nodes)
    best = None
    full = np.zeros(p.n, dtype=np.int64)
    full[p.keep] = p.size
    proven_lower = lo = p.floor if above is None else max(p.floor, above + 1)
    if tried is not None:
        lo = max(lo, tried + 1)
    used = 0
    while lo < top:
        left = None if nodes is None else nodes - used
        if left is not None and left <= 0:
            break
        first = used == 0 and tried is None
        cap = lo if first else (lo + top - 1) // 2
        got = fit(p, cap, alignment, None if left is None else max(left // (2 if first else 3), 1))
        used += got.nodes
        if got.status == FITS:
            best = got.offsets
            top = int((best + full).max(initial=0))
        else:
            if got.status == NO_FIT:  # nor does any capacity below it
                proven_lower = cap + 1
            lo = cap + 1
    return Minimum(best, top, top <= proven_lower, min(proven_lower, top), used)
