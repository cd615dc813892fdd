"""Where the forward pass of a training step can be cut (:func:`cuts`), and what the
segments between cuts cost (:func:`segment_model`): what every checkpoint chooser
reads, Chen's and the balanced cuts (:mod:`.recompute`) and the program
(:mod:`.optimal`).
"""
from __future__ import annotations

import onnx

from graphmem.training.build import TrainingGraph


def forward_pass(g: onnx.GraphProto):
    """Forward nodes, and the activations they make: tensors computed from constants
    only (the ``Constant`` nodes of a Clip's bounds) are not activations: they are
    neither checkpoint candidates nor recomputed."""
    fwd = [n for n in g.node if n.name.startswith("f:")]
    static = {i.name for i in g.initializer}
    for n in fwd:
        if all(t in static for t in n.input if t):
            static.update(t for t in n.output if t)
    produced = {t: n for n in fwd for t in n.output if t not in static}
    return fwd, produced


# A cut may hold small tensors besides its main one (BERT's extended attention mask,
# read by every layer): at most this fraction of the main tensor's bytes.
CUT_SLACK = 1 / 8


def cuts(tg: TrainingGraph) -> list[tuple[str, tuple[str, ...]]]:
    """Where the forward pass can be cut: ``(main, live)`` after each node whose output
    ``main`` is live with only small other activations (together at most
    :data:`CUT_SLACK` of ``main``'s bytes), in forward order; ``live`` is everything
    live there, ``main`` first. Keeping ``live`` lets backward recompute what follows.

    Without the slack these are the articulation tensors (ResNet block outputs, not the
    tensors inside a block); with it a transformer's layer outputs are cuts too, though
    the attention mask made from the input before the first layer is read by all.
    """
    from graphmem.frontend.reader import from_model

    g = tg.model.graph
    fwd, produced = forward_pass(g)
    tensors = from_model(tg.model, check=False).tensors
    size = {t: tensors[t].bytes if t in tensors else 0 for t in produced}
    last_read: dict[str, int] = {}
    for i, n in enumerate(fwd):
        for t in n.input:
            if t in produced:
                last_read[t] = i
    out, live = [], set()
    for i, n in enumerate(fwd):
        live = {t for t in live if last_read.get(t, -1) > i}
        live.update(t for t in n.output if last_read.get(t, -1) > i)
        main = n.output[0]
        if main in live and size[main] > 0 and \
                sum(size[t] for t in live if t != main) <= CUT_SLACK * size[main]:
            out.append((main, (main, *sorted(live - {main}))))
    return out


def segment_model(tg: TrainingGraph, found: list) -> dict:
    """What the segment models (Chen's, :func:`.recompute.choose_balanced`; the program of
    :mod:`.optimal`) see of the forward pass: ``p``, the forward position after which
    each cut sits (index 0 the start, -1 the end); ``kept``, the bytes each cut keeps;
    ``made`` and ``macs``, the activation bytes and matrix MACs made up to each
    position (cumulative, ``[0]`` first); ``pos``, each forward tensor's position."""
    from graphmem.analysis.macs import matrix_macs
    from graphmem.frontend.reader import from_model

    graph = from_model(tg.model, check=False)
    fwd, produced = forward_pass(tg.model.graph)
    size = {t: graph.tensors[t].bytes if t in graph.tensors else 0 for t in produced}
    by_name = {n.name: n for n in graph.nodes}
    pos = {t: i for i, n in enumerate(fwd) for t in n.output}
    made, macs = [0], [0]
    for n in fwd:
        made.append(made[-1] + sum(size.get(t, 0) for t in n.output))
        node = by_name.get(n.name)
        macs.append(macs[-1] + (matrix_macs(node, graph.tensors) if node is not None else 0))
    return {"p": [-1] + [pos[main] for main, _ in found] + [len(fwd) - 1],
            "kept": [0] + [sum(size.get(t, 0) for t in live) for _, live in found] + [0],
            "made": made, "macs": macs, "pos": pos}
