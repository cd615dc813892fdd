"""A budget on the model's local functions, checked before onnx's C++ inference sees them.

onnx's shape inference inlines every call of a model-local function (``ModelProto
.functions``) where it is made, so its work is the number of nodes after inlining, not
the number in the file: functions that each call the one below twice make 2**depth nodes
from a file of a few hundred bytes per level (issue 55: depth 24, a 4.8 KB file, ran
past 37 s in onnx's C++, where a signal is not acted on; depth 64 never ends), and a
function that calls itself recurses in it. :func:`check_functions` counts, from the
file's bytes and without inlining anything, the depth of the deepest chain of calls,
and the nodes after inlining (each function's count computed once), and refuses in one
line a model over :data:`MAX_DEPTH` or :data:`MAX_INLINED_NODES`, or whose functions
call each other in a cycle. A model without local functions costs one pass over the
model's top-level fields.
"""
from __future__ import annotations

from graphmem.errors import GraphmemError
from graphmem.frontend.protowire import Malformed, fields

# The deepest chain of calls of local functions, the graph's node counted as level 1
MAX_DEPTH = 64
# Nodes the graph's calls of local functions make once inlined (nodes of subgraphs
# included). onnx's inference took 0.17 s for 2**16 nodes of inlined Relus on the
# development machine: a model at the budget is inferred in seconds.
MAX_INLINED_NODES = 1 << 20

# ModelProto.graph, .functions; FunctionProto.name, .node, .domain, .overload;
# NodeProto.op_type, .attribute, .domain, .overload; AttributeProto.g, .graphs;
# GraphProto.node
_M_GRAPH, _M_FUNCTIONS = 7, 25
_F_NAME, _F_NODE, _F_DOMAIN, _F_OVERLOAD = 1, 7, 10, 13
_N_OP_TYPE, _N_ATTRIBUTE, _N_DOMAIN, _N_OVERLOAD = 4, 5, 7, 8
_A_G, _A_GRAPHS = 6, 11
_G_NODE = 1


def _text(value) -> str:
    return bytes(value).decode("utf-8", "replace")


def _calls(nodes) -> tuple[int, list[tuple[str, str, str]]]:
    """(nodes that are not calls of anything, the (domain, name, overload) each node
    calls), over ``nodes`` (NodeProto bytes) and their subgraphs' nodes."""
    plain, called = 0, []
    stack = list(nodes)
    while stack:
        node = stack.pop()
        op = domain = overload = ""
        for field, wire, value in fields(node):
            if wire != 2:
                continue
            if field == _N_OP_TYPE:
                op = _text(value)
            elif field == _N_DOMAIN:
                domain = _text(value)
            elif field == _N_OVERLOAD:
                overload = _text(value)
            elif field == _N_ATTRIBUTE:
                for afield, awire, avalue in fields(value):
                    if awire == 2 and afield in (_A_G, _A_GRAPHS):
                        stack.extend(v for f, w, v in fields(avalue)
                                     if f == _G_NODE and w == 2)
        called.append((domain, op, overload))
        plain += 1
    return plain, called


def _functions(data) -> dict[tuple[str, str, str], list]:
    """The model's local functions by (domain, name, overload): their nodes' bytes."""
    out: dict[tuple[str, str, str], list] = {}
    for field, wire, value in fields(data):
        if field != _M_FUNCTIONS or wire != 2:
            continue
        name = domain = overload = ""
        nodes = []
        for ffield, fwire, fvalue in fields(value):
            if fwire != 2:
                continue
            if ffield == _F_NAME:
                name = _text(fvalue)
            elif ffield == _F_DOMAIN:
                domain = _text(fvalue)
            elif ffield == _F_OVERLOAD:
                overload = _text(fvalue)
            elif ffield == _F_NODE:
                nodes.append(fvalue)
        out[(domain, name, overload)] = nodes  # the last of a name, as onnx keeps it
    return out


