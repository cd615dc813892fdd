"""What the passes hand each other: the context they read (graph, index, order, liveness),
the assignment they refine, the storage groups and placement records made from it, the
contract every pass declares and its check, the loop that runs the passes and keeps the
smaller of two plans, the plan's target (provider, in-place table, runtime), and the
writer that turns a finished assignment into the plan file's data.

The passes (:mod:`graphmem.passes`) import this; this imports no pass. What this may
import is the table of docs/architecture.md, which tests/test_architecture_contracts.py
enforces.
"""
