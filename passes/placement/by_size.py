"""Strategy ``greedy_by_size``: best fit over the records in this order. The largest first (TFLite's greedy by size)."""
from __future__ import annotations

from typing import Sequence

NAME = "greedy_by_size"


def order(recs: Sequence) -> list:
    """The records (or Tied sets) in the order best fit inserts them."""
    return sorted(recs, key=lambda r: (-r.bytes, r.first, r.id))
