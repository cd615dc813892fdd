"""Placement strategies on record literals (TFLite GPU memory_management_test style)."""
from __future__ import annotations

import pytest

from graphmem.planning.groups import Record
from graphmem.passes.placement.best_fit import best_fit
from graphmem.passes.placement.search import STRATEGIES, max_live, place_records
from graphmem.passes.share import share_blocks


def overlaps(recs, offsets):
    for a in recs:
        for b in recs:
            if a.id < b.id and a.first <= b.last and b.first <= a.last:
                if offsets[a.id] < offsets[b.id] + b.bytes and offsets[b.id] < offsets[a.id] + a.bytes:
                    return (a, b)
    return None


# TFLite GPU's ComplexRecords: 9 tensors; max live bytes is 96.
COMPLEX = [Record(i, *r) for i, r in enumerate(
    [(32, 0, 1), (32, 1, 4), (8, 2, 5), (16, 3, 5), (8, 4, 5), (64, 5, 7), (8, 6, 8),
     (8, 7, 8), (16, 8, 8)])]


def test_empty_and_one_record():
    assert place_records([]) [:2] == ({}, 0)
    offsets, total, *_ = place_records([Record(0, 16, 0, 1)])
    assert offsets == {0: 0} and total == 16


def test_chain_reuses_one_block_pair():
    chain = [Record(i, 16, i, i + 1) for i in range(6)]
    offsets, total, *_ = place_records(chain)
    assert total == 32 and overlaps(chain, offsets) is None


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_strategy_is_valid_on_complex_records(name):
    offsets, total = best_fit(STRATEGIES[name](COMPLEX))
    assert overlaps(COMPLEX, offsets) is None
    assert total >= max_live(COMPLEX) == 96


def test_best_reaches_max_live_on_complex_records():
    offsets, total, strategy, tried, _ = place_records(COMPLEX)
    assert total == 96  # offsets beat the best shared-objects plan (112 B) by 14%
    # strategies run in order until one reaches the max-live floor
    assert tried[strategy] == 96 and list(tried)[-1] == strategy


def test_share_pool_matches_mxnet_semantics():
    # sizes 64, then 16: with match_range 1 the freed 64 block is too big for 16
    recs = [Record(0, 64, 0, 0), Record(1, 16, 1, 1)]
    _, blocks = share_blocks(recs, 1)
    assert blocks == [64, 16]
    of, blocks = share_blocks(recs, 4)
    assert blocks == [64] and of == {0: 0, 1: 0}
    # a smaller free block grows to fit the larger request
    recs = [Record(0, 16, 0, 0), Record(1, 32, 1, 1)]
    _, blocks = share_blocks(recs, 2)
    assert blocks == [32]


def test_gap_search_is_not_optional():
    # a long-lived small tensor at the bottom, then short big ones that fit in a gap
    recs = [Record(0, 100, 0, 1), Record(1, 10, 0, 9), Record(2, 100, 2, 3), Record(3, 100, 4, 5)]
    offsets, total, *_ = place_records(recs)
    assert overlaps(recs, offsets) is None
    assert total == 110
