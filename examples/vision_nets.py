"""Plain-torch definitions of five torchvision classifiers, layer for layer as torchvision 0.26
writes them (same modules, shapes, orders of operations and eps), so that torch.export gives
the graph a torchvision model of the same name gives: resnet50 (bottleneck),
mobilenet_v3_large (hardswish, hardsigmoid squeeze-excitation, depthwise), efficientnet_b0
(SiLU, squeeze-excitation, depthwise 3x3/5x5), convnext_tiny (depthwise 7x7, channels-last
LayerNorm, GELU, layer scale), regnet_y_400mf (group convs, squeeze-excitation).

torchvision does not import next to the CPU torch of the build host; `conv_nets.make_model`
uses torchvision's own constructors where it imports and these otherwise. Dropout and
stochastic depth are the identity in eval and are left out."""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F


def make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    """torchvision's _make_divisible: round to a multiple, never more than 10 % down."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvNormAct(nn.Sequential):
    """torchvision.ops.Conv2dNormActivation: conv (bias only without a norm), norm, act."""

    def __init__(self, cin, cout, k=3, stride=1, groups=1, norm=nn.BatchNorm2d, act=nn.ReLU,
                 bias=None, padding=None):
        padding = (k - 1) // 2 if padding is None else padding
        layers = [nn.Conv2d(cin, cout, k, stride, padding, groups=groups,
                            bias=norm is None if bias is None else bias)]
        if norm is not None:
            layers.append(norm(cout))
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: global pool, 1x1 conv, act, 1x1 conv, gate, scale."""

    def __init__(self, channels, squeeze, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation, self.scale_activation = act(), gate()

    def forward(self, x):
        s = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return s * x


# ----------------------------------------------------------------------------- ResNet-50
class Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 bottleneck: the stride on the 3x3."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes=1000, layers=(3, 4, 6, 3)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin, stages = 64, []
        for i, (width, n) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for j in range(n):
                blocks.append(Bottleneck(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = 4 * width
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ----------------------------------------------------------------------------- MobileNetV3
class InvertedResidualV3(nn.Module):
    """MobileNetV3's block: [1x1 expand] → depthwise kxk → [SE, hardsigmoid gate] → 1x1."""

    def __init__(self, cin, k, expanded, cout, use_se, act, stride, norm):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        layers = []
        if expanded != cin:
            layers.append(ConvNormAct(cin, expanded, 1, norm=norm, act=act))
        layers.append(ConvNormAct(expanded, expanded, k, stride, groups=expanded, norm=norm,
                                  act=act))
        if use_se:
            layers.append(SqueezeExcitation(expanded, make_divisible(expanded // 4, 8),
                                            gate=nn.Hardsigmoid))
        layers.append(ConvNormAct(expanded, cout, 1, norm=norm, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y


_MOBILENET_V3_LARGE = [  # cin, kernel, expanded, cout, SE, hardswish, stride
    (16, 3, 16, 16, False, False, 1), (16, 3, 64, 24, False, False, 2),
    (24, 3, 72, 24, False, False, 1), (24, 5, 72, 40, True, False, 2),
    (40, 5, 120, 40, True, False, 1), (40, 5, 120, 40, True, False, 1),
    (40, 3, 240, 80, False, True, 2), (80, 3, 200, 80, False, True, 1),
    (80, 3, 184, 80, False, True, 1), (80, 3, 184, 80, False, True, 1),
    (80, 3, 480, 112, True, True, 1), (112, 3, 672, 112, True, True, 1),
    (112, 5, 672, 160, True, True, 2), (160, 5, 960, 160, True, True, 1),
    (160, 5, 960, 160, True, True, 1),
]


class MobileNetV3Large(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        norm = lambda c: nn.BatchNorm2d(c, eps=0.001, momentum=0.01)  # noqa: E731
        layers = [ConvNormAct(3, 16, 3, 2, norm=norm, act=nn.Hardswish)]
        for cin, k, exp, cout, se, hs, stride in _MOBILENET_V3_LARGE:
            act = nn.Hardswish if hs else nn.ReLU
            layers.append(InvertedResidualV3(cin, k, exp, cout, se, act, stride, norm))
        layers.append(ConvNormAct(160, 960, 1, norm=norm, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ----------------------------------------------------------------------------- EfficientNet-B0
class MBConv(nn.Module):
    def __init__(self, expand, k, stride, cin, cout):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = make_divisible(cin * expand, 8)
        layers = []
        if expanded != cin:
            layers.append(ConvNormAct(cin, expanded, 1, act=nn.SiLU))
        layers.append(ConvNormAct(expanded, expanded, k, stride, groups=expanded, act=nn.SiLU))
        layers.append(SqueezeExcitation(expanded, max(1, cin // 4), act=nn.SiLU))
        layers.append(ConvNormAct(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y  # stochastic depth: identity in eval


_EFFICIENTNET_B0 = [  # expand, kernel, stride, cin, cout, layers
    (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1),
]


class EfficientNetB0(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        layers = [ConvNormAct(3, 32, 3, 2, act=nn.SiLU)]
        for expand, k, stride, cin, cout, n in _EFFICIENTNET_B0:
            stage = [MBConv(expand, k, stride if i == 0 else 1, cin if i == 0 else cout, cout)
                     for i in range(n)]
            layers.append(nn.Sequential(*stage))
        layers.append(ConvNormAct(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ----------------------------------------------------------------------------- ConvNeXt-Tiny
class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (torchvision's: permute, norm, back)."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    def __init__(self, dim, layer_scale=1e-6):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, 7, padding=3, groups=dim, bias=True), Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim), nn.GELU(),
            nn.Linear(4 * dim, dim), Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)

    def forward(self, x):
        result = self.layer_scale * self.block(x)
        result += x  # stochastic depth: identity in eval
        return result


class ConvNeXtTiny(nn.Module):
    def __init__(self, num_classes=1000, dims=(96, 192, 384, 768), depths=(3, 3, 9, 3)):
        super().__init__()
        norm = lambda c: LayerNorm2d(c, eps=1e-6)  # noqa: E731
        layers = [ConvNormAct(3, dims[0], 4, 4, norm=norm, act=None, bias=True, padding=0)]
        for i, (dim, n) in enumerate(zip(dims, depths)):
            layers.append(nn.Sequential(*[CNBlock(dim) for _ in range(n)]))
            if i + 1 < len(dims):
                layers.append(nn.Sequential(norm(dim), nn.Conv2d(dim, dims[i + 1], 2, 2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(norm(dims[-1]), nn.Flatten(1),
                                        nn.Linear(dims[-1], num_classes))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


# ----------------------------------------------------------------------------- RegNetY-400MF
def regnet_stages(depth=16, w_0=48, w_a=27.89, w_m=2.09, group_width=8):
    """torchvision's BlockParams.from_init_params: (stage widths, depths, group widths)."""
    widths_cont = torch.arange(depth) * w_a + w_0
    capacity = torch.round(torch.log(widths_cont / w_0) / math.log(w_m))
    widths = (torch.round(torch.divide(w_0 * torch.pow(w_m, capacity), 8)) * 8).int().tolist()
    splits = [w != wp for w, wp in zip(widths + [0], [0] + widths)]
    stage_widths = [w for w, t in zip(widths, splits[:-1]) if t]
    starts = [d for d, t in enumerate(splits) if t]
    depths = [b - a for a, b in zip(starts, starts[1:])]
    groups = [min(group_width, w) for w in stage_widths]
    stage_widths = [make_divisible(w, g) for w, g in zip(stage_widths, groups)]
    return stage_widths, depths, groups


class ResBottleneckBlock(nn.Module):
    def __init__(self, cin, cout, stride, group_width, se_ratio=0.25):
        super().__init__()
        self.proj = None
        if cin != cout or stride != 1:
            self.proj = ConvNormAct(cin, cout, 1, stride, act=None)
        f = [ConvNormAct(cin, cout, 1), ConvNormAct(cout, cout, 3, stride,
                                                     groups=cout // group_width)]
        f.append(SqueezeExcitation(cout, int(round(se_ratio * cin))))
        f.append(ConvNormAct(cout, cout, 1, act=None))
        self.f = nn.Sequential(*f)
        self.activation = nn.ReLU()

    def forward(self, x):
        x = (self.proj(x) if self.proj is not None else x) + self.f(x)
        return self.activation(x)


class RegNetY400MF(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = ConvNormAct(3, 32, 3, 2)
        widths, depths, groups = regnet_stages()
        cin, stages = 32, []
        for w, d, g in zip(widths, depths, groups):
            stages.append(nn.Sequential(*[ResBottleneckBlock(cin if i == 0 else w, w,
                                                             2 if i == 0 else 1, g)
                                          for i in range(d)]))
            cin = w
        self.trunk_output = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.avgpool(self.trunk_output(self.stem(x)))
        return self.fc(x.flatten(start_dim=1))


MODELS = {"resnet50": ResNet50, "mobilenet_v3_large": MobileNetV3Large,
          "efficientnet_b0": EfficientNetB0, "convnext_tiny": ConvNeXtTiny,
          "regnet_y_400mf": RegNetY400MF}
