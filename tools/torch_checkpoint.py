"""PyTorch's own training memory next to graphmem's plan, with and without
``torch.utils.checkpoint.checkpoint_sequential`` (needs torch; not a README command).

    python tools/torch_checkpoint.py --batch 32 resnet18 mobilenet_v2

For each network (the torch.nn definitions in tools/export_corpus.py, BatchNorm folded
into the convolutions as the ONNX export folds it, eval mode, loss = sum of the
logits) it measures one training step on the CPU:

- *saved*: the bytes of the distinct storages autograd saves for backward, through
  ``torch.autograd.graph.saved_tensors_hooks`` (parameters excluded);
- *peak*: the largest total of live allocations during the step, from the profiler's
  memory accounting (``profile_memory=True``: each op's own allocations and frees, in
  start order), counted from the step's start: activations, autograd's temporaries and
  the gradients, not the weights or the input -- what graphmem's planned arena holds;

plain and with ``checkpoint_sequential`` at the segment count graphmem's
``--recompute sqrt`` chose (and at sqrt of the module count), then graphmem's plain and
``--recompute sqrt`` arenas of the same network exported to ONNX.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MIB = 2 ** 20


def fused(module):
    """``module`` with every Conv2d -> BatchNorm2d pair folded (eval mode)."""
    import torch
    from torch import nn
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    module.eval()
    for parent in module.modules():
        names = list(parent._modules)
        for a, b in zip(names, names[1:]):
            ca, cb = parent._modules[a], parent._modules[b]
            if isinstance(ca, nn.Conv2d) and isinstance(cb, nn.BatchNorm2d):
                parent._modules[a] = fuse_conv_bn_eval(ca, cb)
                parent._modules[b] = nn.Identity()
        for a in names:  # BasicBlock: conv1/bn1, conv2/bn2 are attributes, not a sequence
            if a.startswith("conv") and a.replace("conv", "bn") in parent._modules:
                bn = a.replace("conv", "bn")
                if isinstance(parent._modules[bn], nn.BatchNorm2d):
                    parent._modules[a] = fuse_conv_bn_eval(parent._modules[a],
                                                           parent._modules[bn])
                    parent._modules[bn] = nn.Identity()
    for p in module.parameters():
        p.requires_grad_(True)
    return module


def as_sequence(name: str, module):
    """The network as an ``nn.Sequential`` for ``checkpoint_sequential``."""
    import torch
    from torch import nn
    if name == "resnet18":
        m = module
        return nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, *m.layer1, *m.layer2,
                             *m.layer3, *m.layer4, m.avgpool, nn.Flatten(1), m.fc)
    return nn.Sequential(*module.features, nn.AdaptiveAvgPool2d(1), nn.Flatten(1),
                         *module.classifier)


def measure(seq, x, segments: int | None) -> dict:
    """One training step: saved bytes and the peak of live allocations."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.checkpoint import checkpoint_sequential

    params = {p.untyped_storage().data_ptr() for p in seq.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen.setdefault(s.data_ptr(), s.nbytes())
        return t

    for p in seq.parameters():
        p.grad = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            if segments:
                out = checkpoint_sequential(seq, segments, x, use_reentrant=False)
            else:
                out = seq(x)
        out.sum().backward()
    # Each op's own allocations and frees (self_cpu_memory_usage; frees outside any op
    # are "[memory]" events), in start order: a timeline at op granularity (a temporary
    # an op allocates and frees itself is not seen).
    events = sorted((e for e in prof.events() if e.self_cpu_memory_usage),
                    key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:
        live += e.self_cpu_memory_usage
        peak = max(peak, live)
    return {"saved": sum(seen.values()), "peak": peak}


def graphmem_arenas(name: str, module, batch: int) -> tuple[int, int, int]:
    """Plain and ``--recompute sqrt`` planned arenas of the ONNX export, and the number
    of segments sqrt chose."""
    import onnx
    import torch
    from graphmem.training.build import build_training
    from graphmem.training.recompute import recompute_planned
    from graphmem.training.report import load_training, plan_training

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.onnx"
        with torch.no_grad():
            torch.onnx.export(module, (torch.randn(2, 3, 224, 224),), str(path), dynamo=False,
                              opset_version=17, input_names=["pixel_values"],
                              output_names=["logits"], do_constant_folding=True,
                              dynamic_axes={"pixel_values": {0: "batch"},
                                            "logits": {0: "batch"}})
        tg = build_training(onnx.load(str(path)), batch, loss="sum")
    plain, _ = plan_training(load_training(tg))
    _, _, result, _, info = recompute_planned(tg, "sgd", batch)
    return plain.plan.arena_bytes, result.plan.arena_bytes, info["segments"]


def main() -> None:
    import torch
    from export_corpus import vision_models

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["resnet18", "mobilenet_v2"])
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    ResNet18, MobileNetV2 = vision_models()
    print("| network | PyTorch saved MiB | PyTorch peak MiB | checkpoint_sequential "
          "(segments): peak MiB | graphmem plain arena MiB | graphmem --recompute sqrt "
          "(segments): arena MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.models:
        module = fused(ResNet18() if name == "resnet18" else MobileNetV2())
        seq = as_sequence(name, module)
        x = torch.randn(args.batch, 3, 224, 224)
        plain_gm, sqrt_gm, segs = graphmem_arenas(name, module, args.batch)
        base = measure(seq, x, None)
        cps = []
        for k in sorted({segs, max(2, round(math.sqrt(len(seq))))}):
            cps.append(f"{measure(seq, x, k)['peak'] / MIB:,.1f} ({k})")
        print(f"| {name} | {base['saved'] / MIB:,.1f} | {base['peak'] / MIB:,.1f} "
              f"| {', '.join(cps)} | {plain_gm / MIB:,.1f} | {sqrt_gm / MIB:,.1f} ({segs}) |",
              flush=True)


if __name__ == "__main__":
    main()
