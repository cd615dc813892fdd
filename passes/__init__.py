"""graphmem's passes, each a :class:`~graphmem.planning.contract.Pass`: a name, its stage
(order, alias, layout), what it reads and what it provides, and
``run(ctx, assignment, options) -> (assignment, detail)``.

``registry.PASSES`` lists them in the order the pipeline runs them; the placement
strategies the ``place`` pass chooses among are in :mod:`graphmem.passes.placement`, one
per file.

May import: numpy, :mod:`graphmem.core`, :mod:`graphmem.planning`, ``graphmem.fitloops``;
never the pipeline, the plan file or the CLI.
"""
