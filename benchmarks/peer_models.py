"""The models of the peer benchmark (benchmarks/peers_bench.py), in plain torch so every environment builds the same
ones: ResNet-18, MobileNetV3-Small and EfficientNet-B0 as torchvision defines them (layer for layer; their parameter
counts are checked against torchvision's), a BERT-base encoder (12 layers, 768 wide, 12 heads, GELU, post-norm), a
ViT-Tiny/16 (DeiT-Tiny's shape: 12 pre-norm layers, 192 wide, 3 heads, 224x224 in 16x16 patches, a class token) and a
speech-style recurrent model (2 LSTM layers of 256 over 100 frames of 80 features, a linear head of 29 per frame);
ShuffleNetV2 x1.0 (torchvision's, outside the table: a check run by name). torchvision itself is not used: its PyPI
wheels are CUDA builds that do not load beside the CPU torch.

Each factory takes the batch size and returns (model in eval mode, example inputs); weights are random from a fixed
seed.
"""

from __future__ import annotations

import torch
from torch import nn

# name -> parameters of the published model of that architecture: torchvision's resnet18, mobilenet_v3_small,
# efficientnet_b0 and shufflenet_v2_x1_0 (torchvision 0.2x, weights=None), timm's deit_tiny_patch16_224
PUBLISHED_PARAMETERS = {"resnet18": 11_689_512, "mobilenet_v3_small": 2_542_856, "efficientnet_b0": 5_288_548,
                        "shufflenet_v2": 2_278_604, "vit_tiny": 5_717_416}


# --- ResNet-18 ---------------------------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --- MobileNetV3-Small -------------------------------------------------------------------------------------------

def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn_act(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: type | None = None,
                 eps: float = 0.001):
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=eps, momentum=0.01)]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int, act: type = nn.ReLU, scale: type = nn.Hardsigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.relu = act()
        self.scale = scale()

    def forward(self, x):
        return x * self.scale(self.fc2(self.relu(self.fc1(self.avgpool(x)))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, act: type, stride: int):
        super().__init__()
        self.residual = stride == 1 and cin == cout
        layers = []
        if expanded != cin:
            layers.append(_conv_bn_act(cin, expanded, 1, act=act))
        layers.append(_conv_bn_act(expanded, expanded, kernel, stride, groups=expanded, act=act))
        if se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4)))
        layers.append(_conv_bn_act(expanded, cout, 1))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.residual else y


class MobileNetV3Small(nn.Module):
    # (input channels, kernel, expanded channels, output channels, squeeze-excitation, activation, stride)
    SETTING = [(16, 3, 16, 16, True, nn.ReLU, 2), (16, 3, 72, 24, False, nn.ReLU, 2),
               (24, 3, 88, 24, False, nn.ReLU, 1), (24, 5, 96, 40, True, nn.Hardswish, 2),
               (40, 5, 240, 40, True, nn.Hardswish, 1), (40, 5, 240, 40, True, nn.Hardswish, 1),
               (40, 5, 120, 48, True, nn.Hardswish, 1), (48, 5, 144, 48, True, nn.Hardswish, 1),
               (48, 5, 288, 96, True, nn.Hardswish, 2), (96, 5, 576, 96, True, nn.Hardswish, 1),
               (96, 5, 576, 96, True, nn.Hardswish, 1)]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers = [_conv_bn_act(3, 16, 3, 2, act=nn.Hardswish)]
        layers += [InvertedResidual(*s) for s in self.SETTING]
        layers.append(_conv_bn_act(96, 576, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(inplace=True), nn.Dropout(0.2),
                                        nn.Linear(1024, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --- EfficientNet-B0 ---------------------------------------------------------------------------------------------

class MBConv(nn.Module):
    def __init__(self, expand: int, kernel: int, stride: int, cin: int, cout: int):
        super().__init__()
        self.residual = stride == 1 and cin == cout
        expanded = _make_divisible(cin * expand)
        layers = []
        if expanded != cin:
            layers.append(_conv_bn_act(cin, expanded, 1, act=nn.SiLU, eps=1e-5))
        layers.append(_conv_bn_act(expanded, expanded, kernel, stride, groups=expanded, act=nn.SiLU, eps=1e-5))
        layers.append(SqueezeExcitation(expanded, max(1, cin // 4), nn.SiLU, nn.Sigmoid))
        layers.append(_conv_bn_act(expanded, cout, 1, eps=1e-5))
        self.block = nn.Sequential(*layers)

    def forward(self, x):  # stochastic depth is the identity in eval mode
        y = self.block(x)
        return y + x if self.residual else y


class EfficientNetB0(nn.Module):
    # (expand ratio, kernel, stride, input channels, output channels, layers)
    SETTING = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
               (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers = [_conv_bn_act(3, 32, 3, 2, act=nn.SiLU, eps=1e-5)]
        for expand, kernel, stride, cin, cout, n in self.SETTING:
            layers += [MBConv(expand, kernel, stride if i == 0 else 1, cin if i == 0 else cout, cout) for i in range(n)]
        layers.append(_conv_bn_act(320, 1280, 1, act=nn.SiLU, eps=1e-5))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --- ShuffleNetV2 x1.0: a check of a model outside the table (`--models shufflenet_v2`) ---------------------------

def _channel_shuffle(x, groups: int):
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride, half = stride, cout // 2
        self.branch1 = nn.Sequential()
        if stride > 1:
            self.branch1 = nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
                                         nn.BatchNorm2d(cin), nn.Conv2d(cin, half, 1, bias=False),
                                         nn.BatchNorm2d(half), nn.ReLU(inplace=True))
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
            nn.Conv2d(half, half, 3, stride, 1, groups=half, bias=False), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return _channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 24
        for repeats, cout in ((4, 116), (8, 232), (4, 464)):
            stages.append(nn.Sequential(ShuffleUnit(cin, cout, 2),
                                        *(ShuffleUnit(cout, cout, 1) for _ in range(repeats - 1))))
            cin = cout
        self.stage2, self.stage3, self.stage4 = stages
        self.conv5 = nn.Sequential(nn.Conv2d(464, 1024, 1, bias=False), nn.BatchNorm2d(1024), nn.ReLU(inplace=True))
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x):
        x = self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(x)))))
        return self.fc(self.conv5(x).mean([2, 3]))


# --- BERT-base encoder -------------------------------------------------------------------------------------------

def _distinct_layers(encoder: nn.TransformerEncoder) -> nn.TransformerEncoder:
    """nn.TransformerEncoder deep-copies one layer, so every layer starts with the same weights, and the ONNX export
    stores them once: ONNX Runtime and OpenVINO then ran 12 layers on one layer's weights, in cache and in a twelfth
    of the memory. A trained model's layers differ; each gets its own."""
    for layer in encoder.layers:
        for m in layer.modules():
            reset = getattr(m, "_reset_parameters", None) or getattr(m, "reset_parameters", None)
            if reset is not None:
                reset()
        with torch.no_grad():  # the biases and norms start as zeros and ones: as distinct as trained ones
            for p in layer.parameters():
                if p.dim() == 1:
                    p.add_(torch.randn_like(p) * 0.02)
    return encoder


class BertEncoder(nn.Module):
    def __init__(self, layers: int = 12, width: int = 768, heads: int = 12, ffn: int = 3072):
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, heads, ffn, dropout=0.0, activation="gelu", layer_norm_eps=1e-12,
                                           batch_first=True)
        self.encoder = _distinct_layers(nn.TransformerEncoder(layer, layers, enable_nested_tensor=False))

    def forward(self, x):
        return self.encoder(x)


