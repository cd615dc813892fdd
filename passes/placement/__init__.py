"""Placement: an offset in one arena for every storage group, one strategy per file.

Every strategy sees only :class:`~graphmem.planning.groups.Record` lists (bytes, first,
last) and the :class:`~graphmem.passes.placement.items.Tied` sets of Concat groups, so
they are interchangeable and compared on the same input (TFLite GPU's
``memory_management/``):

- ``items``: the records and Tied sets of an assignment's storage groups, and the
  index of every time-overlapping pair of their parts (``part_pairs``);
- ``best_fit``: the insertion loop every greedy strategy shares (compiled,
  ``graphmem/fitloops.c``; its specification is ``tests/reference_place.py``);
- ``by_size``, ``by_breadth``, ``by_area``, ``by_duration``, ``in_order``, ``by_end``,
  ``kept_first``: the orderings best fit inserts in (``STRATEGIES`` in ``search``);
- ``search``: the best of the strategies, then seeded hill climbing, within a work
  budget; the max-live floor;
- ``optimal``: the exact placement for one order (CP-SAT by default, or a big-M MIP
  solved by HiGHS), warm-started by ``search``;
- ``verdicts``: the three answers at a fixed capacity (fits, does not fit, undecided);
- ``capacity``: the complete search at a fixed capacity (compiled,
  ``graphmem/capsearch.c``; its specification is ``tests/reference_capacity.py``) and
  the smallest arena by it;
- ``sweep``: sweep best fit, a placement that needs no pairs (past ``PAIR_LIMIT``);
- ``buffers``: placement of any compiler's buffers given as columns (``graphmem place``);
- ``algorithm``: the one interface of them all (items, pairs, alignment -> ``Placed``,
  a named result) and their composition (``with_fallback``, ``searched``,
  ``proven_or``); ``for_option`` picks the
  algorithm a ``--placement`` value names.

May import: numpy, :mod:`graphmem.core`, :mod:`graphmem.planning`, ``graphmem.fitloops``,
``graphmem.capsearch``.
The pass that uses them is :mod:`graphmem.passes.place`.
"""
