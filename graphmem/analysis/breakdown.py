"""Where the memory and the compute go: a breakdown and a per-layer table from Graph + Plan.

Pure functions: nothing here loads or plans; callers hand in a loaded
:class:`~graphmem.ir.Graph` and the :class:`~graphmem.plan.Plan` made for it.

- Weights are the initializers and folded constants that running nodes read (a weight
  only feeding a folded node, e.g. the shape of a ``ConstantOfShape``, is not counted;
  the folded result is), at the size the file stores them: a folded dequantization
  (a QDQ model's weight ``DequantizeLinear``) counts as the int8 (int4, ...) tensor, scale
  and zero point it reads; the float bytes it makes are ``weight_bytes_dequantized``.
- ``params`` counts the elements of the weights a framework trains (PyTorch's
  ``parameters()``), leaving out int64 constants (Reshape shapes, axes, indices), which
  are arguments, and BatchNormalization's running mean and variance, which are
  statistics a framework keeps beside them (PyTorch's buffers): ``running_stats`` counts
  those. Both are in ``weight_bytes``.
- Activations: ``naive`` is one buffer per arena tensor; ``arena`` is the planned arena.
- Workspace: the largest working buffer a convolution kernel takes, under a rule
  (:mod:`graphmem.analysis.workspace`: ``mlas``, ONNX Runtime's CPU kernels, the
  default; ``im2col``; ``none``); one buffer, reused, as the runtime allocates it per
  node.
- Per layer: bytes moved are the distinct tensors a node reads (activations and weights)
  plus what it writes; a node whose outputs are all views of its input (a Reshape the
  plan aliases) moves nothing. The roofline compares ``2 * MACs / peak FLOP/s`` with
  ``bytes moved / peak bandwidth``: the larger decides whether the layer is compute or
  bandwidth bound.
"""
from __future__ import annotations

from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph, standard_domain
from graphmem.analysis.macs import mac_totals, node_macs
from graphmem.analysis.workspace import largest, node_workspace
from graphmem.plan.columns import live_groups
from graphmem.plan.format import Plan
from graphmem.plan.view import layer_label
from graphmem.analysis.devices import DEFAULT_DEVICE, DEVICES  # noqa: F401 (re-exported)

_HALF = {"float16", "bfloat16"}
_EIGHT_BIT = {"int8", "uint8", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
              "float8e5m2fnuz"}
FLOAT_TYPES = {"float32", "float64", "float16", "bfloat16"}


@record
class Device:
    """A roofline device: peak FLOP/s for the graph's element type, and bytes per second."""

    name: str
    flops: float
    bandwidth: float

    @property
    def ridge(self) -> float:
        """MACs per byte above which a layer is compute bound (one MAC = 2 FLOPs)."""
        return self.flops / (2 * self.bandwidth)


def compute_class(graph: Graph) -> str:
    """Which peak of a device applies to this graph: "float16", "int8" or "float32".

    Decided by the weights read by running nodes, as stored (a QDQ model's int8), the bulk
    of what the kernels compute on.
    """
    counts = weight_dtypes(graph)
    dtype = max(counts, key=counts.get) if counts else "float32"
    return "float16" if dtype in _HALF else "int8" if dtype in _EIGHT_BIT else "float32"


def device(name: str | None = None, *, flops: float | None = None,
           bandwidth: float | None = None, compute: str = "float32") -> Device:
    """A preset by name (peak for the ``compute`` class), or one from explicit peaks."""
    if flops is not None or bandwidth is not None:
        if flops is None or bandwidth is None:
            raise GraphmemError("give both --device-flops and --device-bw, or a --device preset")
        if flops <= 0 or bandwidth <= 0:
            raise GraphmemError("--device-flops and --device-bw must be positive")
        return Device(name or "custom", float(flops), float(bandwidth))
    key = (name or DEFAULT_DEVICE).lower()
    if key not in DEVICES:
        raise GraphmemError(f"unknown device {name!r}; presets: {', '.join(DEVICES)}")
    peaks, bw = DEVICES[key]
    return Device(key, peaks[compute], bw)


# ---------------------------------------------------------------------- breakdown

def static_reads(graph: Graph) -> list[str]:
    """Weights and folded constants that running nodes read (or the graph outputs), once each."""
    static = graph.weights | set(graph.constants)
    seen: dict[str, None] = {}
    for n in graph.nodes:
        for t in n.reads:
            if t in static:
                seen.setdefault(t)
    for t in graph.outputs:
        if t in static:
            seen.setdefault(t)
    return [t for t in seen if t in graph.tensors]


