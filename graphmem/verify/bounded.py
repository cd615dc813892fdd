"""Verifying a plan of a model whose sizes depend on the data (issue 53), with the
sizes the data gives.

The plan reserves each bounded tensor at its bound (``bounded_by``); at run time the
tensor is as large as the values make it and occupies the first bytes of its slot. The
nodes run one at a time in the plan's order, each in a one-node ONNX Runtime session
whose inputs and outputs have no fixed shape: a node reads its inputs from their slots
at the sizes they had when written, and each output is written into the first bytes of
its planned slot, which must hold it. An output larger than its slot is a FAIL naming
the tensor, its size and its bound. Before each node every byte that no live tensor
holds (the unused tail of a bounded slot too) is filled with 0xFF, so a read of a dead
or clobbered tensor shows.

The reference runs the same sessions on the same inputs, every tensor in an array of
its own, in step with the plan's run (each node just before the plan's run reads its
inputs); every tensor a node reads in the arena is compared with the reference's bit
for bit before the node runs, and every graph output at the end. As in the ordinary
verify, the reference drops a tensor once its last reader has run in both runs, the
weights are mapped once (:mod:`.weights`) and shared by both runs (a weight's pages
leave the process once its node has run), and a node's session is dropped after it.
The report says how many elements each bounded tensor had, and each symbol's count (how
many boxes each NonMaxSuppression kept, how many elements each NonZero found). An If, Loop or Scan
runs whole on ONNX Runtime, the tensors its bodies read from the graph given as inputs:
its outputs are checked against their slots, its bodies' own plans are not run here;
but a Loop with a growing carried value also runs iteration by iteration, each value
checked against its body's slots (graphmem/verify/loop_steps.py), and its trip count
and final sizes are its symbols' counts; and an If whose branch holds a Loop bounded by
a symbol of that branch runs that branch again, the Loop's outputs checked against
their slots in the branch's plan and counted. Other body symbols are listed, not
counted.
"""
from __future__ import annotations

import time
from typing import Mapping

import numpy as np

from graphmem.core.dtypes import ENUM_BY_NAME
from graphmem.core.records import record
from graphmem.errors import GraphmemError
from graphmem.verify.arena_run import Mismatch
from graphmem.verify.compare import OutputCheck
from graphmem.verify.loop_steps import branch_loops, grows, past_bound, run_branch, \
    run_loop
from graphmem.verify.node_sessions import numpy_dtype, runtime_message, session_options

POISON = 0xFF


@record
class BoundedCount:
    """One bounded tensor at run time: its elements against the elements planned."""
    tensor: str
    symbols: tuple[str, ...]
    elements: int
    planned: int
    shape: tuple[int, ...]


class _Sessions:
    """One-node sessions whose inputs and outputs keep only their element types; a
    node's session is dropped (:meth:`drop`) once it has run in both runs. They hold no
    memory arena of their own: an output handed back as an array is freed with it, not
    kept in the session's arena for the next run."""

    def __init__(self, model, graph):
        from graphmem.verify.runtime import usable_ir_version
        self.model, self.graph = model, graph
        self.ir_version = usable_ir_version(model)
        self._cache: dict[int, object] = {}
        self.built = 0

    def run(self, index: int, feeds: list, implicit: tuple = (), implicit_values: list = ()):
        """Run node ``index`` on ``feeds`` (its inputs' values, None for a blank one);
        ``implicit``: the names its bodies read from this scope (an If, Loop or Scan run
        whole), inputs of the session under their own names."""
        from onnx import helper
        proto = self.model.graph.node[index]
        # a name its bodies read that is also one of its inputs (a Loop's condition the
        # body passes on, as torch writes it): an input of the session under its own
        # name too
        both = _read_and_input(proto, implicit)
        implicit = tuple(implicit) + both
        implicit_values = list(implicit_values) + [
            feeds[list(proto.input).index(t)] for t in both]
        sess = self._cache.get(index)
        if sess is None:
            import onnxruntime as ort
            ins = [f"in{i}" if t else "" for i, t in enumerate(proto.input)]
            outs = [f"out{i}" if t else "" for i, t in enumerate(proto.output)]
            node = helper.make_node(proto.op_type, ins, outs, domain=proto.domain or None)
            node.attribute.extend(proto.attribute)
            t = self.graph.tensors

            def info(local, name):
                return helper.make_tensor_value_info(local, ENUM_BY_NAME[t[name].dtype], None)
            g = helper.make_graph([node], f"node_{proto.op_type}",
                                  [info(a, b) for a, b in zip(ins, proto.input) if a]
                                  + [info(b, b) for b in implicit],
                                  [info(a, b) for a, b in zip(outs, proto.output) if a])
            m = helper.make_model(g, opset_imports=list(self.model.opset_import))
            m.ir_version = self.ir_version
            try:
                options = session_options()
                options.enable_cpu_mem_arena = False
                sess = ort.InferenceSession(m.SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])
            except Exception as exc:
                raise GraphmemError(f"ONNX Runtime cannot run {proto.op_type} "
                                    f"{proto.name!r} alone: {runtime_message(exc)}") from None
            self._cache[index] = sess
            self.built += 1
        names = [f"in{i}" for i, t in enumerate(proto.input) if t] + list(implicit)
        values = [v for t, v in zip(proto.input, feeds) if t] + list(implicit_values)
        out = sess.run(None, dict(zip(names, values)))
        it = iter(out)
        return [next(it) if t else None for t in proto.output]

    def drop(self, index: int) -> None:
        self._cache.pop(index, None)


