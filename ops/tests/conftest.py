"""Fixtures of the my_ops tests: the package (loads the library, registers the fakes), devices, dtypes."""

import pytest
import torch

import my_ops  # noqa: F401

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _device_params():
    return [
        pytest.param("cpu", id="cpu"),
        pytest.param("cuda", id="cuda", marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ]),
    ]


@pytest.fixture(params=_device_params())
def device(request):
    return request.param


@pytest.fixture(params=DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def dtype(request):
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
