"""Nested scopes: the bodies of If/Loop/Scan nodes planned into sub-arenas.

Each body (:class:`~graphmem.core.ir.Scope`) is planned by the normal pipeline as a
graph of its own. In the enclosing graph the control-flow node then writes one more
tensor, its *workspace*: as many bytes as the largest of its bodies' arenas, live only
at the node's own step, placed by the enclosing plan like any other tensor. A body
tensor's place in the one arena is the workspace's offset plus its offset in the body's
plan (docs/plan-format.md, "Nested scopes").
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from graphmem.core.ir import Graph
from graphmem.core.scopes import with_workspaces, workspace_name
from graphmem.plan.format import ScopePlan
from graphmem.planning.context import aligned_total


def naive_bytes(graph: Graph, alignment: int) -> int:
    """Every arena tensor of a body its own aligned buffer, nested bodies opaque too."""
    sized = _naive_workspaces(graph, alignment)
    return aligned_total([sized.tensors[t].bytes for t in sized.arena_tensors()], alignment)


def _naive_workspaces(graph: Graph, alignment: int) -> Graph:
    """``graph`` with each control-flow node's workspace sized by :func:`naive_bytes` of
    its largest body."""
    return with_workspaces(graph, {i: max(naive_bytes(s.graph, alignment) for s in ss)
                                   for i, ss in graph.scopes.items()})


def plan_scopes(graph: Graph, plan_body: Callable[[Graph], object]):
    """Plan every body of ``graph``'s control-flow nodes with ``plan_body`` (a graph ->
    pipeline Result); return (the ScopePlans, the graph with its workspaces)."""
    made, sizes = [], {}
    for idx in sorted(graph.scopes):
        for s in graph.scopes[idx]:
            result = plan_body(s.graph)
            made.append(ScopePlan(idx, s.attr, workspace_name(graph, idx), result.plan))
            sizes[idx] = max(sizes.get(idx, 0), result.plan.arena_bytes)
    return tuple(made), with_workspaces(graph, sizes)


def opaque_graph(graph: Graph, alignment: int = 64) -> Graph:
    """``graph`` with each control-flow node's workspace as large as its largest body
    with every tensor in its own buffer (nested bodies the same), and no scopes left to
    plan: what a planner that does not look inside the bodies must reserve for them.
    Planned, it measures what planning the bodies saves."""
    return replace(_naive_workspaces(graph, alignment), scopes={})
