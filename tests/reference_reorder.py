"""The specification of graphmem/orderloops.c: the reorder pass's exact search, beam
search and local search in plain Python, as passes/reorder.py ran them before they were
compiled (but for the order in which the local search tries a node's two places: it
followed a set's hash order).

tests/test_reorder_reference.py runs both on the same schedules and wants the same
orders, peaks and search states. Ties resolve as the Python does: a layer's sets are a
dict (the order they were first reached), the ready nodes are tried from the lowest id,
and a local-search pass tries each node's earliest place before its latest.
Do not optimise this file: it is the specification.
"""
from __future__ import annotations

from itertools import accumulate
from operator import add

from graphmem.passes import reorder
from graphmem.passes.reorder import Schedule, _bits, _step, _written_over


def _initial_ready(m: Schedule) -> int:
    ready = 0
    for i, p in enumerate(m.preds):
        if p == 0:
            ready |= 1 << i
    return ready


def _advance_ready(m: Schedule, ready: int, done: int, v: int) -> int:
    ready &= ~(1 << v)
    for s in m.succs[v]:
        if m.preds[s] & ~done == 0:
            ready |= 1 << s
    return ready


def _unwind(link) -> list[int]:
    out = []
    while link is not None:
        v, link = link
        out.append(v)
    return out[::-1]


# Beam rankings of partial orders: by peak so far then live bytes, and the reverse
# (keeping the live bytes low first pays off on randomly wired graphs); both are run.
RANKINGS = {"peak": lambda s: (s[0], s[1], s[2]), "live": lambda s: (s[1], s[0], s[2])}


def _next_steps(m: Schedule, done: int, mem: int, peak: int, ready: int
                ) -> list[tuple[int, int, int, int]]:
    """The steps the searches try from the executed set ``done`` (``mem`` bytes live,
    ``peak`` so far, ``ready`` its ready set): (v, its bit, the peak after v, the bytes
    live after v) for each ready node; only one where a node frees at least what it
    makes without raising the peak (some best order from here runs it next:
    :class:`ExactSearch`'s docstring). :func:`_bits` and :func:`_step` written out, as
    the searches run this a million times."""
    new_bytes, frees, writes = m.new_bytes, m.frees, m.writes
    steps = []
    rest = ready
    while rest:
        low = rest & -rest
        rest ^= low
        v = low.bit_length() - 1
        made = mem + new_bytes[v]
        waiting = ~(done | low)
        during = made - _written_over(writes[v], waiting) if writes[v] else made
        freed = 0
        for readers, nbytes in frees[v]:
            if not readers & waiting:
                freed += nbytes
        if during <= peak and freed >= new_bytes[v]:
            return [(v, low, peak, made - freed)]
        steps.append((v, low, peak if peak >= during else during, made - freed))
    return steps


