"""Export the control-flow fixtures of tests/data/control_flow with PyTorch's TorchScript
exporter (needs torch: the ``[corpus]`` extra; the tests read the files, not torch).

``rnn_loop_ts.onnx``: a scripted tanh RNN, ``for t in range(xs.size(0))``, which the
exporter writes as a Loop whose trip count is ``Gather(Shape(xs), 0)`` and whose body
holds the cell (symbolic ``T`` and ``batch``; hidden 32, so the file stays small).

    python -m tools.corpus.export_control_flow --out tests/data/control_flow
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path


def main() -> None:
    import torch

    class Rnn(torch.nn.Module):
        def __init__(self, inp: int = 8, hidden: int = 32):
            super().__init__()
            self.wx = torch.nn.Linear(inp, hidden)
            self.wh = torch.nn.Linear(hidden, hidden)

        def forward(self, xs, h):
            for t in range(xs.size(0)):
                h = torch.tanh(self.wx(xs[t]) + self.wh(h))
            return h

    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                  description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    warnings.filterwarnings("ignore")
    torch.onnx.export(torch.jit.script(Rnn()), (torch.randn(5, 2, 8), torch.randn(2, 32)),
                      str(out / "rnn_loop_ts.onnx"), dynamo=False, opset_version=17,
                      input_names=["xs", "h0"],
                      dynamic_axes={"xs": {0: "T", 1: "batch"}, "h0": {0: "batch"}})
    print(out / "rnn_loop_ts.onnx")


if __name__ == "__main__":
    main()