def stored_reads(graph: Graph, names: list[str] | None = None) -> list[str]:
    """``names`` (default :func:`static_reads`) with each dequantized constant replaced by
    the tensors the file stores it as (``graph.stored_as``), each once."""
    names = static_reads(graph) if names is None else names
    if not graph.stored_as:
        return names
    out: dict[str, None] = {}
    for t in names:
        out.update(dict.fromkeys(s for s in graph.stored_as.get(t, (t,)) if s in graph.tensors))
    return list(out)


def weight_bytes(graph: Graph) -> int:
    """Bytes of the weights and folded constants running nodes read, each once, as the
    file stores them: a dequantized weight counts as its int8 (int4, ...) tensor, scale
    and zero point."""
    return sum(graph.tensors[t].bytes for t in stored_reads(graph))


def dequantized_bytes(graph: Graph) -> int:
    """Bytes of the float weights that dequantizing the stored ones makes (0 when no
    weight is quantized): what a runtime holds if it dequantizes them ahead of time."""
    return sum(graph.tensors[t].bytes for t in static_reads(graph) if t in graph.stored_as)


def weight_dtypes(graph: Graph) -> dict[str, int]:
    """Stored weight bytes per element type, largest first."""
    out: dict[str, int] = {}
    for t in stored_reads(graph):
        out[graph.tensors[t].dtype] = out.get(graph.tensors[t].dtype, 0) + graph.tensors[t].bytes
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# BatchNormalization's inputs: X, scale, B, input_mean, input_var; the last two are
# running statistics, not trained.
_RUNNING_STAT_SLOTS = {"BatchNormalization": (3, 4)}


def running_stats(graph: Graph) -> set[str]:
    """Weights read only as a normalisation's running mean or variance."""
    stats: set[str] = set()
    other: set[str] = set()
    for n in graph.nodes:
        slots = _RUNNING_STAT_SLOTS.get(n.op_type, ()) if standard_domain(n.domain) else ()
        for i, t in enumerate(n.inputs):
            (stats if i in slots else other).add(t)
    return stats - other


def is_param(graph: Graph, name: str, stats: set[str] | None = None) -> bool:
    """A weight that counts as a parameter: int64 constants are shapes, axes and indices;
    running statistics (``stats``, default :func:`running_stats`) are not trained."""
    stats = running_stats(graph) if stats is None else stats
    return graph.tensors[name].dtype != "int64" and name not in stats


def param_count(graph: Graph) -> int:
    """Elements of the trainable weights running nodes read: shape and index constants
    and running statistics left out."""
    stats = running_stats(graph)
    return sum(graph.tensors[t].numel for t in static_reads(graph) if is_param(graph, t, stats))


def running_stat_count(graph: Graph) -> int:
    """Elements of the running statistics (BatchNormalization mean and variance) read."""
    stats = running_stats(graph)
    return sum(graph.tensors[t].numel for t in static_reads(graph) if t in stats)


DEFAULT_WORKSPACE = "mlas"


def workspace(graph: Graph, rule: str = DEFAULT_WORKSPACE,
              threads: int = 1) -> tuple[int, int | None]:
    """(bytes, node index) of the largest working buffer a node takes under ``rule``
    (:mod:`graphmem.analysis.workspace`); (0, None) where none takes one."""
    return largest(graph, rule, threads)


def totals(graph: Graph, plan: Plan, workspace_rule: str = DEFAULT_WORKSPACE,
           threads: int = 1) -> dict:
    """The breakdown: weights, params, naive and planned activations, MACs, the
    workspace under ``workspace_rule`` for ``threads`` intra-op threads."""
    ws, ws_node = workspace(graph, workspace_rule, threads)
    weights = weight_bytes(graph)
    return {
        "weight_bytes": weights,
        "weight_bytes_by_dtype": weight_dtypes(graph),
        "weight_bytes_dequantized": dequantized_bytes(graph),
        "params": param_count(graph),
        "running_stats": running_stat_count(graph),
        "activation_bytes_naive": plan.stats.get("naive_bytes",
                                                 sum(t.bytes for t in plan.tensors.values())),
        "arena_bytes": plan.arena_bytes,
        "aliased_peak_bytes": plan.stats.get("aliased_peak_bytes"),
        **mac_totals(graph),
        "workspace_bytes": ws,
        "workspace_node": ws_node,
        "workspace_rule": workspace_rule,
        "workspace_threads": threads,
        "total_bytes": weights + plan.arena_bytes + ws,
    }


