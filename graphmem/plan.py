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
from collections import deque
from dataclasses import dataclass, field, fields
from itertools import count, repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import numpy as np

from . import ops
from .errors import GraphmemError, PlanInvalid
from .gcpause import gc_paused
from .ir import Graph
from .link_rules import concat_axis, links_hold
from .liveness import liveness, overlapping_pairs
from .regions import NO_SPAN, byte_regions
from .schedule import check_order
from .topology import topology

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


def tensor_plans(kind, nbytes, offset, live, alias_of, alias, slice_of) -> list[TensorPlan]:
    """``list(map(TensorPlan, kind, nbytes, ...))`` for columns of equal length, made
    field by field: each column is stored by a C-level map over the field's slot, where
    the dataclass ``__init__`` makes seven Python-level calls per tensor (a million
    tensors: 0.6 s instead of 1.4 s). TensorPlan has no ``__post_init__``, so the
    objects are the same (tests/test_zoo_plan.py compares them)."""
    columns = (kind, nbytes, offset, live, alias_of, alias, slice_of)
    out = list(map(object.__new__, repeat(TensorPlan, len(kind))))
    for name, column in zip(_TENSOR_FIELDS, columns):
        if len(column) != len(out):
            raise ValueError(f"tensor_plans: the {name} column has {len(column)} values, "
                             f"not {len(out)}")
        deque(map(getattr(TensorPlan, name).__set__, out, column), maxlen=0)
    return out


_TENSOR_FIELDS = tuple(f.name for f in fields(TensorPlan))
assert _TENSOR_FIELDS == ("kind", "bytes", "offset", "live", "alias_of", "alias", "slice_of")
assert not hasattr(TensorPlan, "__post_init__")


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
    return _problems_or_range(plan, graph, intervals)


def _problems_or_range(plan: Plan, graph: Graph, intervals, cols=None) -> list[str]:
    try:
        return _problems(plan, graph, intervals, cols)
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


class _Columns(NamedTuple):
    """A plan's tensors as columns, in the plan's order, and their storage groups."""

    names: list[str]
    ts: list[TensorPlan]
    first: np.ndarray
    last: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    group: np.ndarray  # per tensor: the position of its alias/slice group's root
    linked: list[int]  # positions of the tensors with alias_of, alias or slice_of


def _columns(plan: Plan, index: Mapping[str, int] | None = None) -> _Columns:
    """Columns of ``plan.tensors``. ``index`` (tensor -> position in the plan; built if
    omitted) only resolves the targets of alias_of and slice_of."""
    names, ts = list(plan.tensors), list(plan.tensors.values())
    n = len(ts)
    live = list(map(_LIVE, ts))
    first = np.fromiter(map(_FIRST, live), np.int64, n)
    last = np.fromiter(map(_SECOND, live), np.int64, n)
    offset = np.fromiter(map(_OFFSET, ts), np.int64, n)
    size = np.fromiter(map(_BYTES, ts), np.int64, n)
    linked = [i for i, t in enumerate(ts)
              if t.alias_of is not None or t.slice_of is not None or t.alias is not None]
    group = np.arange(n)
    if linked:
        if index is None:
            index = dict(zip(names, count()))
        _join_groups(group, ts, linked, index)
    return _Columns(names, ts, first, last, offset, size, group, linked)


_LIVE, _OFFSET, _BYTES = attrgetter("live"), attrgetter("offset"), attrgetter("bytes")
_FIRST, _SECOND, _KIND = itemgetter(0), itemgetter(1), attrgetter("kind")


def _join_groups(group: np.ndarray, ts, linked: list[int], index) -> None:
    """Union-find over the links (alias_of, slice_of) of the ``linked`` positions;
    ``group`` (the identity on entry) ends as each position's root."""
    parent = group.tolist()

    def find(i: int) -> int:
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:  # path compression
            parent[i], i = root, parent[i]
        return root

    get, n = index.get, len(parent)
    for i in linked:
        t = ts[i]
        for other in (t.alias_of, t.slice_of):
            j = get(other) if other is not None else None
            if j is not None and j < n:  # (an index may know more names than the plan)
                a, b = find(i), find(j)
                if a != b:
                    parent[a] = b
    group[:] = parent
    while True:  # every position to its root: pointer jumping, a few numpy steps
        up = group[group]
        if np.array_equal(up, group):
            return
        group[:] = up


