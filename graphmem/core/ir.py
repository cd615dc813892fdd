"""graphmem's own graph IR: plain frozen data, no onnx types past the loader."""
from __future__ import annotations

from collections import deque
from dataclasses import field, fields
from itertools import repeat
from math import prod
from typing import Any, Iterable, Mapping, NamedTuple

from graphmem.core.records import record

# The standard ONNX operator domain, by either of its names.
STANDARD_DOMAINS = frozenset(("", "ai.onnx"))


# The control-flow ops whose bodies graphmem plans as nested scopes
CONTROL_FLOW = frozenset(("If", "Loop", "Scan"))


def standard_domain(domain: str) -> bool:
    """Is ``domain`` (of a node or an opset import) the standard ONNX domain?"""
    return domain in STANDARD_DOMAINS


def from_columns(cls, count: int, **columns: Iterable) -> list:
    """``[cls(**row) for row in rows]`` for a frozen slots dataclass, given one column
    per field, derived fields too (``__post_init__`` is not run), made field by field: each column is stored by a C-level map over the field's slot, where
    the dataclass ``__init__`` makes a Python-level call per field and object (a
    million objects: about three times faster). The objects are equal to those."""
    names = [f.name for f in fields(cls)]
    if set(columns) != set(names):
        raise ValueError(f"from_columns({cls.__name__}): columns {sorted(columns)}, "
                         f"fields {names}")
    out = list(map(object.__new__, repeat(cls, count)))
    for name in names:
        column = columns[name]
        if hasattr(column, "__len__") and len(column) != count:
            raise ValueError(f"from_columns({cls.__name__}): the {name} column has "
                             f"{len(column)} values, not {count}")
        deque(map(getattr(cls, name).__set__, out, column), maxlen=0)
    return out


@record(slots=True)  # slots: a large graph holds a million of these
class Tensor:
    """A value of the graph with a fully known static shape."""

    name: str
    dtype: str  # numpy-style name: "float32", "int64", "bool", "bfloat16", ...
    shape: tuple[int, ...]
    bits: int  # bits per element (4 for int4, 8 for int8, 32 for float32)
    # dense size in bytes (sub-byte types round up to whole bytes); computed once
    # here, since every stage of planning asks for it
    bytes: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bytes", (prod(self.shape) * self.bits + 7) // 8)

    @property
    def numel(self) -> int:
        return prod(self.shape)  # prod(()) == 1: a scalar is one element


