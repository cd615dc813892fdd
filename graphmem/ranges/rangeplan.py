"""The range plan ``graphmem.rangeplan/1`` as data and JSON text (docs/plan-format.md,
"Range plans"): the free dims' ranges, every tensor's shape, bytes and offset in its
block as formulas, the blocks (storage groups) and, per segment of the box, a stacking
of the blocks."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.plan.format import KINDS
from graphmem.plan.io import write_atomic
from graphmem.ranges.formulas import Formula, aux_parts

FORMAT = "graphmem.rangeplan/1"


def check_in_box(dims: dict, binding: dict) -> None:
    """Refuse (one line) a ``binding`` that leaves out a dim of the box ``dims`` (name ->
    (lo, hi)) or puts it outside its range."""
    for name, (lo, hi) in dims.items():
        if name not in binding:
            raise GraphmemError(f"the range plan needs {name} (a value in {lo}..{hi}); "
                                f"pass --at {name}=VALUE")
        if not lo <= binding[name] <= hi:
            raise GraphmemError(f"{name}={binding[name]} is outside the range plan's "
                                f"{name}={lo}..{hi}")


@record
class RangeTensor:
    """A tensor's formulas, the same in every segment."""

    kind: str
    dtype: str
    shape: tuple  # of Formula
    bytes: Formula


@record
class Placed:
    """A tensor in one segment: its live range in the segment's order, its block and
    its offset inside the block, and its links."""

    live: tuple[int, int]
    block: int
    rel: Formula  # offset inside its block
    alias_of: str | None = None
    alias: str | None = None
    slice_of: str | None = None


@record
class Block:
    """One storage group: its root tensor, whose bytes it has, and its whole life."""

    root: str
    bytes: Formula
    live: tuple[int, int]


@record
class Segment:
    """A box inside the plan's, planned on its own: its execution order, each tensor's
    place (``placed``), its blocks, and their stacking: ``stack`` the block ids bottom
    first, ``below[j]`` the positions in ``stack`` the block at ``j`` sits on."""

    dims: dict
    order: tuple
    placed: dict  # name -> Placed
    blocks: tuple
    stack: tuple
    below: tuple


