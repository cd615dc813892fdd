"""Strategy ``greedy_by_duration``: best fit over the records in this order. The longest lived first, then the largest."""
from __future__ import annotations

from typing import Sequence

NAME = "greedy_by_duration"


def order(recs: Sequence) -> list:
    """The records (or Tied sets) in the order best fit inserts them."""
    return sorted(recs, key=lambda r: (-(r.last - r.first), -r.bytes, r.first, r.id))
