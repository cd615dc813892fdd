"""Memory-aware execution order: the order that keeps the fewest bytes live.

The cost of an order is its peak under the **live total with views merged and
writes in place**: at each step, the bytes of every storage unit produced and still to
be read, plus the outputs of the node that runs (its inputs are still live while it
runs), where a storage unit is a tensor together with the chain of view outputs
(Reshape, Flatten, ...) that share its storage, and an output the in-place pass may
write over an input (its provider's overwrite pairs, ``overwrites_of``) takes that
input's bytes at the step that reads the input last. Concat slices are not modelled,
nor the in-place pass's finer rules (the pipeline plans both orders with the real
passes and keeps the better arena). Without the writes the search's best order can
be the worse one: on a small training step the least peak without them (14,116
bytes) planned 12,800, the least with them (12,176) plans 12,416-12,544, by which
order at that peak the search keeps (tests/test_reorder.py).

- ``ExactSearch`` (``exact_order`` runs it once): dynamic programming over the sets of
  executed nodes (a set's live bytes do not depend on how it was reached, so the
  minimum peak to reach each set is enough), layer by layer, pruned by an upper bound;
  where a ready node frees at least what it makes, under the peak so far, it alone is
  run next (no order is better for trying the others first). A run gives up (None) past
  its budget of sets, and a later run goes on from there, pruned at the best peak the
  heuristics found meanwhile: the first try's sets are not made twice.
- ``beam_order``: beam search over the same states, ranking partial orders by
  (peak so far, live bytes now) and, in a second run, by (live bytes, peak); the
  better result wins. A fast heuristic for any size. It runs next the node that frees
  what it makes, as the exact search does: half the beams' time on the speed and
  full-size files, and a lower peak on 16 of them (the Llama decode steps) and on two
  of ten randomly wired networks, higher on none.
- ``local_search``: single-node moves (as early or as late as dependencies allow) from
  the beam's order, and when the exact search gave up, from the file order.
- ``layer_floor``: no order can go below the largest inputs + outputs of one node; an
  order that meets it is optimal and ends the search. ``kept_floor``: nor below the
  graph outputs, all live at the end; a file order that meets it is not searched.
- ``live_floor``: nor below, while any node runs, what it touches and every unit made
  before it in every order (by an ancestor) that a descendant still reads. The search's
  budget follows what it can still win: a file order within MIN_GAIN of it is kept
  unsearched, and the searches run cheapest first (exact with a budget of
  EXACT_FIRST_STATES sets, pruned at the file order's peak, and stopped sooner where
  its pace says it will not end within twice that: a narrow graph's ends there; then
  beam, moves from its order, the same exact search resumed, moves from the file
  order), each only while the best peak so far is more than MIN_GAIN above it. An
  exact order is compacted by ``local_search`` (the same peak, fewer live bytes summed
  over the steps): of the many orders at the minimum peak, a compact one places at
  that peak.

The pass returns its order as ``Assignment.order``; the pipeline plans the rest for it
and for the given order and keeps the smaller arena. It never returns an order whose
modelled peak is above the given order's.
"""
from __future__ import annotations

from itertools import accumulate
from operator import add
from typing import Iterable

from graphmem.core.ir import Graph
from graphmem.core.ops import view_pairs
from graphmem.core.records import record
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions

EXACT_MAX_STATES = 10_000  # DP sets, all runs of one search, before it gives up (0.1 s)
# ... of them the first try, before the beams (5-30 ms): a Llama decode step ends within
# 4,000 sets (18 ms; the beams and moves that ran after 1,000 took 40-60 ms)
EXACT_FIRST_STATES = 4_000
PACE_STATES = 500  # sets made before the first try's pace may end it
BEAM_WORK = 8_000  # beam width x nodes; the width shrinks for large graphs
LOCAL_SEARCH_WORK = 300_000  # local search: order evaluations x nodes (about 0.1 s a start)
# Executed-node sets are Python int bitmasks, so each search step costs O(n / 64):
# the searches grow as n^2 (10k random nodes: 11 s; 100k: 450 s). Above this size
# the pass keeps the given order and says so, which keeps planning near-linear.
MAX_NODES = 4_000
# The search runs only where an order may lower the modelled peak by more than this
# part of the file order's (live_floor): under it, what it could win is not worth its time
MIN_GAIN = 0.01


