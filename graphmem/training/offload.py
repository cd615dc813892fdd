"""Offload (vDNN): saved activations go to host memory after their last forward use and
come back just before backward needs them.

What moves is what ``train`` calls kept for backward: arena storage made before
backward starts in the plan's order and read after it. Tensors that share storage in the
plan (a view and its base, an in-place output, Concat slices: one group of
:func:`graphmem.plan.columns.group_roots`) are one transfer of the bytes they cover
together, copied out when the group's largest member is made and back before the first
read of any member after the boundary; every node after the boundary reads the copy.

Planning: each offloaded tensor ``t`` keeps its forward live range; its backward
readers read a new tensor ``t@host``. The group's largest member comes back by a
``HostToDevice`` node with no inputs, placed one compute layer (Conv/Gemm/MatMul) before
the first backward reader (the prefetch); a member made from another by a node whose
other inputs are constants (a view: Reshape, Flatten, Unsqueeze, ...) is made again from
that one's ``@host`` copy by a clone of its node, so the planner aliases it as it did in
forward; any other member comes back by a ``HostToDevice`` of its own. So the arena is
planned with the storage absent between the two: the live range is split in two by
rewriting the IR, and the normal planner runs unchanged.

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
from graphmem.analysis.macs import MATRIX_OPS, matrix_macs
from graphmem.analysis.breakdown import covered_bytes
from graphmem.training.report import first_backward_position


def offload_groups(graph: Graph, result: Result, min_bytes: int = 1 << 16
                   ) -> dict[str, tuple[list[str], int]]:
    """What is kept for backward (:func:`~graphmem.training.report.plan_saved_activations`:
    arena storage made before backward starts in the plan's order and read after it), by
    storage: root of the plan's alias/slice group -> (its members read after the
    boundary, largest first, then in plan order; the bytes they cover together), for the
    groups of at least ``min_bytes``. Graph inputs (a data input a weight gradient
    reads) stay: nothing on the device makes them."""
    from graphmem.plan.columns import group_roots

    plan = result.plan
    roots = group_roots(plan)
    made = _made_positions(graph, plan.order)
    boundary = first_backward_position(graph, plan)
    by_index = {n.index: n for n in graph.nodes}
    crossing = {t for idx in plan.order[boundary:] for t in by_index[idx].reads
                if t in made and made[t] < boundary and t in plan.tensors
                and plan.tensors[t].bytes}
    groups: dict[str, list[str]] = {}
    for t in sorted(crossing):
        groups.setdefault(roots.get(t, t), []).append(t)
    out = {}
    for root, members in groups.items():
        members.sort(key=lambda m: (-plan.tensors[m].bytes, made.get(m, -1), m))
        nbytes = covered_bytes([(plan.tensors[m].offset, plan.tensors[m].offset
                          + plan.tensors[m].bytes) for m in members])
        if nbytes >= min_bytes:
            out[root] = (members, nbytes)
    return out


def _made_positions(graph: Graph, order) -> dict[str, int]:
    by_index = {n.index: n for n in graph.nodes}
    return {t: k for k, idx in enumerate(order) for t in by_index[idx].outputs if t}


def offload_plan(graph: Graph, result: Result, host_bw: float, device_flops: float,
                 min_bytes: int = 1 << 16) -> dict:
    """Plan ``graph`` with its saved activations offloaded, by storage
    (:func:`offload_groups`, groups of at least ``min_bytes``), in the order of
    ``result``; simulate the transfers. Returns the figures for the report:
    ``offloaded`` storages, ``offloaded_tensors``, ``offload_bytes`` (each storage
    once), the arena planned so and the timeline's ``stall_seconds``."""
    order = list(result.plan.order)
    by_index = {n.index: n for n in graph.nodes}
    pos = {idx: k for k, idx in enumerate(order)}
    groups = offload_groups(graph, result, min_bytes)
    member_of = {t: root for root, (members, _) in groups.items() for t in members}
    producer = {t: n for n in graph.nodes for t in n.outputs if t}
    static = graph.weights | set(graph.constants)
    boundary = first_backward_position(graph, result.plan)
    after = set(order[boundary:])  # the nodes that read the host copies
    last_fwd: dict[str, int] = {}
    first_bwd: dict[str, int] = {}
    for k, idx in enumerate(order):
        n = by_index[idx]
        for t in n.reads:
            if t in member_of:
                g = member_of[t]
                if k < boundary:
                    last_fwd[g] = k
                else:
                    first_bwd.setdefault(g, k)
    nodes = list(graph.nodes)
    tensors = dict(graph.tensors)
    next_index = max(by_index) + 1
    inserts: dict[int, list[int]] = {}  # order position -> new node indices before it
    prefetch_at: dict[str, int] = {}
    made_at: dict[str, int] = {}
    compute_pos = [k for k, idx in enumerate(order) if by_index[idx].op_type in MATRIX_OPS]
    renamed: dict[str, str] = {}
    for g, (members, _) in groups.items():
        if g not in first_bwd:
            continue
        fb = first_bwd[g]
        made_at[g] = pos[producer[members[0]].index]
        before = [k for k in compute_pos if last_fwd.get(g, made_at[g]) < k < fb]
        at = before[-1] if before else fb
        prefetch_at[g] = at
        back = inserts.setdefault(at, [])
        for m in sorted(members, key=lambda m: members.index(m) if m == members[0]
                        else pos[producer[m].index] + 1):
            host = f"{m}@host"
            tensors[host] = replace(graph.tensors[m], name=host)
            node = producer[m]
            kin = [t for t in node.inputs if t and t not in static]
            if m != members[0] and len(kin) == 1 and kin[0] in renamed \
                    and member_of.get(kin[0]) == g and len([o for o in node.outputs if o]) == 1:
                nodes.append(replace(node, index=next_index, name=f"o:{node.name}",
                                     inputs=tuple(renamed.get(t, t) for t in node.inputs),
                                     outputs=(host,)))
            else:
                nodes.append(Node(next_index, f"o:{m}", "HostToDevice", "", (), (host,)))
            renamed[m] = host
            back.append(next_index)
            next_index += 1
    rewired = []
    for n in nodes:
        if n.index in after and any(t in renamed for t in n.inputs):
            n = replace(n, inputs=tuple(renamed.get(t, t) for t in n.inputs),
                        implicit_inputs=tuple(renamed.get(t, t) for t in n.implicit_inputs))
        rewired.append(n)
    split = replace(graph, nodes=tuple(rewired), tensors=tensors)
    new_order = []
    for k, idx in enumerate(order):
        new_order.extend(inserts.get(k, []))
        new_order.append(idx)
    planned = plan_graph(split, order=new_order)
    moved = {g: groups[g][1] for g in prefetch_at}
    stall, compute = _simulate(graph, order, moved, made_at, last_fwd, first_bwd,
                               prefetch_at, host_bw, device_flops)
    return {"offloaded": len(moved), "offloaded_tensors": len(renamed),
            "offload_bytes": sum(moved.values()),
            "offload_arena_bytes": planned.plan.arena_bytes, "stall_seconds": stall,
            "compute_seconds": compute, "host_bw": host_bw, "device_flops": device_flops}


