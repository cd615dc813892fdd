"""The storage groups of an assignment as integer columns (:class:`GroupTable`): made
by :func:`graphmem.planning.groups.group_table`, cached on the assignment
(``Assignment.groups``), read by the layout passes and the plan writer. Plain data: it
imports nothing of planning, so the assignment can hold one.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class GroupTable(NamedTuple):
    """The storage groups of an assignment as arrays over the tensors' positions in
    the context: what :func:`graphmem.planning.groups.groups` lists, for numpy work on all of them. Groups are
    in the order of their first member."""

    root: np.ndarray  # per position: the position of its group's root
    rel: np.ndarray  # per position: its byte offset inside the root's storage
    member: np.ndarray  # positions grouped: group k is member[start[k]:stop[k]]
    start: np.ndarray  # per group
    stop: np.ndarray
    group_first: np.ndarray  # per group: the first step of any member
    group_last: np.ndarray  # per group: the last step of any member
    group: np.ndarray  # per position: the index of its group

    def group_root(self) -> np.ndarray:
        """Per group: the position of its root."""
        return self.root[self.member[self.start]]
