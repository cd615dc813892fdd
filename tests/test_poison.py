"""The verifier's poison schedule against a byte-by-byte reference on random plans."""
from __future__ import annotations

import random

import pytest

from graphmem.verify.poison import PoisonSchedule


def _reference(arena_bytes, spans, owned, writes, steps):
    """Every byte, every step: poison what was written and no owner holds now."""
    dirty = bytearray(arena_bytes)
    out = []
    for name in writes[-1]:
        a, b = spans[name]
        dirty[a:b] = b"\x01" * (b - a)
    for pos in range(steps):
        held = bytearray(arena_bytes)
        for name, (first, last) in owned.items():
            if first <= pos <= last:
                a, b = spans[name]
                held[a:b] = b"\x01" * (b - a)
        poisoned = {i for i in range(arena_bytes) if dirty[i] and not held[i]}
        for i in poisoned:
            dirty[i] = 0
        out.append(poisoned)
        for name in writes[pos]:
            a, b = spans[name]
            dirty[a:b] = b"\x01" * (b - a)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_poisons_what_the_byte_by_byte_reference_does(seed):
    rng = random.Random(seed)
    arena, steps = rng.randrange(1, 200), rng.randrange(1, 30)
    spans, owned, writes = {}, {}, {pos: [] for pos in range(-1, steps)}
    for k in range(rng.randrange(1, 25)):
        a = rng.randrange(arena)
        b = min(arena, a + rng.randrange(0, 60))
        name = f"t{k}"
        spans[name] = (a, b)
        made = rng.randrange(-1, steps)  # -1: a feed, written before the first node
        writes[made].append(name)
        last = rng.randrange(made, steps + 1)
        if last > made:
            owned[name] = (made + 1, last)
    schedule = PoisonSchedule(arena, spans, owned)
    expected = _reference(arena, spans, owned, writes, steps)
    schedule.written(writes[-1])
    for pos in range(steps):
        got = schedule.step(pos)
        assert got == sorted(got)
        assert all(a < b for a, b in got)
        assert all(got[i][1] < got[i + 1][0] for i in range(len(got) - 1))  # merged
        assert {i for a, b in got for i in range(a, b)} == expected[pos]
        schedule.written(writes[pos])
