"""The plan file ``graphmem.plan/1``: data, JSON in and out, and the independent check.

``validate(plan, graph)`` recomputes liveness and the aliasing rules from the graph
itself and knows nothing of how the plan was made; every test and the verifier
call it on every plan.
"""
from __future__ import annotations

import bisect
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import ops
from .errors import GraphmemError, PlanInvalid
from .gcpause import gc_paused
from .ir import Graph
from .liveness import liveness, overlapping_pairs
from .regions import NO_SPAN, byte_regions
from .schedule import check_order

FORMAT = "graphmem.plan/1"
KINDS = ("input", "output", "activation")


@dataclass(frozen=True, slots=True)  # slots: 88 bytes a tensor instead of 344
class TensorPlan:
    kind: str
    bytes: int
    offset: int
    live: tuple[int, int]
    alias_of: str | None = None
    alias: str | None = None  # "view" | "inplace"
    slice_of: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "bytes": self.bytes, "offset": self.offset,
                               "live": list(self.live)}
        if self.alias_of is not None:
            out["alias_of"] = self.alias_of
            out["alias"] = self.alias
        if self.slice_of is not None:
            out["slice_of"] = self.slice_of
        return out


@dataclass(frozen=True)
class Plan:
    model: str
    bindings: dict[str, int]
    alignment: int
    order: list[int]
    constants: list[str]
    arena_bytes: int
    tensors: dict[str, TensorPlan]
    passes: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    format: str = FORMAT

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format, "model": self.model, "bindings": dict(self.bindings),
            "alignment": self.alignment, "order": list(self.order),
            "constants": list(self.constants), "arena_bytes": self.arena_bytes,
            "tensors": {name: t.to_json() for name, t in self.tensors.items()},
            "passes": [dict(p) for p in self.passes], "stats": dict(self.stats),
        }

    def to_json(self) -> str:
        """Deterministic JSON text: one tensor per line, stable key order."""
        d = self.to_dict()
        lines = ["{"]
        keys = list(d)
        for i, k in enumerate(keys):
            comma = "," if i < len(keys) - 1 else ""
            if k == "tensors":
                items = list(d["tensors"].items())
                if not items:
                    lines.append(f'  "tensors": {{}}{comma}')
                    continue
                lines.append('  "tensors": {')
                for j, (name, t) in enumerate(items):
                    sep = "," if j < len(items) - 1 else ""
                    lines.append(f"    {json.dumps(name)}: {json.dumps(t)}{sep}")
                lines.append(f"  }}{comma}")
            else:
                lines.append(f"  {json.dumps(k)}: {json.dumps(d[k])}{comma}")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically: a temp file in the same folder, then rename."""
        write_atomic(path, self.to_json())

    @staticmethod
    def from_dict(d: Any, source: str = "plan") -> "Plan":
        """Parse a plan object, refusing any other format or a malformed file."""
        if not isinstance(d, dict):
            raise GraphmemError(f"{source}: not a graphmem plan (expected a JSON object)")
        fmt = d.get("format")
        if fmt != FORMAT:
            raise GraphmemError(f"{source}: unknown plan format {fmt!r} (expected {FORMAT!r})")
        try:
            tensors = {}
            for name, t in d["tensors"].items():
                live = t["live"]
                if not (isinstance(live, list) and len(live) == 2):
                    raise ValueError(f"tensor {name!r}: live must be [first, last]")
                tensors[str(name)] = TensorPlan(
                    kind=str(t["kind"]), bytes=_int(t["bytes"]), offset=_int(t["offset"]),
                    live=(_int(live[0]), _int(live[1])), alias_of=t.get("alias_of"),
                    alias=t.get("alias"), slice_of=t.get("slice_of"))
            return Plan(model=str(d["model"]),
                        bindings={str(k): _int(v) for k, v in d["bindings"].items()},
                        alignment=_int(d["alignment"]), order=[_int(i) for i in d["order"]],
                        constants=[str(c) for c in d["constants"]],
                        arena_bytes=_int(d["arena_bytes"]), tensors=tensors,
                        passes=list(d.get("passes", [])),
                        stats={str(k): _int(v) for k, v in d.get("stats", {}).items()})
        except KeyError as exc:
            raise GraphmemError(f"{source}: corrupt plan, missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise GraphmemError(f"{source}: corrupt plan ({exc})") from None

    @staticmethod
    def load(path: str | os.PathLike) -> "Plan":
        p = Path(path)
        if not p.is_file():
            raise GraphmemError(f"{p}: no such plan file")
        try:
            d = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise GraphmemError(f"{p}: not a JSON plan file ({exc})") from None
        return Plan.from_dict(d, str(p))


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, got {v!r}")
    return v


def write_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Write a file under a temp name in its folder, then rename it into place."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise GraphmemError(f"{p}: cannot write, folder {str(folder)!r} does not exist")
    if p.is_dir():
        raise GraphmemError(f"{p}: cannot write, it is a directory")
    mode = "wb" if isinstance(text, bytes) else "w"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise GraphmemError(f"{p}: cannot write ({exc.strerror or exc})") from None
    try:
        # mkstemp makes the file private (0600); give it the usual umask-based mode
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, mode) as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):  # disk full, permissions, a read-only file system
            raise GraphmemError(f"{p}: cannot write ({exc.strerror or exc})") from None
        raise


# ---------------------------------------------------------------------- validation

def expected_kind(graph: Graph, tensor: str, io: tuple[set, set] | None = None) -> str:
    """input, output or activation; ``io`` is ``io_sets(graph)``, to ask for many tensors."""
    inputs, outputs = io if io is not None else (graph.inputs, graph.outputs)
    if tensor in inputs:
        return "input"
    if tensor in outputs:
        return "output"
    return "activation"


def io_sets(graph: Graph) -> tuple[set, set]:
    """The graph's inputs and outputs as sets (they are tuples: a lookup per tensor
    would cost O(outputs), quadratic for a graph with many outputs)."""
    return set(graph.inputs), set(graph.outputs)


@gc_paused
def problems(plan: Plan, graph: Graph, *, intervals=None) -> list[str]:
    """Every rule of ``graphmem.plan/1`` that ``plan`` breaks for ``graph`` (empty: valid).

    ``intervals`` is for the planner checking the plan it has just built: the
    liveness of ``plan.order`` it computed with :func:`liveness` after checking the
    order, and from which it wrote the plan's stats with :func:`plan_stats`. Given
    it, the order check, the liveness and the stats are not computed a second time
    (the same functions on the same input); every rule about what the passes
    decided (kinds, bytes, offsets, live ranges, aliases, slices, overlaps) still is.
    """
    try:
        return _problems(plan, graph, intervals)
    except OverflowError:  # the checks use 64-bit arrays
        return [_out_of_range(plan)]


def _out_of_range(plan: Plan) -> str:
    """The first integer of the plan too large for the 64-bit checks (none is right)."""
    limit = 2 ** 63
    if not -limit < plan.arena_bytes < limit:
        return f"arena_bytes {plan.arena_bytes} is out of range"
    for name, t in plan.tensors.items():
        for what, v in (("offset", t.offset), ("bytes", t.bytes), ("live", t.live[0]),
                        ("live", t.live[1])):
            if not -limit < v < limit:
                return f"tensor {name!r}: {what} {v} is out of range"
    return "an integer of the plan is out of range"


def _problems(plan: Plan, graph: Graph, intervals) -> list[str]:
    out: list[str] = []
    if plan.format != FORMAT:
        return [f"format is {plan.format!r}, not {FORMAT!r}"]
    if plan.alignment <= 0:
        return [f"alignment {plan.alignment} is not positive"]
    fresh = intervals is not None
    if not fresh:
        out += check_order(graph, plan.order)
    if out:
        return out
    const_expected = set(graph.constants)
    if set(plan.constants) != const_expected:
        extra = sorted(set(plan.constants) - const_expected)
        miss = sorted(const_expected - set(plan.constants))
        out.append(f"constants: {extra[0]!r} is not a foldable constant" if extra else
                   f"constants: {miss[0]!r} is computed from weights alone but not listed")
    if not fresh:
        intervals = liveness(graph, plan.order)
    names = set(intervals)
    if set(plan.tensors) != names:
        extra = sorted(set(plan.tensors) - names)
        miss = sorted(names - set(plan.tensors))
        if extra:
            out.append(f"tensors: {extra[0]!r} is not a tensor the graph computes or takes as input")
        if miss:
            out.append(f"tensors: {miss[0]!r} is missing")
        return out
    producer = {t: n for n in graph.nodes for t in n.outputs if t}
    io = io_sets(graph)
    for name, t in plan.tensors.items():
        info = graph.tensors[name]
        want_kind = expected_kind(graph, name, io)
        if t.kind != want_kind:
            out.append(f"tensor {name!r}: kind {t.kind!r}, expected {want_kind!r}")
        if t.bytes != info.bytes:
            out.append(f"tensor {name!r}: bytes {t.bytes}, but {info.dtype}{list(info.shape)} "
                       f"is {info.bytes}")
        if t.offset < 0 or t.offset % plan.alignment:
            out.append(f"tensor {name!r}: offset {t.offset} is not a non-negative multiple "
                       f"of the alignment {plan.alignment}")
        if t.offset + t.bytes > plan.arena_bytes:
            out.append(f"tensor {name!r}: ends at {t.offset + t.bytes}, past the arena "
                       f"({plan.arena_bytes} bytes)")
        iv = intervals[name]
        if t.live != (iv.first, iv.last):
            out.append(f"tensor {name!r}: live {list(t.live)}, expected [{iv.first}, {iv.last}]")
    if out:
        return out
    roots = _group_roots(plan)
    out += _alias_problems(plan, graph, producer, roots)
    if out:
        return out
    out += _overlap_problems(plan, roots)
    if not fresh:
        out += _stats_problems(plan, graph, roots)
    return out


def validate(plan: Plan, graph: Graph, *, intervals=None) -> None:
    """Raise :class:`PlanInvalid` naming each broken rule; return None for a valid plan.

    ``intervals``: see :func:`problems`."""
    found = problems(plan, graph, intervals=intervals)
    if found:
        raise PlanInvalid(found)


def _group_roots(plan: Plan) -> dict[str, str]:
    """Tensor -> root of its alias/slice group (following alias_of and slice_of)."""
    tensors = plan.tensors
    parent: dict[str, str] = {}  # only tensors in some link; the rest are their own root

    def find(t: str) -> str:
        root = t
        while parent.get(root, root) != root:
            root = parent[root]
        while t != root:  # path compression
            parent[t], t = root, parent[t]
        return root

    linked = [(name, t.alias_of, t.slice_of) for name, t in tensors.items()
              if t.alias_of is not None or t.slice_of is not None]
    for name, alias_of, slice_of in linked:
        for other in (alias_of, slice_of):
            if other is not None and other in tensors:
                a, b = find(name), find(other)
                if a != b:
                    parent[a] = b
    out = dict(zip(tensors, tensors))  # most tensors: a group of their own
    out.update({name: find(name) for name in parent})
    return out


def _alias_problems(plan: Plan, graph: Graph, producer, roots: dict[str, str]) -> list[str]:
    out = []
    position = {idx: pos for pos, idx in enumerate(plan.order)}
    shared = {r for name, r in roots.items() if r != name}  # groups of more than one
    members: dict[str, list[str]] = {}  # for those groups only: aliases live in them
    for name, r in roots.items():
        if r in shared:
            if r in members:
                members[r].append(name)
            else:
                members[r] = [name]
    guard = _OverwriteGuard(plan, members)
    concats: dict[int, tuple] = {}  # per Concat: see _concat_slices
    for name, t in plan.tensors.items():
        if (t.alias_of is None) != (t.alias is None):
            out.append(f"tensor {name!r}: alias_of and alias must be given together")
            continue
        if t.alias_of is not None:
            out += _check_alias(plan, graph, producer, position, members, roots, name, t, guard)
        if t.slice_of is not None:
            out += _check_slice(plan, graph, producer, name, t, concats)
    return out


class _OverwriteGuard:
    """Per storage group: does any member hold a graph input, or live across a step?

    Answers in O(log n) what the member loop of ``_check_alias`` answers in O(group),
    so a long chain of in-place ops is not quadratic; the loop still runs (and words
    the problem) whenever this says a problem is possible.
    """

    def __init__(self, plan: Plan, members: dict[str, list[str]]):
        self.plan, self.members = plan, members
        self.cache: dict[str, tuple[bool, list[int], list[int]]] = {}

    def may_break(self, root: str, pos: int) -> bool:
        if root not in self.cache:
            tensors = self.plan.tensors
            ms = sorted((tensors[m].live[0], tensors[m].live[1]) for m in self.members[root])
            firsts, reach, best = [], [], None
            for first, last in ms:
                best = last if best is None else max(best, last)
                firsts.append(first)
                reach.append(best)  # the latest last use among members starting by here
            has_input = any(tensors[m].kind == "input" for m in self.members[root])
            self.cache[root] = (has_input, firsts, reach)
        has_input, firsts, reach = self.cache[root]
        k = bisect.bisect_left(firsts, pos)  # members with first < pos
        return has_input or (k > 0 and reach[k - 1] > pos)


def _check_alias(plan, graph, producer, position, members, roots, name, t, guard) -> list[str]:
    src = t.alias_of
    if src not in plan.tensors:
        return [f"tensor {name!r}: alias_of {src!r} is not an arena tensor"]
    node = producer.get(name)
    if node is None or src not in node.inputs:
        return [f"tensor {name!r}: alias_of {src!r}, but its producer does not read {src!r}"]
    i, o = node.inputs.index(src), node.outputs.index(name)
    s = plan.tensors[src]
    if t.offset != s.offset:
        return [f"tensor {name!r}: alias of {src!r} at offset {t.offset}, not {s.offset}"]
    if t.alias == "view":
        pairs = ops.view_pairs(node)
        if not any(src == node.inputs[a] and b == o for a, b in pairs):
            return [f"tensor {name!r}: {node.op_type} is not a view op for input {src!r}"]
        if t.bytes != s.bytes:
            return [f"tensor {name!r}: a view must have the bytes of {src!r}"]
        return []
    if t.alias != "inplace":
        return [f"tensor {name!r}: alias {t.alias!r} is neither 'view' nor 'inplace'"]
    pairs = ops.overwrite_pairs(node)
    if not any(src == node.inputs[a] and b == o for a, b in pairs):
        return [f"tensor {name!r}: {node.op_type} may not overwrite its input {src!r}"]
    if t.bytes > s.bytes:
        return [f"tensor {name!r}: in-place output larger than {src!r}"]
    pos = position[node.index]
    group = members[roots[name]]
    if len(group) > 8 and not guard.may_break(roots[name], pos):
        return []  # a large group that the guard clears without the member loop
    for m in group:
        mt = plan.tensors[m]
        if mt.kind == "input":
            return [f"tensor {name!r}: overwrites the storage of graph input {m!r}"]
        if mt.live[0] < pos and mt.live[1] > pos:
            return [f"tensor {name!r}: overwrites {src!r} in place at position {pos}, but "
                    f"{m!r}, which shares that storage, is read later (at {mt.live[1]})"]
    return []


def _check_slice(plan, graph, producer, name, t, concats) -> list[str]:
    out_name = t.slice_of
    if out_name not in plan.tensors:
        return [f"tensor {name!r}: slice_of {out_name!r} is not an arena tensor"]
    node = producer.get(out_name)
    if node is None or node.op_type != "Concat":
        return [f"tensor {name!r}: slice_of {out_name!r}, which is not a Concat reading it once"]
    concat = concats.get(node.index)
    if concat is None:  # once per Concat, not once per slice
        concat = concats[node.index] = _concat_slices(plan, graph, node, out_name)
    starts, axis, contiguous, base = concat
    if starts.get(name) is None:
        return [f"tensor {name!r}: slice_of {out_name!r}, which is not a Concat reading it once"]
    if t.kind != "activation":
        return [f"tensor {name!r}: a graph input or output cannot be a Concat slice"]
    if not contiguous:
        return [f"tensor {name!r}: the slices of {out_name!r} are not contiguous "
                f"(a dimension before axis {axis} is not 1)"]
    want = base + starts[name]
    if t.offset != want:
        return [f"tensor {name!r}: slice of {out_name!r} at offset {t.offset}, expected {want}"]
    return []


def _concat_slices(plan, graph, node, out_name) -> tuple[dict[str, int | None], int, bool, int]:
    """What every slice check of one Concat needs: each input's byte start (None for an
    input read more than once), the axis, whether the slices are contiguous, and the
    output's offset."""
    starts: dict[str, int | None] = {}
    before = 0
    for inp in node.inputs:
        starts[inp] = None if inp in starts else before  # None: read more than once
        before += graph.tensors[inp].bytes
    shape = graph.tensors[out_name].shape
    axis = node.attrs.get("axis", 0)
    axis = axis + len(shape) if axis < 0 else axis
    contiguous = all(d == 1 for d in shape[:axis])
    return starts, axis, contiguous, plan.tensors[out_name].offset


