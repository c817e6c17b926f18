"""Example models that call this package's ops (`import my_ops.models` loads the ops library first). Each factory
returns (model, example_inputs), the shape `export-tools export --model my_ops.models:FACTORY` takes."""

from __future__ import annotations

import torch


class IdentityConvNet(torch.nn.Module):
    """The seed's model: a stateful IdentityConvClass object, the stateless op, then ordinary layers."""

    def __init__(self, channels: int = 3, kernel_size: int = 3, out_channels: int = 8):
        super().__init__()
        self.depthwise = torch.classes.my_ops.IdentityConvClass(channels, kernel_size)
        self.conv = torch.nn.Conv2d(channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise.forward(x)
        y = torch.ops.my_ops.identity_conv_op(y)
        return torch.relu(self.conv(y))


class IdentityConvOpOnly(torch.nn.Module):
    """The stateless op alone."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.my_ops.identity_conv_op(x)


def identity_conv_net(dtype: torch.dtype = torch.float32):
    """IdentityConvNet with a non-identity depthwise weight, so a package proves that the state travelled."""
    gen = torch.Generator().manual_seed(0)
    model = IdentityConvNet().eval()
    weight = torch.randn(3, 1, 3, 3, generator=gen) * 0.5
    weight[:, :, 1, 1] += 1.0
    model.depthwise.set_weight(weight)
    with torch.no_grad():
        for p in model.conv.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    model = model.to(dtype)
    return model, (torch.randn(4, 3, 32, 32, generator=gen).to(dtype),)


class IdentityConvNetLite(torch.nn.Module):
    """IdentityConvNet with its depthwise convolution as a weight and an aten convolution instead of the TorchBind
    object (which pt2rt-lite cannot hold): the op, then the same layers. Equal to IdentityConvNet to rounding."""

    def __init__(self, weight: torch.Tensor, conv: torch.nn.Conv2d):
        super().__init__()
        self.register_buffer("depthwise_weight", weight.clone())
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.depthwise_weight.shape[-1]
        y = torch.nn.functional.conv2d(x, self.depthwise_weight, padding=k // 2, groups=x.shape[1])
        y = torch.ops.my_ops.identity_conv_op(y)
        return torch.relu(self.conv(y))


def identity_conv_net_lite():
    """identity_conv_net's weights in IdentityConvNetLite: a model with a custom op that pt2rt-lite runs."""
    model, inputs = identity_conv_net()
    return IdentityConvNetLite(model.depthwise.get_weight(), model.conv).eval(), inputs


def identity_conv_net_fp16():
    return identity_conv_net(torch.float16)


def identity_conv_net_bf16():
    return identity_conv_net(torch.bfloat16)


class ConvHeavyNet(torch.nn.Module):
    """A small mobile-style stack where convolutions dominate: stem conv, IdentityConvClass as the depthwise
    stage, pointwise conv, and two more 3x3 convs."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, width, 3, padding=1)
        self.depthwise = torch.classes.my_ops.IdentityConvClass(width, 3)
        self.pointwise = torch.nn.Conv2d(width, 2 * width, 1)
        self.conv1 = torch.nn.Conv2d(2 * width, 2 * width, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(2 * width, width, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        y = torch.ops.my_ops.identity_conv_op(self.depthwise.forward(y))
        y = torch.relu(self.pointwise(y))
        y = torch.relu(self.conv1(y))
        return self.conv2(y)


def conv_heavy_net():
    gen = torch.Generator().manual_seed(2)
    model = ConvHeavyNet().eval()
    model.depthwise.set_weight(torch.randn(32, 1, 3, 3, generator=gen))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model, (torch.randn(2, 3, 64, 64, generator=gen),)


class ConvClassifierNet(torch.nn.Module):
    """An image classifier of the shape services batch: a stem conv, IdentityConvClass and the stateless op at full
    resolution, then stride-2 stages that trade resolution for channels (64x64 -> 4x4, 32 -> 512), a global average
    pool and a linear head. Its deep layers stream more weight bytes than they compute on at batch 1, which is what
    batching amortises."""

    STAGES = ((64, 1), (64, 2), (128, 1), (128, 2), (256, 1), (256, 2), (512, 1))

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.depthwise = torch.classes.my_ops.IdentityConvClass(32, 3)
        layers, c = [], 32
        for width, stride in self.STAGES:
            layers += [torch.nn.Conv2d(c, width, 3, stride=stride, padding=1), torch.nn.ReLU()]
            c = width
        self.features = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        y = torch.ops.my_ops.identity_conv_op(self.depthwise.forward(y))
        return self.head(self.features(y).mean((2, 3)))


def conv_classifier_net():
    gen = torch.Generator().manual_seed(3)
    model = ConvClassifierNet().eval()
    model.depthwise.set_weight(torch.randn(32, 1, 3, 3, generator=gen))
    with torch.no_grad():
        for p in model.parameters():
            fan_in = p[0].numel() if p.dim() > 1 else 100
            p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / fan_in) ** 0.5)  # He: activations stay O(1)
    return model, (torch.randn(2, 3, 64, 64, generator=gen),)


def identity_conv_op_only():
    gen = torch.Generator().manual_seed(1)
    return IdentityConvOpOnly().eval(), (torch.randn(2, 3, 16, 16, generator=gen),)


class Aliasing(torch.nn.Module):
    """Outputs that alias: a view of the input, a constant as it is, and one tensor twice. The runtime must hand
    out outputs the caller owns alone (tests of Runtime::run, the C API and pt2serve)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.arange(6, dtype=torch.float32).reshape(2, 3))

    def forward(self, x):
        y = x * 2
        return x.reshape(x.shape[0], -1), self.w, y, y


def aliasing_outputs():
    gen = torch.Generator().manual_seed(2)
    return Aliasing().eval(), (torch.randn(2, 3, 4, generator=gen),)
