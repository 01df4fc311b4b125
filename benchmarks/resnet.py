"""A torchvision-style ResNet-18, built from the same code in graphc and in PyTorch.

``build(nn, ...)`` takes a module namespace (``graphc.nn`` or ``torch.nn``) and returns the
network, so both systems run literally the same architecture: BasicBlocks (3x3 conv - BN -
ReLU - 3x3 conv - BN, plus the identity or a stride-2 1x1 conv - BN downsample, then ReLU), two
blocks per stage, a 3x3 stem and no max-pool (small single-channel images; ``stem="small"``)
or torchvision's ImageNet stem (``stem="imagenet"``: a 7x7 stride-2 convolution with padding
3, BN, ReLU and ``MaxPool2d(3, 2, 1)``), global average pooling, ``Flatten`` and a ``Linear``
head. ``IMAGENET`` holds torchvision's ResNet-18 configuration itself (widths 64-512, three
input channels, that stem). Convolutions have no bias (BatchNorm follows) and
are initialised like torchvision's (Kaiming normal, fan-out), BatchNorm with weight 1 and bias
0; the PyTorch copy then loads the graphc weights through ``state_dict`` (same key names), so
the two start from identical values.

Unlike torchvision, the residual sum and the ReLUs are written out of place (``out = out +
identity``, ``nn.ReLU()``); the in-place forms (``out += identity``, ``ReLU(inplace=True)``)
give the same values and gradients, eager and compiled, in both systems
(``tests/test_resnet.py::test_eager_inplace_relu_gradient_matches_torch``).

Shared by the ``resnet18`` benchmark workload, ``benchmarks.conv_shapes`` (which convolution
shapes the net runs) and ``tests/test_resnet.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

WIDTHS = (16, 32, 64, 128)
BLOCKS = (2, 2, 2, 2)
IN_CHANNELS = 1
NUM_CLASSES = 10
STEMS = ("small", "imagenet")
BLOCK_KINDS = ("basic", "bottleneck")
# torchvision's resnet18() (but for the classes): ``build(nn, **IMAGENET)``
IMAGENET = {"widths": (64, 128, 256, 512), "in_channels": 3, "stem": "imagenet"}
# torchvision's resnet50() (but for the classes): bottleneck blocks, 3-4-6-3 of them
RESNET50 = {**IMAGENET, "blocks": (3, 4, 6, 3), "block": "bottleneck"}


def build(nn: Any, widths: tuple[int, ...] = WIDTHS, blocks: tuple[int, ...] = BLOCKS,
          in_channels: int = IN_CHANNELS, num_classes: int = NUM_CLASSES,
          stem: str = "small", block: str = "basic") -> Any:
    """The ResNet in the module library ``nn`` (``graphc.nn`` or ``torch.nn``), initialised
    with that library's random generator (seed it first for reproducible weights).
    ``block="bottleneck"``: torchvision's Bottleneck (1x1 - 3x3 with the stride - 1x1 to 4x
    the width, each with BatchNorm; ResNet-50 is ``build(nn, **RESNET50)``)."""
    if stem not in STEMS:
        raise ValueError(f"stem: expected one of {STEMS}, got {stem!r}")
    if block not in BLOCK_KINDS:
        raise ValueError(f"block: expected one of {BLOCK_KINDS}, got {block!r}")

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes: int, planes: int, stride: int = 1,
                     downsample: Any = None) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x: Any) -> Any:
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out = out + identity
            return self.relu(out)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes: int, planes: int, stride: int = 1,
                     downsample: Any = None) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU()
            self.downsample = downsample

        def forward(self, x: Any) -> Any:
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out = out + identity
            return self.relu(out)

    unit = Bottleneck if block == "bottleneck" else BasicBlock

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inplanes = widths[0]
            if stem == "imagenet":
                self.conv1 = nn.Conv2d(in_channels, widths[0], 7, stride=2, padding=3,
                                       bias=False)
                self.maxpool = nn.MaxPool2d(3, 2, 1)
            else:
                self.conv1 = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)
                self.maxpool = None
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU()
            for i, (w, n) in enumerate(zip(widths, blocks, strict=True)):
                setattr(self, f"layer{i + 1}", self._make_layer(w, n, 1 if i == 0 else 2))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.fc = nn.Linear(widths[-1] * unit.expansion, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

        def _make_layer(self, planes: int, n: int, stride: int) -> Any:
            downsample = None
            out = planes * unit.expansion
            if stride != 1 or self.inplanes != out:
                downsample = nn.Sequential(
                    nn.Conv2d(self.inplanes, out, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(out))
            layers = [unit(self.inplanes, planes, stride, downsample)]
            self.inplanes = out
            layers += [unit(out, planes) for _ in range(1, n)]
            return nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            x = self.relu(self.bn1(self.conv1(x)))
            if self.maxpool is not None:
                x = self.maxpool(x)
            for i in range(len(widths)):
                x = getattr(self, f"layer{i + 1}")(x)
            return self.fc(self.flatten(self.avgpool(x)))

    return ResNet()


def torch_copy(torch: Any, gmodel: Any, **kwargs: Any) -> Any:
    """The PyTorch twin of a graphc ResNet from ``build``: same architecture (same keyword
    arguments), the graphc weights and buffers loaded through ``state_dict``."""
    tm = build(torch.nn, **kwargs)
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in
                        gmodel.state_dict().items()})
    return tm


def conv_shapes(size: int, widths: tuple[int, ...] = WIDTHS, blocks: tuple[int, ...] = BLOCKS,
                in_channels: int = IN_CHANNELS, stem: str = "small", block: str = "basic"
                ) -> list[tuple[int, int, int, int, int, int, int]]:
    """Every convolution the net runs on ``size`` x ``size`` inputs, in forward order:
    ``(in_channels, out_channels, height, width, kernel, stride, padding)`` of its input,
    repeats included (``flops`` counts each)."""
    if stem == "imagenet":  # 7x7 stride 2, then the 3x3 stride-2 max-pool
        out = [(in_channels, widths[0], size, size, 7, 2, 3)]
        hw = (size + 6 - 7) // 2 + 1
        hw = (hw + 2 - 3) // 2 + 1
    else:
        out = [(in_channels, widths[0], size, size, 3, 1, 1)]
        hw = size
    cin = widths[0]
    for i, (w, n) in enumerate(zip(widths, blocks, strict=True)):
        stride = 1 if i == 0 else 2
        for b in range(n):
            s = stride if b == 0 else 1
            ohw = (hw + 2 - 3) // s + 1
            if block == "bottleneck":
                wout = 4 * w
                out += [(cin, w, hw, hw, 1, 1, 0), (w, w, hw, hw, 3, s, 1),
                        (w, wout, ohw, ohw, 1, 1, 0)]
            else:
                wout = w
                out += [(cin, w, hw, hw, 3, s, 1), (w, w, ohw, ohw, 3, 1, 1)]
            if b == 0 and (s != 1 or cin != wout):
                out.append((cin, wout, hw, hw, 1, s, 0))
            cin, hw = wout, ohw
    return out


def conv_macs(shape: tuple[int, int, int, int, int, int, int]) -> int:
    """Multiply-accumulates of one image through one convolution ``shape``."""
    cin, cout, h, w, k, s, p = shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return cin * cout * k * k * oh * ow


def flops(batch: int, size: int, widths: tuple[int, ...] = WIDTHS,
          blocks: tuple[int, ...] = BLOCKS, in_channels: int = IN_CHANNELS,
          num_classes: int = NUM_CLASSES, stem: str = "small", block: str = "basic") -> float:
    """FLOPs of one training step, counted as for the other workloads: 2 per multiply-add in
    the forward pass, 2 for each weight gradient and 2 for each input gradient, of the
    convolutions and the Linear head; the stem's input (the images) needs no gradient.
    BatchNorm, ReLU, pooling, the loss and the optimizer are left out (a few percent)."""
    convs = conv_shapes(size, widths, blocks, in_channels, stem, block)
    macs = [conv_macs(c) for c in convs]
    head = widths[-1] * (4 if block == "bottleneck" else 1) * num_classes
    per_image = 2 * (sum(macs) + head) + 2 * (sum(macs) + head) + 2 * (sum(macs[1:]) + head)
    return float(batch * per_image)
