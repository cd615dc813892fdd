"""Export torchvision detection models and a YOLO-style head with NMS to ONNX with
torch's TorchScript exporter (issue 53's corpus): random weights, small inputs.

Needs torch and torchvision (a separate environment: graphmem's tests never import
them). Usage: python -m tools.corpus.export_detection OUT_DIR [--models ssdlite,...]
Each model is written as NAME.onnx beside NAME.npz, the image it was exported with
(``images``: uniform noise in [0, 1), seeded), on which each detector finds boxes:
``verify --inputs`` and ONNX Runtime's peak (tools/corpus/detection_table.py) run on it.
The ``tiny_*`` models (TINY_MODELS, not exported by default) are torchvision's own
detection classes over parts a few channels wide, a few hundred KB each: those graphmem
plans are kept in tests/data/detection (tests/test_detection_tiny.py); the script
rewrites them byte for byte (``--models tiny_fasterrcnn,...``).
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
        "keypointrcnn": lambda: (det.keypointrcnn_resnet50_fpn(
            weights=None, weights_backbone=None, min_size=320, max_size=320, **low),
            (3, 320, 320)),
        "yolo": lambda: (YoloHead(), (3, 64, 64)),
        "tiny_fasterrcnn": lambda: (tiny_rcnn(det.FasterRCNN), TINY),
        "tiny_maskrcnn": lambda: (tiny_rcnn(det.MaskRCNN), TINY),
        "tiny_maskrcnn_masks": lambda: (MaskProbs(tiny_rcnn(det.MaskRCNN)), TINY),
        "tiny_keypointrcnn": lambda: (tiny_rcnn(det.KeypointRCNN), TINY),
        "tiny_retinanet": lambda: (tiny_retinanet(), TINY),
        "tiny_fcos": lambda: (tiny_fcos(), TINY),
        "tiny_ssd": lambda: (tiny_ssd(lite=False), TINY),
        "tiny_ssdlite": lambda: (tiny_ssd(lite=True), TINY),
    }
    for name in names:
        torch.manual_seed(0)  # each model's weights whatever the others exported
        yield name, *made[name]()


# the tiny detectors: torchvision's own detection classes (their transform, anchors,
# heads, box decoding and post-processing as the full models export them) over parts a
# few channels wide, on 64 x 64 images, so that each export is a few hundred KB
TINY = (3, 64, 64)
TINY_CLASSES = 5
TINY_FPN = 8  # the FPN's channels


def tiny_features(widths=(8, 16, 16)):
    """A convolutional net of ``len(widths)`` stages, each halving the image (stride 4,
    8, 16 ... after a stride-2 stem), its stages named ``layer1``, ``layer2`` ... as
    torchvision's backbones name them."""
    from collections import OrderedDict
    from torch import nn
    layers, c = [("stem", nn.Sequential(nn.Conv2d(3, widths[0], 3, 2, 1), nn.ReLU()))], widths[0]
    for i, w in enumerate(widths, 1):
        layers.append((f"layer{i}", nn.Sequential(nn.Conv2d(c, w, 3, 2, 1), nn.ReLU())))
        c = w
    return nn.Sequential(OrderedDict(layers))


def tiny_fpn(extra_blocks=None, channels=TINY_FPN):
    """``tiny_features`` under torchvision's BackboneWithFPN: three levels of
    ``channels``, and the extra blocks given (by default a max-pooled fourth,
    as the R-CNN backbones have; RetinaNet's P6 and P7)."""
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    widths = (8, 16, 16)
    return BackboneWithFPN(tiny_features(widths), {f"layer{i}": str(i - 1) for i in (1, 2, 3)},
                           list(widths), channels, extra_blocks=extra_blocks)


def tiny_anchors(levels, ratios=(0.5, 1.0, 2.0), scales=(1,)):
    """torchvision's AnchorGenerator: at level i, boxes of 8 x 2^i pixels times each of
    ``scales``, of each aspect ratio."""
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    return AnchorGenerator(tuple(tuple(8 * 2 ** i * s for s in scales) for i in range(levels)),
                           (ratios,) * levels)