def _problems(plan: Plan, graph: Graph, intervals, cols=None) -> list[str]:
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
    topo = topology(graph)
    arena = topo.arena_names()
    # the usual plan lists every arena tensor in the graph's order (what liveness
    # gives); then positions in the plan are topology ids, and the set checks hold
    in_order = len(intervals) == len(arena) and list(plan.tensors) == arena
    if not in_order:
        names = set(intervals)
        if set(plan.tensors) != names:
            extra = sorted(set(plan.tensors) - names)
            miss = sorted(names - set(plan.tensors))
            if extra:
                out.append(f"tensors: {extra[0]!r} is not a tensor the graph computes or "
                           "takes as input")
            if miss:
                out.append(f"tensors: {miss[0]!r} is missing")
            return out
    try:
        if cols is None:
            cols = _columns(plan, topo.ids if in_order else None)
    except OverflowError:  # past 64 bits: the loop words the rule broken, if any
        return out + _tensor_problems(plan, graph, intervals) or [_out_of_range(plan)]
    if not (in_order and _tensor_rules_hold(plan, topo, cols, intervals)):
        out += _tensor_problems(plan, graph, intervals)
    if out:
        return out
    if not (in_order and links_hold(plan, graph, topo, cols)):
        out += _alias_problems(plan, graph, cols)
    if out:
        return out
    out += _overlap_problems(cols)
    if not fresh:
        out += _stats_problems(plan, cols)
    return out


def _tensor_rules_hold(plan: Plan, topo, cols: _Columns, intervals) -> bool:
    """The per-tensor rules of :func:`_tensor_problems` on whole columns (numpy), for a
    plan in the graph's order: True when none is broken (else that loop words them)."""
    if topo.nbytes is None or not np.array_equal(cols.size, topo.nbytes):
        return False
    n = len(cols.ts)
    if list(map(_KIND, cols.ts)) != topo.kinds():
        return False
    if list(map(_LIVE, cols.ts)) != list(intervals.values()):  # Interval == tuple
        return False
    off, size = cols.offset, cols.size
    if n and max(int(off.max()), int(size.max())) >= 2 ** 62:  # the sum below would wrap
        return False
    return not (((off < 0) | (off % plan.alignment != 0)).any()
                or (off + size > plan.arena_bytes).any())


def _tensor_problems(plan: Plan, graph: Graph, intervals) -> list[str]:
    """Kind, bytes, offset, end and live range of every tensor, one by one."""
    out = []
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
    return out


def validate(plan: Plan, graph: Graph, *, intervals=None) -> None:
    """Raise :class:`PlanInvalid` naming each broken rule; return None for a valid plan.

    ``intervals``: see :func:`problems`."""
    found = problems(plan, graph, intervals=intervals)
    if found:
        raise PlanInvalid(found)


def built_stats(plan: Plan, index: Mapping[str, int] | None) -> tuple[dict[str, int], _Columns]:
    """:func:`plan_stats` for the planner's just-built plan, with the plan's columns
    (``index`` as there) to hand on to :func:`validate_built`."""
    cols = _columns(plan, index)
    return _stats(plan, cols), cols


def validate_built(plan: Plan, graph: Graph, intervals, cols: _Columns) -> None:
    """:func:`validate` of the plan the planner has just built (``intervals``: see
    :func:`problems`), reusing the columns :func:`built_stats` read from its tensors:
    they are the plan's own data, so every rule is still checked against the graph."""
    found = _problems_or_range(plan, graph, intervals, cols)
    if found:
        raise PlanInvalid(found)


def _group_roots(plan: Plan) -> dict[str, str]:
    """Tensor -> root of its alias/slice group (following alias_of and slice_of)."""
    cols = _columns(plan)
    names = cols.names
    return dict(zip(names, [names[g] for g in cols.group.tolist()]))


class _Producers:
    """``{tensor: the node writing it}`` of the graph, looked up in its topology."""

    def __init__(self, graph: Graph):
        self.nodes, self.topo = graph.nodes, topology(graph)
        self.rows = self.topo.producer_rows().tolist()  # a list: one lookup per call

    def get(self, name: str):
        i = self.topo.ids.get(name)
        row = -1 if i is None else self.rows[i]
        return None if row < 0 else self.nodes[row]


def _alias_problems(plan: Plan, graph: Graph, cols: _Columns) -> list[str]:
    out: list[str] = []
    if not cols.linked:
        return out
    producer = _Producers(graph)
    topo = producer.topo
    pos_of_row = np.full(len(topo.node_index), -1, dtype=np.int64)
    pos_of_row[topo.rows(plan.order)] = np.arange(len(plan.order))
    position = _Positions(topo, pos_of_row)
    group = cols.group
    members = _members(cols)  # group root -> member names, for groups of more than one
    guard = _OverwriteGuard(plan, members)
    concats: dict[str, tuple | None] = {}  # per Concat output: see _concat_slices
    for i in cols.linked:
        name, t = cols.names[i], cols.ts[i]
        if (t.alias_of is None) != (t.alias is None):
            out.append(f"tensor {name!r}: alias_of and alias must be given together")
            continue
        if t.alias_of is not None:
            out += _check_alias(plan, graph, producer, position, members, int(group[i]),
                                name, t, guard)
        if t.slice_of is not None:
            out += _check_slice(plan, graph, producer, name, t, concats)
    return out


