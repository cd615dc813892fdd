"""graphmem's passes, each a :class:`~graphmem.planning.contract.Pass`: a name, its stage
(order, alias, layout), what it reads and what it provides, and
``run(ctx, assignment, options) -> (assignment, detail)``.

``registry.PASSES`` lists them in the order the pipeline runs them; the placement
strategies the ``place`` pass chooses among are in :mod:`graphmem.passes.placement`, one
per file.

A pass imports neither the pipeline, the plan file nor the CLI: what this may import is
the table of docs/architecture.md, which tests/test_architecture_contracts.py enforces.
"""