def tiny_rcnn(kind):
    """torchvision's FasterRCNN, MaskRCNN or KeypointRCNN (``kind``, the class) over the
    tiny FPN: an RPN of at most 50 proposals a level before its NMS and 100 after, RoIAlign of
    4 x 4 (masks and keypoints 7 x 7) on the three levels, a box head of 16, at most 10
    detections scored above 0.001 (random weights score each class near 1/classes).
    Anchors of three sizes a level (8, 16 and 32 pixels at the first) and a pooler whose
    canonical box is 16 pixels at the middle level (the full models' 224 at level 4
    would send every box of a 64 x 64 image to the first level), so that the boxes
    spread over the three levels' RoIAligns."""
    from functools import partial
    import torchvision.models.detection as det
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.rpn import RPNHead
    from torchvision.ops import MultiScaleRoIAlign
    pool = partial(MultiScaleRoIAlign, ["0", "1", "2"], sampling_ratio=2,
                   canonical_scale=16, canonical_level=3)
    parts = {}
    if kind is det.MaskRCNN:
        from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
        parts = dict(mask_roi_pool=pool(7),
                     mask_head=MaskRCNNHeads(TINY_FPN, (8,), 1),
                     mask_predictor=MaskRCNNPredictor(8, 8, TINY_CLASSES))
    elif kind is det.KeypointRCNN:
        from torchvision.models.detection.keypoint_rcnn import (
            KeypointRCNNHeads, KeypointRCNNPredictor)
        parts = dict(keypoint_roi_pool=pool(7),
                     keypoint_head=KeypointRCNNHeads(TINY_FPN, (8,)),
                     keypoint_predictor=KeypointRCNNPredictor(8, 3))
    classes = 2 if kind is det.KeypointRCNN else TINY_CLASSES  # person, background
    return kind(tiny_fpn(), min_size=64, max_size=64,
                rpn_anchor_generator=tiny_anchors(4, (1.0,), (1, 2, 4)),
                rpn_head=RPNHead(TINY_FPN, 3),
                rpn_pre_nms_top_n_test=50, rpn_post_nms_top_n_test=100,
                box_roi_pool=pool(4),
                box_head=TwoMLPHead(TINY_FPN * 4 * 4, 16),
                box_predictor=FastRCNNPredictor(16, classes),
                box_score_thresh=0.001, box_detections_per_img=10, **parts)


def tiny_retinanet():
    """torchvision's RetinaNet over the tiny FPN with P6 and P7 (five levels), its head
    of four 8-channel convolutions a branch, at most 50 candidates a level and 10
    detections."""
    from torchvision.models.detection import RetinaNet
    from torchvision.models.detection.retinanet import RetinaNetHead
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7
    anchors = tiny_anchors(5)
    return RetinaNet(tiny_fpn(LastLevelP6P7(TINY_FPN, TINY_FPN)), TINY_CLASSES,
                     min_size=64, max_size=64, anchor_generator=anchors,
                     head=RetinaNetHead(TINY_FPN, anchors.num_anchors_per_location()[0],
                                        TINY_CLASSES),
                     score_thresh=0.001, topk_candidates=50, detections_per_img=10)


def tiny_fcos():
    """torchvision's FCOS over the tiny FPN (32 channels: the head's GroupNorm has 32
    groups; its fourth level max-pooled, not P6 and P7, whose 1 x 1 map of a 64 x 64
    image would leave GroupNorm one value a group), one anchor a location, a head of one convolution a branch,
    at most 50 candidates a level and 10 detections."""
    from torchvision.models.detection import FCOS
    from torchvision.models.detection.fcos import FCOSHead
    return FCOS(tiny_fpn(channels=32), TINY_CLASSES,
                min_size=64, max_size=64, anchor_generator=tiny_anchors(4, (1.0,)),
                head=FCOSHead(32, 1, TINY_CLASSES, num_convs=1),
                score_thresh=0.001, topk_candidates=50, detections_per_img=10)


def tiny_ssd(lite: bool):
    """torchvision's SSD over the three stages of ``tiny_features`` (16 x 16, 8 x 8 and
    4 x 4 of a 64 x 64 image), default boxes of two aspect ratios, with SSD's
    convolutional head or (``lite``) SSDlite's depthwise-separable one, at most 50
    candidates a class and 10 detections."""
    from functools import partial
    from torch import nn
    from torchvision.models.detection.ssd import SSD, SSDHead
    from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
    from torchvision.models.detection.ssdlite import SSDLiteHead
    from torchvision.models._utils import IntermediateLayerGetter
    widths = [8, 16, 16]
    body = IntermediateLayerGetter(tiny_features(widths),
                                   {f"layer{i}": str(i - 1) for i in (1, 2, 3)})
    boxes = DefaultBoxGenerator([[2]] * len(widths))
    counts = boxes.num_anchors_per_location()
    head = (SSDLiteHead(widths, counts, TINY_CLASSES,
                        partial(nn.BatchNorm2d, eps=0.001, momentum=0.03)) if lite
            else SSDHead(widths, counts, TINY_CLASSES))
    return SSD(body, boxes, (64, 64), TINY_CLASSES, head=head, score_thresh=0.001,
               topk_candidates=50, detections_per_img=10)


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


# the models of the corpus (maskrcnn: the whole model, its masks pasted into the image
# by a Loop; maskrcnn_masks: the same up to the masks' probabilities; keypointrcnn: its
# keypoints from the heatmaps by a Loop too)
MODELS = ("ssdlite", "fasterrcnn_mobilenet", "retinanet", "maskrcnn", "maskrcnn_masks",
          "keypointrcnn", "yolo")
# their tiny versions (kept in tests/data/detection)
TINY_MODELS = ("tiny_fasterrcnn", "tiny_maskrcnn", "tiny_maskrcnn_masks",
               "tiny_keypointrcnn", "tiny_retinanet", "tiny_fcos", "tiny_ssd",
               "tiny_ssdlite")


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
        with torch.no_grad():
            found = model(x)
        found = found[0].values() if isinstance(found, list) else found
        print(f"wrote {path} ({path.stat().st_size:,} bytes) and {name}.npz; in torch "
              f"it finds {', '.join('x'.join(map(str, t.shape)) for t in found)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
