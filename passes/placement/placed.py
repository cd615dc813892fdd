"""What every placement algorithm returns (:mod:`graphmem.passes.placement.algorithm`)."""
from __future__ import annotations

from typing import NamedTuple


class Placed(NamedTuple):
    """A placement's result."""

    offsets: dict[int, int]  # item id -> byte offset
    total: int  # the arena's bytes
    strategy: str  # the name of the placement kept
    tried: dict[str, int]  # {placement name: arena bytes} of each one tried
    proof: dict | None = None  # what the exact placements proved (shown in the report)
