"""Pooling lowered to generated kernels (lowering/pooling.py): max pooling's values, the indices
eager's backward reads, adaptive average and max pooling to any output size, and the strides,
all equal eager's, on every code generator."""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn

import pyjit.backend as backend
from pyjit import config as cfg

from .conftest import compile_graph

CASES = [  # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False),
    (2, 2, 0, 1, False),
    (3, 2, 1, 1, True),
    (3, 1, 1, 2, False),
    ((2, 3), (1, 2), (1, 0), 1, True),
]


def _input(device: str, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 9, 11)
    x[0, 0, 0, 0] = float("nan")                 # a NaN wins its windows
    x[0, 0, 4, 4] = x[0, 0, 4, 6] = float("nan")  # the last NaN of a window wins
    x[1, 2, 2:7, 2:7] = float("-inf")            # windows of -inf: the first valid index...
    x[1, 3, 0:4, 0:4] = float("-inf")            # ...also behind padding
    x[0, 1, 2, 2] = x[0, 1, 2, 3]                # ties: the first wins
    x = x.to(device=device, dtype=dtype)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _same(got: Any, want: Any) -> None:
    torch.testing.assert_close(got[0], want[0], equal_nan=True, atol=0, rtol=0)
    assert torch.equal(got[1], want[1])
    assert got[0].stride() == want[0].stride() and got[1].stride() == want[1].stride()


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("channels_last", [False, True])
def test_max_pool2d_with_indices_matches_eager(target: str, case: tuple, channels_last: bool) -> None:
    k, s, p, d, ceil = case

    def fn(t: torch.Tensor) -> Any:
        return torch.ops.aten.max_pool2d_with_indices(t * 2, k, s, p, d, ceil)

    x = _input(target, torch.float32, channels_last)
    _same(compile_graph(fn, [x])(x), fn(x))
    # A generated kernel on Triton; the C++ generator keeps ATen's vectorized kernel.
    extern = "aten.max_pool2d_with_indices.default" in backend.metrics.fallback_ops
    assert extern is (cfg.config.cpu_backend == "cpp" and target == "cpu")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_and_unbatched(target: str, dtype: torch.dtype) -> None:
    def fn(t: torch.Tensor) -> Any:
        return torch.ops.aten.max_pool2d_with_indices(torch.relu(t), [3, 3], [2, 2], [1, 1])

    x = _input(target, dtype, False)
    _same(compile_graph(fn, [x])(x), fn(x))
    x3 = x[0]  # (C, H, W)
    _same(compile_graph(fn, [x3])(x3), fn(x3))


def test_stem_trains_like_eager(target: str) -> None:
    """conv -> BN -> ReLU -> max pool trained through pyjit's backend: the pool's indices feed
    eager's max_pool2d_with_indices_backward, and every gradient equals eager's."""
    from .test_aot_training import check_training

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(3, 2, 1)).to(target).train()
    check_training(model, [torch.randn(2, 3, 9, 9, device=target)])


ADAPTIVE = [  # input (N, C, H, W) or (C, H, W), output size
    ((2, 5, 14, 14), (7, 7)),    # uniform windows (VGG's 7x7 head)
    ((2, 5, 14, 14), (3, 5)),    # overlapping, uneven windows
    ((2, 3, 10, 13), (4, 6)),
    ((2, 4, 5, 5), (7, 7)),      # more outputs than inputs: windows of one or two positions
    ((3, 9, 11), (5, 2)),        # unbatched
]


def _strides_match(got: torch.Tensor, want: torch.Tensor) -> None:
    """Strides equal on every dimension that addresses memory (size > 1)."""
    assert [s for n, s in zip(got.shape, got.stride()) if n > 1] == \
        [s for n, s in zip(want.shape, want.stride()) if n > 1], (got.stride(), want.stride())


@pytest.mark.parametrize("case", ADAPTIVE, ids=str)
@pytest.mark.parametrize("channels_last", [False, True])
def test_adaptive_pools_match_eager(target: str, case: tuple, channels_last: bool) -> None:
    shape, out = case
    torch.manual_seed(0)
    x = torch.randn(*shape)
    x[(0,) * x.dim()] = float("nan")      # a NaN wins its windows (and spreads into averages)
    x[..., 1, 2:4] = float("-inf")        # -inf windows: the window's first index
    x = x.to(target)
    if channels_last and x.dim() == 4:
        x = x.to(memory_format=torch.channels_last)

    def avg(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.adaptive_avg_pool2d(t * 2, out) + 1

    def mx(t: torch.Tensor) -> Any:
        return torch.nn.functional.adaptive_max_pool2d(t * 2, out, return_indices=True)

    got, want = compile_graph(avg, [x])(x), avg(x)
    torch.testing.assert_close(got, want, equal_nan=True)
    _strides_match(got, want)
    got_max, want_max = compile_graph(mx, [x])(x), mx(x)
    torch.testing.assert_close(got_max[0], want_max[0], equal_nan=True, atol=0, rtol=0)
    assert torch.equal(got_max[1], want_max[1])
    _strides_match(got_max[0], want_max[0])
    _strides_match(got_max[1], want_max[1])
    # Generated kernels on Triton; the C++ generator keeps ATen's vectorized kernels.
    externs = {"aten._adaptive_avg_pool2d.default", "aten.adaptive_max_pool2d.default"} & set(backend.metrics.fallback_ops)
    assert (externs == set()) is not (cfg.config.cpu_backend == "cpp" and target == "cpu"), externs


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_adaptive_average_accumulates_in_fp32(target: str, dtype: torch.dtype) -> None:
    x = (torch.randn(2, 4, 15, 15) * 10 + 100).to(target, dtype)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.adaptive_avg_pool2d(t, (4, 4))

    torch.testing.assert_close(compile_graph(fn, [x])(x), fn(x))
