"""Strategy ``greedy_by_area``: best fit over the records in this order. The largest bytes x steps first."""
from __future__ import annotations

from typing import Sequence

NAME = "greedy_by_area"


def order(recs: Sequence) -> list:
    """The records (or Tied sets) in the order best fit inserts them."""
    return sorted(recs, key=lambda r: (-r.bytes * (r.last - r.first + 1), r.first, r.id))