@record
class Schedule:
    """The scheduling problem: nodes 0..n-1 with dependency masks and storage units."""

    nodes: tuple[int, ...]  # graph node index of each internal node id
    preds: tuple[int, ...]  # bitmask of the nodes each node depends on
    succs: tuple[tuple[int, ...], ...]
    new_bytes: tuple[int, ...]  # bytes of the units a node creates
    touched: tuple[tuple[int, ...], ...]  # units a node reads or creates
    unit_bytes: tuple[int, ...]
    unit_readers: tuple[int, ...]  # bitmask of readers; -1 (all bits): never freed
    base: int  # bytes live before the first node (graph inputs)
    # per node: (readers, bytes) of each unit it touches that some step frees
    frees: tuple[tuple[tuple[int, int], ...], ...] = ()
    # per unit: the node that creates it; -1: a graph input (live from the start);
    # empty: not known (live_floor then bounds nothing beyond the layer floor)
    unit_producer: tuple[int, ...] = ()
    # per node: () or (bytes, readers of each unit it may overwrite): the node's output
    # of those bytes is written over the first such unit that no later step reads
    # (the in-place pass's overwrite pairs); empty: nothing is written in place
    writes: tuple[tuple, ...] = ()

    def __post_init__(self) -> None:
        if not self.writes:
            object.__setattr__(self, "writes", ((),) * len(self.nodes))
        if not self.frees:
            object.__setattr__(self, "frees", tuple(
                tuple((self.unit_readers[u], self.unit_bytes[u]) for u in units
                      if self.unit_readers[u] != -1) for units in self.touched))


def build_schedule(graph: Graph, nodes: list[int] | None = None,
                   overwrites: Iterable[tuple[int, str, str]] = ()) -> Schedule:
    """The cost model of ``graph`` (node ids follow ``nodes``, default the file order).

    ``overwrites``: (graph node index, input, output) of each pair whose output the
    node may write over its input (:func:`overwrites_of`: the in-place pass's pairs);
    a node's write is modelled where its input's unit is read by no later step, holds
    no graph input and is not the output's own."""
    by_index = {n.index: n for n in graph.nodes}
    nodes = list(nodes) if nodes is not None else [n.index for n in graph.nodes]
    nid = {idx: i for i, idx in enumerate(nodes)}
    arena = set(graph.arena_tensors())
    # storage units: a view output joins its input's unit
    unit_of: dict[str, str] = {}

    def unit(t: str) -> str:
        while t in unit_of:
            t = unit_of[t]
        return t

    for idx in nodes:
        node = by_index[idx]
        for i, o in view_pairs(node):
            src, out = node.inputs[i], node.outputs[o]
            if (src in arena and out in arena and src != out
                    and graph.tensors[src].bytes == graph.tensors[out].bytes):
                unit_of[out] = unit(src)
    producer = {t: nid[n.index] for n in graph.nodes if n.index in nid for t in n.outputs if t}
    units = sorted({unit(t) for t in arena}, key=lambda t: t)
    uid = {u: k for k, u in enumerate(units)}
    readers = [0] * len(units)
    for i, idx in enumerate(nodes):
        for t in by_index[idx].reads:
            if t in arena:
                readers[uid[unit(t)]] |= 1 << i
    for t in graph.outputs:
        if t in arena:
            readers[uid[unit(t)]] = -1
    unit_bytes = [graph.tensors[u].bytes for u in units]
    preds, succs = [], [[] for _ in nodes]
    new_bytes, touched = [], []
    for i, idx in enumerate(nodes):
        node = by_index[idx]
        mask = 0
        for t in node.reads:
            p = producer.get(t)
            if p is not None and p != i:
                mask |= 1 << p
        preds.append(mask)
        created = {uid[unit(t)] for t in node.outputs if t in arena and unit(t) == t}
        read = {uid[unit(t)] for t in node.reads if t in arena}
        new_bytes.append(sum(unit_bytes[u] for u in created))
        touched.append(tuple(sorted(created | read)))
    for i, mask in enumerate(preds):
        for p in _bits(mask):
            succs[p].append(i)
    base_units = {uid[unit(t)] for t in dict.fromkeys(graph.inputs)
                  if t in arena and unit(t) == t}
    base = sum(unit_bytes[u] for u in base_units)
    made = [-2] * len(units)  # -2: neither created by a node nor a graph input
    for u in base_units:
        made[u] = -1
    for i, idx in enumerate(nodes):
        for t in by_index[idx].outputs:
            if t in arena and unit(t) == t:
                made[uid[t]] = i
    writes: list[dict[str, list[int]]] = [{} for _ in nodes]  # per node: output -> units
    for idx, src, out in overwrites:
        i = nid.get(idx)
        if (i is None or src not in arena or out not in arena or unit(out) != out
                or graph.tensors[src].bytes != graph.tensors[out].bytes):
            continue
        u = uid[unit(src)]
        if u not in base_units and u != uid[out] and readers[u] != -1:
            writes[i].setdefault(out, []).append(readers[u])
    # one write a node: its first output with a unit to write over (an element-wise
    # kernel has one output)
    node_writes = tuple(next(((graph.tensors[out].bytes, tuple(r)) for out, r in w.items()),
                             ()) for w in writes)
    return Schedule(tuple(nodes), tuple(preds), tuple(tuple(s) for s in succs), tuple(new_bytes),
                 tuple(touched), tuple(unit_bytes), tuple(readers), base,
                 unit_producer=tuple(made), writes=node_writes)


