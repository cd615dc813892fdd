"""The plan file ``graphmem.plan/1``: its data and JSON (``format``), atomic writes
(``io``), the independent check (``validate``, with ``links`` for the alias and slice
rules on whole columns), its statistics (``stats``), its columns and storage groups
(``columns``) and the per-step, per-tensor view the exports share (``view``).

May import: numpy, :mod:`graphmem.core`, :mod:`graphmem.errors`. Knows nothing of how a
plan was made: no pass and no planning module is imported here.
"""
from graphmem.plan.format import FORMAT, Plan, TensorPlan
from graphmem.plan.io import write_atomic
from graphmem.plan.stats import live_timelines, plan_stats
from graphmem.plan.validate import problems, validate

__all__ = ["FORMAT", "Plan", "TensorPlan", "write_atomic", "live_timelines", "plan_stats",
           "problems", "validate"]