class _Positions:
    """``{Node.index: its position in the plan's order}``, from the topology's rows."""

    def __init__(self, topo, pos_of_row: np.ndarray):
        self.row_of, self.pos_of_row = topo.row_of.tolist(), pos_of_row.tolist()

    def __getitem__(self, index: int) -> int:
        return self.pos_of_row[self.row_of[index]]


def _members(cols: _Columns) -> dict[int, list[str]]:
    """Group root -> its members' names in plan order, for the groups of more than one."""
    group = cols.group
    shared = np.flatnonzero(np.bincount(group, minlength=len(group))[group] > 1)
    if not len(shared):
        return {}
    shared = shared[np.argsort(group[shared], kind="stable")]
    g = group[shared]
    cuts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    names = list(map(cols.names.__getitem__, shared.tolist()))
    bounds = np.r_[cuts, len(shared)].tolist()
    # each group's names, sliced out of one list (no per-group numpy call)
    return dict(zip(g[cuts].tolist(), map(names.__getitem__,
                                          map(slice, bounds[:-1], bounds[1:]))))


class _OverwriteGuard:
    """Per storage group: does any member hold a graph input, or live across a step?

    Answers in O(log n) what the member loop of ``_check_alias`` answers in O(group),
    so a long chain of in-place ops is not quadratic; the loop still runs (and words
    the problem) whenever this says a problem is possible.
    """

    def __init__(self, plan: Plan, members: dict[int, list[str]]):
        self.plan, self.members = plan, members
        self.cache: dict[int, tuple[bool, list[int], list[int]]] = {}

    def may_break(self, root: int, pos: int) -> bool:
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


def _check_alias(plan, graph, producer, position, members, gid, name, t, guard) -> list[str]:
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
    group = members[gid]
    if len(group) > 8 and not guard.may_break(gid, pos):
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
    concat = concats.get(out_name)
    if concat is None:  # once per Concat, not once per slice
        node = producer.get(out_name)
        concat = concats[out_name] = (
            None if node is None or node.op_type != "Concat"
            else _concat_slices(plan, graph, node, out_name))
    if concat is None:
        return [f"tensor {name!r}: slice_of {out_name!r}, which is not a Concat reading it once"]
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
    axis, contiguous = concat_axis(shape, node.attrs.get("axis", 0))
    return starts, axis, contiguous, plan.tensors[out_name].offset


def _overlap_problems(cols: _Columns) -> list[str]:
    """Tensors of different groups live at the same time on the same bytes."""
    keep = np.flatnonzero(cols.size > 0)
    first, last, start = cols.first[keep], cols.last[keep], cols.offset[keep]
    end = start + cols.size[keep]
    group = cols.group[keep]
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
    names = cols.names
    return [f"tensors {names[keep[a]]!r} and {names[keep[b]]!r} are live at the same time "
            f"(from position {at}) and overlap in bytes "
            f"[{max(start[a], start[b])}, {min(end[a], end[b])})"]


def _stats_problems(plan: Plan, cols: _Columns) -> list[str]:
    if not plan.stats:
        return []
    want = _stats(plan, cols)
    for key, value in want.items():
        if key in plan.stats and plan.stats[key] != value:
            return [f"stats.{key} is {plan.stats[key]}, the plan's own tensors give {value}"]
    return []


def plan_stats(plan: Plan, *, index: Mapping[str, int] | None = None) -> dict[str, int]:
    """naive, lower bound, aliased peak and arena bytes, computed from a plan's tensors.

    ``index``: tensor -> its position in ``plan.tensors``, if the caller has it."""
    return _stats(plan, _columns(plan, index))


def _stats(plan: Plan, cols: _Columns) -> dict[str, int]:
    aliased, unaliased = _timelines(cols, len(plan.order))
    return {"naive_bytes": sum(map(_BYTES, cols.ts)),
            "lower_bound_bytes": max(unaliased, default=0),
            "aliased_peak_bytes": max(aliased, default=0), "arena_bytes": plan.arena_bytes}


def live_timelines(plan: Plan) -> tuple[list[int], list[int]]:
    """Live bytes at positions -1 .. len(order) (index 0 is position -1): (aliased, unaliased).

    Aliased counts each storage group once (split into byte regions where Concat
    slices make parts of it live at different times); unaliased counts every tensor.
    """
    return _timelines(_columns(plan), len(plan.order))


def _timelines(cols: _Columns, steps: int) -> tuple[list[int], list[int]]:
    first, last, size, offset, gid = cols.first, cols.last, cols.size, cols.offset, cols.group
    unaliased = _sweep(first, last, size, steps)
    # storage groups of the tensors with bytes: per group the earliest first use, the
    # latest last use and its size, where all members cover the same bytes; a group
    # whose members cover different bytes (Concat slices) is split in regions
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
