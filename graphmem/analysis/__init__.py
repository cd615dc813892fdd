"""Where memory and compute go: the breakdown and per-layer table of a plan
(``breakdown``), MACs and workspace per node (``macs``), and re-planned batch and
precision what-ifs (``whatif``).

May import: numpy, :mod:`graphmem.core`, :mod:`graphmem.frontend`, :mod:`graphmem.plan`,
:mod:`graphmem.pipeline` (the what-ifs plan again), :mod:`graphmem.errors`.
"""
