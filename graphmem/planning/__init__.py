"""What the passes hand each other: the context they read (graph, index, order, liveness),
the assignment they refine, the storage groups and placement records made from it, and
the contract every pass declares.

May import: numpy, :mod:`graphmem.core`, :mod:`graphmem.errors`. The passes
(:mod:`graphmem.passes`) import this; this imports no pass.
"""
