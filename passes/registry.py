"""The registry of graphmem's passes, in the order the pipeline runs them (stage by
stage); the CLI's ``--passes reorder,concat,inplace,share,place`` names them."""
from graphmem.passes import concat, inplace, place, reorder, share

PASSES = {p.name: p for p in (reorder.PASS, concat.PASS, inplace.PASS, share.PASS, place.PASS)}
# Every pass runs by default.
DEFAULT_PASSES = tuple(PASSES)
