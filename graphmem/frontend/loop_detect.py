"""Which Loops the loader plans at bounds (issue 53), told from their bodies before any
inference: a Loop that concatenates onto a carried value (it grows each iteration:
graphmem/frontend/loop_growth.py), or one with scan outputs whose body condition is
not its input passed on (it runs as many iterations as that condition lets:
graphmem/frontend/loop_trips.py). Either makes the data bounds apply
(graphmem/frontend/data_bounds.py's ``has_data_dependent_ops``).
"""
from __future__ import annotations


def loop_needs_bounds(state) -> bool:
    """Does a Loop of the graph (or of a body) concatenate onto one of its carried
    values (a Concat reading a formal input from the third on, through Identity or
    Cast), or have scan outputs and a body condition that is not its input passed on?
    The first grows each iteration (graphmem/frontend/loop_growth.py), the second runs
    as many iterations as its condition lets (graphmem/frontend/loop_trips.py): both are
    planned at a bound, and the loader's data bounds apply."""
    found = getattr(state, "loop_needs_bounds", None)
    if found is None:
        found = state.loop_needs_bounds = _any_loop_bound(state)
    return found


def _any_loop_bound(state) -> bool:
    import onnx
    for n in state.g.nodes:
        for a in n.attrs:
            raw = bytes(a.raw) if a.type == 5 else b""  # GRAPH: the AttributeProto's bytes
            if b"Loop" in raw or n.op_type == "Loop" and raw:
                body = onnx.AttributeProto.FromString(raw).g
                if _needs_bound(n.op_type, len(n.outputs), body):
                    return True
    return False


def _needs_bound(op: str, outputs: int, body) -> bool:
    if op == "Loop":
        carried = {vi.name for vi in body.input[2:]}
        producers = {o: nd for nd in body.node for o in nd.output if o}
        for nd in body.node:
            if nd.op_type != "Concat":
                continue
            for x in nd.input:
                while x in producers and producers[x].op_type in ("Identity", "Cast"):
                    x = producers[x].input[0]
                if x in carried:
                    return True
        if outputs > len(carried) and len(body.input) > 1 and body.output:
            x = body.output[0].name
            while x in producers and producers[x].op_type == "Identity":
                x = producers[x].input[0]
            if x != body.input[1].name:
                return True
    return any(_needs_bound(nd.op_type, len(nd.output), a.g) for nd in body.node
               for a in nd.attribute if a.type == 5)  # GRAPH