# --- ViT-Tiny/16 -------------------------------------------------------------------------------------------------

class ViT(nn.Module):
    def __init__(self, image: int = 224, patch: int = 16, width: int = 192, layers: int = 12, heads: int = 3,
                 num_classes: int = 1000):
        super().__init__()
        self.patch = nn.Conv2d(3, width, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu", layer_norm_eps=1e-6,
                                           batch_first=True, norm_first=True)
        self.encoder = _distinct_layers(nn.TransformerEncoder(layer, layers, enable_nested_tensor=False))
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


# --- LSTM acoustic model -----------------------------------------------------------------------------------------

class SpeechLSTM(nn.Module):
    def __init__(self, features: int = 80, hidden: int = 256, layers: int = 2, classes: int = 29):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


# --- recurrent taggers -------------------------------------------------------------------------------------------

class Tagger(nn.Module):
    """A sequence tagger: token embeddings (10,000 x 256), a 2-layer bidirectional GRU, LSTM or plain RNN of 256,
    a linear head of 32 tags per token (~18 MB of weights with the GRU)."""

    def __init__(self, kind: str, vocab: int = 10_000, width: int = 256, layers: int = 2, tags: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}[kind](width, width, layers, batch_first=True,
                                                                          bidirectional=True)
        self.head = nn.Linear(2 * width, tags)

    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))[0])


def _tagger(kind: str, seq: int):
    def factory(batch: int = 1):
        torch.manual_seed(0)
        return _eval(Tagger(kind)), (torch.randint(0, 10_000, (batch, seq)),)
    return factory


def _eval(model: nn.Module) -> nn.Module:
    return model.eval().requires_grad_(False)


def _calibrated(model: nn.Module, *item_shape: int) -> nn.Module:
    """BatchNorm statistics from two train-mode passes over random inputs (a cumulative average), as a trained
    model's would be: with the fresh statistics (mean 0, variance 1) and PyTorch's default initialisation the
    activations of a deep convnet shrink layer by layer, EfficientNet-B0's to 1e-11, so its output was the
    classifier's bias whatever the input, and comparing engines' outputs checked nothing."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    generator = torch.Generator().manual_seed(1)
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(4, *item_shape, generator=generator))
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    return model


def _factory(make: type[nn.Module], *item_shape: int):
    def factory(batch: int = 1):
        torch.manual_seed(0)
        return _eval(_calibrated(make(), *item_shape)), (torch.randn(batch, *item_shape),)
    return factory


MODELS = {"resnet18": _factory(ResNet18, 3, 224, 224), "mobilenet_v3_small": _factory(MobileNetV3Small, 3, 224, 224),
          "efficientnet_b0": _factory(EfficientNetB0, 3, 224, 224),
          "bert_base": _factory(BertEncoder, 128, 768), "vit_tiny": _factory(ViT, 3, 224, 224),
          "lstm": _factory(SpeechLSTM, 100, 80), "gru_tagger": _tagger("gru", 64), "rnn_tagger": _tagger("rnn", 64),
          "lstm_tagger": _tagger("lstm", 64), "gru_tagger_512": _tagger("gru", 512),
          "shufflenet_v2": _factory(ShuffleNetV2, 3, 224, 224)}


# --- ours alone: the peers cannot run a model with our op ---------------------------------------------------------

def conv_heavy_net(batch: int = 1):
    from my_ops.models import conv_heavy_net as make  # loads the ops library (IDENTITY_CONV_OPS_LIBRARY)

    model, (x,) = make()
    return model, (torch.randn(batch, *x.shape[1:], generator=torch.Generator().manual_seed(0)),)


OURS = {"conv_heavy_net": conv_heavy_net}
ALL = {**MODELS, **OURS}
# the benchmark's table (peers_bench.py's default); the others are checks run by name
TABLE = [name for name in ALL if name != "shufflenet_v2"]
