"""graphmem's MAC count against PyTorch's FlopCounterMode, forward and forward+backward.

    python -m tools.training.macs_vs_pytorch [--batch 32] [resnet18] [resnet50]

Needs torch (``pip install torch==2.13.0``; not a graphmem dependency). For each network
the same architecture is counted twice:

- **PyTorch**: the ``torch.nn`` module in training mode on the meta device (shapes only),
  one step (forward, cross-entropy, ``backward()``), under
  ``torch.utils.flop_counter.FlopCounterMode``; its FLOPs / 2 are MACs. It counts the
  matrix ops only (``convolution``, ``convolution_backward``, ``addmm``, ``mm``, ``bmm``,
  ...), as graphmem's convention does (``graphmem/analysis/macs.py``).
- **graphmem**: the ONNX graph of the same network (resnet50: the Model Zoo graph;
  resnet18: the module exported with torch's TorchScript exporter), its training step
  built by ``build_training`` (BatchNormalization in training mode, cross-entropy), its
  MACs by phase from :func:`graphmem.analysis.macs.macs_by_phase`.

It prints both side by side, by phase and by kind (convolutions, matrix products), and,
to show the two graphs are the same network, compares the forward's per-layer MACs
(sorted lists of every conv's and every fully connected layer's MACs). Where the counts
differ the difference is named (an AveragePool's adjoint, which graphmem computes with a
ConvTranspose of ones and PyTorch with a pooling kernel it does not count); an
unexplained difference makes the exit status 1.
"""
from __future__ import annotations

import argparse
import io
import sys
from collections import Counter


NETS = ("resnet18", "resnet50")


# ------------------------------------------------------------------------- torch side

def torch_module(name):
    from tools.training import torch_nets
    return torch_nets.NETS[name]()


def torch_counts(name, batch):
    """{"forward": {aten op: MACs}, "backward": {...}} for one training step, and the
    module's per-layer forward MACs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = torch_module(name).train()
        x = torch.empty(batch, 3, 224, 224)
        target = torch.zeros(batch, dtype=torch.int64)
    counts = {}
    with FlopCounterMode(display=False) as fwd:
        loss = torch.nn.functional.cross_entropy(model(x), target)
    counts["forward"] = {str(k).split(".")[-1]: v // 2
                         for k, v in fwd.get_flop_counts()["Global"].items()}
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    counts["backward"] = {str(k).split(".")[-1]: v // 2
                          for k, v in bwd.get_flop_counts()["Global"].items()}
    per_layer = sorted(v // 2 for k, d in fwd.get_flop_counts().items()
                       if k != "Global" and _is_leaf(model, k) for v in d.values())
    return counts, per_layer


def _is_leaf(model, path):
    """A flop-counter module key (``ResNet.layer1.0.conv1``) naming a conv or linear."""
    import torch
    m = model
    for part in path.split(".")[1:]:
        m = getattr(m, part, None)
        if m is None:
            return False
    return isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))


# ---------------------------------------------------------------------- graphmem side

def onnx_model(name):
    import onnx

    if name == "resnet50":
        from graphmem.frontend.zoo import zoo_path
        return onnx.load(str(zoo_path("resnet50")))
    import torch
    torch.manual_seed(0)
    model = torch_module(name).eval()
    f = io.BytesIO()
    torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), f, dynamo=False,
                      input_names=["x"], output_names=["logits"], opset_version=17)
    return onnx.load_from_string(f.getvalue())


def graphmem_counts(name, batch):
    """{"forward": {op type: MACs}, "backward": {...}}, the forward's per-layer MACs,
    and the first conv's input gradient MACs if the graph computes one."""
    from graphmem.analysis.macs import matrix_macs, phase
    from graphmem.training.build import build_training
    from graphmem.training.report import load_training

    from onnx import numpy_helper

    tg = build_training(onnx_model(name), batch)
    graph = load_training(tg)
    ones = {i.name for i in tg.model.graph.initializer
            if i.dims and (numpy_helper.to_array(i) == 1).all()}
    counts = {"forward": Counter(), "backward": Counter()}
    per_layer = []
    for n in graph.nodes:
        m = matrix_macs(n, graph.tensors)
        if not m:
            continue
        # rules.py's AveragePool adjoint: a grouped ConvTranspose of a ones kernel
        op = POOL_ADJOINT if n.op_type == "ConvTranspose" and n.inputs[1] in ones else n.op_type
        counts[phase(n)][op] += m
        if phase(n) == "forward":
            per_layer.append(m)
    return counts, sorted(per_layer)


