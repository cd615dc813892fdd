"""graphmem's passes. Each is ``run(ctx, assignment) -> (assignment, detail)``.

``PASSES`` maps the names used by the CLI (``--passes reorder,concat,inplace,share,place``) to
the functions, in the order the default pipeline runs them.
"""
from graphmem.passes.concat import run as concat
from graphmem.passes.inplace import run as inplace
from graphmem.passes.place import run as place
from graphmem.passes.reorder import run as reorder
from graphmem.passes.share import run as share

PASSES = {
    "reorder": reorder,
    "concat": concat,
    "inplace": inplace,
    "share": share,
    "place": place,
}

__all__ = ["PASSES", "reorder", "concat", "inplace", "share", "place"]
