"""Loop-carried values that grow each iteration (issue 53).

torchvision's Mask R-CNN pastes each detection's mask in a Loop: ``res`` starts as
zeros ``[0, H, W]`` and each iteration is ``res = Concat(res, mask[1, H, W])``, so
after ``T`` iterations it is ``[T, H, W]``. Such a value is planned at a bound,
``initial + T x g`` on its axis, where ``T`` bounds the trip count and ``g`` the rows
one iteration adds. The growth is proven from the body, not guessed from a sample:

- the body's output for the value is a ``Concat`` (through ``Identity`` nodes) of the
  value's formal input (through ``Identity`` nodes or ``Cast`` to its own type) and
  other tensors none of which is computed from a growing carried value (by data or by
  shape, nested bodies' reads included): its output's dim on the axis is the input's
  plus theirs, which do not depend on the carried value (their bound ``g`` is what
  inference gives them, at the bounds of the body's own symbols);
- the body inferred a second time with the value at another size (the size it is
  planned at) must grow by exactly ``g`` again, and every other body tensor computed
  from the value must keep its shape (nothing else reads its size).

Anything else (a value that shrinks, grows on two axes, grows through another op, or
whose growth reads the carried value) is refused in one line naming the Loop and the
value.
"""
from __future__ import annotations

from typing import NamedTuple

import onnx
from onnx import helper

from graphmem.errors import GraphmemError

PASS = ("Identity",)


class Growth(NamedTuple):
    """How one carried value grows: ``step`` more on ``axis`` each iteration (at most)."""
    index: int  # its position among the Loop's carried values
    axis: int
    initial: int  # its initial value's dim on the axis
    step: int  # g: the most one iteration adds
    concat: int  # the body node (index) of the Concat
    formal_in: str
    formal_out: str
    chain: tuple[str, ...]  # the body tensors whose size is the value's: input to output


def changed(carried, outs) -> list[int]:
    """The carried values whose body output differs from their initial type."""
    return [j for j, (t, o) in enumerate(zip(carried, outs))
            if o is None or (o.dtype, o.shape) != (t.dtype, t.shape)]


def growth(label: str, body: onnx.GraphProto, scope, carried, outs, which) -> dict[int, Growth]:
    """The :class:`Growth` of each carried value of ``which`` (indices into ``carried``:
    those whose body output ``outs[j]`` differs from ``carried[j]``), proven from the
    body's structure and its first inference; refused in one line where it is not a
    linear growth by a Concat."""
    fin, fout = scope.formal_inputs[2:], scope.formal_outputs[1:]
    growing_inputs = {fin[j] for j in which}
    producers = {o: (i, nd) for i, nd in enumerate(body.node) for o in nd.output if o}
    found = {}
    for j in which:
        t, o, name = carried[j], outs[j], fout[j]
        need = ("graphmem plans a loop-carried value that keeps its shape, or grows on one "
                "axis by a Concat onto it of tensors not computed from it")
        what = f"{label}: loop-carried value {name!r}"
        if o is None:
            raise GraphmemError(f"{what} has no static shape; {need}")
        if o.dtype != t.dtype or len(o.shape) != len(t.shape):
            raise GraphmemError(f"{what} is {o.dtype}{list(o.shape)}, its initial value "
                                f"{t.dtype}{list(t.shape)}; {need}")
        axes = [a for a, (x, y) in enumerate(zip(t.shape, o.shape)) if x != y]
        if len(axes) != 1:
            raise GraphmemError(f"{what} changes from {list(t.shape)} to {list(o.shape)} on "
                                f"{len(axes)} axes; {need}")
        axis = axes[0]
        if o.shape[axis] < t.shape[axis]:
            raise GraphmemError(f"{what} shrinks from {list(t.shape)} to {list(o.shape)} in "
                                f"an iteration; {need}")
        chain_out = [name]
        seen = name
        while seen in producers and producers[seen][1].op_type in PASS:
            seen = producers[seen][1].input[0]
            chain_out.append(seen)
        at = producers.get(seen)
        if at is None or at[1].op_type != "Concat":
            op = at[1].op_type if at else "no node"
            raise GraphmemError(f"{what} grows from {list(t.shape)} to {list(o.shape)} "
                                f"through {op}, not a Concat onto it; {need}")
        ci, concat = at
        cat_axis = next((helper.get_attribute_value(a) for a in concat.attribute
                         if a.name == "axis"), None)
        if cat_axis is None or cat_axis % len(o.shape) != axis:
            raise GraphmemError(f"{what} grows on axis {axis}, its Concat (body node {ci}) "
                                f"joins on axis {cat_axis}; {need}")
        onto = []
        for x in concat.input:
            path = _passed(x, fin[j], producers, t.dtype)
            if path is not None:
                onto.append(path)
        if len(onto) != 1:
            raise GraphmemError(f"{what}: its Concat (body node {ci}) reads its formal input "
                                f"{fin[j]!r} {len(onto)} times; {need}")
        reads_carried = computed_from(body, growing_inputs)
        for x in concat.input:
            if x and x not in onto[0] and x in reads_carried:
                raise GraphmemError(f"{what}: its Concat (body node {ci}) adds {x!r}, which "
                                    f"is computed from a growing loop-carried value; {need}")
        chain = tuple(dict.fromkeys(onto[0][::-1] + chain_out[::-1]))
        found[j] = Growth(j, axis, t.shape[axis], o.shape[axis] - t.shape[axis], ci,
                          fin[j], name, chain)
    return found