def _read_and_input(proto, implicit) -> tuple[str, ...]:
    """The names ``proto``'s bodies read from its scope that are also its inputs."""
    import onnx
    if not any(a.type == onnx.AttributeProto.GRAPH for a in proto.attribute):
        return ()
    from graphmem.frontend.control_flow import outer_reads
    reads = set()
    for a in proto.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            reads |= outer_reads(a.g)
    return tuple(sorted(t for t in reads if t and t in proto.input and t not in implicit))


class _Failed(Exception):
    def __init__(self, node, error):
        self.node, self.error = node, error


def _run_node(sessions, node, feeds, implicit_values=()):
    try:
        return sessions.run(node.index, feeds, node.implicit_inputs, implicit_values)
    except GraphmemError:
        raise
    except Exception as exc:
        raise _Failed(node, runtime_message(exc, 1000)) from None


def verify_bounded(plan, graph, plain, base, *, seed: int = 0,
                   inputs: Mapping[str, np.ndarray] | None = None,
                   on_step=None, start: float | None = None):
    """The :class:`~graphmem.verify.verifier.VerifyReport` of ``plan`` for ``graph``
    (which has ``data_bounds``) run with the sizes the data gives: ``base`` is the
    report so far (the plan's problems checked)."""
    from dataclasses import replace
    from graphmem.verify.inputs import checked_inputs, random_inputs
    from graphmem.verify.reference import constant_values, load_weights, refused_inputs_message
    start = time.perf_counter() if start is None else start
    weights = load_weights(graph)  # external weights mapped, shared by both runs
    model = weights.model
    constants = constant_values(model, graph, weights.values)
    feeds = checked_inputs(graph, inputs) if inputs is not None else random_inputs(graph, seed)
    sessions = _Sessions(model, graph)
    by_index = {n.index: n for n in graph.nodes}
    order = list(plan.order)
    # the reference, a node ahead of the plan's run: every tensor an array of its own,
    # dropped once its last reader has run in both runs (the graph outputs kept)
    ref = _Reference(feeds, order, by_index, graph.outputs)
    arena = np.full(plan.arena_bytes, POISON, np.uint8)
    shapes: dict[str, tuple[int, ...]] = {}
    tensors = plan.tensors
    governed = graph.data_bounds.governed
    counts: list[BoundedCount] = []
    overflow = None
    mismatch = None
    reads = 0
    observed: dict[str, int] = {}  # symbol -> its count, where counted apart (a Loop's)
    own: dict[str, list] = {}  # tensor -> the symbols whose count it holds
    for sym in graph.data_bounds.symbols.values():
        own.setdefault(sym.tensor, []).append(sym)

    def write(name, value):
        t = tensors[name]
        data = _bits(value)
        if data.size > t.bytes:
            return data.size
        arena[t.offset:t.offset + data.size] = data
        shapes[name] = tuple(value.shape)
        return None

    def read(name):
        t = tensors[name]
        dtype = numpy_dtype(graph.tensors[name])
        shape = shapes[name]
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return arena[t.offset:t.offset + nbytes].copy().view(dtype).reshape(shape)

    def constant(t):
        return constants[t] if t else None

    for name in graph.inputs:
        if name in tensors:
            write(name, feeds[name])
    for step, idx in enumerate(order):
        node = by_index[idx]
        try:
            ref.run(step, sessions, constant)
        except _Failed as exc:
            raise GraphmemError(refused_inputs_message(plain, exc.node, exc.error,
                                                       inputs is not None)) from None
        _poison(arena, tensors, shapes, graph, step)
        values = []
        for t in (*node.inputs, *node.implicit_inputs):
            if t and t in tensors:
                v = read(t)
                reads += 1
                want = ref.values[t]
                if v.shape != want.shape or not np.array_equal(_bits(v), _bits(want)):
                    mismatch = Mismatch(step, node.label, t, float("nan"),
                                        _overlapping(plan, t, step), (), read=True)
                    break
                values.append(v)
            else:
                values.append(constant(t))
        if mismatch is not None:
            break
        try:
            k = len(node.inputs)
            outs = _run_node(sessions, node, values[:k], values[k:])
        except _Failed as exc:
            raise GraphmemError(f"ONNX Runtime failed on {exc.node.label} in the arena run: "
                                f"{exc.error}") from None
        if node.op_type == "Loop" and grows(graph, idx):
            # issue 53: its carried values that grow, checked against their body slots
            # iteration by iteration (graphmem/verify/loop_steps.py)
            named = dict(zip(node.inputs, values[:k]))
            named.update(zip(node.implicit_inputs, values[k:]))
            run = run_loop(model, graph, plan, node, named, sessions.ir_version)
            overflow = run.overflow
            if overflow is not None:
                break
            observed.update(_observed(graph, idx, run, outs))
        if node.op_type == "If" and branch_loops(graph, idx):
            # issue 53: the bounded Loops of the branch it took, against their slots
            named = dict(zip(node.inputs, values[:k]))
            named.update(zip(node.implicit_inputs, values[k:]))
            found, overflow = run_branch(model, graph, plan, node, named,
                                         sessions.ir_version)
            observed.update(found)
            if overflow is not None:
                break
        del values
        for o, v in zip(node.outputs, outs):
            if not o or v is None or o not in tensors:
                continue
            too_many = write(o, v)
            if o in governed:
                planned = int(np.prod(graph.tensors[o].shape, dtype=np.int64))
                counts.append(BoundedCount(o, governed[o], int(v.size), planned,
                                           tuple(v.shape)))
            if too_many is None:
                overflow = past_bound(o, node.label, v, own.get(o, ()))
                if overflow is not None:
                    break
            if too_many is not None:
                symbols = governed.get(o, ())
                bound = ", ".join(f"{s} <= {graph.data_bounds.symbols[s].bound:,}"
                                  for s in symbols) or "no bound"
                overflow = (f"tensor {o!r} ({node.label}) holds {v.size:,} elements "
                            f"{list(v.shape)} ({too_many:,} bytes), past its planned slot of "
                            f"{tensors[o].bytes:,} bytes "
                            f"({list(graph.tensors[o].shape)} at the bound: {bound})")
                break
        del outs
        if overflow is not None:
            break
        # the node has run in both runs: its session, the reference tensors no later
        # node reads and the pages of the weights it read leave the process
        sessions.drop(idx)
        ref.done(step)
        weights.release_for(node.reads)
        if on_step is not None:
            on_step(step + 1, len(order))
    outputs = []
    if overflow is None and mismatch is None:
        for name in graph.outputs:
            want = ref.values[name] if name in ref.values else constant(name)
            got = read(name) if name in tensors else want
            ok = got.shape == want.shape and np.array_equal(_bits(got), _bits(want))
            outputs.append(OutputCheck(name, graph.tensors[name].dtype, tuple(got.shape),
                                       0.0 if ok else float("nan"), ok))
    weights.release()
    return replace(base, nodes_run=len(order) if overflow is None and mismatch is None else
                   step + 1, sessions_built=sessions.built, outputs=tuple(outputs),
                   mismatch=mismatch, reads_checked=reads, bounded=tuple(counts),
                   symbol_counts=tuple(count_lines(graph, counts, observed)),
                   overflow=overflow, reference_bytes=ref.peak_bytes,
                   seconds=time.perf_counter() - start)