def check_functions(data, graph_nodes=None) -> None:
    """Refuse, in one line, a model whose local functions inline past the budget (see
    the module's docstring). ``data``: the model's bytes (a buffer: read in place);
    ``graph_nodes``: the graph's nodes as :mod:`graphmem.wire` records (read from
    ``data`` when not given)."""
    view = memoryview(data)
    try:
        functions = _functions(view)
        if not functions:
            return
        if graph_nodes is None:
            graph = b"".join(bytes(v) for f, w, v in fields(view) if f == _M_GRAPH and w == 2)
            top = _calls([v for f, w, v in fields(graph) if f == _G_NODE and w == 2])[1]
        else:
            top = _wire_calls(graph_nodes)
    except Malformed:
        return  # the model's bytes are refused by the reader and the checker
    body = {key: _calls(nodes) for key, nodes in functions.items()}
    cost: dict[tuple[str, str, str], tuple[int, int]] = {}  # key -> (nodes, depth)

    def size(key) -> tuple[int, int]:
        # iterative over the call graph (a chain of MAX_DEPTH levels, no Python recursion)
        done = cost.get(key)
        if done is not None:
            return done
        stack = [(key, 0)]
        on_path = {key}
        while stack:
            k, i = stack[-1]
            _, called = body[k]
            if i < len(called):
                stack[-1] = (k, i + 1)
                callee = _callee(called[i], functions)
                if callee is None or callee in cost:
                    continue
                if callee in on_path:
                    raise GraphmemError(
                        f"local function {_name(callee)} calls itself (through "
                        f"{' -> '.join(_name(s) for s, _ in stack)} -> {_name(callee)}); "
                        "refused: onnx's shape inference would recurse without end")
                if len(stack) >= MAX_DEPTH:
                    raise GraphmemError(
                        f"local functions nested more than {MAX_DEPTH} calls deep "
                        f"({_name(key)} calls down to {_name(callee)}); refused: the "
                        f"budget of shape inference is {MAX_DEPTH} levels")
                stack.append((callee, 0))
                on_path.add(callee)
                continue
            stack.pop()
            on_path.discard(k)
            plain, called = body[k]
            nodes, depth = 0, 1
            for c in called:
                callee = _callee(c, functions)
                if callee is None:
                    nodes += 1
                else:
                    n, d = cost[callee]
                    nodes += n
                    depth = max(depth, d + 1)
                if nodes > MAX_INLINED_NODES:
                    break
            cost[k] = (min(nodes, MAX_INLINED_NODES + 1), depth)
        return cost[key]

    total = 0  # the graph's own nodes are bounded by the file's size; calls are not
    for c in top:
        callee = _callee(c, functions)
        if callee is None:
            continue
        n, d = size(callee)
        if d + 1 > MAX_DEPTH:
            raise GraphmemError(f"local functions nested {d + 1} calls deep from the graph "
                                f"(through {_name(callee)}); refused: the budget of shape "
                                f"inference is {MAX_DEPTH} levels")
        total += n
        if total > MAX_INLINED_NODES:
            raise GraphmemError(
                f"the model's local functions make more than {MAX_INLINED_NODES:,} nodes "
                f"once inlined (one call of {_name(callee)} alone makes "
                f"{'more than ' if n > MAX_INLINED_NODES else ''}"
                f"{min(n, MAX_INLINED_NODES):,}); refused: onnx's shape inference inlines "
                f"every call, and its budget is {MAX_INLINED_NODES:,} nodes")


def _wire_calls(nodes) -> list[tuple[str, str, str]]:
    """The (domain, op, overload) of ``nodes`` (wire records) and of their subgraphs'."""
    out = []
    stack = list(nodes)
    while stack:
        n = stack.pop()
        out.append((n.domain, n.op_type, ""))
        for a in n.attrs:
            for sub in a.subgraphs:
                stack.extend(sub.nodes)
    return out


def _callee(call, functions):
    """The local function a node of (domain, op, overload) calls, or None."""
    if call in functions:
        return call
    domain, op, overload = call
    # a graph node's overload is not among the loader's records: any of the name
    return next((k for k in functions if k[0] == domain and k[1] == op), None)


def _name(key) -> str:
    domain, name, overload = key
    return repr(f"{domain + '.' if domain else ''}{name}{':' + overload if overload else ''}")
