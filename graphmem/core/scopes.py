"""The workspaces of control-flow nodes: the tensor each If/Loop/Scan node writes in its
enclosing graph to hold its bodies' sub-arena (docs/plan-format.md, "Nested scopes").

Plain IR functions, shared by the planner (:mod:`graphmem.planning.scopes`), the plan
validator and the verifier, which rebuild the same graph from a plan's scopes.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from graphmem.core.ir import Graph, Node, Tensor


def workspace_name(graph: Graph, node: int) -> str:
    """The name of node ``node``'s workspace tensor: ``graphmem.workspace.<node>``, with
    ``_`` appended while a tensor of the model has that name."""
    if node in graph.workspaces:
        return graph.workspaces[node]
    name = f"graphmem.workspace.{node}"
    while name in graph.tensors:
        name += "_"
    return name


def without_workspaces(graph: Graph) -> Graph:
    """``graph`` as loaded: the workspaces :func:`with_workspaces` added taken out."""
    if not graph.workspaces:
        return graph
    names = set(graph.workspaces.values())
    nodes = tuple(Node(n.index, n.name, n.op_type, n.domain, n.inputs,
                       tuple(o for o in n.outputs if o not in names), n.attrs,
                       n.implicit_inputs) if n.index in graph.workspaces else n
                  for n in graph.nodes)
    tensors = {k: v for k, v in graph.tensors.items() if k not in names}
    return replace(graph, nodes=nodes, tensors=tensors, workspaces={})


def with_workspaces(graph: Graph, sizes: Mapping[int, int]) -> Graph:
    """``graph`` with each control-flow node of ``sizes`` writing its workspace tensor
    (uint8, ``sizes[node]`` bytes) as one more output; ``graph`` itself when it has none."""
    if not sizes:
        return graph
    graph = without_workspaces(graph)
    tensors = dict(graph.tensors)
    nodes, names = [], {}
    for n in graph.nodes:
        if n.index in sizes:
            ws = names[n.index] = workspace_name(graph, n.index)
            tensors[ws] = Tensor(ws, "uint8", (int(sizes[n.index]),), 8)
            n = Node(n.index, n.name, n.op_type, n.domain, n.inputs, n.outputs + (ws,),
                     n.attrs, n.implicit_inputs)
        nodes.append(n)
    return replace(graph, nodes=tuple(nodes), tensors=tensors, workspaces=names)


def is_workspace(graph: Graph, node: Node, name: str) -> bool:
    """Is ``name`` the workspace ``node`` writes in ``graph`` (with its workspaces)?"""
    return graph.workspaces.get(node.index) == name


def graph_for_plan(graph: Graph, plan) -> Graph:
    """The graph a plan with scopes was made for: ``graph`` with the workspaces the
    plan's scopes size (the largest arena of each node's bodies)."""
    if not graph.scopes:
        return graph
    sizes: dict[int, int] = {}
    for s in plan.scopes:
        sizes[s.node] = max(sizes.get(s.node, 0), s.plan.arena_bytes)
    return with_workspaces(graph, {i: sizes.get(i, 0) for i in graph.scopes})
