"""The graph ONNX Runtime runs: the model optimized offline by ORT, for one provider.

``--ort-optimize LEVEL`` has ONNX Runtime build a session for the model with graph
optimizations at LEVEL and save the graph it would run
(``SessionOptions.optimized_model_filepath``) into a temporary folder; graphmem plans
that file and removes the folder when the command ends (:func:`cleanup`, called by the
CLI on every way out). What each level fuses is in docs/ort-graphs.md.

ONNX Runtime does not write the same graph twice: the nodes its layout transformers
insert (NCHWc's reorders) come out in another sequence and under other node names from
one session to the next. The saved graph is therefore rewritten in a canonical form
(:func:`canonicalize`) before anything reads it: its nodes in a deterministic
topological order that depends only on the graph's structure (:func:`canonical_order`),
its initializers and value_info sorted by name. One input gives one graph to plan, and
the same command writes the same plan byte for byte.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from graphmem.core.records import record
from graphmem.errors import GraphmemError

LEVELS = ("basic", "extended", "all")
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}

# ORT writes the optimized model's weights of at least this many bytes into a file
# beside it in the temporary folder. Inline, a model over protobuf's 2 GiB could not be
# saved; and left to itself, ORT saves a source's external weights that it does not
# change as references to the source's files by their relative names, which the
# temporary folder does not hold. graphmem plans without reading the weights; verify
# reads them from there, and `export --annotated` writes them inside the annotated model.
EXTERNAL_MIN_BYTES = 1024

_FOLDERS: list[str] = []


@record
class Optimized:
    """An optimized model: where it lies, what made it, and what it cost to make."""
    path: Path
    source: Path
    level: str
    provider: str
    seconds: float  # ORT's session build, optimization and save


def ort_level(level: str):
    """ONNX Runtime's GraphOptimizationLevel for ``level`` ("off" or one of LEVELS)."""
    import onnxruntime as ort
    return {"off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]


def optimize(source: str | os.PathLike, level: str, provider: str = "cpu") -> Optimized:
    """``source`` optimized by ONNX Runtime at ``level`` for ``provider``, saved into a
    temporary folder that :func:`cleanup` removes."""
    if level not in LEVELS:
        raise GraphmemError(f"--ort-optimize {level!r}: choose one of {', '.join(LEVELS)}")
    src = Path(source)
    import onnxruntime as ort
    ep = PROVIDERS.get(provider)
    if ep is None:
        raise GraphmemError(f"--ort-optimize: no ONNX Runtime provider for {provider!r}")
    if ep not in ort.get_available_providers():
        raise GraphmemError(f"--ort-optimize for --provider {provider} needs ONNX Runtime's "
                            f"{ep}, which this installation lacks (it has "
                            f"{', '.join(ort.get_available_providers())})")
    out = Path(temporary_folder()) / f"{_stem(src)}.{level}.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort_level(level)
    so.optimized_model_filepath = str(out)
    # its warnings (unused initializers removed) and errors (a provider library that
    # does not load) are not the user's: graphmem says in one line what failed
    so.log_severity_level = 4
    ort.set_default_logger_severity(4)
    weights_beside(so, out)
    t0 = time.perf_counter()
    try:
        session = ort.InferenceSession(str(src), so, providers=[ep])
    except Exception as exc:
        text = " ".join(str(exc).split())
        hint = ""
        if "Cannot parse data from external tensors" in text:
            # onnx's shape inference, which ORT runs on loading, reads no external file:
            # a shape or axes saved externally (size_threshold=0) stops it
            hint = ("; ONNX Runtime cannot load a model whose shapes or axes are kept in "
                    "an external file: save it with them inside (onnx's size_threshold "
                    "above 0) to optimize it, or plan it without --ort-optimize")
        raise GraphmemError(f"{src}: ONNX Runtime cannot optimize it at level {level} for "
                            f"{provider} ({text[:300]}){hint}") from None
    seconds = time.perf_counter() - t0
    if ep not in session.get_providers():  # ORT falls back to the CPU when CUDA fails
        raise GraphmemError(f"--ort-optimize for --provider {provider}: ONNX Runtime could "
                            f"not start its {ep} here (no GPU, or its CUDA libraries are "
                            f"missing) and would have optimized for the CPU instead")
    if not out.is_file():
        raise GraphmemError(f"{src}: ONNX Runtime saved no optimized model at level {level}")
    canonicalize(out)
    return Optimized(path=out, source=src, level=level, provider=provider, seconds=seconds)


def canonicalize(path: Path) -> None:
    """Rewrite the model at ``path`` (its weights stay where they are: only the graph's
    proto is read and written) with its top-level nodes in :func:`canonical_order` and
    its initializers, sparse initializers and value_info sorted by name."""
    import onnx
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise GraphmemError(f"{path}: ONNX Runtime's optimized model does not read back "
                            f"({' '.join(str(exc).split())[:300]})") from None
    g = model.graph
    _refill(g.node, [g.node[i] for i in canonical_order(g)])
    _refill(g.initializer, sorted(g.initializer, key=lambda t: t.name))
    _refill(g.sparse_initializer, sorted(g.sparse_initializer, key=lambda t: t.values.name))
    _refill(g.value_info, sorted(g.value_info, key=lambda v: v.name))
    path.write_bytes(model.SerializeToString())


def _refill(field, items) -> None:
    """Make the repeated proto ``field`` hold copies of ``items`` (its own, reordered)."""
    copies = [type(x)() for x in items]
    for c, x in zip(copies, items):
        c.CopyFrom(x)
    del field[:]
    field.extend(copies)


def canonical_order(graph) -> list[int]:
    """A topological order of ``graph``'s nodes (an onnx GraphProto) that depends only
    on its structure, not on the sequence of its nodes in the file nor on their names:
    each graph output's producer, in the graph's output order, after what it reads
    (depth first, its inputs in their order, then the outer names its subgraphs read,
    in their order); then, the same way, every node not reached from an output, those
    first whose (domain, op type, outputs, inputs) sorts first. Depth first runs a
    value's producers just before its first reader, as an exporter writes a program."""
    nodes = list(graph.node)
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for t in n.output:
            if t:
                producer.setdefault(t, i)
    reads = [[t for t in (*n.input, *_outer_reads(n)) if t in producer] for n in nodes]
    done = [False] * len(nodes)
    order: list[int] = []

    def visit(root: int) -> None:
        if done[root]:
            return
        done[root] = True
        stack = [(root, iter(reads[root]))]
        while stack:
            i, it = stack[-1]
            for t in it:
                j = producer[t]
                if not done[j]:
                    done[j] = True
                    stack.append((j, iter(reads[j])))
                    break
            else:
                stack.pop()
                order.append(i)

    for o in graph.output:
        if o.name in producer:
            visit(producer[o.name])
    rest = sorted((i for i in range(len(nodes)) if not done[i]),
                  key=lambda i: (nodes[i].domain, nodes[i].op_type, tuple(nodes[i].output),
                                 tuple(nodes[i].input)))
    for i in rest:
        visit(i)
    return order


def _outer_reads(node) -> list[str]:
    """The names the subgraphs of ``node`` (If, Loop, Scan bodies) read and do not make
    themselves, in the order they first read them."""
    from onnx import AttributeProto
    out: dict[str, None] = {}

    def walk(g, made: set) -> None:
        made = made | {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            for t in n.input:
                if t and t not in made:
                    out.setdefault(t)
            for a in n.attribute:
                for sub in ([a.g] if a.type == AttributeProto.GRAPH else
                            list(a.graphs) if a.type == AttributeProto.GRAPHS else []):
                    walk(sub, made)
            made = made | set(n.output)
        for o in g.output:
            if o.name not in made:
                out.setdefault(o.name)

    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            walk(a.g, set())
        elif a.type == AttributeProto.GRAPHS:
            for sub in a.graphs:
                walk(sub, set())
    return list(out)


def weights_beside(so, out: Path) -> None:
    """Have the session of ``so`` save the optimized model ``out`` with its weights of
    EXTERNAL_MIN_BYTES or more in ``out.stem + ".weights"`` beside it."""
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", out.stem + ".weights")
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes",
        str(EXTERNAL_MIN_BYTES))


def temporary_folder() -> str:
    """A new temporary folder, removed by :func:`cleanup`."""
    folder = tempfile.mkdtemp(prefix="graphmem-ort-")
    _FOLDERS.append(folder)
    return folder


def cleanup() -> None:
    """Remove every folder :func:`optimize` made in this process."""
    while _FOLDERS:
        shutil.rmtree(_FOLDERS.pop(), ignore_errors=True)


def _stem(path: Path) -> str:
    name = path.name
    return name[:-5] if name.endswith(".onnx") else name
