"""Planning without the cyclic garbage collector.

Planning a large graph allocates millions of small objects that all stay alive until
the plan is built (intervals, records, dict entries) and makes no reference cycles
worth collecting, so CPython's generational collector only re-scans the growing heap
(its share of the planning time on large graphs: docs/benchmarks.md). Reference
counting still frees everything as usual; the collector is switched back on, if it was
on, when the outermost paused call returns.
"""
from __future__ import annotations

import functools
import gc


def gc_paused(fn):
    """Run ``fn`` with the cyclic collector off (nesting is fine)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was_on = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_on:
                gc.enable()
    return wrapper
