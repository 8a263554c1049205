"""Gathers whose index is computed inside the graph are not range-checked (eager raises for an
index outside ``[-size, size)``; pyjit's kernels clamp it, docs/ir.md). The clamp must hold on
both sides: an index below ``-size`` once read memory *before* the tensor (the lower bound was
written on an index symbol assumed non-negative and simplified away). The results here are the
documented clamp: wrap negatives once, then clamp into ``[0, size - 1]``."""
from __future__ import annotations

from typing import Any

import torch

from .conftest import compile_graph


def _clamped(x: torch.Tensor, idx: torch.Tensor, dim: int = 0) -> torch.Tensor:
    n = x.shape[dim]
    wrapped = torch.where(idx < 0, idx + n, idx).clamp(0, n - 1)
    return x.index_select(dim, wrapped.flatten()).reshape(*idx.shape, *x.shape[dim + 1:]) if dim == 0 else \
        x.index_select(dim, wrapped)


def test_computed_index_far_below_minus_size_stays_inside(target: Any) -> None:
    def fn(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return x[i * 3 - 100] * 2

    x = torch.arange(1.0, 11.0, device=target)
    i = torch.tensor([0, 1, 2, 30, 40], device=target)
    compiled = compile_graph(fn, [x, i])
    torch.testing.assert_close(compiled(x, i), _clamped(x, i * 3 - 100) * 2)


def test_embedding_and_index_select_with_computed_indices(target: Any) -> None:
    def fn(w: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        j = i - 50  # far below -rows for some entries, above rows for others
        return torch.nn.functional.embedding(j.clamp(max=1000), w), w.index_select(0, (j * 2).flatten())

    w = torch.randn(16, 8, device=target)
    i = torch.tensor([[0, 49, 50, 65], [100, 3, 66, 51]], device=target)
    compiled = compile_graph(fn, [w, i])
    emb, sel = compiled(w, i)
    j = i - 50
    torch.testing.assert_close(emb, _clamped(w, j.clamp(max=1000)))
    torch.testing.assert_close(sel, _clamped(w, (j * 2).flatten()))
