"""Per-op tables: which ops are views, which may overwrite an input, which concatenate.

The passes, the validation and the verifier contain no op names; they ask this module.
Deny by default: an op not listed here never shares storage with its inputs.

- ``VIEW``: output ``out`` is the data of input ``in`` unchanged (same bytes, same
  layout). It may share storage even when the input has other readers later.
- ``ELEMENTWISE``: the element-wise ops whose output graphmem could write over an input
  (input ``in``, output ``out``) -- candidates, not a table any plan trusts.
- ``INPLACE_TABLES``: per ONNX Runtime execution provider, the overwrite pairs a plan
  trusts. Whether a kernel may write its output over its input is the kernel's
  property, so each provider's default table ("cpu", "cuda") holds only the candidates
  with evidence from that provider's kernel sources (``inplace_evidence.json``, made by
  ``tools/upstream/inplace_evidence.py``): the kernel's own ``MayInplace(i, o)``/``Alias(i, o)``
  declaration, or a reviewed reading of its source showing each output element is
  written after the reads it depends on (:func:`evidence`). The "probed" tables
  ("cpu-probed", "cuda-probed") add every other candidate: entries no kernel declares,
  which ``graphmem probe`` checks on this machine; a user opts in with
  ``--inplace-table probed``, never by default. A pair of these tables is a candidate
  only: when a plan may use it (the dtype and shape, the lives of the storage group) is
  the in-place rule of docs/plan-format.md.
"""
from __future__ import annotations

import json
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple

import numpy as np

from graphmem.core.index import GraphIndex
from graphmem.core.ir import Graph, Node, standard_domain
from graphmem.errors import GraphmemError

# op_type -> list of (input index, output index); standard ONNX domain only.
VIEW: dict[str, list[tuple[int, int]]] = {
    "Reshape": [(0, 0)],
    "Flatten": [(0, 0)],
    "Squeeze": [(0, 0)],
    "Unsqueeze": [(0, 0)],
    "Identity": [(0, 0)],
    "Dropout": [(0, 0)],  # inference: the output is the input; the mask is separate
}

_UNARY = [
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "Sigmoid",
    "HardSigmoid", "HardSwish", "Tanh", "Softplus", "Softsign", "Exp", "Log", "Abs", "Neg",
    "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Erf", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Clip", "Not",
    "Mish", "Shrink",
]
_BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "BitShift", "Mod"]
_VARIADIC = ["Max", "Min", "Mean", "Sum"]

# The element-wise candidates: op -> (input, output) pairs graphmem could write over.
ELEMENTWISE: dict[str, list[tuple[int, int]]] = {op: [(0, 0)] for op in _UNARY}
# Binary and variadic element-wise ops may overwrite any input of the output's size
# (a variadic op's first 8 inputs).
ELEMENTWISE.update({op: [(0, 0), (1, 0)] for op in _BINARY})
ELEMENTWISE.update({op: [(i, 0) for i in range(8)] for op in _VARIADIC})
# Inference BatchNormalization is y = x * scale' + bias' per element.
ELEMENTWISE["BatchNormalization"] = [(0, 0)]
# Not element-wise, but each output element is its data element or an update: the
# scatters may write over their data input (input 0), which training graphs fill with
# zeros for a MaxPool adjoint (ScatterND) and let die there.
ELEMENTWISE.update({"ScatterND": [(0, 0)], "ScatterElements": [(0, 0)]})

# Row-wise ops: each output row (along the op's axis) is computed from the same row of
# the input alone. A kernel that reads the whole row before it writes any of it may write
# its output over its input; candidates as ELEMENTWISE's are (a pair enters a default
# table only with evidence), and the probed tables hold only the pairs with evidence.
ROWWISE: dict[str, list[tuple[int, int]]] = {"Softmax": [(0, 0)], "LogSoftmax": [(0, 0)]}

# Element-wise ops in no table, not even a probed one, that ``graphmem probe`` still
# runs in place, so that a user sees why. Gelu: ONNX Runtime's CPU kernel
# (onnxruntime/core/providers/cpu/tensor/gelu.cc) declares no MayInplace, and it writes
# its output before it has read all of its input: run in place it gives wrong results
# on AMD x86-64 CPUs (max abs diff 0.26, issue 20). (The CUDA Gelu kernel does declare
# MayInplace(0, 0): see the evidence file; graphmem leaves Gelu out there too.)
PROBE_CANDIDATES: dict[str, list[tuple[int, int]]] = {"Gelu": [(0, 0)]}

