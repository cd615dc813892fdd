"""The plan file ``graphmem.plan/1`` as data: one :class:`TensorPlan` per arena tensor,
the :class:`Plan` around them, and their JSON text (written and parsed here, nothing
else). The rules a plan must keep are in :mod:`graphmem.plan.validate`.
"""
from __future__ import annotations

import json
import os
from dataclasses import field
from itertools import islice, repeat
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, Iterator

from graphmem.core.ir import from_columns
from graphmem.core.nogc import gc_paused
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.plan.io import write_atomic

# json.dumps of a str, without its dispatch (ensure_ascii: the same text)
_quote = encode_basestring_ascii

FORMAT = "graphmem.plan/1"
KINDS = ("input", "output", "activation")


@record(slots=True)  # slots: no __dict__ in each of a plan's many tensors
class TensorPlan:
    kind: str
    bytes: int
    offset: int
    live: tuple[int, int]
    alias_of: str | None = None
    alias: str | None = None  # "view" | "inplace"
    slice_of: str | None = None
    # issue 53: symbol -> bound, for a tensor whose size the data decides (planned at
    # the bounds; the actual tensor occupies the first bytes of its slot)
    bounded_by: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "bytes": self.bytes, "offset": self.offset,
                               "live": list(self.live)}
        if self.alias_of is not None:
            out["alias_of"] = self.alias_of
            out["alias"] = self.alias
        if self.slice_of is not None:
            out["slice_of"] = self.slice_of
        if self.bounded_by is not None:
            out["bounded_by"] = dict(self.bounded_by)
        return out


_ALIAS_TEXT = {"view": '"view"', "inplace": '"inplace"', None: "null"}


def _tensor_line(item: tuple[str, TensorPlan]) -> str:
    """``    "name": {...}`` exactly as ``json.dumps(name)`` and ``json.dumps(t.to_json())``
    write it, without building the dict: the plan writer's inner loop (a million tensors)."""
    name, t = item
    line = (f'    {_quote(name)}: {{"kind": {_quote(t.kind)}, "bytes": {int(t.bytes)}, '
            f'"offset": {int(t.offset)}, "live": [{int(t.live[0])}, {int(t.live[1])}]')
    if t.alias_of is not None:
        kind = _ALIAS_TEXT.get(t.alias) or json.dumps(t.alias)
        line += f', "alias_of": {_quote(t.alias_of)}, "alias": {kind}'
    if t.slice_of is not None:
        line += f', "slice_of": {_quote(t.slice_of)}'
    if t.bounded_by is not None:
        line += f', "bounded_by": {json.dumps(t.bounded_by)}'
    return line + "}"


def tensor_plans(kind, nbytes, offset, live, alias_of, alias, slice_of,
                 bounded_by=None) -> list[TensorPlan]:
    """``list(map(TensorPlan, kind, nbytes, ...))`` for columns of equal length, made
    field by field (:func:`~graphmem.core.ir.from_columns`, which skips the per-object
    ``__init__`` call; tests/test_zoo_plan.py compares the objects)."""
    return from_columns(TensorPlan, len(kind), kind=kind, bytes=nbytes, offset=offset,
                        live=live, alias_of=alias_of, alias=alias, slice_of=slice_of,
                        bounded_by=repeat(None, len(kind)) if bounded_by is None
                        else bounded_by)


assert not hasattr(TensorPlan, "__post_init__")  # from_columns would not run it