@record
class RangePlan:
    model: str
    dims: dict  # free dim -> (lo, hi), inclusive
    bindings: dict  # every other dim the model binds -> Formula (a constant when fixed)
    alignment: int
    constants: list
    tensors: dict  # name -> RangeTensor
    segments: list
    weights_bytes: Formula
    target: dict | None = None
    format: str = FORMAT
    # dims the graph computes as floors of divisions of the free ones, named by their
    # arithmetic (``floor((seq - 1)/2)``): the formulas name them too
    aux: tuple = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The names every formula of the plan is over: the free dims, then the computed."""
        return tuple(self.dims) + tuple(self.aux)

    def segment_at(self, binding: dict) -> int:
        """The first segment whose box holds ``binding``; a binding outside the plan's
        box is refused (one line)."""
        check_in_box(self.dims, binding)
        for i, s in enumerate(self.segments):
            if all(lo <= binding[n] <= hi for n, (lo, hi) in s.dims.items()):
                return i
        raise GraphmemError(f"no segment of the range plan holds {binding}")

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        out = {"format": self.format, "model": self.model,
               "dims": {n: list(r) for n, r in self.dims.items()},
               "computed_dims": list(self.aux),
               "bindings": {n: f.to_json() for n, f in self.bindings.items()},
               "alignment": self.alignment, "constants": list(self.constants),
               "weights_bytes": self.weights_bytes.to_json()}
        if self.target is not None:
            out["target"] = dict(self.target)
        out["tensors"] = {name: {"kind": t.kind, "dtype": t.dtype,
                                 "shape": [a.to_json() for a in t.shape],
                                 "bytes": t.bytes.to_json()}
                          for name, t in self.tensors.items()}
        out["segments"] = [_segment_json(s) for s in self.segments]
        return out

    def to_json(self) -> str:
        """The file's text: JSON with one line per tensor and per block (as an ordinary
        plan writes one line per tensor), each entry compact; indenting every formula's
        terms made a file near twice the size."""
        return _text(self.to_dict(), 0) + "\n"

    def save(self, path: str | os.PathLike, *, inputs=()) -> None:
        write_atomic(path, [self.to_json()], inputs=inputs)

    @staticmethod
    def from_dict(d: Any, source: str = "range plan") -> "RangePlan":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise GraphmemError(f"{source}: not a {FORMAT} file")
        try:
            dims = {}
            for n, r in d["dims"].items():
                lo, hi = (_int(v) for v in r)
                if not 0 <= lo <= hi:
                    raise ValueError(f"dims {n!r}: expected [lo, hi] with 0 <= lo <= hi")
                dims[str(n)] = (lo, hi)
            aux = tuple(str(a) for a in d.get("computed_dims", []))
            for a in aux:
                if a in dims or aux_parts(a) is None or not _computed_from(a, dims, aux):
                    raise ValueError(f"computed dim {a!r}: not floor((NAME + B)/C) of a "
                                     f"free dim or an earlier computed one")
            names = tuple(dims) + aux

            def formula(x):
                return Formula.from_json(names, x)
            tensors = {}
            for name, t in d["tensors"].items():
                kind = str(t["kind"])
                if kind not in KINDS:
                    raise ValueError(f"tensor {name!r}: kind {kind!r}")
                tensors[str(name)] = RangeTensor(kind, str(t["dtype"]),
                                                 tuple(formula(a) for a in t["shape"]),
                                                 formula(t["bytes"]))
            segments = [_segment(s, names, tensors) for s in d["segments"]]
            if any(list(s.dims) != list(dims) for s in segments):
                raise ValueError("a segment must give [lo, hi] of every free dim, in order")
            if not segments:
                raise ValueError("no segments")
            target = d.get("target")
            return RangePlan(
                model=str(d["model"]), dims=dims,
                bindings={str(n): formula(f) for n, f in d["bindings"].items()},
                alignment=_int(d["alignment"]),
                constants=[str(c) for c in d["constants"]], tensors=tensors,
                segments=segments, weights_bytes=formula(d["weights_bytes"]),
                target=dict(target) if isinstance(target, dict) else None, aux=aux)
        except KeyError as exc:
            raise GraphmemError(f"{source}: corrupt range plan, missing field "
                                f"{exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise GraphmemError(f"{source}: corrupt range plan ({exc})") from None

    @staticmethod
    def load(path: str | os.PathLike) -> "RangePlan":
        d = read_json(path)
        return RangePlan.from_dict(d, str(path))


def _computed_from(name: str, dims: dict, aux: tuple) -> bool:
    of = aux_parts(name)[0]
    return of in dims or (of in aux and aux.index(of) < aux.index(name))


def _segment_json(s: Segment) -> dict[str, Any]:
    placed = {}
    for name, t in s.placed.items():
        d = {"live": list(t.live), "block": t.block, "offset_in_block": t.rel.to_json()}
        if t.alias_of is not None:
            d["alias_of"], d["alias"] = t.alias_of, t.alias
        if t.slice_of is not None:
            d["slice_of"] = t.slice_of
        placed[name] = d
    return {"dims": {n: list(r) for n, r in s.dims.items()}, "order": list(s.order),
            "blocks": [{"root": b.root, "bytes": b.bytes.to_json(), "live": list(b.live)}
                       for b in s.blocks],
            "stack": [[b, list(below)] for b, below in zip(s.stack, s.below)],
            "tensors": placed}


def _segment(s: Any, names: tuple, tensors: dict) -> Segment:
    sdims = {str(n): tuple(_int(v) for v in r) for n, r in s["dims"].items()}
    if list(sdims) != [n for n in names if aux_parts(n) is None] or any(len(r) != 2 for r in sdims.values()):
        raise ValueError("a segment must give [lo, hi] of every free dim, in the plan's order")
    blocks = tuple(Block(str(b["root"]), Formula.from_json(names, b["bytes"]),
                         _live(b["live"])) for b in s["blocks"])
    placed = {}
    for name, t in s["tensors"].items():
        block = _int(t["block"])
        if not 0 <= block < len(blocks):
            raise ValueError(f"tensor {name!r}: block {block} out of range")
        placed[str(name)] = Placed(_live(t["live"]), block,
                                   Formula.from_json(names, t["offset_in_block"]),
                                   _opt(t.get("alias_of")), _opt(t.get("alias")),
                                   _opt(t.get("slice_of")))
    if set(placed) != set(tensors):
        raise ValueError("a segment must place every tensor of the plan")
    stack = tuple(_int(b) for b, _ in s["stack"])
    if sorted(stack) != list(range(len(blocks))):
        raise ValueError("a segment's stack must hold every block once")
    below = tuple(tuple(_int(i) for i in bl) for _, bl in s["stack"])
    return Segment(sdims, tuple(_int(i) for i in s["order"]), placed, blocks, stack, below)


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's data, every failure one line."""
    p = Path(path)
    if not p.is_file():
        raise GraphmemError(f"{p}: no such plan file")
    try:
        return json.loads(p.read_bytes())
    except (ValueError, UnicodeDecodeError, RecursionError, OSError) as exc:
        raise GraphmemError(f"{p}: not a JSON plan file ({str(exc).splitlines()[0]})") from None


def is_range_plan(path: str | os.PathLike) -> bool:
    """Does the file at ``path`` say it is a range plan? (Read cheaply: the format is
    among the first keys graphmem writes.) Only a regular file is opened: a FIFO, a
    device or a folder is not one, and the plan reader says what it is instead (opening
    a FIFO would wait for a writer)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return FORMAT.encode() in head


def _int(v) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"expected an integer, not {v!r}"[:80])
    return v


def _live(v) -> tuple[int, int]:
    if not (isinstance(v, list) and len(v) == 2):
        raise ValueError("live must be [first, last]")
    return _int(v[0]), _int(v[1])


def _opt(v) -> str | None:
    if v is not None and not isinstance(v, str):
        raise ValueError(f"expected a name, not {v!r}"[:80])
    return v


def _text(value: Any, depth: int) -> str:
    """``value`` as JSON: the plan, its segments and their maps and lists of entries one
    item per line (the top two levels, and a segment's two), each entry compact."""
    pad = " " * (depth + 1)
    if depth <= 3 and isinstance(value, dict) and value and (
            depth < 2 or any(isinstance(v, (dict, list)) for v in value.values())):
        items = [f"{pad}{json.dumps(k)}: {_text(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if depth <= 3 and isinstance(value, list) and value and all(
            isinstance(v, dict) for v in value):
        items = [f"{pad}{_text(v, depth + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"
    return json.dumps(value, separators=(", ", ": "))
