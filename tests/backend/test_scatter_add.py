"""Scatter-add lowerings (``lowering/scatter.py``): ``index_put`` with ``accumulate=True`` and
``embedding_dense_backward`` become a fill kernel plus an atomic scatter-add kernel instead of
extern aten calls. Compared with eager on both CPU generators (Triton interpreter, C++) and on
CUDA when available; duplicates, negative indices, broadcast values, 16-bit and int64 values,
and the embedding gradient under autograd with a padding index and repeated tokens.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pyjit.backend as backend

from .conftest import compile_graph, tolerances
from .test_aot_training import check_training

aten = torch.ops.aten


def _no_extern(*names: str) -> None:
    hits = {k: v for k, v in backend.metrics.fallback_ops.items() if any(n in str(k) for n in names)}
    assert not hits, hits


def _run(fn: Any, inputs: list[torch.Tensor], **tol: float) -> Any:
    expected = fn(*[t.clone() for t in inputs])
    compiled = compile_graph(fn, inputs)
    actual = compiled(*inputs)
    torch.testing.assert_close(actual, expected, **(tol or tolerances(expected.dtype)))
    _no_extern("index_put", "embedding_dense_backward")
    return compiled


def _put_1d(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return aten.index_put(x, [i], v, True)


def _put_dim1(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # x[:, i] += v, then a consumer (must run after every atomic add finished)
    return aten.index_put(x, [None, i], v, True) * 2 + 1


def _put_2d(x: torch.Tensor, i: torch.Tensor, j: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return aten.index_put(x, [i, j], v, True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_index_put_accumulate_1d(target: str, dtype: torch.dtype) -> None:
    x = torch.randn(11, 5, device=target).to(dtype)
    i = torch.tensor([1, 3, 1, -1, 10, 3, 3, -11], device=target)  # duplicates, negatives
    v = torch.randn(8, 5, device=target).to(dtype)
    _run(_put_1d, [x, i, v])


def test_index_put_accumulate_broadcast_values(target: str) -> None:
    x = torch.randn(9, 6, device=target)
    i = torch.tensor([0, 8, 0, -2, 4], device=target)
    _run(_put_1d, [x, i, torch.randn(6, device=target)])  # one row for every index
    _run(_put_1d, [x, i, torch.randn(5, 1, device=target)])  # one value per index


def test_index_put_accumulate_int64(target: str) -> None:
    x = torch.randint(-50, 50, (7, 3), device=target)
    i = torch.tensor([2, 2, 6, -7, 2], device=target)
    v = torch.randint(-1000, 1000, (5, 3), device=target)
    _run(_put_1d, [x, i, v])


def test_index_put_accumulate_other_dim_and_consumer(target: str) -> None:
    x = torch.randn(4, 10, 3, device=target)
    i = torch.tensor([[9, 0], [0, -1], [5, 5]], device=target)  # a 2-D index tensor
    v = torch.randn(4, 3, 2, 3, device=target)
    _run(_put_dim1, [x, i, v])


def test_index_put_accumulate_two_index_tensors(target: str) -> None:
    x = torch.randn(6, 7, 2, device=target)
    i = torch.tensor([[0], [5], [-1]], device=target)  # broadcasts against j: [3, 4]
    j = torch.tensor([1, 1, 6, -7], device=target)
    v = torch.randn(3, 4, 2, device=target)
    _run(_put_2d, [x, i, j, v])


def test_index_put_in_place_accumulate(target: str) -> None:
    def fn(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        y = x * 1.5
        y.index_put_((i,), v, accumulate=True)
        return y.sum(0)

    x = torch.randn(8, 4, device=target)
    i = torch.tensor([7, 0, 7, 7, -8], device=target)
    _run(fn, [x, i, torch.randn(5, 4, device=target)], atol=1e-5, rtol=1e-5)


def test_index_put_without_accumulate_stays_extern(target: str) -> None:
    def fn(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return aten.index_put(x, [i], v, False)

    x, i, v = torch.randn(5, 2, device=target), torch.tensor([4, 0], device=target), torch.randn(2, 2, device=target)
    torch.testing.assert_close(compile_graph(fn, [x, i, v])(x, i, v), fn(x, i, v))
    assert any("index_put" in str(k) for k in backend.metrics.fallback_ops)


def _generated(fn: Any, inputs: list[torch.Tensor]) -> str:
    from pyjit.backend.compile_fx import _lower_and_generate, trace_to_aten
    aten_gm, _ = trace_to_aten(torch.fx.symbolic_trace(fn), inputs)
    module, _ = _lower_and_generate(aten_gm, inputs[0].device, [])
    return module.source


def test_generated_source(target: str) -> None:
    """The extern is gone; the adds are atomic (Triton) or a serial loop (C++); the consumer of
    the accumulated buffer is a separate kernel launched after the atomic one."""
    from pyjit import config as cfg
    x, i, v = torch.randn(4, 10, 3, device=target), torch.tensor([[9, 0]], device=target), \
        torch.randn(4, 1, 2, 3, device=target)
    src = _generated(_put_dim1, [x, i, v])
    assert "aten.index_put" not in src and "aten._unsafe_index_put" not in src
    launches = [line.strip() for line in src.split("def call(args):")[1].splitlines() if "pyjit_fused_" in line]
    assert len(launches) == 3, launches  # fill (copy of x), atomic adds, consumer (* 2 + 1)
    if target == "cpu" and cfg.config.cpu_backend == "cpp":
        atomic = src.split(launches[1].split("(")[0] + "(")[1].split("extern")[0]
        assert "#pragma omp" not in atomic and "if (" in atomic, atomic
    else:
        assert src.count("tl.atomic_add(") == 1
        atomic = src.split(launches[1].split("[")[0] + "(")[1].split("@triton.jit")[0]
        assert "tl.atomic_add(" in atomic and "tl.store(" not in atomic, atomic
    assert "mul" in launches[2] and "index_put" in launches[2]  # named after its origins


def _embedding_backward(go: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return aten.embedding_dense_backward(go, idx, 13, 4, False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_embedding_dense_backward_op(target: str, dtype: torch.dtype) -> None:
    idx = torch.tensor([[4, 1, 1, 12], [0, 4, 1, 1], [12, 12, 3, 1]], device=target)  # padding 4, repeats
    go = torch.randn(3, 4, 6, device=target).to(dtype)
    _run(_embedding_backward, [go, idx])


def test_embedding_scale_grad_by_freq_stays_extern(target: str) -> None:
    def fn(go: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return aten.embedding_dense_backward(go, idx, 5, -1, True)

    go, idx = torch.randn(6, 3, device=target), torch.tensor([0, 1, 1, 4, 4, 4], device=target)
    torch.testing.assert_close(compile_graph(fn, [go, idx])(go, idx), fn(go, idx))
    assert any("embedding_dense_backward" in str(k) for k in backend.metrics.fallback_ops)


class _Embed(torch.nn.Module):
    def __init__(self, padding_idx: int | None) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(17, 8))
        self.padding_idx = padding_idx

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = F.embedding(tokens, self.weight, padding_idx=self.padding_idx)
        return torch.tanh(h).sum(-1)


@pytest.mark.parametrize("padding_idx", [None, 3, -2])
def test_embedding_autograd(target: str, padding_idx: int | None) -> None:
    torch.manual_seed(0)
    model = _Embed(padding_idx).to(target)
    tokens = torch.tensor([[3, 1, 1, 15, 0], [15, 15, 3, 7, 1]], device=target)  # repeated tokens
    check_training(model, [tokens], atol=1e-5, rtol=1e-5)
    _no_extern("embedding_dense_backward")
