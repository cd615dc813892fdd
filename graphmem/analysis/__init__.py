"""Where memory and compute go: the breakdown and per-layer table of a plan
(``breakdown``), MACs and workspace per node (``macs``), and re-planned batch and
precision what-ifs (``whatif``).

The what-ifs plan again (:mod:`graphmem.pipeline`). What this may import is the table of
docs/architecture.md, which tests/test_architecture_contracts.py enforces.
"""
