"""Strategy ``greedy_in_order``: best fit over the records in this order. In the order the buffers are produced, the largest first at one step."""
from __future__ import annotations

from typing import Sequence

NAME = "greedy_in_order"


def order(recs: Sequence) -> list:
    """The records (or Tied sets) in the order best fit inserts them."""
    return sorted(recs, key=lambda r: (r.first, -r.bytes, r.id))
