"""graphmem's passes, each a :class:`~graphmem.planning.contract.Pass`: a name, its stage
(order, alias, layout), what it reads and what it provides, and
``run(ctx, assignment, options) -> (assignment, detail)``.

``PASSES`` lists them in the order the pipeline runs them (stage by stage); the CLI's
``--passes reorder,concat,inplace,share,place`` names them. The placement strategies
the ``place`` pass chooses among are in :mod:`graphmem.passes.placement`, one per file.

May import: numpy, :mod:`graphmem.core`, :mod:`graphmem.planning`, ``graphmem._fit``;
never the pipeline, the plan file or the CLI.
"""
from graphmem.passes import concat, inplace, place, reorder, share

PASSES = {p.name: p for p in (reorder.PASS, concat.PASS, inplace.PASS, share.PASS, place.PASS)}
# Every pass runs by default.
DEFAULT_PASSES = tuple(PASSES)

__all__ = ["PASSES", "DEFAULT_PASSES"]