class _Reference:
    """The reference run of the bounded verify, in step with the plan's run: node
    ``step`` of the order runs here (:meth:`run`) just before the plan's run reads its
    inputs, every tensor an array of its own at the size the data gives; a tensor is
    dropped (:meth:`done`) once the last node that reads it has run in both runs (the
    graph outputs are kept for the end). ``peak_bytes``: the most it held at once."""

    def __init__(self, feeds: Mapping[str, np.ndarray], order: list[int], by_index,
                 kept) -> None:
        self.values: dict[str, np.ndarray] = dict(feeds)
        self.order, self.by_index = order, by_index
        kept = set(kept)
        last: dict[str, int] = {}
        for pos, idx in enumerate(order):
            node = by_index[idx]
            for t in (*node.reads, *node.outputs):
                if t and t not in kept:
                    last[t] = pos
        self.drop_at: dict[int, list[str]] = {}
        for t, pos in last.items():
            self.drop_at.setdefault(pos, []).append(t)
        self.live_bytes = self.peak_bytes = sum(v.nbytes for v in self.values.values())

    def run(self, step: int, sessions, constant) -> None:
        node = self.by_index[self.order[step]]
        values = self.values

        def value(t):
            return values[t] if t in values else constant(t)
        outs = _run_node(sessions, node, [value(t) for t in node.inputs],
                         [value(t) for t in node.implicit_inputs])
        for o, v in zip(node.outputs, outs):
            if o and v is not None:
                old = values.get(o)
                self.live_bytes += v.nbytes - (old.nbytes if old is not None else 0)
                values[o] = v
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def done(self, step: int) -> None:
        for t in self.drop_at.get(step, ()):
            v = self.values.pop(t, None)
            if v is not None:
                self.live_bytes -= v.nbytes


