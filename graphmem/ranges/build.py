"""One plan for every binding of a box of dims.

1. Every tensor's shape and bytes as formulas of the free dims
   (:func:`~graphmem.ranges.sizes.size_formulas`); a size that is no formula stops the
   plan, naming the tensor and its op.
2. The box is planned in segments, each a plan of its own box: the planner's plan at one
   binding of the segment (every pass, the command's options) gives the segment's
   execution order and aliases; an alias is kept only where it holds as formulas over
   the segment (a view's bytes equal its input's; an in-place output has its input's
   dtype and shape and more than zero bytes; a Concat slice starts a multiple of the
   alignment into its output), and each storage group becomes one block, of its root's
   bytes, live from its first member's first step to its last member's last.
3. The segment's offsets are a stacking of its blocks: the planner's own best
   placement (:func:`~graphmem.passes.placement.search.place_records`) of the blocks at
   that binding, ordered by offset (:mod:`~graphmem.ranges.stacking`), so that at that
   binding the stacking is no larger than the placement. The binding is the one, among
   the segment's upper corner, centre and lower corner, whose segment is closest to a
   fresh plan at the segment's checkpoints (:func:`checkpoints`); a segment still
   over ``ratio`` there is split in two along its widest dim (by the ratio of its ends),
   up to ``max_segments`` segments.
"""
from __future__ import annotations

import dataclasses
import math
import time
from itertools import product
from typing import Callable

from graphmem.core.ir import Graph, Tensor
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.passes.placement.search import place_records
from graphmem.pipeline import plan_graph
from graphmem.planning.groups import Record
from graphmem.ranges.formulas import Box, Formula, nonnegative
from graphmem.ranges.rangeplan import Block, Placed, RangePlan, RangeTensor, Segment
from graphmem.ranges.sizes import SizeFormulas, binding_key, check_at, size_formulas
from graphmem.ranges.stacking import align_up, stacked_offsets, stacking_from_offsets

# A segment's stacking may reach this much above a fresh plan at its checkpoints before
# the segment is split.
RATIO = 1.05
MAX_SEGMENTS = 16


@record
class Checkpoint:
    """A binding the build compared: the range plan's arena there and a fresh plan's."""

    binding: dict
    arena_bytes: int
    fresh_bytes: int

    @property
    def ratio(self) -> float:
        if self.fresh_bytes == 0:
            return 1.0 if self.arena_bytes == 0 else math.inf
        return self.arena_bytes / self.fresh_bytes


@record
class Built:
    plan: RangePlan
    formulas: SizeFormulas
    checkpoints: tuple  # of Checkpoint, the final segments' checkpoints
    dropped: tuple  # one line per alias of a segment's plan that does not hold over the segment
    seconds: float


def build_range_plan(load_at: Callable[[dict], Graph], box: Box, *, model_name: str,
                     options: dict, ratio: float = RATIO, max_segments: int = MAX_SEGMENTS,
                     progress: Callable[[str], None] | None = None) -> Built:
    """The range plan of the model ``load_at(binding)`` loads, over ``box``; ``options``:
    :func:`~graphmem.pipeline.plan_graph`'s keywords (passes, alignment, placement, ...)."""
    stage = progress or (lambda s: None)
    start = time.perf_counter()
    stage("size formulas")
    sf = size_formulas(load_at, box)
    if sf.unfitted:
        more = f" (and {len(sf.unfitted) - 1} more)" if len(sf.unfitted) > 1 else ""
        raise GraphmemError(f"no range plan: {sf.unfitted[0]}{more}")
    names = sf.names
    alignment = int(options.get("alignment", 64))
    graph = sf.graph
    fresh = _FreshPlans(load_at, sf, options, model_name)
    top = fresh.plan({n: hi for n, (lo, hi) in box.items()})
    tensors = {n: RangeTensor(t.kind, sf.tensors[n].dtype, sf.tensors[n].shape,
                              sf.tensors[n].bytes) for n, t in top.tensors.items()}
    segments, checkpoints, dropped = _segments(box, alignment, fresh, ratio, max_segments,
                                               stage)
    weights = Formula.const(names, 0)
    for t in graph.stored_weight_names():
        weights = weights + sf.tensors[t].bytes
    plan = RangePlan(model=model_name, dims=dict(box), aux=tuple(sf.aux),
                     bindings=dict(sf.bindings),
                     alignment=alignment, constants=list(top.constants), tensors=tensors,
                     segments=segments, weights_bytes=weights, target=top.target)
    return Built(plan, sf, tuple(checkpoints), tuple(dropped), time.perf_counter() - start)


