"""graphmem.fitloops is importable, so its two entry points check what they are given:
indices and counts before any loop reads them, and every sum for 64-bit overflow. Bad
arrays are refused with ValueError; nothing is read or written out of bounds (the same
calls run under AddressSanitizer in tests/test_sanitizers.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphmem import fitloops

I64 = np.int64
MAX = np.iinfo(I64).max


def run(tied, start, rel, nbytes, owner, a=(), b=(), alignment=64, seq=None):
    """fitloops.run on plain lists; returns (arena bytes, base offsets)."""
    n = len(tied)
    base = np.zeros(n, dtype=I64)
    seq = np.arange(n, dtype=I64) if seq is None else np.asarray(seq, dtype=I64)
    total = fitloops.run(seq, np.asarray(tied, dtype=np.uint8), np.asarray(start, dtype=I64),
                         np.asarray(rel, dtype=I64), np.asarray(nbytes, dtype=I64),
                         np.asarray(owner, dtype=np.int32), np.asarray(a, dtype=np.int32),
                         np.asarray(b, dtype=np.int32), alignment, base)
    return total, base.tolist()


def test_two_plain_items_that_overlap_are_stacked():
    assert run([0, 0], [0, 1, 2], [0, 0], [64, 128], [0, 1], [0], [1]) == (192, [0, 64])


def test_a_plain_item_without_parts_is_refused():
    # item 0 is plain and owns no part: the loop would read nbytes[start[0]] of item 1
    # or past the end (issue 38: fitloops.c:228-250 under ASan)
    with pytest.raises(ValueError, match="exactly one part"):
        run([0, 0], [0, 0, 1], [0], [64], [1])
    with pytest.raises(ValueError, match="exactly one part"):
        run([0], [0, 0], [], [], [])


def test_a_plain_item_with_two_parts_is_refused():
    with pytest.raises(ValueError, match="exactly one part"):
        run([0], [0, 2], [0, 64], [64, 64], [0, 0])


def test_a_tied_set_without_parts_places_nothing():
    assert run([1, 0], [0, 0, 1], [0], [64], [1]) == (64, [0, 0])


def test_a_part_owned_by_another_item_is_refused():
    with pytest.raises(ValueError, match="owner"):
        run([0, 0], [0, 1, 2], [0, 0], [64, 64], [1, 0], [0], [1])


def test_negative_sizes_and_offsets_are_refused():
    with pytest.raises(ValueError, match="negative"):
        run([0], [0, 1], [0], [-64], [0])
    with pytest.raises(ValueError, match="negative"):
        run([1], [0, 1], [-1], [64], [0])


@pytest.mark.parametrize("alignment", [1, 64, MAX])
def test_offsets_past_64_bits_are_refused_not_wrapped(alignment):
    # two plain records of 2^62 + 2^61 bytes that overlap: the second would end past 2^63
    size = (1 << 62) + (1 << 61)
    with pytest.raises(ValueError, match="64 bits"):
        run([0, 0], [0, 1, 2], [0, 0], [size, size], [0, 1], [0], [1], alignment=alignment)
    # a Tied set whose part sits near 2^63 and is larger than what is left
    with pytest.raises(ValueError, match="64 bits"):
        run([1], [0, 1], [MAX - 10], [64], [0], alignment=alignment)
    # its reach (offset + size - 1) alone overflows, checked before the sweep
    with pytest.raises(ValueError, match="64 bits"):
        run([0, 1], [0, 1, 2], [0, MAX], [64, MAX], [0, 1], [0], [1], alignment=alignment)


def test_the_largest_arena_that_fits_is_computed_exactly():
    assert run([0, 0], [0, 1, 2], [0, 0], [MAX - 64, 64], [0, 1], [0], [1], alignment=1) \
        == (MAX, [0, MAX - 64])


def test_alignment_must_be_positive():
    with pytest.raises(ValueError, match="alignment"):
        run([0], [0, 1], [0], [64], [0], alignment=0)


int64s = st.one_of(st.integers(-3, 8), st.sampled_from([MAX, MAX - 1, -MAX - 1, 1 << 62]))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_any_arrays_give_an_arena_or_a_value_error(data):
    """Arbitrary columns (consistent lengths, any values) never crash the loop."""
    n = data.draw(st.integers(0, 4))
    parts = data.draw(st.integers(0, 6))
    pairs = data.draw(st.integers(0, 6))
    draw = lambda s, k: data.draw(st.lists(s, min_size=k, max_size=k))
    tied = draw(st.integers(0, 1), n)
    start = draw(int64s, n + 1)
    rel = draw(int64s, parts)
    nbytes = draw(int64s, parts)
    owner = draw(st.integers(-1, 4), parts)
    a = draw(st.integers(-1, 6), pairs)
    b = draw(st.integers(-1, 6), pairs)
    seq = draw(st.integers(-1, 4), n)
    alignment = data.draw(st.sampled_from([1, 64, MAX]))
    try:
        total, base = run(tied, start, rel, nbytes, owner, a, b, alignment, seq)
    except ValueError:
        return
    assert 0 <= total <= MAX and all(0 <= x <= MAX for x in base)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_storage_pool_takes_any_sizes(data):
    n = data.draw(st.integers(0, 6))
    first = sorted(data.draw(st.lists(int64s, min_size=n, max_size=n)))
    last = data.draw(st.lists(int64s, min_size=n, max_size=n))
    nbytes = data.draw(st.lists(int64s, min_size=n, max_size=n))
    match_range = data.draw(st.sampled_from([0, 1, 4, MAX]))
    block = np.zeros(n, dtype=I64)
    block_bytes = np.zeros(n, dtype=I64)
    try:
        blocks = fitloops.share(np.array(first, dtype=I64), np.array(last, dtype=I64),
                                np.array(nbytes, dtype=I64), match_range, block, block_bytes)
    except ValueError:
        assert min(nbytes) < 0
        return
    assert 0 <= blocks <= n and all(0 <= x < max(blocks, 1) for x in block.tolist())
