"""Decomposed batch-norm variants (incl. CUDA's cudnn_batch_norm) and the cross-entropy kernels.

Every batch-norm aten variant that can appear in an inference graph must become pointwise ops
fused with what follows (no extern aten call); cross_entropy over long rows must stay two
kernels and read each row once (the multi-pass row reduction runs persistent).
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import pyjit.backend as backend
from pyjit import config as cfg

from .conftest import check, make

aten = torch.ops.aten
EPS = 1e-5


def _stats(device: str, c: int) -> tuple[torch.Tensor, ...]:
    weight, bias = make([c], device), make([c], device)
    mean, var = make([c], device), make([c], device, low=0.5, high=2.0)
    return weight, bias, mean, var


# Each variant computes eval-mode batch norm, then relu (the pattern that must fuse).
VARIANTS: dict[str, Callable[..., Any]] = {
    "cudnn_batch_norm": lambda x, w, b, m, v: aten.cudnn_batch_norm(x, w, b, m, v, False, 0.1, EPS)[0],
    "miopen_batch_norm": lambda x, w, b, m, v: aten.miopen_batch_norm(x, w, b, m, v, False, 0.1, EPS)[0],
    "native_batch_norm": lambda x, w, b, m, v: aten.native_batch_norm(x, w, b, m, v, False, 0.1, EPS)[0],
    "_native_batch_norm_legit_no_training":
        lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training(x, w, b, m, v, 0.1, EPS)[0],
    "_batch_norm_no_update": lambda x, w, b, m, v: aten._batch_norm_no_update(x, w, b, m, v, 0.1, EPS)[0],
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_batch_norm_variant_decomposes_and_fuses_with_relu(device: str, variant: str) -> None:
    w, b, m, v = _stats(device, 6)
    op = VARIANTS[variant]
    x = make([2, 6, 5, 3], device)
    expected = F.batch_norm(x, m, v, w, b, training=False, eps=EPS).relu()
    gm = torch.fx.symbolic_trace(lambda x: op(x, w, b, m, v).relu())
    compiled = backend.compile_fx(gm, [x])
    torch.testing.assert_close(compiled(x), expected, atol=1e-5, rtol=1e-5)
    assert not backend.metrics.fallback_ops, backend.metrics.fallback_ops
    assert backend.metrics.extern_calls == 0
    assert backend.metrics.generated_kernel_count == 1


def test_eval_conv_bn_relu_residual_block(device: str) -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
    bn = torch.nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = conv, bn

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (self.bn(self.conv(x)) + x).relu()

    block = Block().to(device).eval()
    with torch.no_grad():
        check(block, make([2, 4, 7, 6], device), atol=1e-4, rtol=1e-4)
    assert not backend.metrics.fallback_ops, backend.metrics.fallback_ops
    assert backend.metrics.extern_calls == 1  # the convolution
    assert backend.metrics.generated_kernel_count == 1  # bn + add + relu in one kernel


@pytest.mark.parametrize("multi_pass_max", [0, 32768])
def test_cross_entropy_long_rows(device: str, multi_pass_max: int) -> None:
    # Rows longer than the persistent limit: looped (two passes) or persistent (one read).
    logits = make([5, 70], device)
    target = torch.randint(0, 70, (5,), device=device)
    target[1] = -100  # ignore_index
    with cfg.patch(backend_persistent_reduction_max=16, backend_persistent_multi_pass_max=multi_pass_max):
        check(lambda x, t: F.cross_entropy(x, t), logits, target, atol=1e-5)
    # Row reduction (max, sum of exp) + final mean over the gathered target logits.
    assert backend.metrics.generated_kernel_count == 2
    assert not backend.metrics.fallback_ops


def test_multi_reader_cheap_value_is_recomputed_not_stored(device: str) -> None:
    # log_softmax's ``x - max`` has two readers in different kernels (sum-exp and the gather):
    # it must not be materialized as a [N, C] buffer; only per-row and scalar buffers exist.
    logits = make([4, 40], device)
    target = torch.randint(0, 40, (4,), device=device)
    gm = torch.fx.symbolic_trace(lambda x, t: F.cross_entropy(x, t))
    compiled = backend.compile_fx(gm, [logits, target])
    torch.testing.assert_close(compiled(logits, target), F.cross_entropy(logits, target))
    source = compiled.pyjit_source
    assert "empty_strided((4,)" in source  # the per-row statistics
    assert "empty_strided((4, 40)" not in source, source


def test_multi_pass_row_reduction_reads_rows_once(device: str) -> None:
    x = make([3, 70], device)
    with cfg.patch(backend_persistent_reduction_max=16):
        gm = torch.fx.symbolic_trace(lambda a: F.log_softmax(a, -1))
        compiled = backend.compile_fx(gm, [x])
        torch.testing.assert_close(compiled(x), F.log_softmax(x, -1))
    assert "for roffset" not in compiled.pyjit_source  # persistent: one read per row
    with cfg.patch(backend_persistent_reduction_max=16, backend_persistent_multi_pass_max=0):
        gm = torch.fx.symbolic_trace(lambda a: F.log_softmax(a, -1))
        compiled = backend.compile_fx(gm, [x])
        torch.testing.assert_close(compiled(x), F.log_softmax(x, -1))
    assert "for roffset" in compiled.pyjit_source


def _looped_source(fn: Callable[..., Any], *inputs: torch.Tensor) -> str:
    """Compile with rows too long for registers (looped kernels) and check against eager."""
    with cfg.patch(backend_persistent_reduction_max=16, backend_persistent_multi_pass_max=0):
        check(fn, *inputs, atol=1e-5)
        compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), list(inputs))
    return compiled.pyjit_source


def test_online_max_sum_exp_reads_long_rows_once(device: str) -> None:
    x = make([4, 70], device)
    target = torch.randint(0, 70, (4,), device=device)
    # cross_entropy: max and sum-exp share one loop over the row (online rescaling).
    source = _looped_source(lambda a, t: F.cross_entropy(a, t), x, target)
    assert source.count("for roffset") == 1, source
    # softmax: one loop for max + sum-exp, one that stores the normalized values.
    source = _looped_source(lambda a: F.softmax(a, -1), x)
    assert source.count("for roffset") == 2, source


def test_online_max_sum_exp_special_values(device: str) -> None:
    # Rows longer than the looped RBLOCK (2048), so lanes see several chunks and rescale.
    n = 4500
    x = make([7, n], device)
    x[0, 3000:] += 30.0  # the max grows in a later chunk: earlier sums must be rescaled
    x[1, 5] = float("nan")
    x[2, 4100] = float("inf")
    x[3, :] = float("-inf")
    x[4, 3:4000] = float("-inf")  # -inf in most lanes, finite elsewhere
    x[5, n - 1] = 80.0  # large values: rescaling must not overflow
    x[5, 0] = -80.0
    x[6, 2100:] = float("-inf")  # lanes whose later chunks are all -inf
    _looped_source(lambda a: F.log_softmax(a, -1), x)
    _looped_source(lambda a: F.softmax(a, -1), x)


@pytest.mark.parametrize("variant", ["cudnn_batch_norm", "native_batch_norm"])
def test_training_batch_norm_variant_updates_running_stats(device: str, variant: str) -> None:
    # Training mode without autograd (e.g. under no_grad): batch statistics, running stats
    # updated in place, exactly as eager's F.batch_norm.
    w, b, m, v = _stats(device, 5)
    op = getattr(aten, variant)
    x = make([4, 5, 3], device)
    m_ref, v_ref = m.clone(), v.clone()
    expected = F.batch_norm(x, m_ref, v_ref, w, b, training=True, momentum=0.1, eps=EPS)
    gm = torch.fx.symbolic_trace(lambda x, m, v: op(x, w, b, m, v, True, 0.1, EPS)[0])
    compiled = backend.compile_fx(gm, [x, m.clone(), v.clone()])
    actual = compiled(x, m, v)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m, m_ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(v, v_ref, atol=1e-6, rtol=1e-6)
    assert not backend.metrics.fallback_ops, backend.metrics.fallback_ops