def _bits(value) -> np.ndarray:
    """A value's bytes, flat (a 0-d array too)."""
    return np.ascontiguousarray(value).reshape(-1).view(np.uint8)


def _poison(arena, tensors, shapes, graph, step: int) -> None:
    """Every byte no tensor live at ``step`` holds to POISON (a bounded tensor holds the
    bytes of its size at run time, not its whole slot): the gaps between the live
    tensors' byte ranges, sorted, each filled as one slice (a mask of the whole arena a
    step took most of the run on an arena of hundreds of MiB)."""
    spans = []
    for name, t in tensors.items():
        if t.live[0] <= step <= t.live[1] and name in shapes:
            dtype = numpy_dtype(graph.tensors[name])
            n = int(np.prod(shapes[name], dtype=np.int64)) * dtype.itemsize
            if n > 0:
                spans.append((t.offset, t.offset + n))
    spans.sort()
    at = 0
    for lo, hi in spans:
        if lo > at:
            arena[at:lo] = POISON
        at = max(at, hi)
    if at < arena.size:
        arena[at:] = POISON


def _overlapping(plan, name: str, step: int) -> tuple[str, ...]:
    t = plan.tensors[name]
    return tuple(o for o, u in plan.tensors.items() if o != name
                 and u.offset < t.offset + t.bytes and t.offset < u.offset + u.bytes
                 and u.live[0] <= step <= u.live[1])[:8]


def _observed(graph, idx: int, run, outs) -> dict[str, int]:
    """The counts of Loop ``idx``'s symbols from its run by iterations: its trip count
    and each growing carried value's final size on its axis; that run must agree with
    ONNX Runtime's of the whole node."""
    found = {}
    for s in graph.data_bounds.symbols.values():
        if s.op != "Loop" or s.node != idx:
            continue
        if "_carried_" in s.name:
            j = int(s.name.rsplit("_", 1)[1])
            shape = run.finals[j]
            if outs[j] is not None and tuple(outs[j].shape) != shape:
                raise GraphmemError(
                    f"the verifier's run of Loop node {idx} by iterations ends with its "
                    f"carried value {j} of shape {list(shape)}, ONNX Runtime's with "
                    f"{list(outs[j].shape)}")
            found[s.name] = shape[s.axis]
        else:
            found[s.name] = run.iterations
    found.update(run.body_counts)
    return found


def count_lines(graph, counts, observed=None) -> list[str]:
    """Each symbol's count at run time against its bound, in words (``observed``: the
    counts known apart, symbol -> count)."""
    lines = []
    seen = {}
    for c in counts:
        for s in c.symbols:
            sym = graph.data_bounds.symbols[s]
            if sym.tensor == c.tensor and s not in seen:
                seen[s] = c
    for s, sym in graph.data_bounds.symbols.items():
        c = seen.get(s)
        if observed and s in observed:
            lines.append(f"{s} ({sym.op}, node {sym.node}): {observed[s]:,} of at most "
                         f"{sym.bound:,}")
            continue
        if c is None:
            lines.append(f"{s} ({sym.op}, node {sym.node}): not run")
            continue
        axis = _count_axis(sym.op, c, sym.axis)
        lines.append(f"{s} ({sym.op}, node {sym.node}): {axis:,} of at most {sym.bound:,}")
    for s, sym in graph.data_bounds.body_symbols.items():
        node, _, attr = sym.scope.partition("_")
        where = f"{sym.op}, node {sym.node} in the {attr} of node {node}"
        if observed and s in observed:
            lines.append(f"{s} ({where}): {observed[s]:,} of at most {sym.bound:,}")
            continue
        lines.append(f"{s} ({where}): not counted, at most {sym.bound:,} (its node runs "
                     "whole on ONNX Runtime)")
    return lines


def _count_axis(op: str, c: BoundedCount, axis: int) -> int:
    """The symbol's value in its own output: the dim of its axis."""
    return c.shape[axis] if axis < len(c.shape) else c.elements
