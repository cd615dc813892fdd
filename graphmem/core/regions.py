"""Byte regions of storage groups whose members cover different bytes (Concat slices).

A Concat output holds its slices: the slices are live before the output is, so the
group's bytes are split into regions, each live from the first to the last use of a
member on it. Placement (``passes/placement/items.py``) cuts at aligned boundaries so that
every gap is aligned; the plan's statistics (``graphmem/plan/stats.py``) at the exact
ones. Both ask this one function, for all groups at once, in numpy.
"""
from __future__ import annotations

import numpy as np

NO_SPAN = np.iinfo(np.int64).max  # the first use of a region no span covers


def byte_regions(cut_group: np.ndarray, cuts: np.ndarray, span_group: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray, first: np.ndarray, last: np.ndarray,
                 ) -> tuple[np.ndarray, ...]:
    """Regions between consecutive distinct cuts of each group, with their lives.

    ``cut_group``/``cuts``: each group's cut points (int ids, byte positions; repeats
    are fine). ``span_group``, ``lo``, ``hi``, ``first``, ``last``: per member, its
    group, byte range ``[lo, hi)`` and live range; a span must start at or after its
    group's lowest cut and end by its highest. A region's life is the earliest first
    and latest last use of the spans that share a byte with it; a region no span
    covers has first ``NO_SPAN`` and last -1.

    Returns ``(group, start, end, first, last)`` arrays, one entry per region, sorted
    by group then start.
    """
    order = np.lexsort((cuts, cut_group))
    cg, cv = cut_group[order], cuts[order]
    distinct = np.concatenate(([True], (cg[1:] != cg[:-1]) | (cv[1:] != cv[:-1])))
    cg, cv = cg[distinct], cv[distinct]
    inner = cg[1:] == cg[:-1]  # cut k and cut k + 1 bound a region
    region_at = np.concatenate(([0], np.cumsum(inner)))  # the region starting at cut k
    n_regions = int(region_at[-1])
    # the cut at or below each span's first byte and last byte: one merged sort of
    # cuts and queries by (group, position), cuts first on ties
    n, s = len(cv), len(lo)
    keys_g = np.concatenate((cg, span_group, span_group))
    keys_v = np.concatenate((cv, lo, hi - 1))
    is_query = np.concatenate((np.zeros(n, dtype=np.int8), np.ones(2 * s, dtype=np.int8)))
    merged = np.lexsort((is_query, keys_v, keys_g))
    cut_below = np.cumsum(is_query[merged] == 0) - 1  # per merged position
    where = np.empty_like(merged)
    where[merged] = np.arange(len(merged))
    r_lo = region_at[cut_below[where[n:n + s]]]
    r_hi = region_at[cut_below[where[n + s:]]]
    count = r_hi - r_lo + 1
    ramp = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    region = np.repeat(r_lo, count) + ramp
    r_first = np.full(n_regions, NO_SPAN, dtype=np.int64)
    r_last = np.full(n_regions, -1, dtype=np.int64)
    np.minimum.at(r_first, region, np.repeat(first, count))
    np.maximum.at(r_last, region, np.repeat(last, count))
    return cg[:-1][inner], cv[:-1][inner], cv[1:][inner], r_first, r_last
