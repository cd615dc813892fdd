"""graphmem's passes. Each is ``run(ctx, assignment) -> (assignment, detail)``.

``PASSES`` maps the names used by the CLI (``--passes inplace,share,place``) to
the functions, in the order the default pipeline runs them.
"""
from .inplace import run as inplace
from .place import run as place
from .share import run as share

PASSES = {
    "inplace": inplace,
    "share": share,
    "place": place,
}

__all__ = ["PASSES", "inplace", "share", "place"]
