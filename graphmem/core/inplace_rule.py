"""The two tests of the in-place rule (docs/plan-format.md, "The in-place rule") that
the in-place pass (through :class:`graphmem.planning.storage_groups.StorageGroups`)
and the plan validator (``graphmem/plan/links.py``) share: a tensor live across a
write, and two byte ranges that overlap. Each takes Python ints or numpy arrays alike
(the pass asks about one member at a time, the validator about whole columns).
"""
from __future__ import annotations


def live_across(first, last, pos):
    """Is a tensor live ``[first, last]`` live across position ``pos``: produced before
    it and read after it?"""
    return (first < pos) & (pos < last)


def overlaps(lo, hi, other_lo, other_hi):
    """Do the byte ranges ``[lo, hi)`` and ``[other_lo, other_hi)`` share a byte? A
    range of no bytes overlaps nothing."""
    return (lo < other_hi) & (other_lo < hi) & (lo < hi) & (other_lo < other_hi)
