"""Export torchvision detection models and a YOLO-style head with NMS to ONNX with
torch's TorchScript exporter (issue 53's corpus): random weights, small inputs.

Needs torch and torchvision (a separate environment: graphmem's tests never import
them). Usage: python -m tools.corpus.export_detection OUT_DIR [--models ssdlite,...]
"""
from __future__ import annotations

import argparse
from pathlib import Path


def models(names):
    import torch
    import torchvision.models.detection as det
    torch.manual_seed(0)
    # random weights score every class near 1/classes (RetinaNet's head starts at a
    # prior of 0.01): thresholds low enough that the post-processing keeps boxes (the
    # default 0.05 keeps none)
    low = {"box_score_thresh": 0.001}
    made = {
        "ssdlite": lambda: (det.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=91), (3, 320, 320)),
        "fasterrcnn_mobilenet": lambda: (det.fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, num_classes=91, **low), (3, 320, 320)),
        "retinanet": lambda: (det.retinanet_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=91, min_size=320,
            max_size=320, score_thresh=0.001), (3, 320, 320)),
        "maskrcnn": lambda: (det.maskrcnn_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=91, min_size=320,
            max_size=320, **low), (3, 320, 320)),
    }
    for name in names:
        yield name, *made[name]()


def main() -> int:
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--models", default="ssdlite")
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, model, shape in models(args.models.split(",")):
        model.eval()
        x = [torch.rand(shape)]
        path = out / f"{name}.onnx"
        torch.onnx.export(model, (x,), str(path), opset_version=args.opset,
                          input_names=["images"], dynamo=False)
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
