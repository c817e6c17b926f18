"""Models nobody here tuned the exporter for, built from torch.nn (no downloads), each with its example inputs and
the dynamic_shapes it is exported with. recipes[name] -> (factory, export kwargs)."""

from __future__ import annotations

import my_ops  # noqa: F401  (the depthwise layer of the conv net)
import torch
from torch.export import Dim


class ConvNet(torch.nn.Module):
    """A small image classifier: stem conv, our depthwise class with a non-identity weight, a stride-2 conv, global
    pooling and a linear head. Any batch, height and width."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.depthwise = torch.classes.my_ops.IdentityConvClass(16, 3)
        self.depthwise.set_weight(torch.randn(16, 1, 3, 3, generator=gen) * 0.3)
        self.down = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(image))
        y = self.depthwise.forward(y)
        y = torch.relu(self.down(y))
        return self.head(y.mean(dim=(2, 3)))


class Encoder(torch.nn.Module):
    """torch.nn.TransformerEncoder over token embeddings with a key padding mask (True = padding), as written
    everywhere: a row that is all padding gives NaN in eager (no caller sends one)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 32)
        layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = torch.nn.Linear(32, 5)

    def forward(self, tokens: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        y = self.encoder(self.embed(tokens), src_key_padding_mask=padding)
        keep = (~padding).unsqueeze(-1).to(y.dtype)
        return self.out((y * keep).sum(1) / keep.sum(1))


class TwoScales(torch.nn.Module):
    """Two inputs sharing the batch, the second at twice the first's resolution (a derived dim: 2*h, 2*w), and two
    outputs."""

    def __init__(self):
        super().__init__()
        self.mix = torch.nn.Conv2d(4, 4, 1)

    def forward(self, coarse: torch.Tensor, fine: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        up = torch.nn.functional.interpolate(coarse, scale_factor=2.0, mode="nearest")
        mixed = self.mix(up + fine)
        return mixed, mixed.amax(dim=(2, 3))


class UNetish(torch.nn.Module):
    """Three stride-2 convs down, nearest upsampling back with skip connections: H and W must be multiples of 8."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.ModuleList([torch.nn.Conv2d(3 if i == 0 else 4, 4, 3, stride=2, padding=1)
                                         for i in range(3)])
        self.up = torch.nn.Upsample(scale_factor=2, mode="nearest")
        self.head = torch.nn.Conv2d(4, 2, 1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        skips, x = [], image
        for down in self.down:
            skips.append(x)
            x = torch.relu(down(x))
        for skip in reversed(skips[1:]):
            x = self.up(x) + skip
        return self.head(self.up(x))


def unet():
    return UNetish().eval(), (torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(5)),)


def conv_net(dtype: torch.dtype = torch.float32):
    model = ConvNet().eval().to(dtype)
    image = torch.randn(1, 3, 24, 40).to(dtype)  # a batch-1 example
    return model, (image,)


def conv_net_shapes():
    return {"image": {0: Dim("batch", min=1, max=8), 2: Dim("h", min=8, max=64), 3: Dim("w", min=8, max=64)}}


def encoder():
    model = Encoder().eval()
    tokens = torch.randint(0, 100, (1, 7))  # a batch-1 example, its last two tokens padding
    padding = torch.zeros(1, 7, dtype=torch.bool)
    padding[0, 5:] = True
    return model, (tokens, padding)


def encoder_golden():
    """Cases of the caller's own: rows padded by different amounts, none whole."""
    tokens = torch.randint(0, 100, (3, 9), generator=torch.Generator().manual_seed(3))
    padding = torch.arange(9).expand(3, 9) >= torch.tensor([[9], [4], [1]])
    return [(tokens, padding)]


def encoder_shapes():
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=2, max=16)
    return {"tokens": {0: batch, 1: seq}, "padding": {0: batch, 1: seq}}


def two_scales():
    return TwoScales().eval(), (torch.randn(2, 4, 5, 6), torch.randn(2, 4, 10, 12))


def two_scales_shapes():
    batch, h, w = Dim("batch", min=1, max=6), Dim("h", min=2, max=20), Dim("w", min=2, max=20)
    return {"coarse": {0: batch, 2: h, 3: w}, "fine": {0: batch, 2: 2 * h, 3: 2 * w}}


RECIPES = {
    "conv_net": (conv_net, conv_net_shapes),
    "conv_net_fp16": (lambda: conv_net(torch.float16), conv_net_shapes),
    "conv_net_bf16": (lambda: conv_net(torch.bfloat16), conv_net_shapes),
    "encoder": (encoder, encoder_shapes, encoder_golden),
    "two_scales": (two_scales, two_scales_shapes),
}