@record(slots=True)
class Node:
    """One operator. ``index`` is its position in the model's top-level ``graph.node``."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]  # "" marks an omitted optional input
    outputs: tuple[str, ...]  # "" marks an omitted optional output
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # Outer-scope tensors read by subgraphs (If/Loop/Scan bodies): they must stay
    # alive until this node has run, like ordinary inputs.
    implicit_inputs: tuple[str, ...] = ()

    @property
    def reads(self) -> tuple[str, ...]:
        """Every tensor this node reads, explicit and implicit, without blanks."""
        if "" not in self.inputs and not self.implicit_inputs:
            return self.inputs  # the common case, without building a new tuple
        return tuple(t for t in self.inputs if t) + self.implicit_inputs

    @property
    def label(self) -> str:
        return f"node {self.index} ({self.op_type}{' ' + repr(self.name) if self.name else ''})"


class Sizing(NamedTuple):
    """One shape strategy that ran at load (graphmem/frontend/shape_strategies.py)."""
    strategy: str
    count: int  # the tensors it newly sized
    tensors: tuple[str, ...]  # their names; () for the first (it sizes them all)


@record
class Graph:
    """A loaded model: the nodes that run, and every tensor's static type.

    ``nodes`` holds only the nodes that run at inference time; nodes whose outputs
    are all folded constants are in ``folded_nodes`` instead.
    """

    name: str
    nodes: tuple[Node, ...]
    tensors: Mapping[str, Tensor]  # every tensor, weights and constants included
    inputs: tuple[str, ...]  # graph inputs that are not initializers
    outputs: tuple[str, ...]
    weights: frozenset[str]  # initializers
    constants: tuple[str, ...]  # folded at plan time, in production order
    folded_nodes: tuple[int, ...] = ()
    opset: int = 0
    model_path: str | None = None
    node_count: int = 0  # len(graph.node) in the file, folded nodes included
    # every symbolic dimension bound at load time (by --dim or --dim-default)
    bindings: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)
    # the bodies of the control-flow nodes (If/Loop/Scan), by the node's index: each a
    # nested scope planned on its own (graphmem/planning/scopes.py)
    scopes: Mapping[int, tuple["Scope", ...]] = field(default_factory=dict, compare=False,
                                                     hash=False)
    # node index -> the name of the workspace tensor it writes, once the workspaces are
    # added (graphmem/core/scopes.py); empty in a graph as loaded
    workspaces: Mapping[int, str] = field(default_factory=dict, compare=False, hash=False)
    # a folded constant computed through a weight's dequantization -> the stored tensors
    # it is made from (graphmem/frontend/stored_weights.py): weights count as stored
    stored_as: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False,
                                                    hash=False)
    # how the loader sized the tensors: each shape strategy that ran, in order
    sizing: tuple[Sizing, ...] = field(default=(), compare=False, hash=False)
    # what the loader caught and went on past (printed as notes when it loads)
    load_notes: tuple[str, ...] = field(default=(), compare=False, hash=False)
    # issue 53: the sizes that depend on the data, planned at upper bounds: a
    # graphmem.frontend.data_bounds.DataBounds (its symbols, and tensor -> the symbols
    # its size may depend on), None where the model has none
    data_bounds: object = field(default=None, compare=False, hash=False)

    def producers(self) -> dict[str, Node]:
        return {t: n for n in self.nodes for t in n.outputs if t}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for t in dict.fromkeys(n.reads):
                out.setdefault(t, []).append(n)
        return out

    def arena_tensors(self) -> list[str]:
        """The tensors a plan places: graph inputs, then node outputs in file order.

        Weights and folded constants are not arena tensors.
        """
        static = self.weights | set(self.constants)
        names = [t for t in self.inputs if t not in static]
        seen = set(names)
        for n in self.nodes:
            for t in n.outputs:
                if t and t not in seen and t not in static:
                    seen.add(t)
                    names.append(t)
        return names

    def weight_names(self) -> list[str]:
        """Initializers and folded constants that running nodes read (or that are outputs).

        Shape tensors that only fed folded nodes are not counted: a runtime needs to
        hold only what the remaining nodes read.
        """
        static = self.weights | set(self.constants)
        used = dict.fromkeys(t for n in self.nodes for t in n.reads if t in static)
        used.update(dict.fromkeys(t for t in self.outputs if t in static))
        names = [t for t in used if t in self.tensors]
        if self.scopes:
            names += [t for t in self.body_weights() if t not in set(names)]
        return names

    def stored_weight_names(self) -> list[str]:
        """:meth:`weight_names` with each dequantized constant replaced by the tensors the
        file stores it as (``stored_as``: an int8 weight, its scale and zero point)."""
        names = self.weight_names()
        if not self.stored_as:
            return names
        out: dict[str, None] = {}
        for t in names:
            out.update(dict.fromkeys(self.stored_as.get(t, (t,))))
        return list(out)

    def weight_bytes(self) -> int:
        """Bytes of the weights running nodes read, as the file stores them."""
        body = self.body_weights() if self.scopes else {}
        return sum((self.tensors.get(t) or body[t]).bytes for t in self.stored_weight_names())

    def dequantized_bytes(self) -> int:
        """Bytes of the float weights folding dequantizes (0 without quantized weights)."""
        return sum(self.tensors[t].bytes for t in self.weight_names() if t in self.stored_as)

    def body_weights(self) -> dict[str, "Tensor"]:
        """The initializers of the control-flow bodies (nested ones too) that their nodes
        read: weights held as long as the model, like the graph's own."""
        out: dict[str, Tensor] = {}
        for scopes in self.scopes.values():
            for s in scopes:
                body = s.graph
                outer = set(s.outer)
                for t in body.weight_names():
                    if t not in outer and t in body.tensors:
                        out.setdefault(t, body.tensors[t])
                out.update({k: v for k, v in body.body_weights().items() if k not in out})
        return out


@record
class Scope:
    """One body of a control-flow node (a Loop's or Scan's ``body``, an If's
    ``then_branch`` or ``else_branch``) as a graph of its own.

    ``graph.inputs`` are the body's formal inputs; ``graph.outputs`` its formal outputs
    followed by the formal inputs not among them: a formal input stays alive to the
    end of the body, so that copying the outputs into the inputs for the next iteration
    never lands on bytes still to be read. ``graph.weights`` holds the body's own
    initializers and the names it reads from enclosing scopes (``outer``): neither is
    a tensor of the body's arena. ``graph.tensors`` types both.
    """

    node: int  # the control-flow node's index in the enclosing graph
    attr: str  # "body", "then_branch" or "else_branch"
    graph: Graph
    formal_inputs: tuple[str, ...]
    formal_outputs: tuple[str, ...]
    outer: tuple[str, ...]