# The fused ops of ONNX Runtime's optimizers (contrib domains, keyed "domain:op") whose
# kernels may write an output over an input: a Conv's fused "sum" (the residual add)
# into its output, a past key/value buffer into the present one, QuickGelu's input.
# Candidates as ELEMENTWISE's are: a pair enters a table only with evidence.
FUSED: dict[str, list[tuple[int, int]]] = {
    "com.microsoft:FusedConv": [(3, 0)],
    "com.microsoft.nchwc:Conv": [(3, 0)],
    "com.microsoft:QuickGelu": [(0, 0)],
    "com.microsoft:Attention": [(4, 1)],
    "com.microsoft:GroupQueryAttention": [(3, 1), (4, 2)],
    "com.microsoft:SparseAttention": [(3, 1), (4, 2)],
}
# ... and the element type an op's pairs are for, where its kernels differ by type
# (a contrib op keyed "domain:op"): CPU FusedConv declares MayInplace(3, 0) for float only
# (its MLFloat16 kernel, built with MLAS's fp16 vector intrinsics, declares none and adds
# the sum after writing); CPU Softmax and LogSoftmax declare MayInplace(0, 0) on their
# float kernels, not on the double ones.
PAIR_DTYPE: dict[str, str] = {"com.microsoft:FusedConv": "float32", "Softmax": "float32",
                              "LogSoftmax": "float32"}

PROVIDERS = ("cpu", "cuda")
PROBED = "probed"  # the suffix of the probed tables: "cpu-probed", "cuda-probed"
_EVIDENCE_FILE = Path(__file__).with_name("inplace_evidence.json")


