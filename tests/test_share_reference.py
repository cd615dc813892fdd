"""The compiled storage pool (graphmem.fitloops.share) equals its specification, the Python
loop of tests/reference_share.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphmem import fitloops
from graphmem.passes.share import share_blocks
from graphmem.planning.groups import Record

import reference_share as ref


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


@settings(max_examples=300, deadline=None)
@given(recs=record_lists(), match_range=st.sampled_from([0, 1, 2, 3, 4, 8, 16]))
def test_compiled_pool_equals_the_specification(recs, match_range):
    assert share_blocks(recs, match_range) == ref.share_blocks(recs, match_range)


@pytest.mark.parametrize("blocks", [share_blocks, ref.share_blocks])
def test_pool_keeps_mxnet_semantics(blocks):
    # the hand-checked cases of test_placement, on the pool and its specification
    recs = [Record(0, 64, 0, 0), Record(1, 16, 1, 1)]
    assert blocks(recs, 1)[1] == [64, 16]
    assert blocks(recs, 4) == ({0: 0, 1: 0}, [64])
    # a smaller free block grows to fit the larger request
    assert blocks([Record(0, 16, 0, 0), Record(1, 32, 1, 1)], 2)[1] == [32]


def test_compiled_pool_rejects_unsorted_records():
    first = np.array([3, 1], dtype=np.int64)
    out = np.empty(2, dtype=np.int64)
    with pytest.raises(ValueError, match="sorted"):
        fitloops.share(first, first, first, 4, out, out.copy())


@pytest.mark.parametrize("name", ["densenet121", "resnet50"])
def test_share_pass_equals_the_specification_on_the_zoo(name):
    """The pass walks the group table's columns into the compiled pool: the storage
    the specification gives for the same groups."""
    import graphmem
    from graphmem.frontend.zoo import zoo_path
    from graphmem.planning.context import Context
    from graphmem.planning.groups import group_records, group_roots
    graph = graphmem.load(zoo_path(name))
    a = graphmem.plan_graph(graph, ["concat", "inplace", "share"]).assignment
    assert len(set(a.storage.values())) < len(a.storage)  # blocks were shared
    ctx = Context.for_order(graph, [n.index for n in graph.nodes], 64)
    recs = group_records(ctx, a.groups)[0]
    roots = group_roots(ctx, a.groups)
    want = min((ref.share_blocks(recs, m) for m in (1, 2, 4, 8, 16)),
               key=lambda blocks: sum(blocks[1]))
    assert {roots[r]: b for r, b in want[0].items()} == a.storage
    assert tuple(want[1]) == a.storage_bytes