def overwrites_of(ctx: Context) -> list[tuple[int, str, str]]:
    """(graph node index, input, output) of each overwrite pair of ``ctx``'s order: the
    pairs the in-place pass may take, from its provider's table."""
    pos, overwrite, src, out = ctx.edges
    names, order = ctx.index.names, ctx.order
    return [(order[p], names[a], names[b]) for p, o, a, b in
            zip(pos.tolist(), overwrite.tolist(), src.tolist(), out.tolist())
            if o and a >= 0 and b >= 0]


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _step(m: Schedule, done: int, mem: int, v: int) -> tuple[int, int]:
    """(bytes live while node ``v`` runs, bytes live after it) from executed set ``done``."""
    made = mem + m.new_bytes[v]
    waiting = ~(done | (1 << v))  # the nodes not run after v
    freed = 0
    for readers, nbytes in m.frees[v]:  # a loop, not sum() over a generator: the
        if not readers & waiting:  # searches call this a million times
            freed += nbytes
    write = m.writes[v]
    return (made - _written_over(write, waiting) if write else made), made - freed


def _written_over(write: tuple, waiting: int) -> int:
    """The bytes a node's output takes from a unit it writes over (``Schedule.writes``),
    given the nodes still ``waiting`` after it: the output's, if one such unit is read
    by none of them, else 0."""
    if write:
        nbytes, readers = write
        for r in readers:
            if not r & waiting:
                return nbytes
    return 0