@record
class Plan:
    model: str
    bindings: dict[str, int]
    alignment: int
    order: list[int]
    constants: list[str]
    arena_bytes: int
    tensors: dict[str, TensorPlan]
    passes: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    format: str = FORMAT
    # optional: the runtime, provider and in-place table the plan trusted
    target: dict[str, str] | None = None
    # the plans of the control-flow nodes' bodies (nested scopes); none without them
    scopes: tuple["ScopePlan", ...] = ()
    # the digest of the graph the plan was made for (graphmem.plan.graph_digest); None
    # in a plan written before graphmem recorded it, and in a body's plan
    graph: str | None = None
    # issue 53: the bounded symbols (name -> bound, proven, op, node, tensor); none
    # without a size that depends on the data
    bounds: dict[str, dict[str, Any]] | None = None

    def storage_root(self, name: str) -> str:
        """The tensor whose bytes ``name`` lives in: its ``alias_of`` / ``slice_of``
        links followed to a tensor that has neither (``name`` itself if it has none)."""
        t = self.tensors[name]
        while t.alias_of or t.slice_of:
            name = t.alias_of or t.slice_of
            t = self.tensors[name]
        return name

    # ------------------------------------------------------------------ JSON
    def to_dict(self, *, tensors: bool = True) -> dict[str, Any]:
        """The plan as JSON data; without ``tensors``, their entry is an empty
        placeholder (``to_json`` writes them line by line)."""
        out = {"format": self.format, "model": self.model}
        if self.graph is not None:
            out["graph"] = self.graph
        out |= {
            "bindings": dict(self.bindings),
            "alignment": self.alignment, "order": list(self.order),
            "constants": list(self.constants), "arena_bytes": self.arena_bytes,
            "tensors": ({name: t.to_json() for name, t in self.tensors.items()}
                        if tensors else {}),
            "passes": [dict(p) for p in self.passes], "stats": dict(self.stats),
        }
        if self.target is not None:
            out["target"] = dict(self.target)
        if self.scopes:
            out["scopes"] = [s.to_dict() for s in self.scopes]
        if self.bounds:
            out["bounds"] = {k: dict(v) for k, v in self.bounds.items()}
        return out

    def to_json(self) -> str:
        """Deterministic JSON text: one tensor per line, stable key order."""
        return "".join(self.json_chunks())

    def json_chunks(self, batch: int = 8192) -> Iterator[str]:
        """The text of :meth:`to_json` in pieces (``batch`` tensor lines each), for
        writing a large plan without holding its whole text twice."""
        d = self.to_dict(tensors=False)
        keys = list(d)
        yield "{\n"
        for i, k in enumerate(keys):
            comma = "," if i < len(keys) - 1 else ""
            if k != "tensors":
                yield f"  {json.dumps(k)}: {json.dumps(d[k])}{comma}\n"
            elif not self.tensors:
                yield f'  "tensors": {{}}{comma}\n'
            else:
                yield '  "tensors": {\n'
                items = iter(self.tensors.items())
                part = list(islice(items, batch))
                while part:
                    after = list(islice(items, batch))
                    yield ",\n".join(map(_tensor_line, part)) + (",\n" if after else "\n")
                    part = after
                yield f"  }}{comma}\n"
        yield "}\n"

    @gc_paused  # a million tensors' text makes the collector re-scan the heap
    def save(self, path: str | os.PathLike, *, inputs=()) -> None:
        """Write whole (:func:`~graphmem.plan.io.write_atomic`), streamed; ``inputs``:
        the files the command read, which ``path`` must not be."""
        write_atomic(path, self.json_chunks(), inputs=inputs)

    @staticmethod
    def from_dict(d: Any, source: str = "plan") -> "Plan":
        """Parse a plan object, refusing any other format or a malformed file."""
        if not isinstance(d, dict):
            raise GraphmemError(f"{source}: not a graphmem plan (expected a JSON object)")
        fmt = d.get("format")
        if fmt != FORMAT:
            raise GraphmemError(f"{source}: unknown plan format {fmt!r} (expected {FORMAT!r})")
        try:
            tensors = {}
            for name, t in d["tensors"].items():
                live = t["live"]
                if not (isinstance(live, list) and len(live) == 2):
                    raise ValueError(f"tensor {name!r}: live must be [first, last]")
                tensors[str(name)] = TensorPlan(
                    kind=_str(t["kind"], "kind"), bytes=_int(t["bytes"]),
                    offset=_int(t["offset"]), live=(_int(live[0]), _int(live[1])),
                    alias_of=_name(t.get("alias_of"), "alias_of"),
                    alias=_name(t.get("alias"), "alias"),
                    slice_of=_name(t.get("slice_of"), "slice_of"),
                    bounded_by=_bounded_by(t.get("bounded_by"), name))
            passes = d.get("passes", [])
            if not (isinstance(passes, list) and all(isinstance(p, dict) for p in passes)):
                raise ValueError("passes must be a list of objects")
            for p in passes:  # what the report and the exports read of each
                if not isinstance(p.get("name", ""), str):
                    raise ValueError(f"a pass's name must be a string, not {_short(p['name'])}")
                if p.get("bytes_saved") is not None:
                    _int(p["bytes_saved"])
            target = d.get("target")
            if target is not None and not (isinstance(target, dict) and all(
                    isinstance(k, str) and isinstance(v, str) for k, v in target.items())):
                raise ValueError("target must be an object of strings")
            graph = d.get("graph")
            if graph is not None and not isinstance(graph, str):
                raise ValueError(f"graph must be a string, not {_short(graph)}")
            scopes = tuple(ScopePlan.from_dict(s, d, i, source) for i, s in enumerate(
                _list(d.get("scopes", []), "scopes")))
            return Plan(model=str(d["model"]),
                        bindings={str(k): _int(v) for k, v in d["bindings"].items()},
                        alignment=_int(d["alignment"]), order=[_int(i) for i in d["order"]],
                        constants=[_str(c, "constants") for c in d["constants"]],
                        arena_bytes=_int(d["arena_bytes"]), tensors=tensors,
                        passes=[dict(p) for p in passes],
                        stats=_stats(d.get("stats", {})),
                        target=dict(target) if target is not None else None,
                        scopes=scopes, graph=graph, bounds=_bounds(d.get("bounds")))
        except KeyError as exc:
            raise GraphmemError(f"{source}: corrupt plan, missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise GraphmemError(f"{source}: corrupt plan ({exc})") from None

    @staticmethod
    def load(path: str | os.PathLike, max_bytes: int | None = None) -> "Plan":
        """Read a plan file; ``max_bytes``: refuse a larger file before parsing it (a
        plan's size follows from its model: see ``commands.common.read_plan``)."""
        p = Path(path)
        if not p.is_file():
            raise GraphmemError(f"{p}: {_not_a_file(p)}")
        if max_bytes is not None and p.stat().st_size > max_bytes:
            raise GraphmemError(f"{p}: {p.stat().st_size:,} bytes, more than any plan for "
                                f"this model needs ({max_bytes:,}); not read")
        try:
            text = p.read_bytes()
        except OSError as exc:
            raise GraphmemError(f"{p}: cannot read ({exc.strerror or exc})") from None
        return Plan.parse(text, str(p), what="a JSON plan file")

    @staticmethod
    def parse(text: str | bytes, source: str, max_bytes: int | None = None,
              what: str = "a JSON plan") -> "Plan":
        """A plan from its JSON text (a file's, or the one an annotated model carries):
        every way the text can be hostile (too large, not UTF-8, nested too deeply, an
        integer of thousands of digits, fields of the wrong type) is one GraphmemError
        naming ``source``."""
        if max_bytes is not None and len(text) > max_bytes:
            raise GraphmemError(f"{source}: a plan of {len(text):,} bytes, more than any "
                                f"plan for this model needs ({max_bytes:,}); not read")
        try:
            d = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, huge integers
            raise GraphmemError(f"{source}: not {what} ({_first_line(exc)})") from None
        except RecursionError:
            raise GraphmemError(f"{source}: not {what} (nested too deeply)") from None
        return Plan.from_dict(d, source)


# The fields of a scope's plan that it takes from the plan around it
_INHERITED = ("format", "model", "bindings", "alignment", "target")


@record
class ScopePlan:
    """The plan of one body of a control-flow node: ``plan`` is a plan of the body's
    graph (order, tensors with offsets inside the body's own arena, stats, and its own
    nested scopes), whose arena lies inside the enclosing plan's tensor ``workspace``:
    a body tensor's place in the one arena is the workspace's offset plus its own."""

    node: int  # the control-flow node's index in the enclosing graph's node list
    attr: str  # "body", "then_branch" or "else_branch"
    workspace: str
    plan: "Plan"

    def to_dict(self) -> dict[str, Any]:
        inner = {k: v for k, v in self.plan.to_dict().items()
                 if k not in _INHERITED and k != "graph"}  # the outer digest covers it
        return {"node": self.node, "attr": self.attr, "workspace": self.workspace, **inner}

    @staticmethod
    def from_dict(d: Any, outer: dict, i: int, source: str = "plan") -> "ScopePlan":
        if not isinstance(d, dict):
            raise ValueError(f"scopes[{i}] must be an object")
        inner = {**{k: outer[k] for k in _INHERITED if k in outer}, **d}
        inner.pop("graph", None)  # the outer plan's digest covers the bodies
        return ScopePlan(node=_int(d["node"]), attr=_str(d["attr"], "attr"),
                         workspace=_str(d["workspace"], "workspace"),
                         plan=Plan.from_dict(inner, f"{source}: scopes[{i}]"))


# Stats keys renamed since graphmem.plan/1 was first written: old name -> new name. A
# plan that carries an old name is read under the new one (and checked under it).
RENAMED_STATS = {"lower_bound_bytes": "unaliased_peak_bytes"}


def _stats(d: Any) -> dict[str, int]:
    """A plan's ``stats``, old key names read as their new ones (:data:`RENAMED_STATS`);
    where a file has both, the new one is kept."""
    if not isinstance(d, dict):
        raise ValueError(f"stats must be an object, not {_short(d)}")
    out = {str(k): _int(v) for k, v in d.items()}
    for old, new in RENAMED_STATS.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


def _bounded_by(v: Any, name: str) -> dict[str, int] | None:
    """A tensor's ``bounded_by``: symbol -> bound (issue 53), or absent."""
    if v is None:
        return None
    if not isinstance(v, dict) or not v:
        raise ValueError(f"tensor {name!r}: bounded_by must be an object of symbol: bound")
    return {_str(k, "bounded_by"): _int(b) for k, b in v.items()}


def _bounds(v: Any) -> dict[str, dict[str, Any]] | None:
    """The plan's ``bounds``: symbol -> {bound, proven, op, node, tensor} (issue 53)."""
    if v is None:
        return None
    if not isinstance(v, dict) or not all(isinstance(s, dict) and "bound" in s
                                          for s in v.values()):
        raise ValueError("bounds must be an object of symbol: {bound, ...}")
    for s in v.values():
        _int(s["bound"])
    return {str(k): dict(s) for k, s in v.items()}


def _list(v: Any, field: str) -> list:
    if not isinstance(v, list):
        raise ValueError(f"{field} must be a list, not {_short(v)}")
    return v


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, got {_short(v)}")
    return v


def _str(v: Any, field: str) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{field} must be a string, not {_short(v)}")
    return v


def _name(v: Any, field: str) -> str | None:
    """A tensor name or an alias kind: a string, or absent."""
    return None if v is None else _str(v, field)


def _short(v: Any) -> str:
    """``repr(v)`` cut to a line's worth (a hostile value may be huge)."""
    text = repr(v) if not isinstance(v, int) or v.bit_length() < 256 else f"an integer of {v.bit_length()} bits"
    return text if len(text) <= 60 else text[:57] + "..."


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _not_a_file(p: Path) -> str:
    """What ``p``, not a regular file, is (for the one line that refuses it as a plan)."""
    import stat
    try:
        mode = p.stat().st_mode
    except OSError:
        return "no such plan file"
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return f"is {kind}, not a plan file; give a plan file (graphmem plan -o FILE)"
