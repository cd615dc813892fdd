"""The data that passes hand each other: a context they read, an assignment they refine.

Each pass is a function ``(Context, Assignment) -> (Assignment, detail)``; an
Assignment is immutable, so no pass can change what an earlier one decided.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Mapping

from .ir import Graph
from .liveness import Interval


def align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class Record:
    """What placement sees of a buffer: its size and inclusive live range. Nothing else."""

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

    @property
    def sizes(self) -> dict[str, int]:
        return {t: self.graph.tensors[t].bytes for t in self.intervals}


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


@dataclass(frozen=True)
class Group:
    """Tensors that share one storage (a root and everything aliased into it)."""

    root: str
    members: tuple[str, ...]
    bytes: int  # the root's bytes; members lie inside it
    first: int
    last: int


def groups(ctx: Context, a: Assignment) -> list[Group]:
    """Storage groups in order of the root's first appearance."""
    sizes = ctx.sizes
    members: dict[str, list[str]] = {}
    for t in ctx.intervals:
        members.setdefault(a.root_of(t)[0], []).append(t)
    out = []
    for root, ts in members.items():
        out.append(Group(root, tuple(ts), sizes[root],
                         min(ctx.intervals[t].first for t in ts),
                         max(ctx.intervals[t].last for t in ts)))
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
    return sum(align_up(g.bytes, ctx.alignment) for g in groups(ctx, a))
