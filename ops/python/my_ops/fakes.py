"""Fake (meta) implementations of my_ops for tracing: same checks and same words as the C++ kernels, so tracing
fails where running would."""

from __future__ import annotations

import torch


def _check_input(x: torch.Tensor, what: str) -> None:
    torch._check(x.dim() == 4, lambda: f"{what}: expected a 4-D NCHW tensor, got a {x.dim()}-D tensor of shape "
                                       f"{list(x.shape)}")
    torch._check(x.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16),
                 lambda: f"{what}: expected dtype float32, float64, float16 or bfloat16, got {x.dtype}")


def register() -> None:
    @torch.library.register_fake("my_ops::identity_conv_op")
    def _identity_conv_fake(x):
        _check_input(x, "identity_conv_op")
        # empty_like keeps dense strides and makes others contiguous, as the kernels do.
        return torch.empty_like(x)

    @torch.library.register_fake("my_ops::depthwise_conv2d")
    def _depthwise_fake(x, weight):
        _check_input(x, "depthwise_conv2d")
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    @torch._library.register_fake_class("my_ops::IdentityConvClass")
    class FakeIdentityConvClass:
        def __init__(self, weight: torch.Tensor):
            self.weight = weight

        @classmethod
        def __obj_unflatten__(cls, flat_ctx):
            return cls(**dict(flat_ctx))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            _check_input(x, "IdentityConvClass.forward")
            torch._check(x.shape[1] == self.weight.shape[0],
                         lambda: f"IdentityConvClass.forward: expected an input with {self.weight.shape[0]} "
                                 f"channels (dim 1), got shape {list(x.shape)}")
            return torch.empty(x.shape, dtype=x.dtype, device=x.device)

        def get_weight(self) -> torch.Tensor:
            return self.weight.clone()

        def set_weight(self, weight: torch.Tensor) -> None:  # every method of the real class has a fake
            self.weight = weight.clone()

        def channels(self) -> int:
            return self.weight.shape[0]

        def kernel_size(self) -> int:
            return self.weight.shape[2]
