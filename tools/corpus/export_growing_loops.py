"""Export the growing-loop fixtures of tests/data/control_flow with PyTorch's TorchScript
exporter (needs torch; the tests read the files, not torch): a scripted loop over a
data-dependent count that concatenates one fixed-size piece per iteration onto a
loop-carried value, as torchvision's detection post-processing writes it (issue 53).

``paste_loop_ts.onnx``: the rows of ``x`` [12, 20] whose first column is positive kept
(a NonZero), then ``res = cat(res, (row * 2).reshape(1, 4, 5))`` for each kept row,
from ``res = zeros(0, 4, 5)``, as ``_onnx_paste_masks_in_image_loop`` pastes masks.

``keypoint_loop_ts.onnx``: the same kept rows, two carried values grown per row with a
``.to(float32)`` around each (a Cast to its own type), as
``_onnx_heatmaps_to_keypoints_loop`` builds ``xy_preds`` [T, 3, 4] and ``end_scores``
[T, 4].

    python -m tools.corpus.export_growing_loops --out tests/data/control_flow
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path


def main() -> None:
    import torch
    from torch import nn

    @torch.jit._script_if_tracing
    def paste_loop(rows: torch.Tensor) -> torch.Tensor:
        res = torch.zeros((0, 4, 5), dtype=torch.float32)
        for i in range(rows.size(0)):
            r = (rows[i] * 2.0).reshape(4, 5)
            res = torch.cat((res, r.unsqueeze(0)))
        return res

    @torch.jit._script_if_tracing
    def keypoint_loop(rows: torch.Tensor, k: int):
        xy = torch.zeros((0, 3, k), dtype=torch.float32)
        sc = torch.zeros((0, k), dtype=torch.float32)
        for i in range(int(rows.size(0))):
            a = rows[i, :3 * k].reshape(3, k)
            b = rows[i, :k]
            xy = torch.cat((xy.to(dtype=torch.float32), a.unsqueeze(0).to(dtype=torch.float32)), 0)
            sc = torch.cat((sc.to(dtype=torch.float32), b.to(dtype=torch.float32).unsqueeze(0)), 0)
        return xy, sc

    class Kept(nn.Module):
        def __init__(self, kind: str):
            super().__init__()
            self.kind = kind

        def forward(self, x):
            rows = x[torch.nonzero(x[:, 0] > 0).squeeze(1)]
            if self.kind == "paste":
                return paste_loop(rows) + 1.0
            return keypoint_loop(rows, 4)

    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    warnings.filterwarnings("ignore")
    for kind, name in (("paste", "paste_loop_ts.onnx"), ("keypoint", "keypoint_loop_ts.onnx")):
        torch.manual_seed(0)
        torch.onnx.export(Kept(kind), (torch.randn(12, 20),), str(out / name), dynamo=False,
                          opset_version=17, input_names=["x"])
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