def _simulate(graph, order, moved, made_at, last_fwd, first_bwd, prefetch_at,
              host_bw, flops) -> tuple[float, float]:
    """The transfer timeline of the storages ``moved`` (group -> bytes): (stall, compute)
    seconds."""
    by_index = {n.index: n for n in graph.nodes}
    out_wait: dict[int, list[str]] = {}  # position -> copies to host that must be done
    in_wait: dict[int, list[str]] = {}
    start_out: dict[int, list[str]] = {}
    start_in: dict[int, list[str]] = {}
    for g in moved:
        made = made_at[g]
        start_out.setdefault(made, []).append(g)
        out_wait.setdefault(max(last_fwd.get(g, made), made) + 1, []).append(g)
        start_in.setdefault(prefetch_at[g], []).append(g)
        in_wait.setdefault(first_bwd[g], []).append(g)
    now = stall = compute = 0.0
    d2h_free = h2d_free = 0.0
    done_out: dict[str, float] = {}
    done_in: dict[str, float] = {}
    for k, idx in enumerate(order):
        for g in start_in.get(k, []):
            h2d_free = max(h2d_free, now) + moved[g] / host_bw
            done_in[g] = h2d_free
        ready = max([now] + [done_out.get(g, now) for g in out_wait.get(k, [])]
                    + [done_in.get(g, now) for g in in_wait.get(k, [])])
        stall += ready - now
        n = by_index[idx]
        out_elems = sum(graph.tensors[t].numel for t in n.outputs if t)
        step = max(2 * matrix_macs(n, graph.tensors), out_elems) / flops
        compute += step
        now = ready + step
        for g in start_out.get(k, []):
            d2h_free = max(d2h_free, now) + moved[g] / host_bw
            done_out[g] = d2h_free
    return stall, compute
