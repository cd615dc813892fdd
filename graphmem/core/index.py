"""The graph index: a graph's tensors as integer ids, its nodes' reads and writes as arrays.

Inside the planner a tensor is its id here and a node its row: the order check,
liveness, the op pairs, the passes, the plan writer and the validation all work on
these columns (numpy or compiled), and names come back only at the edges (the plan
file, messages). At a million nodes every lookup in a name-keyed dict of a million
entries misses the CPU caches; one pass over the nodes builds the index instead.

``index_graph(graph)`` builds it; the planner builds it once per run and carries it
in its :class:`~graphmem.planning.context.Context`. Nothing is cached on the graph.
"""
from __future__ import annotations

from itertools import chain, count, repeat
from typing import NamedTuple

import numpy as np

from graphmem.core.ir import Graph


class GraphIndex(NamedTuple):
    """Ids, rows and edges of one graph. Row ``k`` is ``graph.nodes[k]``."""

    names: list[str]  # id -> tensor: the arena tensors first, then other node outputs
    arena: int  # ids below this are the arena tensors (Graph.arena_tensors, in order)
    ids: dict[str, int]
    node_index: np.ndarray  # row -> Node.index
    row_of: np.ndarray  # Node.index -> row (-1 for an index that is not a running node)
    read_start: np.ndarray  # rows + 1 bounds into ``reads``
    reads: np.ndarray  # the ids of each row's Node.reads, in order (-1: a weight)
    write_start: np.ndarray  # rows + 1 bounds into ``writes``
    writes: np.ndarray  # the ids of each row's outputs, blanks left out
    inputs: np.ndarray  # ids of the graph inputs that are arena tensors
    outputs: np.ndarray  # ids of the graph outputs that are produced or inputs
    nbytes: np.ndarray | None  # per arena tensor: its bytes (None: one is past int64)

    def rows(self, order) -> np.ndarray:
        """The rows of an order of node indices."""
        return self.row_of[np.asarray(order, dtype=np.int64)]

    def arena_names(self) -> list[str]:
        return self.names if self.arena == len(self.names) else self.names[:self.arena]

    def kinds(self) -> list[str]:
        """Per arena tensor: "input", "output" or "activation" (an input that is also
        an output is an input)."""
        kinds = ["activation"] * self.arena
        for i in self.outputs[self.outputs < self.arena].tolist():
            kinds[i] = "output"
        for i in self.inputs.tolist():
            kinds[i] = "input"
        return kinds

    def producer_rows(self) -> np.ndarray:
        """Per id: the row that writes it (the last such row), -1 for none."""
        out = np.full(len(self.names), -1, dtype=np.int64)
        out[self.writes] = np.repeat(np.arange(len(self.node_index)), np.diff(self.write_start))
        return out


def index_graph(graph: Graph) -> GraphIndex:
    """The :class:`GraphIndex` of ``graph`` (one pass over its nodes)."""
    nodes = graph.nodes
    outs = [n.outputs for n in nodes]
    written = [t for o in outs for t in o if t]
    write_start = _bounds(map(len, outs), len(nodes))
    if write_start[-1] != len(written):  # blank outputs: count per node
        write_start = _bounds((sum(1 for t in o if t) for o in outs), len(nodes))
    static = graph.weights | set(graph.constants)
    inputs = [t for t in graph.inputs if t not in static]
    ids = dict(zip(chain(inputs, written), count()))
    if len(ids) == len(inputs) + len(written) and static.isdisjoint(written):
        # the usual graph: every output written once, none a weight's name
        names, n_arena = inputs + written, len(ids)
        writes = np.arange(len(inputs), n_arena, dtype=np.int64)
    else:
        names = graph.arena_tensors()
        n_arena = len(names)
        ids = dict(zip(names, count()))
        for t in written:  # outputs that are not arena tensors (a weight's name): own ids
            if t not in ids:
                ids[t] = len(names)
                names.append(t)
        writes = np.fromiter(map(ids.__getitem__, written), np.int64, len(written))
    get = ids.get
    read_names = [n.reads for n in nodes]
    read_start = _bounds(map(len, read_names), len(nodes))
    flat = [t for r in read_names for t in r]
    reads = np.fromiter(map(get, flat, repeat(-1)), np.int64, len(flat))
    node_index = np.fromiter((n.index for n in nodes), np.int64, len(nodes))
    row_of = np.full(int(node_index.max(initial=-1)) + 1, -1, dtype=np.int64)
    row_of[node_index] = np.arange(len(nodes))
    arena_inputs = np.fromiter((ids[t] for t in graph.inputs if get(t, n_arena) < n_arena),
                               np.int64)
    outputs = np.fromiter((ids[t] for t in graph.outputs if t in ids), np.int64)
    tensors = graph.tensors
    try:
        nbytes = np.fromiter((tensors[t].bytes for t in names[:n_arena]), np.int64, n_arena)
    except OverflowError:  # a tensor of 2**63 bytes or more: refused later, by name
        nbytes = None
    return GraphIndex(names, n_arena, ids, node_index, row_of, read_start, reads,
                    write_start, writes, arena_inputs, outputs, nbytes)


def _bounds(lengths, n: int) -> np.ndarray:
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(lengths, np.int64, n), out=out[1:])
    return out


def edges_in_order(start: np.ndarray, values: np.ndarray, rows: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The edges of a CSR (``start`` bounds per row into ``values``) in the order of
    ``rows`` (an order's rows: any subset, repeats too): (values, position of each)."""
    lengths = np.diff(start)[rows]
    total = int(lengths.sum())
    pos = np.repeat(np.arange(len(rows)), lengths)
    skip = np.repeat(np.cumsum(lengths) - lengths, lengths)  # edges before each position's
    return values[np.repeat(start[rows], lengths) + np.arange(total) - skip], pos
