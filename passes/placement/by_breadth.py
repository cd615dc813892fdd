"""Strategy ``greedy_by_breadth``: best fit over the records whose lives cross the most
live bytes first (TFLite's greedy by breadth), then the largest."""
from __future__ import annotations

from typing import Sequence

import numpy as np

NAME = "greedy_by_breadth"


def order(recs: Sequence) -> list:
    """The records (or Tied sets) in the order best fit inserts them."""
    b = breadth(recs)
    return sorted(recs, key=lambda r: (-b[r.id], -r.bytes, r.first, r.id))


def breadth(recs: Sequence) -> dict[int, int]:
    """For each record, the largest total live at any step of its life."""
    if not recs:
        return {}
    lo = min(r.first for r in recs)
    hi = max(r.last for r in recs)
    delta = np.zeros(hi - lo + 2, dtype=np.int64)
    firsts = np.fromiter((r.first - lo for r in recs), np.int64, len(recs))
    lasts = np.fromiter((r.last - lo for r in recs), np.int64, len(recs))
    nbytes = np.fromiter((r.bytes for r in recs), np.int64, len(recs))
    np.add.at(delta, firsts, nbytes)
    np.add.at(delta, lasts + 1, -nbytes)
    live = np.cumsum(delta)  # live[-1] is 0: a sentinel so every slice end is in range
    # maximum over [first, last] for every record at once: reduceat over the
    # interleaved (first, last + 1) bounds, keeping every other result
    bounds = np.empty(2 * len(recs), dtype=np.int64)
    bounds[0::2], bounds[1::2] = firsts, lasts + 1
    peaks = np.maximum.reduceat(live, bounds)[0::2]
    return {r.id: int(p) for r, p in zip(recs, peaks)}
