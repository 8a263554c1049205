"""Extern calls (``mm``, ``bmm``, fallbacks) read views of computed values without copies.

A transposed, permuted or sliced view of a value the graph computes is passed to the extern as
a strided view of that value realized in its own layout (``GraphLowering.realize(allow_view=True)``),
as eager passes ``h.t()`` to cuBLAS; only views that no strided layout expresses (a reshape
merging dimensions with incompatible strides, a flip) are copied. Results equal eager's.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pyjit.backend as backend
from pyjit import config as cfg

from .conftest import check, make


def _kernels(compiled: object) -> int:
    return compiled.pyjit_source.count("def pyjit_fused")  # type: ignore[attr-defined]


def test_transposed_computed_operand_is_not_copied(device: str) -> None:
    a, b = torch.randn(32, 16, device=device), torch.randn(32, 4, device=device)
    compiled = check(lambda x, y: torch.tanh(x).t() @ y, a, b, atol=1e-4, rtol=1e-4)
    assert _kernels(compiled) == 1  # tanh, realized row-major; mm reads it transposed
    assert "reinterpret(" in compiled.pyjit_source  # type: ignore[attr-defined]


def test_clone_of_transpose_before_bmm_reads_the_value(device: str) -> None:
    """``matmul``'s decomposition clones a transposed operand; where the batch dims merge into a
    strided layout the clone is not materialized."""
    a, b = torch.randn(4, 8, 16, device=device), torch.randn(4, 8, 5, device=device)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = (x * 2).transpose(1, 2)  # [4, 16, 8], strides (128, 1, 16)
        return torch.bmm(h.clone(), y)

    compiled = check(fn, a, b, atol=1e-4, rtol=1e-4)
    assert _kernels(compiled) == 1


def test_clone_saved_and_read_by_bmm_is_written_once(device: str) -> None:
    """Attention's head split: the clone of a transposed slice merges its batch dims, which no
    strided view of the source expresses; when the clone is also an output (a value saved for
    the backward), the bmm reads that one copy instead of a second copy in its own shape."""
    qkv, k = torch.randn(2, 8, 3 * 16, device=device), torch.randn(4, 8, 5, device=device)

    def fn(x: torch.Tensor, kt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = x.split(16, -1)[0].view(2, 8, 2, 8).transpose(1, 2)  # [2, 2, 8, 8], non-contiguous
        heads = q.clone(memory_format=torch.contiguous_format)
        return torch.bmm(heads.view(4, 8, 8), kt), heads

    compiled = check(fn, qkv, k, atol=1e-4, rtol=1e-4)
    assert _kernels(compiled) == 1
    assert compiled.pyjit_source.count("tl.store") == 1  # type: ignore[attr-defined]


def test_views_a_layout_cannot_express_are_copied(device: str) -> None:
    x, w = torch.randn(2, 3, 4, 5, device=device), torch.randn(5, 6, device=device)

    def merged(t: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        # [2, 4, 3, 5] -> [8, 3, 5] cannot be strided over the [2, 3, 4, 5] value: a copy.
        return (t + 1).transpose(1, 2).reshape(8, 3, 5) @ m

    check(merged, x, w, atol=1e-4, rtol=1e-4)
    check(lambda t, m: (t * 3).flip(-1) @ m, torch.randn(7, 5, device=device), w, atol=1e-4, rtol=1e-4)


def test_expanded_and_sliced_operands(device: str) -> None:
    a, b = torch.randn(1, 8, 6, device=device), torch.randn(3, 6, 10, device=device)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        left = (x.sin()).expand(3, 8, 6)  # stride 0 on the batch dim
        right = (y * 2)[:, :, 2:7]  # a slice: offset 2, row stride 10
        return torch.bmm(left, right)

    check(fn, a, b, atol=1e-4, rtol=1e-4)


def test_as_strided_of_a_computed_view_keeps_its_meaning(device: str) -> None:
    """``as_strided`` addresses the storage under its input: for a view of a computed value,
    the value's own storage (as in eager), not a copy of the view (which had another order)."""
    x = torch.randn(4, 6, device=device)
    check(lambda t: (t * 2).t().as_strided((3, 4), (1, 3)) + 0, x)


@pytest.mark.parametrize("cpu_backend", ["cpp"])
def test_cpp_backend_reads_strided_views(cpu_backend: str, tmp_path: object) -> None:
    a, b = torch.randn(32, 16), torch.randn(32, 4)
    with cfg.patch(cpu_backend=cpu_backend, raise_on_internal_error=True, cache_dir=str(tmp_path)):
        backend.metrics.reset()
        compiled = check(lambda x, y: torch.tanh(x).t() @ y, a, b, atol=1e-4, rtol=1e-4)
    assert "reinterpret(" in compiled.pyjit_source  # type: ignore[attr-defined]