# ----------------------------------------------------------------------------- compare

CONV = {"Conv", "ConvTranspose", "convolution", "_convolution", "convolution_backward"}
POOL_ADJOINT = "AveragePool adjoint (ConvTranspose of ones)"
# What graphmem counts and PyTorch does not, and why.
EXPLAINED = {
    "pool adjoints": "graphmem spreads an AveragePool's gradient over its windows with a "
                     "grouped ConvTranspose of a ones kernel (rules.py): a convolution "
                     "node, so counted, 1 MAC per input-gradient element per window tap; "
                     "PyTorch's avg_pool2d_backward is not a matrix op and not counted",
}


def kind(op):
    if op == POOL_ADJOINT:
        return "pool adjoints"
    return "convolutions" if op in CONV else "matrix products"


def by_kind(counts):
    out = Counter()
    for op, v in counts.items():
        out[kind(op)] += v
    return out


def g(n):
    return f"{n:,}"


def compare(name, batch) -> bool:
    theirs, their_layers = torch_counts(name, batch)
    ours, our_layers = graphmem_counts(name, batch)
    print(f"\n## {name}, batch {batch} (training step: forward, cross-entropy, backward)\n")
    same_layers = their_layers == our_layers
    print(f"forward layers (conv + fully connected): graphmem {len(our_layers)}, PyTorch "
          f"{len(their_layers)}; per-layer MACs "
          + ("identical" if same_layers else "DIFFER"))
    if not same_layers:
        extra = Counter(our_layers) - Counter(their_layers)
        missing = Counter(their_layers) - Counter(our_layers)
        print(f"  only in graphmem: {sorted(extra.elements())[:10]}")
        print(f"  only in PyTorch:  {sorted(missing.elements())[:10]}")
    print()
    print("| phase | kind | graphmem MACs | PyTorch FLOPs/2 | graphmem - PyTorch |")
    print("|---|---|---:|---:|---:|")
    totals = {}
    for ph in ("forward", "backward"):
        ok, tk = by_kind(ours[ph]), by_kind(theirs[ph])
        for k in sorted(set(ok) | set(tk)):
            print(f"| {ph} | {k} | {g(ok[k])} | {g(tk[k])} | {g(ok[k] - tk[k])} |")
        totals[ph] = (sum(ok.values()), sum(tk.values()))
        print(f"| **{ph}** | all | **{g(totals[ph][0])}** | **{g(totals[ph][1])}** | "
              f"{g(totals[ph][0] - totals[ph][1])} |")
    fb = tuple(totals["forward"][i] + totals["backward"][i] for i in (0, 1))
    print(f"| **forward+backward** | all | **{g(fb[0])}** | **{g(fb[1])}** | "
          f"{g(fb[0] - fb[1])} ({100 * (fb[0] - fb[1]) / fb[1]:+.4f}%) |")
    print(f"\nPyTorch's ops: forward {dict(theirs['forward'])}, "
          f"backward {dict(theirs['backward'])}")
    print(f"graphmem's ops: forward {dict(ours['forward'])}, backward {dict(ours['backward'])}")
    explained = True
    for ph, (o, t) in totals.items():
        ok, tk = by_kind(ours[ph]), by_kind(theirs[ph])
        known = sum(ok[k] - tk[k] for k in EXPLAINED)
        if o == t:
            print(f"{ph}: equal.")
            continue
        print(f"{ph}: graphmem counts {o - t:,} MACs more ({100 * (o - t) / t:+.4f}%)"
              + (":" if known else ": not explained."))
        for k, why in EXPLAINED.items():
            if ok[k] - tk[k]:
                print(f"  {ok[k] - tk[k]:,} in {k}: {why}")
        if o - t != known:
            explained = False
            print(f"  {o - t - known:,} not explained.")
    return explained and same_layers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("nets", nargs="*", metavar="NET", help=f"default: {' '.join(NETS)}")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("needs torch: pip install torch==2.13.0", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}; graphmem MACs = matrix ops (graphmem/analysis/macs.py)")
    bad = [n for n in args.nets if n not in NETS]
    if bad:
        ap.error(f"unknown network {bad[0]!r}; choose from {', '.join(NETS)}")
    ok = [compare(n, args.batch) for n in args.nets or NETS]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