def _beam(m: Schedule, width: int | None, rank) -> tuple[list[int], int]:
    n = len(m.nodes)
    if width is None:
        width = max(4, min(32, reorder.BEAM_WORK // max(n, 1)))
    beam = [(m.base, m.base, 0, _initial_ready(m), None)]  # (peak, mem, done, ready, link)
    for _ in range(n):
        # (peak, mem, done, the parent's ready set, v, the parent's link): the ready set
        # after v (it depends on the executed set alone) is made for the kept states only
        nxt: dict[int, tuple] = {}
        for peak, mem, done, ready, link in beam:
            for v, low, p2, after in _next_steps(m, done, mem, peak, ready):
                d2 = done | low
                old = nxt.get(d2)
                if old is None or (p2, after) < old[:2]:
                    nxt[d2] = (p2, after, d2, ready, v, link)
        beam = [(p, after, d2, _advance_ready(m, ready, d2, v), (v, link)) for
                p, after, d2, ready, v, link in sorted(nxt.values(), key=rank)[:width]]
    best = min(beam, key=lambda s: (s[0], s[1], s[2]))
    return _unwind(best[4]), best[0]


def beam_order(m: Schedule, width: int | None = None, enough: int = 0
               ) -> tuple[list[int], int]:
    """(order as internal ids, its modelled peak): the better of the beam searches, or
    the first whose peak is ``enough`` or less."""
    best = None
    for rank in RANKINGS.values():
        order, peak = _beam(m, width, rank)
        if best is None or peak < best[1]:
            best = (order, peak)
        if best[1] <= enough:
            break
    return best


class ExactSearch:
    """passes/reorder.py's ExactSearch (its docstring says what it searches and why the
    one-step rule keeps it exact), with a layer's sets in a dict keyed by the executed
    set as an int: a set keeps the place where it was first reached."""

    def __init__(self, m: Schedule, upper: int | None = None):
        self.m = m
        self.limit = upper if upper is not None else float("inf")
        # done -> (peak, mem, ready, link), the sets of ``self.k`` executed nodes
        self.layer = {0: (m.base, m.base, _initial_ready(m), None)}
        self.k = 0
        self.states = 1  # sets made so far, over every run
        self.exhausted = False  # no order at or under the bound: nothing left to search

    def tighten(self, upper: int) -> None:
        """Prune at ``upper`` from here on, and drop the kept sets above it."""
        if upper < self.limit:
            self.limit = upper
            self.layer = {d: s for d, s in self.layer.items() if s[0] <= upper}
            self.exhausted = self.exhausted or not self.layer

    def run(self, max_states: int, paced: bool = False) -> tuple[list[int], int] | None:
        """As passes/reorder.py's ExactSearch.run."""
        m, layer, limit = self.m, self.layer, self.limit
        n = len(m.nodes)
        while self.k < n and not self.exhausted:
            if self.states > max_states or (paced and self.states > reorder.PACE_STATES
                                             and self.states * n > 2 * max_states * self.k):
                return None
            nxt: dict[int, tuple] = {}
            for done, (peak, mem, ready, link) in layer.items():
                for v, low, p2, after in _next_steps(m, done, mem, peak, ready):
                    if p2 > limit:
                        continue
                    d2 = done | low
                    old = nxt.get(d2)
                    if old is not None and p2 >= old[0]:
                        continue  # no better way to this set: what it frees is not needed
                    if old is None:
                        # the ready set depends only on the executed set, not on the path
                        nxt[d2] = (p2, after, _advance_ready(m, ready, d2, v), (v, link))
                    else:
                        nxt[d2] = (p2, after, old[2], (v, link))
            self.states += len(nxt)
            self.layer = layer = nxt
            self.k += 1
            self.exhausted = not layer
        if self.exhausted:
            return None
        (peak, _, _, link), = layer.values()
        return _unwind(link), peak


def local_search(m: Schedule, order: list[int], evals: int | None = None) -> tuple[list[int], int]:
    """passes/reorder.py's local_search (its docstring says what it moves and how a move
    is costed, here by :class:`_Profile`): each pass goes over the nodes in the order
    they had when it began, and tries a node's earliest place, then its latest."""
    n = len(order)
    if evals is None:
        evals = max(50, reorder.LOCAL_SEARCH_WORK // max(n, 1))
    best = list(order)
    at = {u: i for i, u in enumerate(best)}  # each node's position in best
    prof = _Profile(m, best)
    cost = prof.cost
    improved = True
    while improved and evals > 0:
        improved = False
        for v in list(best):
            if evals <= 0:
                break
            pos = at[v]
            # v's place in the order without it: after its last predecessor (the same
            # positions), before its first successor (one less, as v is taken out)
            lo = max((at[p] + 1 for p in _bits(m.preds[v])), default=0)
            hi = min((at[s] - 1 for s in m.succs[v]), default=n - 1)
            for target in ((lo,) if lo == hi else (lo, hi)):
                if target == pos:
                    continue
                evals -= 1
                # the steps a..b of the moved order; the rest is the order's own
                if target < pos:
                    a, b, span = target, pos, [v] + best[target:pos]
                else:
                    a, b, span = pos, target, best[pos + 1:target + 1] + [v]
                c = prof.span_cost(span, a)
                if c < cost:
                    best, cost, improved = best[:a] + span + best[b + 1:], c, True
                    prof.move_to(best, a, b)
                    at.update(zip(span, range(a, b + 1)))
                    break
    return best, cost[0]


class _Profile:
    """An order's state before each step (executed set, live bytes), the bytes live
    during each step, and the peak and area of the steps before and from each step:
    enough to cost an order that differs only at positions ``a..b``, and to become
    that order's profile by redoing those steps alone."""

    def __init__(self, m: Schedule, order: list[int]):
        self.m = m
        n = len(order)
        self.done, self.mem, self.during = [0] * (n + 1), [m.base] * (n + 1), [0] * n
        self.move_to(order, 0, n - 1)

    def move_to(self, order: list[int], a: int, b: int) -> None:
        """Become the profile of ``order``, equal to the profiled one outside ``a..b``:
        redo those steps, then the running sums around them."""
        m, done, mem, during = self.m, self.done, self.mem, self.during
        for k in range(a, b + 1):
            during[k], mem[k + 1] = _step(m, done[k], mem[k], order[k])
            done[k + 1] = done[k] | (1 << order[k])
        # over the steps before k (peak from the inputs' bytes), and from k to the end
        self.peak = list(accumulate(during, max, initial=m.base))
        self.area = list(accumulate(during, add, initial=0))
        self.tail_peak = list(accumulate(reversed(during), max, initial=0))[::-1]
        self.tail_area = list(accumulate(reversed(during), add, initial=0))[::-1]
        self.cost = (self.peak[-1], self.area[-1])

    def span_cost(self, span: list[int], a: int) -> tuple[int, int]:
        """:func:`_cost` of the profiled order with its steps ``a`` to
        ``a + len(span) - 1`` replaced by ``span`` (the same nodes as those steps, in
        another order); the steps after them are the profiled order's own."""
        m = self.m
        b = a + len(span) - 1
        done, mem, peak, area = self.done[a], self.mem[a], self.peak[a], self.area[a]
        for v in span:
            during, mem = _step(m, done, mem, v)
            peak = max(peak, during)
            area += during
            done |= 1 << v
        return max(peak, self.tail_peak[b + 1]), area + self.tail_area[b + 1]