# ---------------------------------------------------------------------- per layer

def layer_table(graph: Graph, plan: Plan, dev: Device | None = None,
                workspace_rule: str = DEFAULT_WORKSPACE, threads: int = 1) -> list[dict]:
    """One row per node in plan order: shapes, params, bytes, MACs, roofline.

    Fields: ``step`` (position in the plan's order), ``node`` (index in the file),
    ``name``, ``op``, ``output_shapes``,
    ``params``, ``param_bytes`` (weights and constants the node reads),
    ``activation_bytes`` (its outputs), ``workspace_bytes`` (its working buffer under
    ``workspace_rule``),
    ``live_bytes`` (arena bytes in use while it runs), ``macs`` (None for an op without a cost rule), ``bytes_moved``,
    ``intensity`` (MACs per byte moved, None when nothing moves), ``bound``
    ("compute", "bandwidth" or "none"), ``time_s`` (roofline time on ``dev``).
    """
    dev = dev or device(compute=compute_class(graph))
    static = graph.weights | set(graph.constants)
    stats = running_stats(graph)
    by_index = {n.index: n for n in graph.nodes}
    live = live_bytes_per_step(plan)
    rows = []
    for pos, idx in enumerate(plan.order):
        n = by_index[idx]
        reads = list(dict.fromkeys(n.reads))
        outs = [o for o in n.outputs if o]
        params = [t for t in reads if t in static and t in graph.tensors]
        param_bytes = sum(graph.tensors[t].bytes for t in stored_reads(graph, params))
        act_bytes = sum(graph.tensors[o].bytes for o in outs)
        views = [o for o in outs if o in plan.tensors and plan.tensors[o].alias == "view"]
        if outs and len(views) == len(outs):
            moved = 0  # the output is the input's storage: no kernel runs
        else:
            moved = sum(graph.tensors[t].bytes for t in reads if t in graph.tensors) + act_bytes
        macs = node_macs(n, graph.tensors)
        compute_s = 2 * (macs or 0) / dev.flops
        memory_s = moved / dev.bandwidth
        bound = ("none" if not macs and not moved else
                 "compute" if compute_s > memory_s else "bandwidth")
        rows.append({
            "step": pos, "node": idx, "name": n.name, "op": n.op_type,
            "output_shapes": [list(graph.tensors[o].shape) for o in outs],
            "params": sum(graph.tensors[t].numel for t in params if is_param(graph, t, stats)),
            "param_bytes": param_bytes,
            "activation_bytes": act_bytes,
            "workspace_bytes": node_workspace(n, graph.tensors, workspace_rule, threads),
            "live_bytes": live[pos],
            "macs": macs,
            "bytes_moved": moved,
            "intensity": (macs or 0) / moved if moved else None,
            "bound": bound,
            "time_s": max(compute_s, memory_s),
        })
    return rows


def live_bytes_per_step(plan: Plan) -> list[int]:
    """Arena bytes occupied at each step: the union of live tensors' byte ranges.

    A sweep over the steps with a segment tree over the byte cuts that counts how many
    live tensors cover each piece: O(n log n), where collecting each step's ranges is
    quadratic when many tensors live long (a Concat of thousands of inputs)."""
    steps = len(plan.order)
    spans = [(max(t.live[0], 0), min(t.live[1], steps - 1), t.offset, t.offset + t.bytes)
             for t in plan.tensors.values() if t.bytes > 0]
    spans = [s for s in spans if s[0] <= s[1]]
    cuts = sorted({b for _, _, lo, hi in spans for b in (lo, hi)})
    tree = _Coverage(cuts)
    starts: list[list[tuple[int, int]]] = [[] for _ in range(steps + 1)]
    ends: list[list[tuple[int, int]]] = [[] for _ in range(steps + 1)]
    for first, last, lo, hi in spans:
        starts[first].append((lo, hi))
        ends[last + 1].append((lo, hi))
    out = []
    for pos in range(steps):
        for lo, hi in ends[pos]:
            tree.add(lo, hi, -1)
        for lo, hi in starts[pos]:
            tree.add(lo, hi, 1)
        out.append(tree.covered())
    return out


