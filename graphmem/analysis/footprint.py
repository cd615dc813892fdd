"""The whole footprint: every part of the memory a run holds, as one stack with its total.

One shape for inference and for a training step, so that the terminal, JSON and HTML
draw both the same way (and side by side)::

    {"kind": "inference", "title": ..., "total_bytes": N,
     "parts": [{"key": "weights", "label": "weights (as stored)", "bytes": n, "note": ...},
               ...]}

The parts add up to ``total_bytes``. Inference: weights, workspace, the activation
arena (:func:`inference`). A training step: weights (and master weights), optimizer
state, folded constants, and the arena split at its peak into what is kept for
backward, gradients, backward's own tensors and the rest
(:func:`graphmem.training.footprint.training`).
"""
from __future__ import annotations


def part(key: str, label: str, nbytes: int, note: str = "") -> dict:
    return {"key": key, "label": label, "bytes": int(nbytes), "note": note}


def stack(kind: str, title: str, parts: list[dict], keep: tuple[str, ...] = ()) -> dict:
    """A footprint of ``parts`` (those of 0 bytes left out, unless their key is in
    ``keep``), with their total."""
    kept = [p for p in parts if p["bytes"] > 0 or p["key"] in keep]
    return {"kind": kind, "title": title, "total_bytes": sum(p["bytes"] for p in kept),
            "parts": kept}


# What each workspace rule counts (graphmem.analysis.workspace).
WORKSPACE_NOTES = {
    "mlas": "the largest working buffer ONNX Runtime's CPU convolution (MLAS) allocates",
    "im2col": "one unfolded image of the largest convolution",
    "none": "no working buffer counted (--workspace none)",
}


def workspace_note(totals: dict) -> str:
    """What the workspace of a report's ``totals`` is, in words."""
    rule = totals.get("workspace_rule", "im2col")
    note = WORKSPACE_NOTES.get(rule, rule)
    threads = totals.get("workspace_threads", 1)
    if rule == "mlas":
        note += f", for {threads} thread{'s' if threads != 1 else ''}"
    return note + (", reused by every node" if rule != "none" else "")


def inference(totals: dict, title: str = "inference") -> dict:
    """The inference footprint of a report's ``totals`` (:func:`graphmem.analysis.breakdown.totals`):
    weights as stored, the convolution workspace (under the report's rule), the
    activation arena; its total is ``totals["total_bytes"]``."""
    rule = totals.get("workspace_rule", "im2col")
    return stack("inference", title, [
        part("weights", "weights (as stored)", totals["weight_bytes"],
             "initializers and folded constants the running nodes read"),
        part("workspace", f"workspace ({rule})", totals["workspace_bytes"],
             workspace_note(totals) if totals["workspace_bytes"] else ""),
        part("arena", "activation arena", totals["arena_bytes"],
             "every activation, planned into one buffer"),
    ])


_BINARY = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_bytes(n: int | float) -> str:
    """A size in the binary unit that reads best: ``512 B``, ``3.50 KiB``, ``6.89 MiB``,
    ``2.04 GiB`` (the largest unit that gives at least 1; two decimals): how every view
    writes a size beside its exact bytes."""
    for unit, scale in _BINARY:
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{int(n):,} B"
