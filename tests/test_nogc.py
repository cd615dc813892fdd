"""graphmem.core.nogc: the collector is off inside, and back as it was afterwards."""
from __future__ import annotations

import gc

import pytest

from graphmem.core.nogc import gc_paused


@gc_paused
def _inner():
    return gc.isenabled()


@gc_paused
def _outer():
    return _inner(), gc.isenabled()


@gc_paused
def _fails():
    raise ValueError("boom")


def test_off_inside_and_restored_after_nesting_and_errors():
    assert gc.isenabled()
    assert _outer() == (False, False)
    assert gc.isenabled()
    with pytest.raises(ValueError):
        _fails()
    assert gc.isenabled()


def test_a_caller_that_switched_it_off_keeps_it_off():
    gc.disable()
    try:
        assert _inner() is False
        assert not gc.isenabled()
    finally:
        gc.enable()