@lru_cache(maxsize=1)
def evidence_file() -> dict:
    """The evidence file (``inplace_evidence.json``): the ONNX Runtime source it was read
    from, and per provider and op the evidence of each pair. A file that is missing or
    unreadable is an error, not an empty table: every default table is made from it."""
    try:
        with open(_EVIDENCE_FILE, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise GraphmemError(f"cannot read the in-place evidence file {_EVIDENCE_FILE} "
                            f"({exc.strerror or exc}): graphmem's install is incomplete "
                            "(the file is part of the package, made by "
                            "tools/upstream/inplace_evidence.py)") from None
    except ValueError as exc:  # not JSON, or not UTF-8
        raise GraphmemError(f"the in-place evidence file {_EVIDENCE_FILE} is not valid "
                            f"JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("providers"), dict):
        raise GraphmemError(f"the in-place evidence file {_EVIDENCE_FILE} has no "
                            "\"providers\" object")
    return data


def evidence(provider: str, op: str) -> list[dict]:
    """The evidence that ``provider``'s kernel for ``op`` may write output over input:
    one dict per pair, ``kind`` "declared" (the kernel's ``MayInplace``/``Alias``, with
    ``file``, ``line`` and ``text``) or "source" (a reviewed reading of the kernel:
    ``file``, ``line``, ``function``, ``why``); empty when there is none."""
    entry = evidence_file()["providers"].get(provider, {}).get(op)
    return list(entry["evidence"]) if entry else []


def _default_table(provider: str) -> dict[str, list[tuple[int, int]]]:
    """The candidates of :data:`ELEMENTWISE`, :data:`ROWWISE` and :data:`FUSED` with
    evidence for ``provider``'s kernels."""
    table = {}
    for op, pairs in {**ELEMENTWISE, **ROWWISE, **FUSED}.items():
        backed = {tuple(e["pair"]) for e in evidence(provider, op)}
        kept = [p for p in pairs if p in backed]
        if kept:
            table[op] = kept
    return table


# provider (or "provider-probed") -> op -> overwrite pairs. The default tables hold only
# entries with evidence; the probed ones every candidate (see the module docstring).
INPLACE_TABLES: dict[str, dict[str, list[tuple[int, int]]]] = {}
for _p in PROVIDERS:
    INPLACE_TABLES[_p] = _default_table(_p)
    INPLACE_TABLES[f"{_p}-{PROBED}"] = {
        **{op: list(pairs) for op, pairs in ELEMENTWISE.items()},
        **{op: pairs for op, pairs in INPLACE_TABLES[_p].items()
           if op in FUSED or op in ROWWISE}}
DEFAULT_TABLE = "cpu"
# The CPU provider's default table (kept under its old name).
OVERWRITE = INPLACE_TABLES["cpu"]


def table_key(provider: str, which: str = "default") -> str:
    """The :data:`INPLACE_TABLES` key of ``provider``'s ``which`` ("default" or "probed")
    table."""
    if which not in ("default", PROBED):
        raise ValueError(f"no {which!r} in-place table: choose default or probed")
    return provider if which == "default" else f"{provider}-{PROBED}"


def provider_of(table: str) -> str:
    """The provider whose kernels ``table`` (an :data:`INPLACE_TABLES` key) is about."""
    return table.split("@", 1)[0].split("-", 1)[0]


def unproven(table: str) -> dict[str, list[tuple[int, int]]]:
    """The entries of ``table`` its provider's default table lacks: pairs no kernel
    declares and no reading of the source backs (empty for a default table)."""
    default = INPLACE_TABLES[provider_of(table)]
    out = {}
    for op, pairs in INPLACE_TABLES[table].items():
        extra = [p for p in pairs if p not in default.get(op, ())]
        if extra:
            out[op] = extra
    return out


def table_id(table: str) -> str:
    """A name for the table as it stands: the provider and a digest of its entries, so a
    plan says which table it trusted and a changed table is told apart."""
    if table in _PAST_IDS:
        return _PAST_IDS[table]
    entries = json.dumps(sorted((op, sorted(p)) for op, p in INPLACE_TABLES[table].items()))
    return f"graphmem-{table}-{_sha256(entries.encode()).hexdigest()[:12]}"


def _sha256(data: bytes):
    """SHA-256 of ``data`` by Python's own module where there is one (``import hashlib``
    loads OpenSSL, a cost a short command pays in full); the digest is the same."""
    try:
        from _sha256 import sha256  # CPython 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # CPython 3.12+
        except ImportError:
            from hashlib import sha256
    return sha256(data)


def table_of_id(ident: str) -> str | None:
    """The table a :func:`table_id` names, None when it names none graphmem knows: one of
    today's, or one an earlier version wrote into its plans (``inplace_tables_past.json``,
    registered in :data:`INPLACE_TABLES` as ``<table>@<digest>`` when first asked for)."""
    found = next((t for t in INPLACE_TABLES if table_id(t) == ident), None)
    return found if found is not None else _past_table(ident)


_PAST_FILE = Path(__file__).with_name("inplace_tables_past.json")
_PAST_IDS: dict[str, str] = {}  # registered past key -> the id its plans record


def _past_table(ident: str) -> str | None:
    """Register the past table ``ident`` names, if any, and return its key."""
    global _TABLE_OPS
    try:
        with open(_PAST_FILE, encoding="utf-8") as f:
            entry = json.load(f)["tables"].get(ident)
    except FileNotFoundError:
        return None
    if entry is None:
        return None
    key = f"{entry['table']}@{ident.rsplit('-', 1)[-1]}"
    INPLACE_TABLES[key] = {op: [tuple(p) for p in pairs]
                           for op, pairs in entry["entries"].items()}
    _PAST_IDS[key] = ident
    _TABLE_OPS = _TABLE_OPS | frozenset(_op_types(INPLACE_TABLES[key]))
    return key


# Ops whose outputs differ from run to run: never folded into constants.
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                        "RandomUniformLike", "Multinomial", "Bernoulli"})

# The op whose inputs may be written straight into slices of its output (zero-copy
# concatenation): the concat pass, the plan's slice rule and the verifier ask is_concat.
CONCAT = "Concat"


def is_concat(node: Node) -> bool:
    """Is ``node`` a standard-domain Concat (its inputs may be slices of its output)?"""
    return node.op_type == CONCAT and standard_domain(node.domain)


def concat_axis(shape: tuple[int, ...], axis: int) -> tuple[int, bool]:
    """A Concat's axis attribute made non-negative for an output of ``shape``, and
    whether its slices are contiguous in memory (every dimension before the axis is 1),
    so that each input may be written straight into its slice of the output."""
    axis = axis + len(shape) if axis < 0 else axis
    before = shape[:axis]
    return axis, before.count(1) == len(before)


