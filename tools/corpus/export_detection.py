"""Export torchvision detection models and a YOLO-style head with NMS to ONNX with
torch's TorchScript exporter (issue 53's corpus): random weights, small inputs.

Needs torch and torchvision (a separate environment: graphmem's tests never import
them). Usage: python -m tools.corpus.export_detection OUT_DIR [--models ssdlite,...]
Each model is written as NAME.onnx beside NAME.npz, the image it was exported with
(``images``: uniform noise in [0, 1), seeded), on which each detector finds boxes:
``verify --inputs`` and ONNX Runtime's peak (tools/corpus/detection_table.py) run on it.
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
        "maskrcnn_masks": lambda: (MaskProbs(det.maskrcnn_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=91, min_size=320,
            max_size=320, **low)), (3, 320, 320)),
        "yolo": lambda: (YoloHead(), (3, 64, 64)),
    }
    for name in names:
        torch.manual_seed(0)  # each model's weights whatever the others exported
        yield name, *made[name]()


def YoloHead(classes: int = 4, anchors: int = 3, conf: float = 0.3, iou: float = 0.45,
             max_det: int = 50):
    """A YOLO-style detector with its post-processing, as YOLO exports with NMS write it:
    a small convolutional stem (stride 8), a head of ``anchors`` x (5 + ``classes``)
    channels per cell, boxes decoded on the grid (centre, width and height from the
    sigmoid, anchor sizes in pixels), confidence objectness x best class, the
    candidates above ``conf`` kept (a NonZero), torchvision's ``batched_nms`` (an If
    around the NonMaxSuppression) and at most ``max_det`` detections."""
    import torch
    from torch import nn
    from torchvision.ops import batched_nms

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU(),
                nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU())
            self.head = nn.Conv2d(16, anchors * (5 + classes), 1)
            self.register_buffer("anchor_wh", torch.tensor(
                [[10.0, 13.0], [16.0, 30.0], [33.0, 23.0]])[:anchors])

        def forward(self, images):
            x = images[0].unsqueeze(0)
            p = self.head(self.stem(x))  # [1, A*(5+C), H, W]
            _, _, h, w = p.shape
            p = p.view(anchors, 5 + classes, h, w).permute(0, 2, 3, 1).sigmoid()
            gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            grid = torch.stack((gx, gy), -1).float()  # [H, W, 2]
            xy = (p[..., :2] * 2 - 0.5 + grid) * 8
            wh = (p[..., 2:4] * 2) ** 2 * self.anchor_wh.view(anchors, 1, 1, 2)
            boxes = torch.cat((xy - wh / 2, xy + wh / 2), -1).reshape(-1, 4)
            scores = (p[..., 5:] * p[..., 4:5]).reshape(-1, classes)
            best, label = scores.max(1)
            keep = best > conf
            boxes, best, label = boxes[keep], best[keep], label[keep]
            kept = batched_nms(boxes, best, label, iou)[:max_det]
            return boxes[kept], best[kept], label[kept]
    return Yolo()


def MaskProbs(model):
    """Mask R-CNN up to its masks' probabilities (boxes, labels, scores and the 28 x 28
    mask of each detection): the whole model but the last step of the transform's
    post-processing, which pastes each mask into the image in a Loop whose body sizes
    its tensors from the box coordinates' values and whose carried value grows by one
    image per detection (torchvision's ``_onnx_paste_masks_in_image_loop``)."""
    import torch

    class Masks(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, images):
            m = self.m
            batch, _ = m.transform(images)
            features = m.backbone(batch.tensors)
            proposals, _ = m.rpn(batch, features)
            found, _ = m.roi_heads(features, proposals, batch.image_sizes)
            d = found[0]
            return d["boxes"], d["labels"], d["scores"], d["masks"]
    return Masks(model)


# the models of the corpus (maskrcnn: the whole model, whose mask-pasting Loop graphmem
# refuses; maskrcnn_masks: the same up to the masks' probabilities)
MODELS = ("ssdlite", "fasterrcnn_mobilenet", "retinanet", "maskrcnn", "maskrcnn_masks",
          "yolo")


def main() -> int:
    import numpy as np
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, model, shape in models(args.models.split(",")):
        model.eval()
        torch.manual_seed(1)
        x = [torch.rand(shape)]
        path = out / f"{name}.onnx"
        torch.onnx.export(model, (x,), str(path), opset_version=args.opset,
                          input_names=["images"], dynamo=False)
        np.savez(out / f"{name}.npz", images=x[0].numpy())
        print(f"wrote {path} ({path.stat().st_size:,} bytes) and {name}.npz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