# --------------------------------------------------------------------------- aliases

def _kept_links(ref, graph: Graph, sf: SizeFormulas, box: Box, alignment: int):
    """{tensor: (alias_of, alias, slice_of, slice offset formula)} of the links that hold
    as formulas, and a line for each one dropped."""
    producer = {t: n for n in graph.nodes for t in n.outputs if t}
    F = sf.tensors
    names = sf.names
    kept: dict[str, list] = {}
    dropped: list[str] = []
    for name, t in ref.tensors.items():
        alias_of = alias = slice_of = prefix = None
        if t.alias_of is not None:
            a, s = F[name], F[t.alias_of]
            if t.alias == "view" and a.bytes == s.bytes:
                alias_of, alias = t.alias_of, t.alias
            elif (t.alias == "inplace" and a.dtype == s.dtype and a.shape == s.shape
                  and nonnegative(a.bytes - Formula.const(names, 1), box)):
                alias_of, alias = t.alias_of, t.alias
            else:
                dropped.append(f"{name}: {t.alias} of {t.alias_of} (bytes {a.bytes.text()} "
                               f"and {s.bytes.text()})")
        if t.slice_of is not None:
            prefix = _slice_prefix(name, t.slice_of, producer, F, names, alignment)
            if prefix is not None:
                slice_of = t.slice_of
            else:
                dropped.append(f"{name}: slice of {t.slice_of} (its start is not a multiple "
                               f"of {alignment} at every binding)")
        if alias_of or slice_of:
            kept[name] = [alias_of, alias, slice_of, prefix]
    return kept, dropped


def _slice_prefix(name, concat, producer, F, names, alignment) -> Formula | None:
    """The bytes of the Concat's inputs before ``name``, where it is a slice at every
    binding (the dims before the axis are 1, the start a multiple of the alignment)."""
    node = producer.get(concat)
    if node is None or node.op_type != "Concat" or list(node.inputs).count(name) != 1:
        return None
    rank = len(F[concat].shape)
    axis = int(node.attrs.get("axis", 0))
    if not -rank <= axis < rank:
        return None
    one = Formula.const(names, 1)
    if any(F[concat].shape[i] != one for i in range(axis % rank)):
        return None
    prefix = Formula.const(names, 0)
    for i in node.inputs:
        if i == name:
            break
        if i:
            prefix = prefix + F[i].bytes
    return prefix if prefix.divisible_by(alignment) else None