def test_output_view_aliases_its_value_as_in_eager(device: str) -> None:
    """An output that is a view of another output comes back as a view of it (no copy), so an
    in-place write to one is seen in the other, as in eager."""
    def fn(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = (t * 2).relu()
        return y, y.t()

    x = torch.randn(8, 5, device=device)
    compiled = check(fn, x)
    a, b = compiled(x)
    ea, eb = fn(x)
    assert b.stride() == eb.stride() and b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    a.add_(1)
    ea.add_(1)
    torch.testing.assert_close(b, eb)


def test_output_view_of_a_clone_is_a_fresh_tensor(device: str) -> None:
    x = torch.randn(8, 5, device=device)
    compiled = check(lambda t: t.clone().t(), x)
    out = compiled(x)
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    out.zero_()
    assert x.abs().sum() > 0


def test_attention_kernels_get_a_contiguous_last_dim(device: str) -> None:
    """Fused attention kernels need q/k/v with a last-dimension stride of 1 (eager's
    scaled_dot_product_attention only picks them then; the CPU flash kernel gives wrong values
    otherwise, without an error). A key that pyjit realized with another layout than eager's
    (here ``k.mT * 0.5`` stored row-major, so its ``.mT`` has a last stride of 8) is copied."""
    q, k, v = (make([2, 2, 8, 16], device) for _ in range(3))
    mask = make([1, 2, 8, 8], device)
    check(lambda a, b, c: F.scaled_dot_product_attention(a, (b.mT * 0.5).mT, c), q, k, v)
    check(lambda a, b, c, m: F.scaled_dot_product_attention((a.mT + 1).mT, (b.mT * 0.5).mT, (c.mT - 1).mT,
                                                            attn_mask=m), q, k, v, mask)


def test_as_strided_over_a_non_contiguous_value_runs_as_captured(device: str) -> None:
    """``clone`` of a transposed input keeps its strides in eager; pyjit realizes computed values
    contiguous, so ``as_strided`` over it would address another layout: the graph runs as
    captured (logged), with eager's result."""
    x = torch.randn(6, 4, device=device).t()  # [4, 6], strides (1, 4)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t.clone().t().as_strided((3, 4), (1, 3), 2) * 1

    before = len(backend.metrics.eager_graphs)
    compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [x])
    torch.testing.assert_close(compiled(x), fn(x))
    assert any("as_strided" in r for r in backend.metrics.eager_graphs[before:])


def test_in_place_restride_of_a_computed_value_is_a_view(device: str) -> None:
    """ATen's ``adaptive_avg_pool2d`` to 1x1 of a channels-last input restrides its fresh
    ``mean`` with ``as_strided_``: lowered as a view of the computed value, no aten call."""
    x = torch.randn(2, 8, 5, 5, device=device).contiguous(memory_format=torch.channels_last)
    w = torch.randn(4, 8, device=device)

    def fn(a: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        pooled = F.adaptive_avg_pool2d(torch.relu(a), 1)
        return torch.flatten(pooled, 1) @ weight.t(), pooled

    backend.metrics.reset()
    check(fn, x, w, atol=1e-4, rtol=1e-4)
    assert "aten.as_strided_.default" not in backend.metrics.fallback_ops


@pytest.mark.parametrize("restride", ["t_", "as_strided_"])
def test_in_place_restride_of_an_input_runs_as_captured(device: str, restride: str) -> None:
    """Restriding a graph input in place changes what the caller holds; functionalization
    would keep only the values, so the graph runs as captured (logged) and the caller's tensor
    changes as in eager."""
    def fn(a: torch.Tensor) -> torch.Tensor:
        out = a.t_() if restride == "t_" else a.as_strided_((3, 2), (1, 3))
        return out * 2

    before = len(backend.metrics.eager_graphs)
    compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [torch.randn(2, 3, device=device)])
    assert "in place" in backend.metrics.eager_graphs[before]
    expected_input, got_input = torch.randn(2, 3, device=device), torch.empty(2, 3, device=device)
    got_input.copy_(expected_input)
    expected = fn(expected_input)
    torch.testing.assert_close(compiled(got_input), expected)
    assert got_input.shape == expected_input.shape and got_input.stride() == expected_input.stride()
