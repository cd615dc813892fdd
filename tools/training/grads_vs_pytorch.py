"""Training-step gradients of graphmem's graph (on ONNX Runtime) against torch.autograd.

    python -m tools.training.grads_vs_pytorch [--batch 4] [--bn training|inference]
                                              [--model resnet18|efficientnet_b0|convnext_tiny|...]

Needs torch (and torchvision for ``--model`` other than resnet18). resnet18 in
``torch.nn`` (tools/training/torch_nets.py), or ``torchvision.models.<model>(weights=None)``,
with random BatchNorm scales, biases and running statistics (and a little noise on any
parameter whose entries are all equal: the exporter would share one initializer among
equal parameters) is exported with torch's
TorchScript exporter (BatchNormalization kept, not folded into the convs), its training
step built by graphmem (cross-entropy against a one-hot label) and run on ONNX Runtime's
CPU provider, as built and with the cheap values recomputed in backward
(graphmem/training/selective.py, both tiers: the two must give bit-identical
gradients); the same step runs in PyTorch in float64 (the reference) and float32, its
BatchNorms in ``train()`` mode for ``--bn training`` (batch statistics) and ``eval()``
mode for ``--bn inference``, everything else in ``eval()`` mode (no dropout, no
stochastic depth: the exported graph has none).
Prints the loss and, for the worst five gradients, graphmem's and PyTorch float32's
largest difference from the float64 gradient relative to its largest value: both are
float32 runs of the same step, so graphmem should be as close as PyTorch's own float32
is. Exit status 1 if a gradient of graphmem's is off by more than ``--rtol`` (1e-4) and
by more than twice PyTorch float32's. Also the running statistics' largest difference:
ONNX updates the running variance with the batch's population variance, PyTorch with the
unbiased one (a factor M/(M-1), M the elements per channel), so those differ by that.
"""
from __future__ import annotations

import argparse
import copy
import io
import sys

import numpy as np



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--bn", choices=["training", "inference"], default="training")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--model", default="resnet18")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("needs torch: pip install torch==2.13.0", file=sys.stderr)
        return 2
    import onnx
    import onnxruntime as ort
    from tools.training.torch_nets import resnet18

    from graphmem.training.build import build_training, running_stat_outputs
    from graphmem.training.selective import TIERS, recomputable, selective

    torch.manual_seed(0)
    if args.model == "resnet18":
        model = resnet18()
    else:
        import torchvision
        model = getattr(torchvision.models, args.model)(weights=None)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.9, 1.1)
        # The TorchScript exporter writes one initializer for parameters of equal value
        # (every fresh LayerNorm's ones, convnext's layer scales): graphmem would then
        # give one gradient for all of them. A parameter whose entries are all equal
        # gets a little noise, so each is its own initializer.
        for p in model.parameters():
            flat = p.flatten()
            if bool((flat == flat[0]).all()):
                p.add_(torch.randn_like(p) * 0.1 * (float(flat[0].abs()) or 0.1))
    model.eval()
    f = io.BytesIO()
    torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), f, dynamo=False,
                      input_names=["x"], output_names=["logits"], opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE)
    tg = build_training(onnx.load_from_string(f.getvalue()), args.batch, loss="xent",
                        bn=args.bn)
    rng = np.random.default_rng(0)
    x = rng.standard_normal([args.batch, 3, 224, 224]).astype(np.float32)
    label = np.eye(1000, dtype=np.float32)[rng.integers(0, 1000, args.batch)]
    opts = ort.SessionOptions()
    opts.log_severity_level = 3

    def run(t):
        session = ort.InferenceSession(t.model.SerializeToString(), opts,
                                       providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(None, t.feeds({"x": x, "label": label}))))

    out = run(tg)
    for tier, cheap in TIERS.items():
        rec = run(selective(tg, cheap))
        same = all(np.array_equal(out[g], rec[g]) for g in tg.gradients.values())
        print(f"cheap values recomputed ({tier}, {len(recomputable(tg, cheap))} values): "
              f"gradients {'bit-identical' if same else 'DIFFERENT'}")
        if not same:
            return 1

    grads, losses = {}, {}
    for dtype in (torch.float64, torch.float32):
        m = copy.deepcopy(model).to(dtype)
        m.eval()
        for bn in m.modules():
            if isinstance(bn, torch.nn.modules.batchnorm._BatchNorm):
                bn.train(args.bn == "training")
        logits = m(torch.from_numpy(x).to(dtype))
        loss = -(torch.log_softmax(logits, 1) * torch.from_numpy(label).to(dtype)).sum()
        (loss / args.batch).backward()
        losses[dtype] = loss.item() / args.batch
        grads[dtype] = {k: p.grad.double().numpy() for k, p in m.named_parameters()}
        if dtype == torch.float32:
            model = m  # its running statistics, updated in float32
    rows, zero, failed = [], [], False
    # A gradient that is zero in float64 (a bias before a training-mode BatchNorm: the
    # batch mean takes any shift away) has no relative error: both float32 runs give
    # rounding noise there. Those are compared by their largest value, each against the
    # largest |gradient| of the step.
    largest = max(float(np.abs(g).max()) for g in grads[torch.float64].values())
    for w, grad in tg.gradients.items():
        if w not in grads[torch.float64]:
            print(f"graphmem differentiates {w!r}, which torch does not name")
            return 1
        ref = grads[torch.float64][w]
        scale = np.abs(ref).max()
        if scale <= 1e-9 * largest:
            zero.append((float(np.abs(out[grad]).max()) / largest,
                         float(np.abs(grads[torch.float32][w]).max()) / largest, w))
            continue
        ours = float(np.abs(out[grad] - ref).max() / scale)
        theirs = float(np.abs(grads[torch.float32][w] - ref).max() / scale)
        between = float(np.abs(out[grad] - grads[torch.float32][w]).max() / scale)
        failed |= ours > args.rtol and ours > 2 * theirs
        rows.append((ours, theirs, between, w))
    rows.sort(reverse=True)
    print(f"{args.model}, batch {args.batch}, BatchNormalization {args.bn}: loss graphmem "
          f"{float(out['loss']):.6f}, PyTorch float64 {losses[torch.float64]:.6f}")
    print(f"{len(rows)} gradients; largest |difference from float64| / largest |gradient|, "
          "worst five:")
    for ours, theirs, between, w in rows[:5]:
        print(f"  {w}: graphmem {ours:.2e}, PyTorch float32 {theirs:.2e} (graphmem - "
              f"PyTorch float32: {between:.2e})")
    print(f"largest graphmem - PyTorch float32: {max(r[2] for r in rows):.2e} "
          f"({max(rows, key=lambda r: r[2])[3]})")
    if zero:
        ours, theirs = max(z[0] for z in zero), max(z[1] for z in zero)
        failed |= ours > args.rtol and ours > 2 * theirs
        print(f"{len(zero)} gradients are zero in float64; their largest |value| / the "
              f"step's largest |gradient|: graphmem {ours:.2e}, PyTorch float32 {theirs:.2e}")
    buffers = dict(model.named_buffers())
    running = running_stat_outputs(tg.model)
    if running:
        diff = max(float(np.abs(buffers[s].numpy() - out[o]).max()) for s, o in running.items())
        print(f"{len(running)} running statistics: largest |difference| {diff:.2e} (ONNX "
              "updates the variance with the population variance, PyTorch the unbiased)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