def _blocks(ref, sf: SizeFormulas, links: dict, box: Box, names, dropped: list):
    """Every tensor's block and offset in it, and the blocks; a link whose tensor would
    not lie inside its root's bytes at every binding is dropped (until none is)."""
    F = sf.tensors
    while True:
        root: dict[str, str] = {}
        rel: dict[str, Formula] = {}

        def place(n: str) -> None:
            if n in root:
                return
            link = links.get(n)
            if link is None:
                root[n], rel[n] = n, Formula.const(names, 0)
                return
            alias_of, _, slice_of, prefix = link
            if alias_of:
                place(alias_of)
                root[n], rel[n] = root[alias_of], rel[alias_of]
            else:
                place(slice_of)
                root[n], rel[n] = root[slice_of], rel[slice_of] + prefix
        for n in ref.tensors:
            place(n)
        bad = []
        for n, link in links.items():
            alias_of, _, slice_of, prefix = link
            inside = nonnegative(F[root[n]].bytes - rel[n] - F[n].bytes, box)
            agree = True
            if alias_of and slice_of:  # both: the slice's place must be the alias's
                place(slice_of)
                agree = (root[slice_of] == root[n] and rel[slice_of] + prefix == rel[n])
            if not inside or not agree:
                bad.append(n)
        if not bad:
            break
        for n in bad:
            dropped.append(f"{n}: does not lie inside its storage at every binding")
            link = links[n]
            if link[2] is not None:  # the slice goes first
                link[2] = link[3] = None
            else:
                link[0] = link[1] = None
            if link[0] is None and link[2] is None:
                del links[n]
    block_of: dict[str, int] = {}
    blocks: list[Block] = []
    lives: list[list[int]] = []
    for n, t in ref.tensors.items():
        r = root[n]
        if r not in block_of:
            block_of[r] = len(blocks)
            blocks.append(None)
            lives.append([t.live[0], t.live[1]])
        b = block_of[r]
        lives[b][0] = min(lives[b][0], t.live[0])
        lives[b][1] = max(lives[b][1], t.live[1])
    blocks = [Block(r, F[r].bytes, tuple(lives[b])) for r, b in block_of.items()]
    placed = {}
    for n, t in ref.tensors.items():
        link = links.get(n, [None, None, None, None])
        placed[n] = Placed(tuple(t.live), block_of[root[n]], rel[n], link[0], link[1], link[2])
    return placed, tuple(blocks)


# --------------------------------------------------------------------------- segments

class _FreshPlans:
    """The planner's own plan at a binding (each made once). At a binding the size fit
    loaded, the loader's graph (every tensor's formula checked against it on the way);
    elsewhere (a checkpoint) the graph is the loaded one with every shape evaluated from
    its formula (:func:`graph_from_formulas`): the fit already checked the formulas at
    the grid and at random bindings, and a load per checkpoint was most of the build."""

    def __init__(self, load_at, sf: SizeFormulas, options: dict, model_name: str):
        self.load_at, self.sf, self.options, self.model_name = load_at, sf, options, model_name
        self.plans: dict[tuple, object] = {}
        self.graph = sf.graph  # the nodes are the same at every binding

    def plan(self, binding: dict):
        key = binding_key(binding)
        if key not in self.plans:
            g = self.sf.loaded.get(key)
            if g is not None:
                wrong = check_at(self.sf, g, binding)
                if wrong:
                    raise GraphmemError(f"a size formula misses the loader at {binding}: "
                                        f"{wrong[0]}")
            else:
                g = graph_from_formulas(self.sf, binding)
            self.plans[key] = plan_graph(g, **self.options, model_name=self.model_name,
                                         bindings=g.bindings, check=False).plan
        return self.plans[key]

    def arena(self, binding: dict) -> int:
        return self.plan(binding).arena_bytes


def graph_from_formulas(sf: SizeFormulas, binding: dict) -> Graph:
    """The model at ``binding`` as its formulas give it: the graph the fit loaded at the
    box's upper corner, every tensor's shape and the loader's other dims evaluated."""
    g = sf.graph
    tensors = {}
    for name, t in g.tensors.items():
        f = sf.tensors[name]
        shape = tuple(axis.at(binding) for axis in f.shape)
        tensors[name] = t if shape == t.shape else Tensor(t.name, t.dtype, shape, t.bits)
    bindings = {**g.bindings, **{n: f.at(binding) for n, f in sf.bindings.items()},
                **binding}
    return dataclasses.replace(g, tensors=tensors, bindings=bindings)


def _geo_mid(lo: int, hi: int) -> int:
    return min(max(round(math.sqrt((lo + 1) * (hi + 1))) - 1, lo), hi)