def _overlap_problems(plan: Plan, roots: dict[str, str] | None = None) -> list[str]:
    """Tensors of different groups live at the same time on the same bytes."""
    roots = roots if roots is not None else _group_roots(plan)
    names = [name for name, t in plan.tensors.items() if t.bytes > 0]
    ts = [plan.tensors[name] for name in names]
    n = len(ts)
    first = np.fromiter((t.live[0] for t in ts), np.int64, n)
    last = np.fromiter((t.live[1] for t in ts), np.int64, n)
    start = np.fromiter((t.offset for t in ts), np.int64, n)
    end = start + np.fromiter((t.bytes for t in ts), np.int64, n)
    root_id: dict[str, int] = {}
    group = np.fromiter((root_id.setdefault(roots[name], len(root_id)) for name in names),
                        np.int64, n)
    worst = None  # the clash that starts earliest: (position, a, b)
    for a, b in overlapping_pairs(first, last):
        clash = (start[a] < end[b]) & (start[b] < end[a]) & (group[a] != group[b])
        if clash.any():
            a, b = a[clash], b[clash]
            at = np.maximum(first[a], first[b])
            k = int(np.argmin(at))
            if worst is None or at[k] < worst[0]:
                worst = (int(at[k]), int(a[k]), int(b[k]))
    if worst is None:
        return []
    at, a, b = worst
    a, b = sorted((a, b), key=lambda k: (first[k], k))
    return [f"tensors {names[a]!r} and {names[b]!r} are live at the same time "
            f"(from position {at}) and overlap in bytes "
            f"[{max(start[a], start[b])}, {min(end[a], end[b])})"]


