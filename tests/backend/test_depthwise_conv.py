"""Depthwise convolutions lowered to generated kernels (lowering/convolution.py): values and
strides equal eager's for every window, stride, padding and dilation, in both memory formats, in
half precision, fused with the batch norm and activation after them, and in training (the
backward stays ATen's); other convolutions stay extern calls."""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit.backend as backend
from pyjit import config as cfg

from .conftest import compile_graph, tolerances

CASES = [  # channels, (h, w), kernel, stride, padding, dilation, bias
    (8, (9, 9), 3, 1, 1, 1, True),
    (6, (10, 11), 5, 2, 2, 1, False),
    (4, (14, 14), 7, 1, 3, 1, True),       # ConvNeXt's 7x7
    (5, (6, 7), 3, 2, 0, 1, True),         # no padding, odd sizes
    (4, (9, 9), 3, 1, 2, 2, False),        # dilated
    (3, (8, 8), (1, 3), (1, 2), (0, 1), 1, True),  # rectangular window
]


class Around(nn.Module):
    """``conv(x * scale) + shift``: the convolution between two generated operations."""

    def __init__(self, conv: nn.Conv2d, scale: float = 1.0, shift: float = 0.0) -> None:
        super().__init__()
        self.conv, self.scale, self.shift = conv, scale, shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x * self.scale) + self.shift


@pytest.fixture
def forced(target: str) -> Any:
    with cfg.patch(conv_template=True):
        yield target


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("channels_last", [False, True])
def test_depthwise_matches_eager(forced: str, case: tuple, channels_last: bool) -> None:
    c, hw, k, s, p, d, bias = case
    fn = Around(nn.Conv2d(c, c, k, s, p, d, groups=c, bias=bias), scale=2.0).to(forced)

    x = torch.randn(2, c, *hw, device=forced)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        backend.metrics.reset()
        got, want = compile_graph(fn, [x])(x), fn(x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert got.stride() == want.stride()
    assert backend.metrics.extern_calls == 0  # the convolution is a generated kernel


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_accumulates_in_fp32(forced: str, dtype: torch.dtype) -> None:
    fn = Around(nn.Conv2d(16, 16, 5, 1, 2, groups=16)).to(forced, dtype)
    conv = fn.conv

    x = torch.randn(2, 16, 12, 12, device=forced, dtype=dtype).to(memory_format=torch.channels_last)
    with torch.no_grad():
        got, want = compile_graph(fn, [x])(x), fn(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, **tolerances(dtype))
    # fp32 accumulation, as ATen's: within one rounding of the fp64 result
    ref = F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=2, groups=16)
    torch.testing.assert_close(got.double(), ref, **tolerances(dtype))


def test_batch_norm_and_activation_fuse_into_the_convolution(forced: str) -> None:
    """Eval batch norm + hardswish after the depthwise convolution: one generated kernel."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8),
                          nn.Hardswish()).to(forced).eval()
    with torch.no_grad():
        model[1].running_mean.normal_()
        model[1].running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 8, 9, 9, device=forced).to(memory_format=torch.channels_last)
    with torch.no_grad():
        backend.metrics.reset()
        got, want = compile_graph(model, [x])(x), model(x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert got.stride() == want.stride()
    assert backend.metrics.generated_kernel_count == 1 and backend.metrics.extern_calls == 0


def test_depthwise_trains_like_eager(forced: str) -> None:
    """In training the forward's convolution is generated and its backward is ATen's
    ``convolution_backward``: outputs, input and parameter gradients and the batch norm's running
    statistics equal eager's."""
    from .test_aot_training import check_training

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(6, 6, 3, 2, 1, groups=6), nn.BatchNorm2d(6), nn.ReLU6(),
                          nn.Conv2d(6, 6, 5, 1, 2, groups=6, bias=False)).to(forced).train()
    x = torch.randn(2, 6, 10, 10, device=forced).to(memory_format=torch.channels_last).requires_grad_()
    check_training(model, [x])


@pytest.mark.parametrize("groups, cout", [(1, 4), (2, 4), (4, 8)])
def test_other_convolutions_stay_extern(forced: str, groups: int, cout: int) -> None:
    """Dense, grouped and channel-multiplier convolutions are ATen calls, with eager's values."""
    fn = Around(nn.Conv2d(4, cout, 3, 1, 1, groups=groups), shift=1.0).to(forced)

    x = torch.randn(2, 4, 7, 7, device=forced)
    with torch.no_grad():
        backend.metrics.reset()
        got, want = compile_graph(fn, [x])(x), fn(x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert backend.metrics.extern_calls == 1


def test_off_by_default_keeps_the_extern(target: str) -> None:
    """Without ``conv_template`` every convolution is an extern call."""
    fn = Around(nn.Conv2d(4, 4, 3, 1, 1, groups=4)).to(target)
    x = torch.randn(2, 4, 7, 7, device=target)
    assert cfg.config.conv_template is False
    with torch.no_grad():
        backend.metrics.reset()
        torch.testing.assert_close(compile_graph(fn, [x])(x), fn(x), atol=1e-5, rtol=1e-5)
    assert backend.metrics.extern_calls == 1
