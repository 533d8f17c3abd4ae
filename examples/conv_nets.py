"""Small convolutional networks in plain torch (torchvision does not import next to the CPU
torch here): the shapes of ResNet-18, a MobileNetV2 inverted residual, a ConvNeXt block, a
squeeze-excitation block, a Conv1d audio stem, a U-Net and a HiFi-GAN-like vocoder (transposed
convolutions); and factories of full models: the torchvision
classifiers (`make_vision`: torchvision's own where it imports, else examples/vision_nets.py),
transformers' Whisper encoder and wav2vec2 (tiny random-init configs). Used by
tests/test_conv.py, tests/test_conv_models.py and benchmarks/bench_conv.py, and buildable:
`aotpack build examples/conv_nets.py:make_resnet18` (`--dynamic x.0=1..64` for any batch)."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


def randomize_batch_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial running statistics and affine parameters (fresh ones are the identity)."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            c = m.num_features
            m.running_mean.copy_(torch.rand(c, generator=gen) - 0.5)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(c, generator=gen) - 0.5)
    return model


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's resnet18 layout (widths scaled by `width`/64)."""

    def __init__(self, width=64, classes=1000):
        super().__init__()
        w = width
        self.conv1 = nn.Conv2d(3, w, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8 * w, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2: 1x1 expand + BN + ReLU6, 3x3 depthwise + BN + ReLU6, 1x1 project + BN,
    residual when the shape allows."""

    def __init__(self, cin, cout, stride, expand=6):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV2Block(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c),
                                  nn.Hardswish())
        self.b1 = InvertedResidual(c, c, 1)
        self.b2 = InvertedResidual(c, 2 * c, 2)

    def forward(self, x):
        return self.b2(self.b1(self.stem(x)))


class ConvNeXtBlock(nn.Module):
    """7x7 depthwise conv, channels-last LayerNorm, pointwise MLP with GELU, layer scale."""

    def __init__(self, dim=32):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class SqueezeExcitation(nn.Module):
    def __init__(self, c=32, squeeze=8):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)

    def forward(self, x):
        y = F.silu(self.bn(self.conv(x)))
        s = F.adaptive_avg_pool2d(y, 1)
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(s))))
        return y * s


class AudioStem(nn.Module):
    """Whisper-like: two Conv1d + GELU, the second strided, then [B, T, C]."""

    def __init__(self, mels=16, dim=32):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)

    def forward(self, x):
        x = F.gelu(self.conv1(x))
        x = F.gelu(self.conv2(x))
        return x.permute(0, 2, 1)


def _double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    """A two-level U-Net: the decoder upsamples by ConvTranspose2d — kernel == stride (the
    usual 2x2/2) and overlapping windows (4x4/2, padding 1, as DCGAN generators) — then
    concatenates the encoder's skip along the channels."""

    def __init__(self, c=3, w=16, classes=2):
        super().__init__()
        self.down1, self.down2 = _double_conv(c, w), _double_conv(w, 2 * w)
        self.mid = _double_conv(2 * w, 4 * w)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = _double_conv(4 * w, 2 * w)
        self.up1 = nn.ConvTranspose2d(2 * w, w, 4, stride=2, padding=1)
        self.dec1 = _double_conv(2 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        a = self.down1(x)
        b = self.down2(F.max_pool2d(a, 2))
        y = self.mid(F.max_pool2d(b, 2))
        y = self.dec2(torch.cat([self.up2(y), b], 1))
        y = self.dec1(torch.cat([self.up1(y), a], 1))
        return self.head(y)


class VocoderStage(nn.Module):
    """HiFi-GAN's upsampling stage: leaky ReLU, ConvTranspose1d with a kernel twice its
    stride, and a residual dilated Conv1d."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.up = nn.ConvTranspose1d(cin, cout, 2 * stride, stride, padding=stride // 2)
        self.res = nn.Conv1d(cout, cout, 3, padding=3, dilation=3)

    def forward(self, x):
        x = self.up(F.leaky_relu(x, 0.1))
        return x + self.res(F.leaky_relu(x, 0.1))


class Vocoder(nn.Module):
    """Mel frames [B, mels, T] to a waveform [B, 1, 64 T] (8x, 4x, 2x upsampling)."""

    def __init__(self, mels=16, w=32):
        super().__init__()
        self.pre = nn.Conv1d(mels, w, 7, padding=3)
        self.stages = nn.Sequential(VocoderStage(w, w // 2, 8), VocoderStage(w // 2, w // 4, 4),
                                    VocoderStage(w // 4, w // 8, 2))
        self.post = nn.Conv1d(w // 8, 1, 7, padding=3)

    def forward(self, mel):
        return torch.tanh(self.post(F.leaky_relu(self.stages(self.pre(mel)))))


def nets():
    """name -> (factory, example input shape)."""
    return {
        "resnet18": (lambda: ResNet18(width=16, classes=10), (2, 3, 32, 32)),
        "mobilenet_v2_block": (MobileNetV2Block, (2, 3, 16, 16)),
        "convnext_block": (ConvNeXtBlock, (2, 32, 8, 8)),
        "squeeze_excitation": (SqueezeExcitation, (2, 32, 8, 8)),
        "audio_stem": (AudioStem, (2, 16, 20)),
        "unet": (UNet, (2, 3, 16, 16)),
        "vocoder": (Vocoder, (2, 16, 6)),
    }


def make(name: str, dtype=torch.float32):
    factory, shape = nets()[name]
    torch.manual_seed(0)
    model = randomize_batch_norms(factory()).eval().to(dtype)
    return model, torch.randn(shape).to(dtype)


def make_unet(batch: int = 1, size: int = 64, dtype=torch.float32):
    """(model, example inputs): the U-Net of nets() at size x size (a multiple of 4)."""
    torch.manual_seed(0)
    return (randomize_batch_norms(UNet()).eval().to(dtype),
            (torch.randn(batch, 3, size, size).to(dtype),))


def make_unet_dynamic(max_batch: int = 4, max_side: int = 256, dtype=torch.float32):
    """The U-Net for any batch in 1..max_batch and any image height and width that are
    multiples of 16 in 32..max_side: each side is a torch.export derived Dim, 16*h, as
    torch asks for a net that halves and doubles the sides (the bundle reads h from it)."""
    model, (x,) = make_unet(batch=2, size=64, dtype=dtype)
    h, w = (torch.export.Dim(n, min=2, max=max_side // 16) for n in ("h", "w"))
    return model, (x,), ({0: torch.export.Dim("B", min=1, max=max_batch), 2: 16 * h,
                          3: 16 * w},)


def make_vocoder(batch: int = 1, frames: int = 32, dtype=torch.float32):
    """(model, example inputs): the vocoder of nets(), `frames` mel frames."""
    torch.manual_seed(0)
    return Vocoder().eval().to(dtype), (torch.randn(batch, 16, frames).to(dtype),)


def make_resnet18(batch: int = 1, size: int = 224, width: int = 64, classes: int = 1000,
                  dtype=torch.bfloat16, seed: int = 0):
    """(model, example inputs): full-size ResNet-18 (random weights, batch norms randomized)."""
    torch.manual_seed(seed)
    model = randomize_batch_norms(ResNet18(width, classes), seed).eval().to(dtype)
    return model, (torch.randn(batch, 3, size, size).to(dtype),)


def make_resnet18_dynamic(max_batch: int = 64, **kw):
    """ResNet-18 for any batch in 1..max_batch (dim B; the example has 2: torch.export
    specializes an example size of 1)."""
    model, inputs = make_resnet18(**{"batch": 2, **kw})
    return model, inputs, ({0: torch.export.Dim("B", min=1, max=max_batch)},)


# ----------------------------------------------------------------------------- full models
VISION_MODELS = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0",
                 "convnext_tiny", "regnet_y_400mf")


def vision_model(name: str, source: str = "auto") -> nn.Module:
    """A torchvision classifier by name, random weights: torchvision's own constructor where it
    imports (source "auto" or "torchvision"), else examples/vision_nets.py's definition of the
    same layers ("ours")."""
    if source in ("auto", "torchvision"):
        try:
            import torchvision.models as tvm

            return getattr(tvm, name)(weights=None)
        except Exception:  # not importable here (a CUDA torchvision next to the CPU torch)
            if source == "torchvision":
                raise
    if name == "resnet18":
        return ResNet18()
    import vision_nets

    return vision_nets.MODELS[name]()


def randomize_layer_scales(model: nn.Module, seed: int = 0) -> nn.Module:
    """ConvNeXt's layer scales start at 1e-6, which hides every block from a comparison."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("layer_scale"):
            p.data.copy_(torch.rand(p.shape, generator=gen) * 0.5 + 0.25)
    return model


def make_vision(name: str, batch: int = 1, size: int = 224, dtype=torch.bfloat16,
                seed: int = 0, source: str = "auto"):
    """(model, example inputs): a torchvision classifier, random weights, batch norms and
    layer scales randomized, eval, cast to `dtype`."""
    torch.manual_seed(seed)
    model = randomize_layer_scales(randomize_batch_norms(vision_model(name, source), seed), seed)
    model = model.eval().to(dtype)
    gen = torch.Generator().manual_seed(seed + 1)
    return model, (torch.randn(batch, 3, size, size, generator=gen).to(dtype),)


def make_whisper_encoder(batch: int = 1, dtype=torch.float32, seed: int = 0):
    """transformers' WhisperEncoder (two Conv1d + GELU front end, then the transformer),
    tiny random-init config: input features [B, 80 mels, 2 * max_source_positions]."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(seed)
    cfg = WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4,
                        encoder_ffn_dim=128, num_mel_bins=80, max_source_positions=50,
                        attn_implementation="sdpa")
    model = _FirstOutput(WhisperEncoder(cfg)).eval().to(dtype)
    gen = torch.Generator().manual_seed(seed + 1)
    return model, (torch.randn(batch, 80, 100, generator=gen).to(dtype),)


def make_wav2vec2(batch: int = 1, dtype=torch.float32, seed: int = 0, norm: str = "layer",
                  samples: int = 1600):
    """transformers' Wav2Vec2Model, tiny random-init config: the conv feature extractor
    (Conv1d stack, `norm` "layer" or "group" after the convs) then the transformer."""
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(seed)
    cfg = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
                         conv_kernel=(10, 3, 3), feat_extract_norm=norm,
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                         do_stable_layer_norm=norm == "layer", attn_implementation="sdpa")
    model = _FirstOutput(Wav2Vec2Model(cfg)).eval().to(dtype)
    gen = torch.Generator().manual_seed(seed + 1)
    return model, (torch.randn(batch, samples, generator=gen).to(dtype),)


def make_wav2vec2_features(batch: int = 1, dtype=torch.float32, seed: int = 0,
                           norm: str = "group"):
    """Only wav2vec2's conv feature extractor ([B, samples] -> [B, C, frames])."""
    model, inputs = make_wav2vec2(batch, dtype, seed, norm)
    return model.inner.feature_extractor, inputs


class _FirstOutput(nn.Module):
    """A transformers model's last_hidden_state as a plain tensor output."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)[0]
