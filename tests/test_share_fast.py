"""The compiled storage pool (graphmem._fit.share) equals share_blocks' Python loop."""
from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphmem.planning.assignment import Record

# graphmem.passes.share is the pass function; the module is under the same name
share = importlib.import_module("graphmem.passes.share")

needs_native = pytest.mark.skipif(share._fit is None,
                                  reason="graphmem._fit was not built (no C compiler)")


def python_loop(recs, match_range):
    with pytest.MonkeyPatch.context() as mp:  # not the fixture: it cannot be used under @given
        mp.setattr(share, "NATIVE", False)
        return share.share_blocks(recs, match_range)


@st.composite
def record_lists(draw):
    """Records with few distinct sizes and steps, so equal sizes, equal release steps
    and blocks that grow all happen."""
    n = draw(st.integers(0, 60))
    sizes = draw(st.lists(st.sampled_from([0, 16, 24, 64, 100, 128, 1000, 4096]),
                          min_size=n, max_size=n))
    recs = []
    for i, size in enumerate(sizes):
        first = draw(st.integers(-1, 20))
        last = first + draw(st.integers(0, 8))
        recs.append(Record(draw(st.integers(0, 10 ** 6)) * 64 + i, size, first, last))
    return recs


@needs_native
@settings(max_examples=300, deadline=None)
@given(recs=record_lists(), match_range=st.sampled_from([0, 1, 2, 3, 4, 8, 16]))
def test_compiled_pool_equals_python_loop(recs, match_range):
    assert share.share_blocks(recs, match_range) == python_loop(recs, match_range)


@needs_native
def test_compiled_pool_keeps_mxnet_semantics(monkeypatch):
    # the hand-checked cases of test_placement, on both loops
    for loop in ("compiled", "python"):
        monkeypatch.setattr(share, "NATIVE", loop == "compiled")
        recs = [Record(0, 64, 0, 0), Record(1, 16, 1, 1)]
        assert share.share_blocks(recs, 1)[1] == [64, 16]
        assert share.share_blocks(recs, 4) == ({0: 0, 1: 0}, [64])
        # a smaller free block grows to fit the larger request
        assert share.share_blocks([Record(0, 16, 0, 0), Record(1, 32, 1, 1)], 2)[1] == [32]


def test_sizes_past_64_bits_take_the_python_loop():
    recs = [Record(0, 2 ** 70, 0, 0), Record(1, 2 ** 70, 1, 1)]
    assert share.share_blocks(recs, 16) == ({0: 0, 1: 0}, [2 ** 70])


@needs_native
def test_compiled_pool_rejects_unsorted_records():
    import numpy as np
    first = np.array([3, 1], dtype=np.int64)
    out = np.empty(2, dtype=np.int64)
    with pytest.raises(ValueError, match="sorted"):
        share._fit.share(first, first, first, 4, out, out.copy())


@needs_native
@pytest.mark.parametrize("name", ["densenet121", "resnet50"])
def test_share_pass_is_the_same_on_either_loop(name, monkeypatch):
    """The pass walks the group table's columns into the compiled pool; without the
    extension it runs share_blocks' Python loop over the records: the same storage."""
    import graphmem
    from graphmem.frontend.zoo import zoo_path
    graph = graphmem.load(zoo_path(name))
    native = graphmem.plan_graph(graph, ["concat", "inplace", "share"]).assignment
    monkeypatch.setattr(share, "NATIVE", False)
    python = graphmem.plan_graph(graph, ["concat", "inplace", "share"]).assignment
    assert native.storage == python.storage and native.storage_bytes == python.storage_bytes
    assert len(set(native.storage.values())) < len(native.storage)  # blocks were shared
