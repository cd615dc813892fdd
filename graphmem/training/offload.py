"""Offload (vDNN): saved activations go to host memory after their last forward use and
come back just before backward needs them.

Planning: each offloaded tensor ``t`` keeps its forward live range; its backward
readers read a new tensor ``t@host`` made by a ``HostToDevice`` node with no inputs,
placed one compute layer (Conv/Gemm/MatMul) before the first backward reader (the
prefetch). So the arena is planned with ``t`` absent between the two: the live range is
split in two by rewriting the IR, and the normal planner runs unchanged.

Timeline: a node takes max(2 * MACs, output elements) / device FLOP/s. Copies to host
start when ``t`` is made and run on one queue; the node after ``t``'s last forward use
waits for its copy (the buffer is about to be reused). Copies back start at the
prefetch node on a second queue (the link is full duplex); the first reader waits for
its copy. ``stall_seconds`` is the total waiting.
"""
from __future__ import annotations

from dataclasses import replace

from graphmem.core.ir import Graph, Node
from graphmem.pipeline import Result, plan_graph
from graphmem.analysis.macs import MATRIX_OPS, matrix_macs, phase
from graphmem.training.report import saved_activations


def offload_plan(graph: Graph, result: Result, host_bw: float, device_flops: float,
                 min_bytes: int = 1 << 16) -> dict:
    """Plan ``graph`` with its saved activations (``>= min_bytes``) offloaded, in the
    order of ``result``; simulate the transfers. Returns the figures for the report."""
    order = list(result.plan.order)
    by_index = {n.index: n for n in graph.nodes}
    pos = {idx: k for k, idx in enumerate(order)}
    saved = {t: b for t, b in saved_activations(graph).items() if b >= min_bytes}
    producer = {t: n.index for n in graph.nodes for t in n.outputs if t}
    last_fwd: dict[str, int] = {}
    first_bwd: dict[str, int] = {}
    for k, idx in enumerate(order):
        n = by_index[idx]
        for t in n.reads:
            if t in saved:
                if phase(n) == "forward":
                    last_fwd[t] = k
                else:
                    first_bwd.setdefault(t, k)
    nodes = list(graph.nodes)
    tensors = dict(graph.tensors)
    next_index = max(by_index) + 1
    inserts: dict[int, list[int]] = {}  # order position -> new node indices before it
    prefetch_at: dict[str, int] = {}
    compute_pos = [k for k, idx in enumerate(order) if by_index[idx].op_type in MATRIX_OPS]
    renamed: dict[str, str] = {}
    for t in saved:
        if t not in first_bwd:
            continue
        fb = first_bwd[t]
        before = [k for k in compute_pos if last_fwd.get(t, pos[producer[t]]) < k < fb]
        at = before[-1] if before else fb
        host = f"{t}@host"
        renamed[t] = host
        tensors[host] = replace(graph.tensors[t], name=host)
        nodes.append(Node(next_index, f"o:{t}", "HostToDevice", "", (), (host,)))
        inserts.setdefault(at, []).append(next_index)
        prefetch_at[t] = at
        next_index += 1
    rewired = []
    for n in nodes:
        if phase(n) != "forward" and n.op_type != "HostToDevice" and any(
                t in renamed for t in n.inputs):
            n = replace(n, inputs=tuple(renamed.get(t, t) for t in n.inputs),
                        implicit_inputs=tuple(renamed.get(t, t) for t in n.implicit_inputs))
        rewired.append(n)
    split = replace(graph, nodes=tuple(rewired), tensors=tensors)
    new_order = []
    for k, idx in enumerate(order):
        new_order.extend(inserts.get(k, []))
        new_order.append(idx)
    planned = plan_graph(split, order=new_order)
    stall, compute = _simulate(graph, order, saved, renamed, last_fwd, first_bwd, prefetch_at,
                               producer, pos, host_bw, device_flops)
    return {"offloaded": len(renamed), "offload_bytes": sum(saved[t] for t in renamed),
            "offload_arena_bytes": planned.plan.arena_bytes, "stall_seconds": stall,
            "compute_seconds": compute, "host_bw": host_bw, "device_flops": device_flops}


def _simulate(graph, order, saved, renamed, last_fwd, first_bwd, prefetch_at, producer, pos,
              host_bw, flops) -> tuple[float, float]:
    by_index = {n.index: n for n in graph.nodes}
    out_wait: dict[int, list[str]] = {}  # position -> copies to host that must be done
    in_wait: dict[int, list[str]] = {}
    start_out: dict[int, list[str]] = {}
    start_in: dict[int, list[str]] = {}
    for t in renamed:
        made = pos[producer[t]]
        start_out.setdefault(made, []).append(t)
        out_wait.setdefault(last_fwd.get(t, made) + 1, []).append(t)
        start_in.setdefault(prefetch_at[t], []).append(t)
        in_wait.setdefault(first_bwd[t], []).append(t)
    now = stall = compute = 0.0
    d2h_free = h2d_free = 0.0
    done_out: dict[str, float] = {}
    done_in: dict[str, float] = {}
    for k, idx in enumerate(order):
        for t in start_in.get(k, []):
            h2d_free = max(h2d_free, now) + saved[t] / host_bw
            done_in[t] = h2d_free
        ready = max([now] + [done_out[t] for t in out_wait.get(k, [])]
                    + [done_in[t] for t in in_wait.get(k, [])])
        stall += ready - now
        n = by_index[idx]
        out_elems = sum(graph.tensors[t].numel for t in n.outputs if t)
        step = max(2 * matrix_macs(n, graph.tensors), out_elems) / flops
        compute += step
        now = ready + step
        for t in start_out.get(k, []):
            d2h_free = max(d2h_free, now) + saved[t] / host_bw
            done_out[t] = d2h_free
    return stall, compute
