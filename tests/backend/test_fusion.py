"""Fusion: kernel counts of typical patterns (from backend.metrics), checked against eager."""
from __future__ import annotations

import torch.nn.functional as F

import pyjit.backend as backend

from .conftest import check, make


def _kernels() -> int:
    return backend.metrics.generated_kernel_count


def test_add_relu_one_kernel(device: str) -> None:
    check(lambda x, y: (x + y).relu(), make([8, 33], device), make([33], device))
    assert _kernels() == 1


def test_softmax_one_kernel(device: str) -> None:
    check(lambda x: F.softmax(x, -1), make([6, 37], device))
    assert _kernels() == 1


def test_layer_norm_one_kernel(device: str) -> None:
    w, b = make([40], device), make([40], device)
    check(lambda x: F.layer_norm(x, (40,), w, b), make([5, 40], device), atol=1e-4, rtol=1e-4)
    assert _kernels() == 1


def test_gelu_linear_extern_mm_plus_one_kernel(device: str) -> None:
    w, b = make([16, 24], device), make([16], device)
    check(lambda x: F.gelu(F.linear(x, w, b)), make([7, 24], device), atol=1e-4, rtol=1e-4)
    assert _kernels() == 1
    assert backend.metrics.extern_calls == 1


def test_sum_plus_mean_one_kernel(device: str) -> None:
    check(lambda x: x.sum(-1) + x.mean(-1), make([9, 21], device), atol=1e-4, rtol=1e-4)
    assert _kernels() == 1


def test_looped_softmax_and_layer_norm_one_kernel_each(device: str) -> None:
    from pyjit import config as cfg
    w, b = make([50], device), make([50], device)
    with cfg.patch(backend_persistent_reduction_max=8, backend_persistent_multi_pass_max=0):
        check(lambda x: F.softmax(x, -1), make([3, 50], device))
        assert _kernels() == 1
        check(lambda x: F.layer_norm(x, (50,), w, b), make([3, 50], device), atol=1e-4, rtol=1e-4)
        assert _kernels() == 2


def test_fusion_disabled_gives_more_kernels(device: str) -> None:
    from pyjit import config as cfg
    with cfg.patch(backend_fusion=False):
        check(lambda x, y: (x + y).relu() * 2, make([4, 5], device), make([4, 5], device))
    assert _kernels() >= 1


def test_small_independent_kernels_share_one_launch(device: str) -> None:
    """Kernels that share no data fuse only when small (a launch costs more than their run):
    three batch-norm-like counter increments and two short column sums become one kernel each
    group; two large independent pointwise ops stay two kernels."""
    import torch

    c1, c2, c3 = (torch.tensor(i, device=device) for i in (3, 5, 7))
    a, b = make([40, 24], device), make([40, 24], device)
    check(lambda p, q, r, s, t: (p + 1, q + 1, r + 1, s.sum(0), t.sum(0)), c1, c2, c3, a, b)
    assert _kernels() == 2
    big1, big2 = make([300, 300], device), make([300, 300], device)
    before = _kernels()
    check(lambda p, q: (p * 2, q * 3), big1, big2)
    assert _kernels() - before == 2


def test_dependent_small_kernels_keep_their_order(device: str) -> None:
    """A small kernel reading another's reduction at other indices never joins it."""
    a = make([30, 20], device)
    check(lambda x: (x.sum(0) - x.sum(0).flip(0)).sum(), a, atol=1e-4, rtol=1e-4)
