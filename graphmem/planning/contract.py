"""The contract every pass declares (nnvm's pass registry: a name, what it reads and what
it provides), and its check: the pipeline runs passes without knowing any of them, and
refuses, before anything runs, a list of passes whose contracts do not fit together.

Stages, in the order the pipeline runs them:

- ``order``: chooses the execution order (``Assignment.order``). The rest of the passes
  are planned for the given order and for the one it found, and the smaller arena is
  kept (:func:`graphmem.planning.loop.run_passes`), so an order pass never makes a
  plan worse.
- ``alias``: decides which tensors share storage (``alias``, ``slice_of``).
- ``layout``: storage blocks and offsets in the arena (``storage``, ``offsets``).

A ``trial`` pass makes a choice that can cost elsewhere (Concat slices lengthen the
branches' lives): when it changed the assignment, the rest is also planned without it
and the smaller arena kept, so a trial pass never makes a plan worse either.

What a pass reads and provides are the products of :data:`PRODUCTS`, each a part of the
:class:`Assignment` (:data:`FIELDS`):

- ``reads``: what the pass needs. Each must be provided by the context
  (:data:`CONTEXT_PROVIDES`: its ``order``; the ``groups``, which the pipeline makes
  from the aliases and slices as they stand, none or some) or by an earlier pass.
- ``uses``: what the pass takes into account when an earlier pass made it, and does
  without otherwise (``inplace`` keeps the in-place rule over the Concat slices, if
  any; ``place`` stacks the ``share`` blocks, made by itself if ``share`` did not run).
- ``provides``: what it makes. It may change those parts of the assignment and no
  others (:func:`changed_products`, checked after every pass), and no pass may provide
  what an earlier pass reads or uses: that one would have planned without it.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.planning.assignment import Assignment
from graphmem.planning.context import Context
from graphmem.planning.groups import group_table

STAGES = ("order", "alias", "layout")
# each product, and the fields of the Assignment that hold it
FIELDS = {"order": ("order",), "slices": ("slice_of", "slice_offset"), "aliases": ("alias",),
          "groups": ("groups",), "storage": ("storage", "storage_bytes"),
          "offsets": ("offsets", "arena_bytes", "strategy")}
PRODUCTS = tuple(FIELDS)
# What every pipeline has before its first pass: the context's order, and the storage
# groups, made on demand from whatever aliases and slices there are (none at first).
CONTEXT_PROVIDES = ("order", "groups")


@record
class PassOptions:
    """The planning options a pass may read: the placement strategy (``"best"``, one of
    the strategies, or ``"optimal"``), the exact solver's time limit in seconds, and the
    arena's ``capacity`` in bytes (None: none; see ``placement.algorithm.within``)."""

    placement: str = "best"
    time_limit: float = 10.0
    capacity: int | None = None


@record
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
    uses: tuple[str, ...] = ()  # read when an earlier pass made them (module docstring)

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"pass {self.name!r}: stage {self.stage!r} is not one of "
                             f"{', '.join(STAGES)}")
        unknown = [p for p in (*self.reads, *self.uses, *self.provides) if p not in FIELDS]
        if unknown:
            raise ValueError(f"pass {self.name!r}: {unknown[0]!r} is not a product "
                             f"({', '.join(PRODUCTS)})")
        if "groups" in self.provides:
            raise ValueError(f"pass {self.name!r}: the pipeline makes the groups; a pass "
                             "provides the aliases or slices they are made of")

    def __call__(self, ctx: Context, a: Assignment,
                 options: PassOptions = PassOptions()) -> tuple[Assignment, dict]:
        """Run the pass, first making the groups if it reads them; refuse a result that
        changed a product the pass does not provide."""
        if "groups" in self.reads and a.groups is None:
            a = a.with_(groups=group_table(ctx, a))
        new, detail = self.run(ctx, a, options)
        changed = changed_products(a, new, skip=self.provides)
        if changed:
            raise GraphmemError(f"pass {self.name!r} changed the {changed[0]}, which it does "
                                f"not provide (it provides {_listed(self.provides)})")
        return new, detail


def changed_products(before: Assignment, after: Assignment,
                     skip: Sequence[str] = ()) -> list[str]:
    """The products, other than ``skip``, whose fields differ between two assignments
    (the groups, derived from the aliases and slices, are left out). Compared by
    identity first: a pass that leaves a field alone hands on the same object, so a
    million-entry mapping is compared only where a pass made a new one."""
    out = []
    for product, names in FIELDS.items():
        if product == "groups" or product in skip:
            continue
        for name in names:
            old, new = getattr(before, name), getattr(after, name)
            if old is not new and old != new:
                out.append(product)
                break
    return out


def check_pipeline(passes: Sequence[Pass], known: Iterable[Pass] = ()) -> None:
    """Refuse, with one line naming the pass, the missing input and a pass that would
    provide it (from ``known``, the registry), a list of passes that cannot run in this
    order: one that reads a product no earlier pass (nor the context) provides, one
    that provides a product an earlier pass read or used, or one of an earlier stage
    after a later one."""
    known = list(known)
    have = set(CONTEXT_PROVIDES)
    asked: dict[str, str] = {}  # product -> the first pass that read or used it
    for before, p in zip((None, *passes), passes):
        if before is not None and STAGES.index(p.stage) < STAGES.index(before.stage):
            raise GraphmemError(f"pass {p.name!r} ({p.stage} stage) runs after pass "
                                f"{before.name!r} ({before.stage} stage): the stages run "
                                f"in the order {', '.join(STAGES)}")
        for product in p.reads:
            if product not in have:
                raise GraphmemError(f"pass {p.name!r} reads the {product}, which no earlier "
                                    f"pass provides{_advice(product, p, known)}")
        for product in (*p.reads, *p.uses):
            asked.setdefault(product, p.name)
        for product in p.provides:
            if product in asked and asked[product] != p.name:
                raise GraphmemError(f"pass {p.name!r} provides the {product}, which pass "
                                    f"{asked[product]!r} before it has already read: run "
                                    f"{p.name!r} first")
        have.update(p.provides)


def _advice(product: str, reader: Pass, known: list[Pass]) -> str:
    """": run 'share' before it" (or why nothing can)."""
    makers = [p.name for p in known if product in p.provides and p.name != reader.name]
    if not makers:
        return " (and no pass does)"
    return f": run {' or '.join(map(repr, makers))} before it"


def _listed(products: Sequence[str]) -> str:
    return ", ".join(products) if products else "nothing"
