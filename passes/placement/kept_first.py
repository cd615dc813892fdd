"""Strategy ``greedy_kept_first``: best fit over the records in this order. Those live
at the last step first, then the largest.

On a decode step the new key and value caches (graph outputs, made layer by layer and
kept to the end) and the past ones (graph inputs, read until their layer) take turns
under large per-layer tensors: by size alone the large ones all go to the bottom and
both caches stack above them (a Llama decode step ORT optimized: 7.1% above the floor);
the kept ones placed first leave the large ones a staircase between them (0.5% above)."""
from __future__ import annotations

from typing import Sequence

NAME = "greedy_kept_first"


def order(recs: Sequence) -> list:
    """The records (or Tied sets) in the order best fit inserts them."""
    end = max((r.last for r in recs), default=0)
    return sorted(recs, key=lambda r: (r.last != end, -r.bytes, r.first, r.id))
