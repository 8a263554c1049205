"""Compiled graphs called inside autocast: the graph is traced below autocast, so its extern ops
(matmuls, convolutions, attention) must not be cast again by the caller's autocast. An
``autocast(enabled=False)`` region inside an autocast region keeps eager's fp32 results, in
inference and in training (the forward exact; the backward traced in the forward's autocast
state)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pyjit


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def _fresh():
    pyjit.reset()
    yield
    pyjit.reset()


def mixed(x: torch.Tensor, w: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a = x @ w                                    # autocast: bf16
    with torch.autocast(x.device.type, enabled=False):
        b = torch.mm(x.float(), w.float())       # fp32, as written
        c = F.conv2d(x.float().view(1, 1, 16, 16), k.float(), padding=1)
    d = F.linear(a, w) + 1                       # autocast again
    return a, b, c, d


def _inputs(grad: bool, device: str) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return (torch.randn(16, 16, device=device), torch.randn(16, 16, device=device, requires_grad=grad),
            torch.randn(2, 1, 3, 3, device=device, requires_grad=grad))


def _grads_agree(*pairs: tuple[torch.Tensor, torch.Tensor]) -> None:
    """pyjit's gradient against eager's, each fp32, to bf16 rounding (fused kernels round less
    often than eager's op-by-op bf16)."""
    for got, want in pairs:
        assert got.grad.dtype == want.grad.dtype == torch.float32
        torch.testing.assert_close(got.grad, want.grad, rtol=2e-2, atol=0.5)


def _check(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> None:
    for g, e in zip(got, want):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_region_inside_autocast_inference(device: str) -> None:
    x, w, k = _inputs(False, device)
    jitted = pyjit.jit(mixed)
    with torch.autocast(device, dtype=torch.bfloat16):
        want = mixed(x, w, k)
        for _ in range(2):  # the compiling call and a cached one
            _check(jitted(x, w, k), want)
    assert want[1].dtype == torch.float32 and want[0].dtype == torch.bfloat16


def split_paths(x: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a = F.linear(x @ w, w) + 1                   # autocast: bf16
    with torch.autocast(x.device.type, enabled=False):
        b = torch.tanh(torch.mm(x.float(), v.float()))  # fp32 only: its gradient too
    return a, b


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_region_inside_autocast_training(device: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 16, device=device)
    w, v = (torch.randn(16, 16, device=device, requires_grad=True) for _ in range(2))
    w2, v2 = (t.detach().clone().requires_grad_() for t in (w, v))
    jitted = pyjit.jit(split_paths)
    with torch.autocast(device, dtype=torch.bfloat16):
        want = split_paths(x, w, v)
        got = jitted(x, w2, v2)
    _check(got, want)
    sum(o.float().sum() for o in want).backward()  # outside autocast, as PyTorch asks
    sum(o.float().sum() for o in got).backward()
    # pyjit traces the backward in the forward's autocast state: the fp32 region's backward
    # matmul runs in bf16 there (eager's would if called inside the region), so the gradients
    # agree to bf16 rounding.
    _grads_agree((v2, v), (w2, w))


@pytest.mark.parametrize("device", DEVICES)
def test_backward_called_inside_autocast(device: str) -> None:
    """Backward called inside the autocast region: eager casts the fp32 region's backward matmul
    to bf16, as pyjit's traced backward does; the forward is exact, the gradients agree to bf16
    rounding (fused kernels round less often)."""
    x, w, k = _inputs(True, device)
    x2, w2, k2 = (t.detach().clone().requires_grad_(t.requires_grad) for t in (x, w, k))
    jitted = pyjit.jit(mixed)
    with torch.autocast(device, dtype=torch.bfloat16):
        want, got = mixed(x, w, k), jitted(x2, w2, k2)
        _check(got, want)
        sum(o.float().sum() for o in want).backward()
        sum(o.float().sum() for o in got).backward()
    _grads_agree((w2, w), (k2, k))


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_dtype_and_device_are_guarded(device: str) -> None:
    """A graph compiled under bf16 autocast is not reused under fp16 autocast (the frame's guard
    and the graph cache's key both hold the autocast dtype), nor under another device's autocast."""
    x, w, _ = _inputs(False, device)
    jitted = pyjit.jit(lambda a, b: torch.relu(a @ b))
    other = "cpu" if device == "cuda" else ("cuda" if torch.cuda.is_available() else None)
    for dtype in (torch.bfloat16, torch.float16, torch.bfloat16):
        with torch.autocast(device, dtype=dtype):
            got, want = jitted(x, w), torch.relu(x @ w)
        assert got.dtype == want.dtype == dtype
        torch.testing.assert_close(got, want)
    if other is not None:
        with torch.autocast(other, dtype=torch.bfloat16):  # autocast on, but not for this device
            got = jitted(x, w)
        assert got.dtype == torch.float32
