"""PyTorch's own training memory next to graphmem's plan, plain and with
``torch.utils.checkpoint.checkpoint_sequential`` at every segment count (needs torch and
torchvision; not a README command).

    python -m tools.training.torch_checkpoint [--batch 8] [NETWORK ...] [--doc]
                                     [--side both|torch|graphmem|none --cache DIR]

Networks: ``torchvision.models.<name>(weights=None)`` (default: resnet18, mobilenet_v2,
efficientnet_b0, convnext_tiny, mobilenet_v3_small, mobilenet_v3_large, mnasnet1_0,
swin_t, vit_b_16), random weights (``torch.manual_seed(0)``), in eval mode
with every BatchNorm folded into the convolution before it (the TorchScript export folds
them the same way, so both sides compute the same function), loss = sum of the logits.

PyTorch, one training step (forward, ``loss.backward()``) on the CPU, after one
unmeasured warm-up step:

- **peak**: the CPU allocator's own records, walked in time order: ``torch.profiler``
  with ``profile_memory=True`` records every allocation and free the allocator makes
  (``alloc_size``, signed), temporaries inside an op included; the peak is the largest
  running total of those from the step's start, **plus the input batch** (allocated
  before the step). Weights are **excluded** (allocated before the step and not freed);
  the gradients (``p.grad`` is None before the step) and autograd's saved tensors and
  temporaries are included. The allocator's own running total (``total_allocated``)
  gives the same peak; the tool checks that it does. With ``--device cuda`` (on a
  machine with a GPU): ``torch.cuda.max_memory_allocated()`` after
  ``reset_peak_memory_stats()``, less what was allocated before the step (the weights),
  plus the input batch -- what a PyTorch user reads on a GPU.
- **saved**: the bytes of the distinct storages autograd saves for backward, through
  ``torch.autograd.graph.saved_tensors_hooks`` (parameters excluded).
- plain, and ``checkpoint_sequential(seq, k, x, use_reentrant=False)`` for every ``k``
  from 2 to the length of ``seq``, the network as a sequence of its blocks (nested
  stages flattened: resnet18's stem and BasicBlocks, efficientnet's MBConvs, convnext's
  CNBlocks, Swin's blocks and patch mergings, ViT's tokens (patch embedding, class token,
  position embedding) and encoder layers; an in-place layer stays with the block before
  it, as ``checkpoint_sequential`` refuses a segment that starts at one).

graphmem, the same module exported with the TorchScript exporter (opset 17, eval mode,
constant folding), ``graphmem train --loss sum --optimizer sgd`` at the same batch:

- **plain arena**: the planned arena of the step (activations kept for backward, the
  input, the gradients -- graph outputs -- and backward's temporaries; not the weights),
  as ``train`` plans it (cheap values recomputed in backward where that plans smaller:
  graphmem/training/selective.py);
- **best --recompute**: ``train --recompute optimal``: the smallest of no checkpoints,
  Chen's, the balanced and the program's cuts, trimmed;
- **folded constants**: tensors the planner computes from weights and constants only
  and holds outside the arena for the whole step, like weights (neither side's peak
  counts them; PyTorch has no such tensors).

``--doc`` writes the table between ``<!-- torch-table -->`` markers in docs/training.md.
The two sides can run apart (PyTorch's at batch 8 takes minutes a network on two cores):
``--side torch --cache DIR`` measures PyTorch only and writes
``DIR/<network>.b<batch>.torch.json``, ``--side graphmem`` graphmem's, ``--side none``
neither; the sides not measured are read from the cache.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tools import ROOT

MIB = 2 ** 20
NETWORKS = ("resnet18", "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "mobilenet_v3_small",
            "mobilenet_v3_large", "mnasnet1_0", "swin_t", "vit_b_16")
DOC = ROOT / "docs" / "training.md"


def fused(module):
    """``module`` in eval mode with every Conv2d -> BatchNorm2d pair folded."""
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
    """The network as an ``nn.Sequential`` of its blocks, for ``checkpoint_sequential``:
    the same function as ``module`` (checked by the caller)."""
    from torch import nn

    class Lambda(nn.Module):  # a parameter-free step of the network's forward
        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, x):
            return self.f(x)

    class Tokens(nn.Module):  # ViT's patch embedding, class token and position embedding
        def __init__(self, vit):
            super().__init__()
            self.process, self.proj = vit._process_input, vit.conv_proj
            self.cls, self.pos = vit.class_token, vit.encoder.pos_embedding

        def forward(self, x):
            x = self.process(x)
            x = __import__("torch").cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
            return x + self.pos

    def flat(mods):
        out = []
        for m in mods:
            out.extend(m.children() if type(m) is nn.Sequential else [m])
        return out

    mean = Lambda(lambda x: x.mean([2, 3]))
    if name.startswith("resnet"):
        m = module
        # the stem as one block: its ReLU is in place, and checkpoint_sequential refuses
        # a segment that starts there (it overwrites the segment's saved input)
        return nn.Sequential(nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool), *m.layer1,
                             *m.layer2, *m.layer3, *m.layer4, m.avgpool, nn.Flatten(1), m.fc)
    if name.startswith("vit"):
        m = module
        return nn.Sequential(Tokens(m), *m.encoder.layers, m.encoder.ln,
                             Lambda(lambda x: x[:, 0]), m.heads)
    if name.startswith("swin"):
        m = module
        return nn.Sequential(*flat(m.features), m.norm, m.permute, m.avgpool, m.flatten,
                             m.head)
    # the classifier as one block where it has in-place layers (Hardswish, Dropout):
    # checkpoint_sequential refuses a segment that starts at one
    if name.startswith("mnasnet"):  # its stem's ReLUs are in place: each with its conv
        blocks = []
        for m in module.layers:
            if type(m) is nn.Identity:  # a BatchNorm folded away
                continue
            if getattr(m, "inplace", False) and blocks:
                blocks[-1] = nn.Sequential(blocks[-1], m)
            else:
                blocks.append(m)
        return nn.Sequential(*blocks, mean, module.classifier)
    if name.startswith("mobilenet_v3"):
        return nn.Sequential(*flat(module.features), module.avgpool, nn.Flatten(1),
                             module.classifier)
    if name.startswith("shufflenet"):
        m = module
        return nn.Sequential(m.conv1, m.maxpool, *m.stage2, *m.stage3, *m.stage4, m.conv5,
                             mean, m.fc)
    head = [module.avgpool] if hasattr(module, "avgpool") else [nn.AdaptiveAvgPool2d(1)]
    if name.startswith("convnext"):  # classifier: LayerNorm2d, Flatten, Linear
        return nn.Sequential(*flat(module.features), *head, *module.classifier)
    return nn.Sequential(*flat(module.features), *head, nn.Flatten(1), *module.classifier)


def step(seq, x, segments: int | None):
    """One training step: forward (checkpointed in ``segments`` when given), backward.
    The gradients are made anew: :func:`clear` them before."""
    from torch.utils.checkpoint import checkpoint_sequential

    if segments:
        out = checkpoint_sequential(seq, segments, x, use_reentrant=False)
    else:
        out = seq(x)
    out.sum().backward()


def clear(seq) -> None:
    """Free the gradients of the step before, outside the measured step."""
    for p in seq.parameters():
        p.grad = None


def measure_cpu(seq, x, segments: int | None) -> dict:
    """The peak of the CPU allocator's records during one step, from the step's start,
    plus the input's bytes; and what autograd saved (see the module docstring)."""
    import torch
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    step(seq, x, segments)  # warm-up: caches and lazily made state, unmeasured
    clear(seq)
    params = {p.untyped_storage().data_ptr() for p in seq.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen.setdefault(s.data_ptr(), s.nbytes())
        return t

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step(seq, x, segments)
    records = []

    def walk(events):
        for e in events:
            if e.tag == _EventType.Allocation and e.extra_fields.device.type == "cpu":
                f = e.extra_fields
                records.append((e.start_time_ns, f.alloc_size, f.total_allocated))
            walk(e.children)

    walk(prof.profiler.kineto_results.experimental_event_tree())
    records.sort(key=lambda r: r[0])
    live = peak = 0
    for _, size, _ in records:
        live += size
        peak = max(peak, live)
    # the allocator's running total, relative to its value before the first record
    start = records[0][2] - records[0][1] if records else 0
    total_peak = max((r[2] - start for r in records), default=0)
    if total_peak != peak:
        raise SystemExit(f"the allocator's running total ({total_peak}) and the walk of its "
                         f"records ({peak}) disagree")
    return {"peak": peak + x.nbytes, "saved": sum(seen.values()), "records": len(records)}


def measure_cuda(seq, x, segments: int | None) -> dict:
    """``torch.cuda.max_memory_allocated`` during one step, less what was allocated
    before it (the weights and the input), plus the input's bytes."""
    import torch

    step(seq, x, segments)
    clear(seq)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(seq, x, segments)
    torch.cuda.synchronize()
    return {"peak": torch.cuda.max_memory_allocated() - before + x.nbytes}


def graphmem_side(module, batch: int) -> dict:
    """graphmem's plain and best ``--recompute`` plans of the TorchScript export."""
    import onnx
    import torch

    from graphmem.training.build import build_training
    from graphmem.training.recompute import recompute_planned
    from graphmem.training.selective import selective_planned

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.onnx"
        # with gradients enabled, as in training: under no_grad nn.MultiheadAttention
        # takes its inference fast path (ViT), an op the exporter does not know
        torch.onnx.export(module, (torch.randn(2, 3, 224, 224),), str(path),
                          dynamo=False, opset_version=17, input_names=["pixel_values"],
                          output_names=["logits"], do_constant_folding=True,
                          dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
        tg = build_training(onnx.load(str(path)), batch, loss="sum")
    t0 = time.perf_counter()
    base, plain, selected = selective_planned(tg, "sgd", batch)
    best = recompute_planned(base, "sgd", batch, optimal=True, plain=plain)
    rc, info, p = best.report, best.info, plain.report
    return {"plain": p.arena_bytes, "constants": p.constant_bytes, "saved": p.saved_activation_bytes,
            "selective": selected["selective"], "best": rc.arena_bytes,
            "best_constants": rc.constant_bytes, "choice": info["choice"],
            "segments": info["segments"],
            "recompute_pct": 100 * rc.recompute_macs / max(p.forward_macs + p.backward_macs, 1),
            "seconds": time.perf_counter() - t0}


def network(name: str):
    """``(module, seq, x)``: the fused torchvision network, its block sequence and a
    random input batch of 1 (the caller expands it)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    module = fused(getattr(torchvision.models, name)(weights=None))
    seq = as_sequence(name, module)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        if not torch.equal(seq(x), module(x)):
            raise SystemExit(f"{name}: the block sequence does not compute the network")
    return module, seq


def measure_torch(name: str, batch: int, device: str, log) -> dict:
    """PyTorch's side: plain and ``checkpoint_sequential`` at every segment count."""
    import torch

    _, seq = network(name)
    torch.manual_seed(1)
    x = torch.randn(batch, 3, 224, 224)
    if device == "cuda":
        seq, x = seq.cuda(), x.cuda()
    run = measure_cuda if device == "cuda" else measure_cpu
    plain = run(seq, x, None)
    log(f"{name}: PyTorch plain {plain}")
    ckpt = {}
    for k in range(2, len(seq) + 1):
        ckpt[k] = run(seq, x, k)["peak"]
        log(f"{name}: checkpoint_sequential {k}: {ckpt[k] / MIB:,.1f} MiB ({ckpt[k]} bytes)")
    return {"blocks": len(seq), "torch": plain, "ckpt": ckpt, "device": device,
            "versions": _versions()}


def measure(name: str, batch: int, device: str, log, sides=("graphmem", "torch"),
            cache: Path | None = None) -> dict:
    """Both sides of one network; ``sides`` says which to measure now, the other read
    from ``cache`` (``<cache>/<name>.b<batch>.<side>.json``, written for each side
    measured) so that the slow PyTorch side and graphmem's can run apart."""
    import json

    row, done = {"name": name}, True
    for side in ("graphmem", "torch"):
        path = cache / f"{name}.b{batch}.{side}.json" if cache else None
        if side in sides:
            if side == "graphmem":
                got = {"gm": graphmem_side(network(name)[0], batch)}
                log(f"{name}: graphmem {got['gm']}")
            else:
                got = measure_torch(name, batch, device, log)
            if path:
                path.write_text(json.dumps(got))
        elif path and path.exists():
            got = json.loads(path.read_text())
            if "ckpt" in got:
                got["ckpt"] = {int(k): v for k, v in got["ckpt"].items()}
        else:
            done = False
            continue
        row.update(got)
    return row if done else {}


def table(rows: list[dict], batch: int, device: str) -> str:
    m = lambda b: f"{b / MIB:,.1f}"  # noqa: E731
    where = "CPU allocator records" if device == "cpu" else "torch.cuda.max_memory_allocated"
    versions = rows[0].get("versions") or _versions()  # cached rows say what measured them
    lines = [f"Batch {batch}; PyTorch {versions}; MiB = 2^20 bytes. PyTorch: {where}, "
             "weights excluded, input and gradients included. graphmem: planned arena "
             "(the same accounting); folded constants are held outside it.", "",
             "| network | PyTorch plain peak | PyTorch saved | graphmem plain arena "
             "| PyTorch best `checkpoint_sequential` peak (segments of blocks) "
             "| graphmem best `--recompute` arena (choice, segments, recomputed MACs) "
             "| graphmem folded constants | plain at most PyTorch's | recompute at most "
             "PyTorch's |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        g, t = r["gm"], r["torch"]
        k = min(r["ckpt"], key=r["ckpt"].get)
        best = r["ckpt"][k]
        lines.append(
            f"| {r['name']} | {m(t['peak'])} | {m(t['saved']) if 'saved' in t else '-'} "
            f"| {m(g['plain'])} | {m(best)} ({k} of {r['blocks']}) "
            f"| {m(g['best'])} ({g['choice']}, {g['segments']}, {g['recompute_pct']:.1f}%) "
            f"| {m(g['constants'])} | {'yes' if g['plain'] <= t['peak'] else '**no**'} "
            f"| {'yes' if g['best'] <= best else '**no**'} |")
    lines += ["", "PyTorch's peak at every segment count (`checkpoint_sequential`, MiB):", ""]
    for r in rows:
        lines.append(f"- {r['name']}: " + ", ".join(f"{k}: {m(v)}" for k, v in r["ckpt"].items()))
    return "\n".join(lines)


def _versions() -> str:
    import torch
    import torchvision
    return f"{torch.__version__}, torchvision {torchvision.__version__}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("networks", nargs="*", default=list(NETWORKS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--doc", action="store_true", help="rewrite the table in docs/training.md")
    ap.add_argument("--side", choices=["both", "torch", "graphmem", "none"], default="both",
                    help="measure one side only (none: neither); the others are read from "
                    "--cache")
    ap.add_argument("--cache", type=Path, help="folder of each side's measurements "
                    "(written for the sides measured, read for the others)")
    args = ap.parse_args(argv)
    if args.side != "none":
        import torch

        torch.set_num_threads(args.threads)
    if args.side != "both" and args.cache is None:
        raise SystemExit("--side needs --cache")
    if args.cache:
        args.cache.mkdir(parents=True, exist_ok=True)
    sides = {"both": ("graphmem", "torch"), "none": ()}.get(args.side, (args.side,))

    def log(s):
        print(s, file=sys.stderr, flush=True)

    rows = [measure(n, args.batch, args.device, log, sides, args.cache)
            for n in args.networks]
    missing = [n for n, r in zip(args.networks, rows) if not r]
    rows = [r for r in rows if r]
    if missing:
        log(f"not in the cache for the other side: {', '.join(missing)}")
    if not rows:
        return
    text = table(rows, args.batch, args.device)
    print(text)
    if args.doc:
        from tools.docs.sections import write_doc
        write_doc(DOC, "torch-table", text)


if __name__ == "__main__":
    main()
