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
  what it makes, as the exact search does: a lower peak on 16 of the speed and
  full-size files (the Llama decode steps) and on two of ten randomly wired networks,
  higher on none.
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

The exact, beam and local searches run compiled (``graphmem.orderloops``,
graphmem/orderloops.c), from the schedule compiled once (:func:`_compiled`); their
specification is the Python of tests/reference_reorder.py, which the tests run beside
them. The schedule, the floors and the costs of whole orders stay here.

The pass returns its order as ``Assignment.order``; the pipeline plans the rest for it
and for the given order and keeps the smaller arena. It never returns an order whose
modelled peak is above the given order's.
"""
from __future__ import annotations

from typing import Iterable

from graphmem import orderloops
from graphmem.core.ir import Graph
from graphmem.core.ops import view_pairs
from graphmem.core.records import record
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.contract import Pass, PassOptions

# The searches run compiled (graphmem/orderloops.c); their budgets are counted in work,
# not time. Ten and a hundred times the exact budgets found no lower peak on six
# full-size forms (two BERT-base, a GPT-2 and a Llama decode step, T5-small, ViT-B/16).
EXACT_MAX_STATES = 10_000  # DP sets, all runs of one search, before it gives up
# ... of them the first try, before the beams: a Llama decode step ends within 4,000 sets
EXACT_FIRST_STATES = 4_000
PACE_STATES = 500  # sets made before the first try's pace may end it
BEAM_WORK = 8_000  # beam width x nodes; the width shrinks for large graphs
LOCAL_SEARCH_WORK = 300_000  # local search: order evaluations x nodes
# Executed-node sets are bitsets of n / 64 words, and the schedule and its lower bounds
# are built from Python int masks: the pass grows as n^2 (the scale section of
# docs/benchmarks.md: random DAGs of 1,000 nodes). Above this size the pass keeps the
# given order and says so, which keeps planning near-linear.
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

    def __getstate__(self) -> dict:
        """Pickled and copied without its compiled form (:func:`_compiled`), which is
        made again where a copy is searched."""
        return {k: v for k, v in self.__dict__.items() if k != "_orderloops"}

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
    for readers, nbytes in m.frees[v]:
        if not readers & waiting:
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


# Beam rankings of partial orders: by peak so far then live bytes, and the reverse
# (keeping the live bytes low first pays off on randomly wired graphs); both are run.
RANKINGS = ("peak", "live")


def beam_order(m: Schedule, width: int | None = None, enough: int = 0
               ) -> tuple[list[int], int]:
    """(order as internal ids, its modelled peak): the better of the beam searches, or
    the first whose peak is ``enough`` or less.

    Each beam keeps, step by step, the ``width`` best partial orders (by their peak,
    then live bytes, then executed set as an integer; or by live bytes first), and of
    the partial orders that reach the same set the one of least (peak, live bytes). It
    runs next the node that frees what it makes, as the exact search does. ``width``:
    1 to 10^6 (default from BEAM_WORK). Compiled (``graphmem.orderloops.beam``); its
    specification is ``_beam`` in
    tests/reference_reorder.py."""
    n = len(m.nodes)
    if width is None:
        width = max(4, min(32, BEAM_WORK // max(n, 1)))
    best = None
    for rank in RANKINGS:
        order, peak = orderloops.beam(_compiled(m), width, rank == "live")
        if best is None or peak < best[1]:
            best = (order, peak)
        if best[1] <= enough:
            break
    return best


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

    The search runs compiled (``graphmem.orderloops``, graphmem/orderloops.c); its
    specification is ``ExactSearch`` in tests/reference_reorder.py, which keeps a
    layer's sets in a dict (the order they were first reached decides ties), as the
    compiled one does.
    """

    def __init__(self, m: Schedule, upper: int | None = None):
        self._search = orderloops.exact_new(_compiled(m), upper)

    @property
    def states(self) -> int:
        """Sets made so far, over every run."""
        return orderloops.exact_state(self._search)[0]

    @property
    def k(self) -> int:
        """Executed nodes in each set of the layer kept."""
        return orderloops.exact_state(self._search)[1]

    @property
    def exhausted(self) -> bool:
        """No order at or under the bound: nothing left to search."""
        return orderloops.exact_state(self._search)[2]

    def tighten(self, upper: int) -> None:
        """Prune at ``upper`` from here on, and drop the kept sets above it."""
        orderloops.exact_tighten(self._search, upper)

    def run(self, max_states: int, paced: bool = False) -> tuple[list[int], int] | None:
        """(an order of minimum peak, that peak) once the search ends with at most
        ``max_states`` sets made in all; None while the budget does not reach the end
        (a later run goes on) or where it ended with no order (:attr:`exhausted`).

        ``paced``: stop sooner, once past PACE_STATES sets, where the sets per layer so
        far, over every layer, would come to twice the budget (a BERT encoder's first
        layers alone pass it: its many ready nodes)."""
        return orderloops.exact_run(self._search, max_states, PACE_STATES if paced else -1)


def _cost(m: Schedule, order: list[int]) -> tuple[int, int]:
    """(peak, live bytes summed over the steps): peak first, then compactness. Local
    search gets the same figures from its profile of the order (the specification's
    ``_Profile``, tests/reference_reorder.py; tests compare the two)."""
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
    suffix over that span alone: the same (peak, area) as :func:`_cost` of the whole
    candidate, in time of the span, not of the order. Each pass goes over the nodes
    in the order they had when the pass began, and tries a node's earliest place
    before its latest.

    Compiled (``graphmem.orderloops.local_search``); its specification is
    ``local_search`` in tests/reference_reorder.py."""
    if evals is None:
        evals = max(50, LOCAL_SEARCH_WORK // max(len(order), 1))
    return orderloops.local_search(_compiled(m), order, evals)


def _compiled(m: Schedule):
    """``m`` as the compiled searches take it, made once per schedule."""
    compiled = m.__dict__.get("_orderloops")
    if compiled is None:
        compiled = orderloops.schedule(m.preds, m.succs, m.new_bytes, m.frees, m.writes,
                                       m.base)
        object.__setattr__(m, "_orderloops", compiled)
    return compiled


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
    # the search is not run
    bound = max(live_floor(m), kept_floor(m))
    if file_peak - bound <= file_peak * MIN_GAIN:
        return list(order), {"method": "floor" if file_peak <= bound else "gap",
                             "file_peak": file_peak, "peak": file_peak, "bound": bound}
    # a narrow graph's exact search, pruned at the file order's peak, ends in a few
    # thousand sets: cheaper than the beams, and optimal. It is tried first with a small
    # budget; where it runs out, the search goes on below
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