def view_pairs(node: Node) -> list[tuple[int, int]]:
    """(input, output) index pairs where the output is a view of the input."""
    return list(_pairs_of(*_signature(node))[0])


def overwrite_pairs(node: Node, table: str = DEFAULT_TABLE) -> list[tuple[int, int]]:
    """(input, output) index pairs where the kernel of ``table``'s provider may write the
    output over the input."""
    return list(_pairs_of(*_signature(node), table)[1])


def _signature(node: Node) -> tuple[str, str, tuple[bool, ...], tuple[bool, ...]]:
    """Everything the pairs of a node depend on: its op, its domain, and which of its
    inputs and outputs are given (a blank is an omitted optional one)."""
    return (node.op_type, node.domain, tuple(map(bool, node.inputs)),
            tuple(map(bool, node.outputs)))


@lru_cache(maxsize=4096)
def _pairs_of(op_type: str, domain: str, given_in: tuple[bool, ...], given_out: tuple[bool, ...],
              table: str = DEFAULT_TABLE
              ) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """(view pairs, overwrite pairs) of a node with this signature, the overwrite pairs
    from the provider's ``table`` (:data:`INPLACE_TABLES`): the one rule.

    A contrib op is looked up as "domain:op" (:data:`FUSED`); views are standard
    domain only. Pairs between given inputs and outputs only. Dropout with a
    ``training_mode`` input may be training (its output is not its input);
    BatchNormalization with more than one output is training (it also writes running
    statistics), so neither aliases then."""
    if not standard_domain(domain):
        op_type = f"{domain}:{op_type}"
        if op_type not in FUSED:
            return (), ()

    def pairs(table):
        return tuple((i, o) for i, o in table.get(op_type, ())
                     if i < len(given_in) and given_in[i] and o < len(given_out) and given_out[o])

    views, overwrites = pairs(VIEW), pairs(INPLACE_TABLES[table])
    if op_type == "Dropout" and len(given_in) > 2 and given_in[2]:
        views = ()
    if op_type == "BatchNormalization" and sum(given_out) > 1:
        overwrites = ()
    return views, overwrites


class AliasEdges(NamedTuple):
    """The pairs :func:`view_pairs` and :func:`overwrite_pairs` give for every node of
    an order, as graph-index ids, sorted by position, then views before overwrites,
    then each node's pairs in the order those functions list them."""

    pos: np.ndarray  # the node's position in the order
    overwrite: np.ndarray  # bool: an overwrite pair (else a view pair)
    src: np.ndarray  # the input's id (-1: a name the index lacks, a weight)
    out: np.ndarray  # the output's id