def _stats_problems(plan: Plan, graph: Graph, roots: dict[str, str] | None = None) -> list[str]:
    if not plan.stats:
        return []
    want = plan_stats(plan, roots)
    for key, value in want.items():
        if key in plan.stats and plan.stats[key] != value:
            return [f"stats.{key} is {plan.stats[key]}, the plan's own tensors give {value}"]
    return []


def plan_stats(plan: Plan, roots: dict[str, str] | None = None) -> dict[str, int]:
    """naive, lower bound, aliased peak and arena bytes, computed from a plan's tensors."""
    aliased, unaliased = live_timelines(plan, roots)
    return {"naive_bytes": sum(t.bytes for t in plan.tensors.values()),
            "lower_bound_bytes": max(unaliased, default=0),
            "aliased_peak_bytes": max(aliased, default=0), "arena_bytes": plan.arena_bytes}


def live_timelines(plan: Plan, roots: dict[str, str] | None = None
                   ) -> tuple[list[int], list[int]]:
    """Live bytes at positions -1 .. len(order) (index 0 is position -1): (aliased, unaliased).

    Aliased counts each storage group once (split into byte regions where Concat
    slices make parts of it live at different times); unaliased counts every tensor.
    ``roots`` (:func:`_group_roots`) may be passed in when the caller has them.
    """
    roots = roots if roots is not None else _group_roots(plan)
    steps = len(plan.order)
    tensors = list(plan.tensors.values())
    n = len(tensors)
    first = np.fromiter((t.live[0] for t in tensors), np.int64, n)
    last = np.fromiter((t.live[1] for t in tensors), np.int64, n)
    size = np.fromiter((t.bytes for t in tensors), np.int64, n)
    unaliased = _sweep(first, last, size, steps)
    # storage groups of the tensors with bytes: per group the earliest first use, the
    # latest last use and its size, where all members cover the same bytes; a group
    # whose members cover different bytes (Concat slices) is split in regions
    code: dict[str, int] = {}
    gid = np.fromiter((code.setdefault(roots[name], len(code)) for name in plan.tensors),
                      np.int64, n)
    offset = np.fromiter((t.offset for t in tensors), np.int64, n)
    index = np.flatnonzero(size > 0)
    index = index[np.argsort(gid[index], kind="stable")]
    if len(index) == 0:
        return unaliased, unaliased
    g = gid[index]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    uniform = ((np.minimum.reduceat(offset[index], starts)
                == np.maximum.reduceat(offset[index], starts))
               & (np.minimum.reduceat(size[index], starts)
                  == np.maximum.reduceat(size[index], starts)))
    spans = [np.minimum.reduceat(first[index], starts)[uniform],
             np.maximum.reduceat(last[index], starts)[uniform],
             np.maximum.reduceat(size[index], starts)[uniform]]
    if not uniform.all():
        # members on different bytes: cut at every member's start and end, and count
        # each region covered by a member from the first to the last use on it
        members = index[np.repeat(~uniform, np.diff(np.r_[starts, len(index)]))]
        grp = gid[members]
        lo, hi = offset[members], offset[members] + size[members]
        _, r_lo, r_hi, r_first, r_last = byte_regions(
            np.r_[grp, grp], np.r_[lo, hi], grp, lo, hi, first[members], last[members])
        covered = r_first != NO_SPAN
        spans = [np.r_[spans[0], r_first[covered]], np.r_[spans[1], r_last[covered]],
                 np.r_[spans[2], (r_hi - r_lo)[covered]]]
    return _sweep(*spans, steps), unaliased


def _sweep(first: np.ndarray, last: np.ndarray, nbytes: np.ndarray, steps: int) -> list[int]:
    """Sum of bytes over (first, last, bytes) spans at each position -1..steps."""
    delta = np.zeros(steps + 3, dtype=np.int64)
    np.add.at(delta, first + 1, nbytes)
    np.add.at(delta, last + 2, -nbytes)
    return np.cumsum(delta[:-1]).tolist()
