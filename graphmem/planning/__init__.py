"""What the passes hand each other: the context they read (graph, index, order, liveness),
the assignment they refine, the storage groups and placement records made from it, the
contract every pass declares, and the writer that turns a finished assignment into the
plan file's data.

May import: numpy, :mod:`graphmem.core`, :mod:`graphmem.errors`, and for the writer
:mod:`graphmem.plan` (the format and its statistics). The passes
(:mod:`graphmem.passes`) import this; this imports no pass.
"""
