"""The contract every pass declares (MXNet's pass registry: a name, what it reads and what
it provides), so that the pipeline runs passes without knowing any of them.

Stages, in the order the pipeline runs them:

- ``order``: chooses the execution order (``Assignment.order``). The pipeline runs
  such a pass first, on the given order; when it finds another one, the rest of the
  passes are planned for both orders and the smaller arena is kept, so an order pass
  never makes a plan worse.
- ``alias``: decides which tensors share storage (``alias``, ``slice_of``).
- ``layout``: storage blocks and offsets in the arena (``storage``, ``offsets``).

A ``trial`` pass makes a choice that can cost elsewhere (Concat slices lengthen the
branches' lives): when it changed the assignment, the pipeline also plans the rest
without it and keeps the smaller arena, so a trial pass never makes a plan worse either.

What a pass reads and provides are names of what the assignment holds: ``order``,
``slices``, ``aliases``, ``groups`` (the storage groups the aliases and slices make:
the pipeline makes them before a pass that reads them), ``storage``, ``offsets``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.groups import group_table

STAGES = ("order", "alias", "layout")
PRODUCTS = ("order", "slices", "aliases", "groups", "storage", "offsets")


@dataclass(frozen=True)
class PassOptions:
    """The planning options a pass may read: the placement strategy (``"best"``, one of
    the strategies, or ``"optimal"``) and the exact solver's time limit in seconds."""

    placement: str = "best"
    time_limit: float = 10.0


@dataclass(frozen=True)
class Pass:
    """A planning pass: ``run(ctx, assignment, options) -> (assignment, detail)``, where
    ``detail`` is a small JSON-able dict of what it did (shown in the report)."""

    name: str
    stage: str
    reads: tuple[str, ...]
    provides: tuple[str, ...]
    run: Callable[[Context, Assignment, PassOptions], tuple[Assignment, dict]]
    summary: str  # one line for --help and the docs
    trial: bool = False  # planned with and without, the smaller arena kept

    def __post_init__(self) -> None:
        assert self.stage in STAGES, self.stage
        assert set(self.reads) | set(self.provides) <= set(PRODUCTS), (self.reads, self.provides)

    def __call__(self, ctx: Context, a: Assignment,
                 options: PassOptions = PassOptions()) -> tuple[Assignment, dict]:
        """Run the pass, first making what it reads that is derived (the groups)."""
        if "groups" in self.reads and a.groups is None:
            a = a.with_(groups=group_table(ctx, a))
        return self.run(ctx, a, options)