def checkpoints(box: Box) -> list[dict]:
    """Where a segment is compared with fresh plans: each free dim at its ends, its
    geometric and arithmetic middles and its third quarter, every combination for up to
    two free dims; for more, the corners and the points that take the k-th value of
    every dim together."""
    values = [sorted({lo, _geo_mid(lo, hi), (lo + hi) // 2, lo + 3 * (hi - lo) // 4, hi})
              for lo, hi in box.values()]
    if len(box) <= 2:
        pts = [dict(zip(box, c)) for c in product(*values)]
    else:
        pts = [dict(zip(box, c)) for c in product(*[(v[0], v[-1]) for v in values])]
        pts += [{n: v[min(k, len(v) - 1)] for n, v in zip(box, values)} for k in range(5)]
    out: dict[tuple, dict] = {}
    for p in pts:
        out.setdefault(binding_key(p), p)
    return list(out.values())


def segment_at(box: Box, ref: dict, fresh: _FreshPlans, alignment: int):
    """The segment of ``box`` made from the planner's plan at ``ref``: its order, its
    aliases that hold over ``box``, their blocks and the stacking of the best placement
    of the blocks at ``ref``; and a line per alias dropped."""
    plan = fresh.plan(ref)
    links, dropped = _kept_links(plan, fresh.graph, fresh.sf, box, alignment)
    placed, blocks = _blocks(plan, fresh.sf, links, box, fresh.sf.names, dropped)
    stack, below = stacking_at(blocks, ref, alignment)
    return Segment(dict(box), tuple(plan.order), placed, blocks, tuple(stack),
                   tuple(map(tuple, below))), dropped


def stacking_at(blocks, binding: dict, alignment: int):
    """The stacking of the planner's best placement of the blocks at ``binding``."""
    recs = [Record(i, align_up(max(b.bytes.at(binding), 0), alignment), b.live[0], b.live[1])
            for i, b in enumerate(blocks)]
    offsets = place_records(recs, "best", alignment).offsets
    return stacking_from_offsets([offsets[i] for i in range(len(blocks))],
                                 [r.bytes for r in recs], [b.live[0] for b in blocks],
                                 [b.live[1] for b in blocks])


def arena_at(seg: Segment, binding: dict, alignment: int) -> int:
    return stacked_offsets(seg.stack, seg.below, [b.bytes.at(binding) for b in seg.blocks],
                           alignment)[1]


def _best_segment(seg: Box, alignment: int, fresh: _FreshPlans, stage):
    """(worst ratio, segment, checkpoints, dropped) of the best candidate for ``seg``."""
    stage(f"stacking for {_box_text(seg)}")
    points = checkpoints(seg)
    refs = [{n: hi for n, (lo, hi) in seg.items()},
            {n: _geo_mid(lo, hi) for n, (lo, hi) in seg.items()},
            {n: lo for n, (lo, hi) in seg.items()}]
    best = None
    for ref in {binding_key(r): r for r in refs}.values():
        made, dropped = segment_at(seg, ref, fresh, alignment)
        cps = [Checkpoint(p, arena_at(made, p, alignment), fresh.arena(p)) for p in points]
        worst = max(c.ratio for c in cps)
        if best is None or worst < best[0]:
            best = (worst, made, cps, dropped)
    return best


def _segments(box: Box, alignment: int, fresh: _FreshPlans, ratio: float,
              max_segments: int, stage):
    """The segments: the whole box first; then, while fewer than ``max_segments``, the
    segment furthest over ``ratio`` split in two along its widest dim (by the ratio of
    its ends) at its geometric middle."""
    done = [_best_segment(dict(box), alignment, fresh, stage)]
    while len(done) < max_segments:
        over = [d for d in done if d[0] > ratio and any(
            lo < hi for lo, hi in d[1].dims.values())]
        if not over:
            break
        worst = max(over, key=lambda d: d[0])
        done.remove(worst)
        seg = worst[1].dims
        wide = max((n for n in seg if seg[n][0] < seg[n][1]),
                   key=lambda n: (seg[n][1] + 1) / (seg[n][0] + 1))
        lo, hi = seg[wide]
        mid = min(_geo_mid(lo, hi), hi - 1)
        done += [_best_segment({**seg, wide: part}, alignment, fresh, stage)
                 for part in ((lo, mid), (mid + 1, hi))]
    done.sort(key=lambda d: [d[1].dims[n] for n in box])
    return ([d[1] for d in done], [c for d in done for c in d[2]],
            sorted({line for d in done for line in d[3]}))


def _box_text(box: Box) -> str:
    return ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in box.items())
