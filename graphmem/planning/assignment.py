"""What the passes decide, as it stands: an immutable :class:`Assignment` each pass refines.

Each pass is ``(Context, Assignment, PassOptions) -> (Assignment, detail)``
(:mod:`graphmem.planning.contract`); an Assignment is immutable, so no pass can change
what an earlier one decided. Tensors are named here, as in the plan file; the storage
groups made from the names (``groups``) are integer columns over the context's positions.
"""
from __future__ import annotations

from dataclasses import field, replace
from itertools import chain
from typing import TYPE_CHECKING, Mapping

from graphmem.core.records import record

if TYPE_CHECKING:
    from graphmem.planning.group_table import GroupTable

# the fields whose change makes the storage groups another set
_GROUPING = frozenset(("alias", "slice_of", "slice_offset"))


@record
class Assignment:
    """Where every arena tensor lives, as decided so far.

    - ``order``: the execution order an order pass chose (None: the context's)
    - ``alias``: tensor -> (tensor it shares storage with, "view" | "inplace")
    - ``slice_of``: tensor -> the Concat output it is written into, and
      ``slice_offset``: its byte offset inside that output
    - ``groups``: the storage groups those make (a :class:`GroupTable`), set by the
      pipeline before a pass that reads them; cleared by :meth:`with_` when the
      aliases or slices change
    - ``storage``: group root -> storage block id (the ``share`` pass), with
      ``storage_bytes`` per block
    - ``offsets``: group root -> arena offset (the ``place`` pass), ``arena_bytes``
    """

    order: tuple[int, ...] | None = None
    alias: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    slice_of: Mapping[str, str] = field(default_factory=dict)
    slice_offset: Mapping[str, int] = field(default_factory=dict)
    groups: "GroupTable | None" = field(default=None, compare=False, repr=False)
    storage: Mapping[str, int] | None = None
    storage_bytes: tuple[int, ...] | None = None
    offsets: Mapping[str, int] | None = None
    arena_bytes: int | None = None
    strategy: str = ""

    def with_(self, **changes) -> "Assignment":
        if "groups" not in changes and _GROUPING.intersection(changes):
            changes["groups"] = None  # made for the old aliases and slices
        return replace(self, **changes)

    def root_of(self, tensor: str) -> tuple[str, int]:
        """(root tensor, byte offset of ``tensor`` inside the root's storage).

        Aliases share their source's offset; a Concat slice sits inside the Concat
        output. When a member of an alias group is a slice (an in-place Relu written
        into a Concat), the whole alias group lives in that slice.
        """
        return linked_roots(self).get(tensor, (tensor, 0))

    def linked(self) -> tuple[str, ...]:
        """The tensors that may have another root: aliases, Concat slices, and the
        roots of alias groups living in a slice (each once). Every other tensor is a
        root of its own, so the walks over roots visit only these."""
        return tuple(dict.fromkeys(chain(self.slice_of, self.alias, sliced_members(self))))


def sliced_members(a: Assignment) -> dict[str, str]:
    """Alias-group root -> the member of its alias group that is a Concat slice."""
    out: dict[str, str] = {}
    for t in a.slice_of:
        r = t
        while r in a.alias:
            r = a.alias[r][0]
        if r != t:
            assert out.setdefault(r, t) == t, f"two slices in the alias group of {r!r}"
    return out


def linked_roots(a: Assignment) -> dict[str, tuple[str, int]]:
    """``{tensor: (root, byte offset inside the root)}`` for the linked tensors (and the
    roots they reach); a tensor that is not a key is its own root at offset 0.

    Linear in the number of links even for one long chain of in-place ops (each walk
    stops at a tensor already resolved), where walking up from every tensor would be
    quadratic.
    """
    memo: dict[str, tuple[str, int]] = {}
    alias, slice_of = a.alias, a.slice_of
    sliced = sliced_members(a) if slice_of else {}
    for t in chain(slice_of, alias, sliced):
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
