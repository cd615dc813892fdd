"""torchvision's resnet18, resnet50 (v1.5: the stride in the 3x3 convolution) and
mobilenet_v2 (width 1.0) in plain ``torch.nn``, for the PyTorch comparisons, which run
without torchvision: the same modules under the same names, so the same state-dict keys
and shapes and, given the same weights, the same outputs (checked against torchvision
0.28). resnet50 is the Model Zoo graph's network
(tests/test_analysis.py::test_resnet50_matches_torchvision_v1_5).

torch is imported when a network is first built, so the tools that import this module
still start (and answer ``--help``) without it.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace


def resnet18(classes: int = 1000):
    return _classes().ResNet((3, 3), (2, 2, 2, 2), classes)


def resnet50(classes: int = 1000):
    return _classes().ResNet((1, 3, 1), (3, 4, 6, 3), classes)


def mobilenet_v2(classes: int = 1000):
    return _classes().MobileNetV2(classes)


NETS = {"resnet18": resnet18, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2}


@functools.cache
def _classes() -> SimpleNamespace:
    import torch
    from torch import nn

    class Block(nn.Module):
        """torchvision's BasicBlock (two 3x3 convolutions, ``kernels=(3, 3)``) or
        Bottleneck (1x1, 3x3, 1x1 four times as wide: ``(1, 3, 1)``), each convolution
        followed by a BatchNorm, the first 3x3 one strided, the shortcut added last."""

        def __init__(self, cin, width, stride, kernels):
            super().__init__()
            cout = width * (4 if len(kernels) == 3 else 1)
            self.depth = len(kernels)
            c, strided = cin, False
            for i, k in enumerate(kernels, 1):
                out = cout if i == len(kernels) else width
                s = stride if k == 3 and not strided else 1
                strided |= k == 3
                setattr(self, f"conv{i}", nn.Conv2d(c, out, k, s, k // 2, bias=False))
                setattr(self, f"bn{i}", nn.BatchNorm2d(out))
                c = out
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = x
            for i in range(1, self.depth + 1):
                out = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(out))
                if i < self.depth:
                    out = self.relu(out)
            return self.relu(out + idt)

    class ResNet(nn.Module):
        """torchvision.models.ResNet: a stem, four stages of ``counts`` blocks of
        ``kernels`` (64, 128, 256 and 512 wide; the first block of stages 2 to 4
        strided), pooling and a fully connected layer."""

        def __init__(self, kernels, counts, classes=1000):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages, cin = [], 64
            for k, (width, count) in enumerate(zip((64, 128, 256, 512), counts)):
                blocks = []
                for i in range(count):
                    blocks.append(Block(cin, width, 2 if k and not i else 1, kernels))
                    cin = width * (4 if len(kernels) == 3 else 1)
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    def cbr(cin, cout, k=3, stride=1, groups=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                       bias=False), nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            self.use_res = stride == 1 and cin == cout
            layers = [cbr(cin, hidden, 1)] if expand != 1 else []
            layers += [cbr(hidden, hidden, 3, stride, hidden),
                       nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2(nn.Module):
        """torchvision.models.mobilenet_v2's structure (width 1.0)."""

        def __init__(self, classes=1000):
            super().__init__()
            setting = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
            layers, cin = [cbr(3, 32, 3, 2)], 32
            for t, c, n, s in setting:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(cbr(cin, 1280, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(torch.flatten(x, 1))

    return SimpleNamespace(ResNet=ResNet, MobileNetV2=MobileNetV2)
