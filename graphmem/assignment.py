"""The data that passes hand each other: a context they read, an assignment they refine.

Each pass is a function ``(Context, Assignment) -> (Assignment, detail)``; an
Assignment is immutable, so no pass can change what an earlier one decided.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain, repeat
from typing import Mapping, NamedTuple

from .ir import Graph
from .liveness import Interval
from .topology import topology


# The most bytes a graph's arena tensors may hold together (one aligned buffer each)
# for graphmem to plan it: half the signed 64-bit range, so that no offset, sum or
# difference in the array and compiled code can overflow. No device comes near it.
MAX_PLAN_BYTES = 2 ** 62


def align_up(n: int, alignment: int) -> int:
    """``n`` rounded up to a multiple of ``alignment`` (element-wise for a numpy array)."""
    return -(-n // alignment) * alignment


class Record(NamedTuple):
    """What placement sees of a buffer: its size and inclusive live range. Nothing else.

    A named tuple: a large graph makes one per storage group, several times over."""

    id: int
    bytes: int
    first: int
    last: int


@dataclass(frozen=True)
class Context:
    graph: Graph
    order: tuple[int, ...]
    intervals: Mapping[str, Interval]  # per arena tensor
    alignment: int = 64

    @cached_property
    def sizes(self) -> dict[str, int]:
        # cached: every pass asks, for every tensor
        topo = topology(self.graph)
        if len(self.intervals) == topo.arena and topo.nbytes is not None:
            return dict(zip(self.intervals, topo.nbytes.tolist()))  # the same tensors
        return {t: self.graph.tensors[t].bytes for t in self.intervals}

    @cached_property
    def naive_layout(self) -> int:
        """One aligned buffer per tensor: the arena before any pass."""
        return sum(align_up(b, self.alignment) for b in self.sizes.values())

    @cached_property
    def roots_memo(self) -> list:
        """[alias, slice_of, roots] of the last :func:`root_map` call."""
        return []

    @cached_property
    def groups_memo(self) -> list:
        """[(alias, slice_of, groups)] of the last :func:`groups` call: the report after a
        pass, share and place all ask for the groups of the same aliases."""
        return []


@dataclass(frozen=True)
class Assignment:
    """Where every arena tensor lives, as decided so far.

    - ``alias``: tensor -> (tensor it shares storage with, "view" | "inplace")
    - ``slice_of``: tensor -> the Concat output it is written into, and
      ``slice_offset``: its byte offset inside that output
    - ``storage``: group root -> storage block id (the ``share`` pass), with
      ``storage_bytes`` per block
    - ``offsets``: group root -> arena offset (the ``place`` pass), ``arena_bytes``
    """

    alias: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    slice_of: Mapping[str, str] = field(default_factory=dict)
    slice_offset: Mapping[str, int] = field(default_factory=dict)
    storage: Mapping[str, int] | None = None
    storage_bytes: tuple[int, ...] | None = None
    offsets: Mapping[str, int] | None = None
    arena_bytes: int | None = None
    strategy: str = ""

    def with_(self, **changes) -> "Assignment":
        return replace(self, **changes)

    def root_of(self, tensor: str) -> tuple[str, int]:
        """(root tensor, byte offset of ``tensor`` inside the root's storage).

        Aliases share their source's offset; a Concat slice sits inside the Concat
        output. When a member of an alias group is a slice (an in-place Relu written
        into a Concat), the whole alias group lives in that slice.
        """
        offset = 0
        while True:
            if tensor in self.slice_of:
                offset += self.slice_offset[tensor]
                tensor = self.slice_of[tensor]
            elif tensor in self.alias:
                tensor = self.alias[tensor][0]
            elif tensor in self._sliced_member:
                tensor = self._sliced_member[tensor]
            else:
                return tensor, offset

    @cached_property
    def linked(self) -> tuple[str, ...]:
        """The tensors that may have another root: aliases, Concat slices, and the
        roots of alias groups living in a slice (each once). Every other tensor is a
        root of its own, so the walks over roots visit only these."""
        sliced = self._sliced_member if self.slice_of else {}
        return tuple(dict.fromkeys(chain(self.slice_of, self.alias, sliced)))

    @cached_property
    def _sliced_member(self) -> dict[str, str]:
        """Alias-group root -> the member of its alias group that is a Concat slice."""
        out: dict[str, str] = {}
        for t in self.slice_of:
            r = t
            while r in self.alias:
                r = self.alias[r][0]
            if r != t:
                assert out.setdefault(r, t) == t, f"two slices in the alias group of {r!r}"
        return out


class Group(NamedTuple):
    """Tensors that share one storage (a root and everything aliased into it)."""

    root: str
    members: tuple[str, ...]
    bytes: int  # the root's bytes; members lie inside it
    first: int
    last: int


def roots(a: Assignment, names) -> dict[str, tuple[str, int]]:
    """``a.root_of(t)`` for every name, sharing the walk up each alias chain.

    Linear in the number of names even for one long chain of in-place ops, where
    calling ``root_of`` per tensor would be quadratic. Only ``a.linked`` is walked
    (:func:`linked_roots`); every other name is its own root, filled in by one
    C-level dict build.
    """
    out = dict(zip(names, zip(names, repeat(0))))
    out.update(linked_roots(a))
    return out


def linked_roots(a: Assignment) -> dict[str, tuple[str, int]]:
    """``a.root_of(t)`` for the linked tensors (and the roots they reach): every
    tensor not a key is its own root, at offset 0."""
    memo: dict[str, tuple[str, int]] = {}
    alias, slice_of = a.alias, a.slice_of
    sliced = a._sliced_member if slice_of else {}
    for t in a.linked:
        path = []
        cur = t
        while cur not in memo:
            if cur in slice_of:
                path.append((cur, a.slice_offset[cur]))
                cur = slice_of[cur]
            elif cur in alias:
                path.append((cur, 0))
                cur = alias[cur][0]
            elif cur in sliced:  # an alias group that lives in a Concat slice
                path.append((cur, 0))
                cur = sliced[cur]
            else:
                memo[cur] = (cur, 0)
                break
        root, offset = memo[cur]
        for name, delta in reversed(path):
            offset += delta
            memo[name] = (root, offset)
    return memo


def root_map(ctx: Context, a: Assignment) -> dict[str, tuple[str, int]]:
    """:func:`linked_roots`, kept on ``ctx`` while the alias and slice maps are the
    same objects (passes after inplace and the plan writer ask for the same). A
    tensor that is not a key is its own root at offset 0 (``root_map(...).get(t,
    (t, 0))``). The caller must not change the returned dict."""
    memo = ctx.roots_memo
    if memo and memo[0] is a.alias and memo[1] is a.slice_of:
        return memo[2]
    out = linked_roots(a)
    memo[:] = [a.alias, a.slice_of, out]
    return out


def groups(ctx: Context, a: Assignment) -> list[Group]:
    """Storage groups in order of the root's first appearance."""
    memo = ctx.groups_memo
    if memo and memo[0][0] is a.alias and memo[0][1] is a.slice_of:
        return list(memo[0][2])
    out = _groups(ctx, a)
    memo[:] = [(a.alias, a.slice_of, out)]
    return list(out)


def _groups(ctx: Context, a: Assignment) -> list[Group]:
    sizes = ctx.sizes
    intervals = ctx.intervals
    if not a.alias and not a.slice_of:  # every tensor is its own group
        return [Group(t, (t,), sizes[t], iv.first, iv.last) for t, iv in intervals.items()]
    root_name = {t: r for t, (r, _) in root_map(ctx, a).items() if r != t}
    shared = set(root_name.values())  # roots with other members
    out: list = []  # a Group per lone tensor, [root, members, first, last] per shared root
    at: dict[str, int] = {}  # shared root -> its index in out
    for t, r, iv in zip(intervals, map(root_name.get, intervals, intervals),
                        intervals.values()):
        if r not in shared:
            out.append(Group(t, (t,), sizes[t], iv.first, iv.last))
        elif r in at:
            g = out[at[r]]
            g[1].append(t)
            if iv.first < g[2]:
                g[2] = iv.first
            if iv.last > g[3]:
                g[3] = iv.last
        else:
            at[r] = len(out)
            out.append([r, [t], iv.first, iv.last])
    for k in at.values():
        r, ts, first, last = out[k]
        out[k] = Group(r, tuple(ts), sizes[r], first, last)
    return out


def records(ctx: Context, gs: list[Group]) -> list[Record]:
    """Placement records (aligned sizes) for groups; zero-sized groups are left out."""
    return [Record(i, align_up(g.bytes, ctx.alignment), g.first, g.last)
            for i, g in enumerate(gs) if g.bytes > 0]


def layout_bytes(ctx: Context, a: Assignment) -> int:
    """The arena this assignment needs as it stands: placed, or one buffer each."""
    if a.arena_bytes is not None:
        return a.arena_bytes
    if a.storage_bytes is not None:
        return sum(align_up(b, ctx.alignment) for b in a.storage_bytes)
    # one buffer per storage group, the size of its root: every tensor's buffer but
    # those of the linked ones. The groups themselves are not needed, and the report
    # after each pass asks, so only the linked tensors are visited.
    sizes, al = ctx.sizes, ctx.alignment
    return ctx.naive_layout - sum(align_up(sizes[t], al) for t in a.linked if t in sizes)