def _passed(x: str, source: str, producers, dtype: str) -> list[str] | None:
    """The tensors from ``x`` back to ``source`` through Identity nodes and Casts to
    ``dtype`` (``source`` last), or None where ``x`` is not such a copy of it."""
    from graphmem.core.dtypes import ENUM_BY_NAME
    path = [x]
    while x != source:
        at = producers.get(x)
        if at is None:
            return None
        nd = at[1]
        if nd.op_type == "Cast":
            to = next((a.i for a in nd.attribute if a.name == "to"), None)
            if to != ENUM_BY_NAME.get(dtype):
                return None
        elif nd.op_type not in PASS:
            return None
        x = nd.input[0]
        path.append(x)
    return path


def computed_from(body: onnx.GraphProto, sources: set[str]) -> set[str]:
    """The body tensors computed from ``sources`` (by data or shape), a nested body's
    reads of them included."""
    from graphmem.frontend.body_reads import outer_reads
    found = set(sources)
    for nd in body.node:
        reads = [t for t in nd.input if t]
        for a in nd.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                reads.extend(outer_reads(a.g))
        if any(t in found for t in reads):
            found.update(o for o in nd.output if o)
    return found


def check_again(label: str, body: onnx.GraphProto, first, second, grown: dict[int, Growth],
                sizes: dict[int, int]) -> None:
    """The body inferred again (``second``) with each growing value's formal input at
    ``sizes[j]`` on its axis: each must grow by exactly its step again, and every other
    body tensor computed from a growing value must have kept its shape."""
    allowed = {t for g in grown.values() for t in g.chain}
    for j, g in grown.items():
        o = second.graph.tensors.get(g.formal_out)
        t = first.graph.tensors[g.formal_out]
        want = tuple(sizes[j] + g.step if a == g.axis else d for a, d in enumerate(t.shape))
        if o is None or o.shape != want:
            got = list(o.shape) if o is not None else "of no static shape"
            raise GraphmemError(
                f"{label}: loop-carried value {g.formal_out!r} grows by {g.step} from its "
                f"initial size but is {got} from {sizes[j]} (not {list(want)}); graphmem "
                "plans a loop-carried value that grows by the same step each iteration")
    for g in grown.values():
        for name in sorted(computed_from(body, {g.formal_in}) - allowed):
            a, b = first.graph.tensors.get(name), second.graph.tensors.get(name)
            if a is None or b is None or a.shape == b.shape:
                continue
            value = g.formal_in
            raise GraphmemError(
                f"{label}: body tensor {name!r} is {list(a.shape)} or {list(b.shape)} as "
                f"loop-carried value {value!r} grows; graphmem plans a growing "
                "loop-carried value only where nothing but its Concat reads its size")


def without_types(body: onnx.GraphProto, grown: dict[int, Growth]) -> onnx.GraphProto:
    """``body`` less the value_info of the tensors computed from its growing values (the
    enclosing graph's inference wrote them at the initial sizes), for inferring again."""
    stale = computed_from(body, {g.formal_in for g in grown.values()})
    out = onnx.GraphProto()
    out.CopyFrom(body)
    kept = [vi for vi in out.value_info if vi.name not in stale]
    del out.value_info[:]
    out.value_info.extend(kept)
    return out