def alias_edges(graph: Graph, order, index: GraphIndex, table: str = DEFAULT_TABLE
                ) -> AliasEdges:
    """:class:`AliasEdges` of ``order`` (node indices): :func:`_pairs_of` asked once per
    distinct signature, its pairs laid over all nodes of that signature in numpy.

    A node with no blank input or output and no implicit input (nearly all) has its
    inputs and outputs at the same places in the index's read and write arrays, so its
    signature is (op, domain, input count, output count); the few others are looked up
    by name one node at a time.
    """
    nodes = graph.nodes
    rows = index.rows(order)
    op_types = list(map(_OP_TYPE, nodes))
    codes = {op: k for k, op in enumerate(dict.fromkeys(op_types))}
    aliasing = [codes[op] for op in _TABLE_OPS if op in codes]
    if not aliasing:
        return _EMPTY
    code = np.fromiter(map(codes.__getitem__, op_types), np.int64, len(nodes))[rows]
    n_in = np.fromiter(map(len, map(_INPUTS, nodes)), np.int64, len(nodes))[rows]
    n_out = np.fromiter(map(len, map(_OUTPUTS, nodes)), np.int64, len(nodes))[rows]
    read_start, write_start = index.read_start[rows], index.write_start[rows]
    regular = ((index.read_start[rows + 1] - read_start == n_in)
               & (index.write_start[rows + 1] - write_start == n_out))
    domains = list(map(_DOMAIN, nodes))
    domain_names = list(dict.fromkeys(domains))
    domain = (np.zeros(len(rows), dtype=np.int64) if len(domain_names) == 1 else
              np.fromiter(map({d: k for k, d in enumerate(domain_names)}.__getitem__, domains),
                          np.int64, len(nodes))[rows])
    parts = []  # (pos, overwrite, rank, src, out) arrays
    of_table = np.zeros(len(codes), dtype=bool)
    of_table[aliasing] = True
    aliases = of_table[code]  # per position: an op of the tables
    candidates = aliases & regular
    # one integer per signature of a regular node: (domain, input count, output count)
    wide_in, wide_out = int(n_in.max(initial=0)) + 1, int(n_out.max(initial=0)) + 1
    signature = (domain * wide_in + n_in) * wide_out + n_out
    for op, k in codes.items():
        if op not in _TABLE_OPS:
            continue
        of_op = np.flatnonzero(candidates & (code == k))
        sig_of_op = signature[of_op]
        for sig in sorted(set(sig_of_op.tolist())):  # np.unique would import numpy.ma
            d, rest = divmod(sig, wide_in * wide_out)
            i_count, o_count = divmod(rest, wide_out)
            pos_all = of_op[sig_of_op == sig]
            pairs_of = _pairs_of(op, domain_names[d], (True,) * i_count, (True,) * o_count,
                                 table)
            for overwrite, pairs in zip((False, True), pairs_of):
                for rank, (i, o) in enumerate(pairs):
                    parts.append((pos_all, np.full(len(pos_all), overwrite),
                                  np.full(len(pos_all), rank),
                                  index.reads[read_start[pos_all] + i],
                                  index.writes[write_start[pos_all] + o]))
    get = index.ids.get
    extra = []
    for pos, row in zip(*(a.tolist() for a in _odd(aliases & ~regular, rows))):
        node = nodes[row]
        for overwrite, pairs in zip((False, True), _pairs_of(*_signature(node), table)):
            extra += [(pos, overwrite, rank, get(node.inputs[i], -1), get(node.outputs[o], -1))
                      for rank, (i, o) in enumerate(pairs)]
    if extra:
        parts.append(tuple(np.array(c, dtype=d) for c, d in zip(
            zip(*extra), (np.int64, bool, np.int64, np.int64, np.int64))))
    if not parts:
        return _EMPTY
    pos, overwrite, rank, src, out = (np.concatenate(c) for c in zip(*parts))
    if any(op.rsplit(":", 1)[-1] in codes for op in PAIR_DTYPE):
        keep = _typed(graph, rows, index, pos, overwrite, src)
        pos, overwrite, rank, src, out = pos[keep], overwrite[keep], rank[keep], src[keep], out[keep]
    by = np.lexsort((rank, overwrite, pos))
    return AliasEdges(pos[by], overwrite[by], src[by], out[by])


def _typed(graph: Graph, rows, index: GraphIndex, pos, overwrite, src) -> np.ndarray:
    """Which pairs stand once :data:`PAIR_DTYPE` is applied: an overwrite pair of such an
    op holds only when its input has the element type its kernel declares it for."""
    keep = np.ones(len(pos), dtype=bool)
    for k in np.flatnonzero(overwrite).tolist():
        node = graph.nodes[int(rows[int(pos[k])])]
        dtype = PAIR_DTYPE.get(node.op_type if standard_domain(node.domain)
                               else f"{node.domain}:{node.op_type}")
        if dtype is not None:
            name = index.names[int(src[k])] if src[k] >= 0 else None
            tensor = graph.tensors.get(name) if name is not None else None
            keep[k] = tensor is not None and tensor.dtype == dtype
    return keep


def _odd(mask: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions, rows) of the nodes under ``mask``."""
    pos = np.flatnonzero(mask)
    return pos, rows[pos]


_OP_TYPE, _DOMAIN = attrgetter("op_type"), attrgetter("domain")
_INPUTS, _OUTPUTS = attrgetter("inputs"), attrgetter("outputs")
def _op_types(table) -> list[str]:
    """The op types a table names ("com.microsoft:FusedConv" names FusedConv)."""
    return [op.rsplit(":", 1)[-1] for op in table]


# every op type some table names (a contrib op by its op type: its domain is checked
# in _pairs_of)
_TABLE_OPS = frozenset([*VIEW, *(op for t in INPLACE_TABLES.values() for op in _op_types(t))])
_NONE = np.zeros(0, dtype=np.int64)
_EMPTY = AliasEdges(_NONE, _NONE.astype(bool), _NONE, _NONE)
