"""The plan file ``graphmem.plan/1``: its data and JSON (``format``), atomic writes
(``io``), the independent check (``validate``, with ``links`` for the alias and slice
rules), its statistics (``stats``), its columns and storage groups (``columns``) and the
per-step, per-tensor view the exports share (``view``).

Knows nothing of how a plan was made: no pass and no planning module is imported here.
What this may import is the table of docs/architecture.md, which
tests/test_architecture_contracts.py enforces.
"""