def peak_of(m: Schedule, order: list[int]) -> int:
    """Modelled peak of an order given as internal node ids."""
    return _cost(m, order)[0]


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
        width = max(4, min(32, BEAM_WORK // max(n, 1)))
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


def exact_order(m: Schedule, upper: int | None = None,
                max_states: int = EXACT_MAX_STATES) -> tuple[list[int], int] | None:
    """(an order of minimum modelled peak, that peak), or None past ``max_states`` sets
    or where no order reaches ``upper`` or less (:class:`ExactSearch`, run once)."""
    return ExactSearch(m, upper).run(max_states)


class ExactSearch:
    """Dynamic programming over the sets of executed nodes, layer by layer (the sets of
    k nodes, then of k + 1), keeping the lowest peak that reaches each set.

    ``upper``: a peak some order is known to reach; sets above it are pruned.
    :meth:`run` goes on from where the last run's budget ran out, and :meth:`tighten`
    prunes the sets kept so far at a lower ``upper`` (a heuristic's order found since):
    a search tried with a small budget first and resumed later costs what one run with
    the whole budget costs.

    From a set where a ready node ``v`` frees at least the bytes it makes, and runs
    without raising the peak so far, ``v`` alone is tried next: take any order from
    there and move ``v`` to the front. The steps it jumps over each have at most the
    bytes live they had (``v``'s outputs live longer, the inputs only ``v`` still read
    are freed sooner, and those are no fewer bytes; a write in place there can only
    gain, as fewer steps are left to read each input), ``v``'s own step is under the
    peak, and everything after ``v``'s old place is as it was: the peak does not rise.
    On a transformer encoder this leaves a third to a fifth of the sets to search.
    """

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
        """(an order of minimum peak, that peak) once the search ends with at most
        ``max_states`` sets made in all; None while the budget does not reach the end
        (a later run goes on) or where it ended with no order (:attr:`exhausted`).

        ``paced``: stop sooner, once past PACE_STATES sets, where the sets per layer so
        far, over every layer, would come to twice the budget (a BERT encoder's first
        layers alone pass it: its many ready nodes)."""
        m, layer, limit = self.m, self.layer, self.limit
        n = len(m.nodes)
        while self.k < n and not self.exhausted:
            if self.states > max_states or (paced and self.states > PACE_STATES
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


def _cost(m: Schedule, order: list[int]) -> tuple[int, int]:
    """(peak, live bytes summed over the steps): peak first, then compactness. Local
    search gets the same figures from a :class:`_Profile` (tests compare the two)."""
    done, mem, peak, area = 0, m.base, m.base, 0
    for v in order:
        during, mem = _step(m, done, mem, v)
        peak = max(peak, during)
        area += during
        done |= 1 << v
    return peak, area


def local_search(m: Schedule, order: list[int], evals: int | None = None) -> tuple[list[int], int]:
    """Improve an order by moving single nodes as early or as late as their
    dependencies allow (a helper node as late as possible, a consumer right after its
    producer), keeping a move when (peak, summed live bytes) drops. Bounded by ``evals``
    order evaluations. Returns (order, peak).

    A move changes only the steps between the node's old and new place: before them
    the order is the same, and after them the executed set, so the live bytes, are
    the same again. Each candidate is costed from the current order's prefix and
    suffix (:class:`_Profile`) over that span alone: the same (peak, area) as
    :func:`_cost` of the whole candidate, in time of the span, not of the order."""
    n = len(order)
    if evals is None:
        evals = max(50, LOCAL_SEARCH_WORK // max(n, 1))
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
            for target in {lo, hi} - {pos}:
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


def _most_written(m: Schedule, v: int) -> int:
    """The most bytes node ``v``'s output can take from a unit it writes over."""
    return m.writes[v][0] if m.writes[v] else 0


def layer_floor(m: Schedule) -> int:
    """A lower bound on every order's peak: a node's inputs and outputs are live together
    (an output written over an input shares its bytes)."""
    return max((sum(m.unit_bytes[u] for u in m.touched[v]) - _most_written(m, v)
                for v in range(len(m.nodes))), default=0)


def kept_floor(m: Schedule) -> int:
    """A lower bound on every order's peak: while the last node runs, the units no step
    frees (graph outputs) are all live, and so are the other units that node touches
    (less what its output may write over); the last node is one no other node waits for."""
    kept = sum(b for b, readers in zip(m.unit_bytes, m.unit_readers) if readers == -1)
    last = min((sum(m.unit_bytes[u] for u in m.touched[v] if m.unit_readers[u] != -1)
                - _most_written(m, v) for v in range(len(m.nodes)) if not m.succs[v]),
               default=0)
    return kept + last


def live_floor(m: Schedule) -> int:
    """A lower bound on every order's peak, at least the layer floor: while node ``v``
    runs, every unit it touches is live (less what its output may write over), and so
    is every unit created before it in every order (by an ancestor of ``v``, or a graph
    input) that a descendant of ``v`` still reads (or that no step frees). Units whose
    producer is not known count only where ``v`` touches them."""
    n = len(m.nodes)
    anc = [0] * n  # ids are in a topological order: preds come first
    for i in range(n):
        a = 0
        for p in _bits(m.preds[i]):
            a |= anc[p] | (1 << p)
        anc[i] = a
    desc = [0] * n
    for i in range(n - 1, -1, -1):
        d = 0
        for s in m.succs[i]:
            d |= desc[s] | (1 << s)
        desc[i] = d
    floor = [sum(m.unit_bytes[u] for u in m.touched[v]) - _most_written(m, v)
             for v in range(n)]
    everyone = (1 << n) - 1
    touching = [0] * len(m.unit_bytes)
    for v, units in enumerate(m.touched):
        for u in units:
            touching[u] |= 1 << v
    for u, p in enumerate(m.unit_producer):
        if p == -2:
            continue
        readers = m.unit_readers[u]
        if readers == 0:
            continue
        after = everyone if p == -1 else desc[p]
        if readers == -1:
            before = everyone
        else:
            before = 0
            for r in _bits(readers):
                before |= anc[r]
        nbytes = m.unit_bytes[u]
        for v in _bits(after & before & ~touching[u]):
            floor[v] += nbytes
    return max(floor, default=0)


def best_order(graph: Graph, order: list[int], exact_states: int = EXACT_MAX_STATES,
               overwrites: Iterable[tuple[int, str, str]] = ()) -> tuple[list[int], dict]:
    """The best order found for ``graph`` (graph node indices) and what was tried;
    ``overwrites`` as :func:`build_schedule` takes them."""
    if len(order) > MAX_NODES:
        return list(order), {"method": f"skipped ({len(order)} nodes > {MAX_NODES})"}
    m = build_schedule(graph, order, overwrites)
    file_ids = list(range(len(order)))
    file_peak = peak_of(m, file_ids)
    floor = max(layer_floor(m), m.base)
    # no order is below the outputs kept to the end either: a graph whose file order
    # meets that (thousands of outputs read from one input) needs no search, which would
    # cost minutes there; past this check only the layer floor stops the search
    if file_peak <= max(floor, kept_floor(m)):  # the file order is already optimal
        return list(order), {"method": "floor", "file_peak": file_peak, "peak": file_peak}
    # what any order can still win is the file order's peak above the units live in
    # every order (live_floor): when that is nothing, or under MIN_GAIN of the peak,
    # the search (a third of a second on BERT) is not run
    bound = max(live_floor(m), kept_floor(m))
    if file_peak - bound <= file_peak * MIN_GAIN:
        return list(order), {"method": "floor" if file_peak <= bound else "gap",
                             "file_peak": file_peak, "peak": file_peak, "bound": bound}
    # a narrow graph's exact search, pruned at the file order's peak, ends in a few
    # thousand sets: cheaper than the beams (an int4 Whisper encoder: 2 ms against 15).
    # It is tried first with a small budget; where it runs out, the search goes on below
    search = ExactSearch(m, upper=file_peak)
    if exact_states:
        found = _compacted(m, search.run(min(EXACT_FIRST_STATES, exact_states), paced=True))
        if found is not None:
            ids, peak = found if found[1] < file_peak else (file_ids, file_peak)
            return [m.nodes[i] for i in ids], {"method": "exact", "file_peak": file_peak,
                                                "peak": peak}
    # the search ends at a peak within MIN_GAIN of the bound (MIN_GAIN of the peak: at
    # most bound / (1 - MIN_GAIN))
    enough = int(bound / (1 - MIN_GAIN))
    ids, peak = beam_order(m, enough=enough)
    method = "beam"
    if peak > file_peak:
        ids, peak = file_ids, file_peak
    if peak <= floor:
        exact_states = 0  # the heuristic met the lower bound: nothing to search
        method = "beam (meets the layer floor)"
    # the cheap steps first, each later one only while the best peak so far is above
    # that: the beam searches (one ranking, then the other), moves from the beam's
    # order, the exact search, moves from the file order
    starts = [ids] if ids == file_ids else [ids, file_ids]
    if peak > floor and peak > enough:
        ids, peak, method = _moved(m, starts.pop(0), ids, peak, method)
    if peak > enough and exact_states:  # the first search goes on, pruned at the best peak
        search.tighten(peak)
        found = _compacted(m, search.run(exact_states))
        if found is not None and found[1] <= peak:
            ids, peak, method = found[0], found[1], "exact"
    if method != "exact" and peak > floor and peak > enough:
        for start in starts:
            ids, peak, method = _moved(m, start, ids, peak, method)
    if peak >= file_peak:
        ids, peak = file_ids, file_peak
    detail = {"method": method, "file_peak": file_peak, "peak": peak}
    return [m.nodes[i] for i in ids], detail


def _compacted(m: Schedule, found: tuple[list[int], int] | None
               ) -> tuple[list[int], int] | None:
    """An exact search's order compacted by :func:`local_search`: the same minimum
    peak, the fewest live bytes summed over the steps the moves reach. Of the many
    orders at the minimum peak, the search's own pick can leave placement far from
    that peak (a Llama decode step: 4.6% above it), a compact one does not."""
    return found and local_search(m, found[0])


def _moved(m: Schedule, start: list[int], ids: list[int], peak: int, method: str
           ) -> tuple[list[int], int, str]:
    """The local search from ``start``, where it beats the best order so far."""
    cand, cand_peak = local_search(m, start)
    if cand_peak < peak:
        return cand, cand_peak, ("beam+local" if method.startswith("beam") else
                                 method + "+local")
    return ids, peak, method


def run(ctx: Context, a: Assignment, options: PassOptions) -> tuple[Assignment, dict]:
    # above MAX_NODES there is no search: the overwrite pairs are not needed
    overwrites = overwrites_of(ctx) if len(ctx.order) <= MAX_NODES else ()
    order, detail = best_order(ctx.graph, list(ctx.order), overwrites=overwrites)
    return a.with_(order=tuple(order)), detail


PASS = Pass("reorder", "order", reads=(), provides=("order",), run=run,
            summary="memory-aware execution order (exact DP when small, beam search and "
                    "moves otherwise); never worse than the given order")
