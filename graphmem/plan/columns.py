"""A plan's tensors as numpy columns, and its storage groups (the tensors joined by
``alias_of`` and ``slice_of``): what validation, statistics and the views read."""
from __future__ import annotations

from itertools import count
from operator import attrgetter, itemgetter
from typing import Mapping, NamedTuple

import numpy as np

from graphmem.plan.format import Plan, TensorPlan


class PlanColumns(NamedTuple):
    """A plan's tensors as columns, in the plan's order, and their storage groups."""

    names: list[str]
    ts: list[TensorPlan]
    first: np.ndarray
    last: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    group: np.ndarray  # per tensor: the position of its alias/slice group's root
    linked: list[int]  # positions of the tensors with alias_of, alias or slice_of


def columns(plan: Plan, index: Mapping[str, int] | None = None) -> PlanColumns:
    """Columns of ``plan.tensors``. ``index`` (tensor -> position in the plan; built if
    omitted) only resolves the targets of alias_of and slice_of."""
    names, ts = list(plan.tensors), list(plan.tensors.values())
    n = len(ts)
    live = list(map(LIVE, ts))
    first = np.fromiter(map(_LIVE_FIRST, live), np.int64, n)
    last = np.fromiter(map(_LIVE_LAST, live), np.int64, n)
    offset = np.fromiter(map(OFFSET, ts), np.int64, n)
    size = np.fromiter(map(BYTES, ts), np.int64, n)
    linked = [i for i, t in enumerate(ts)
              if t.alias_of is not None or t.slice_of is not None or t.alias is not None]
    group = np.arange(n)
    if linked:
        if index is None:
            index = dict(zip(names, count()))
        _join_groups(group, ts, linked, index)
    return PlanColumns(names, ts, first, last, offset, size, group, linked)


# getters of a TensorPlan's fields, shared by the modules that read plan columns
LIVE, OFFSET, BYTES, KIND = (attrgetter("live"), attrgetter("offset"), attrgetter("bytes"),
                             attrgetter("kind"))
_LIVE_FIRST, _LIVE_LAST = itemgetter(0), itemgetter(1)


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



def group_roots(plan: Plan) -> dict[str, str]:
    """Tensor -> root of its alias/slice group (following alias_of and slice_of)."""
    cols = columns(plan)
    names = cols.names
    return dict(zip(names, [names[g] for g in cols.group.tolist()]))


def live_groups(plan: Plan, pos: int) -> list[list[str]]:
    """The tensors of more than zero bytes live at position ``pos`` of the plan's order,
    by storage group: a list per group, each in plan order, the groups in the order of
    their first such tensor."""
    roots = group_roots(plan)
    groups: dict[str, list[str]] = {}
    for name, t in plan.tensors.items():
        if t.bytes and t.live[0] <= pos <= t.live[1]:
            groups.setdefault(roots[name], []).append(name)
    return list(groups.values())
