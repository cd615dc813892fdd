"""Run a plan on ONNX Runtime: every tensor at its planned offset inside one arena, dead
bytes poisoned, each output compared with a plain run.

- ``verifier``: :func:`~graphmem.verify.verifier.verify`, the whole check;
  ``reference``: the plain run and inputs;
- ``arena``: host and device arenas; ``arena_run``: the node-by-node run inside the arena;
- ``node_sessions``: one ORT session per node; ``compare``: tolerances per dtype.

May import: onnx, onnxruntime, numpy, :mod:`graphmem.core`, :mod:`graphmem.frontend`,
:mod:`graphmem.plan`, :mod:`graphmem.errors`; never the planner.
"""