class _Coverage:
    """Counts over the pieces between sorted byte cuts; the total length covered."""

    def __init__(self, cuts: list[int]):
        self.cuts = cuts
        self.index = {c: k for k, c in enumerate(cuts)}
        n = max(len(cuts) - 1, 1)
        self.count = [0] * (4 * n)
        self.length = [0] * (4 * n)
        self.n = n

    def add(self, lo: int, hi: int, delta: int) -> None:
        self._add(1, 0, self.n, self.index[lo], self.index[hi], delta)

    def covered(self) -> int:
        return self.length[1]

    def _add(self, node: int, a: int, b: int, lo: int, hi: int, delta: int) -> None:
        if hi <= a or b <= lo:
            return
        if lo <= a and b <= hi:
            self.count[node] += delta
        else:
            mid = (a + b) // 2
            self._add(2 * node, a, mid, lo, hi, delta)
            self._add(2 * node + 1, mid, b, lo, hi, delta)
        if self.count[node] > 0:
            self.length[node] = self.cuts[b] - self.cuts[a]
        elif b - a == 1:
            self.length[node] = 0
        else:
            self.length[node] = self.length[2 * node] + self.length[2 * node + 1]


def peak(graph: Graph, plan: Plan, layers: list[dict] | None = None) -> dict:
    """The step where the most arena bytes are in use, and the storage live there.

    Tensors sharing storage (views, in-place outputs, Concat slices) are one entry,
    named after its largest live tensor; entries are largest first and their bytes add
    up to ``live_bytes``.
    """
    layers = layers if layers is not None else layer_table(graph, plan)
    if not layers:
        return {"node": None, "step": None, "op": None, "name": None, "layer": None,
                "live_bytes": 0, "tensors": []}
    pos = max(range(len(layers)), key=lambda i: layers[i]["live_bytes"])
    entries = []
    for members in live_groups(plan, pos):
        ranges = sorted((plan.tensors[m].offset, plan.tensors[m].offset + plan.tensors[m].bytes)
                        for m in members)
        main = max(members, key=lambda m: (plan.tensors[m].bytes, m))
        entries.append({"name": main, "shares_with": sorted(set(members) - {main}),
                        "bytes": covered_bytes(ranges), "offset": ranges[0][0],
                        "shape": list(graph.tensors[main].shape)})
    entries.sort(key=lambda d: (-d["bytes"], d["offset"]))
    at = layers[pos]
    return {"node": at["node"], "step": pos, "op": at["op"], "name": at["name"],
            "layer": layer_label(at["op"], at["name"], pos, at["node"]),
            "live_bytes": at["live_bytes"], "tensors": entries}


def covered_bytes(ranges: list[tuple[int, int]]) -> int:
    """Bytes covered by [start, stop) ranges (tensors sharing storage counted once)."""
    total, end = 0, -1
    for start, stop in sorted(ranges):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def report(graph: Graph, plan: Plan, dev: Device | None = None,
           workspace_rule: str = DEFAULT_WORKSPACE, threads: int = 1) -> dict:
    """``totals``, ``layers`` and the device used, as one JSON-ready object (the
    workspace under ``workspace_rule`` for ``threads`` threads)."""
    dev = dev or device(compute=compute_class(graph))
    layers = layer_table(graph, plan, dev, workspace_rule, threads)
    return {
        "model": plan.model,
        "bindings": dict(plan.bindings),
        "device": {"name": dev.name, "flops": dev.flops, "bandwidth": dev.bandwidth,
                   "ridge_macs_per_byte": dev.ridge},
        "totals": {**totals(graph, plan, workspace_rule, threads),
                   "time_s": sum(r["time_s"] for r in layers)},
        "peak": peak(graph, plan, layers),
        "layers": layers,
    }


def by_op(layers: list[dict]) -> dict[str, dict]:
    """MACs, bytes moved and time summed per op type, largest MAC share first; ``unknown``
    counts the nodes without a MAC rule."""
    out: dict[str, dict] = {}
    for r in layers:
        s = out.setdefault(r["op"], {"count": 0, "macs": 0, "unknown": 0, "bytes_moved": 0,
                                     "time_s": 0.0})
        s["count"] += 1
        s["macs"] += r["macs"] or 0
        s["unknown"] += r["macs"] is None  # nodes without a MAC rule: "macs" a lower bound
        s["bytes_moved"] += r["bytes_moved"]
        s["time_s"] += r["time_s"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["macs"]))

