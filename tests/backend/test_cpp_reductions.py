"""C++ reductions: column loops, fp32 accumulation order, special values, strides (vs eager)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.runtime import cpp_build

from .conftest import check, compile_graph, make

pytestmark = pytest.mark.skipif(cpp_build.compiler() is None, reason="no working C++ compiler")


@pytest.fixture
def cpp(tmp_path: Any) -> Any:
    with cfg.patch(cpu_backend="cpp", cpp_fast_compile=True, raise_on_internal_error=True,
                   cache_dir=str(tmp_path / "cache")):
        backend.metrics.reset()
        yield


@pytest.mark.parametrize("shape", [(300, 7), (64, 130), (5, 1000), (33, 64)])
@pytest.mark.parametrize("kind", ["sum", "mean", "amax", "amin", "var", "any", "argmax"])
def test_column_reductions_match_eager(cpp: Any, shape: tuple[int, int], kind: str) -> None:
    x = make(shape, "cpu")
    if kind == "any":
        compiled = check(lambda t: (t > 2.5).any(0), x)
    elif kind == "var":
        compiled = check(lambda t: t.var(0), x)
    else:
        compiled = check(lambda t: getattr(t, kind)(0), x)
    # Column loops (rows outer, a block of outputs inner); argmax keeps the row form.
    assert ("x0 += 64" in compiled.pyjit_source) == (kind != "argmax")


def test_column_reduction_of_a_middle_dim_and_of_a_transposed_input(cpp: Any) -> None:
    check(lambda t: (t.sum(1), t.amax(1)), make((6, 40, 70), "cpu"))
    check(lambda t: t.t().sum(1, keepdim=True), make((90, 33), "cpu"))
    check(lambda t: (t * 2 + 1).sum(0) / t.shape[0], make((200, 65), "cpu"))


def test_column_sum_next_to_row_mean_and_var(cpp: Any) -> None:
    x = make((96, 300), "cpu")
    compiled = check(lambda t: (t.sum(0), t.mean(1), t.var(1)), x)
    assert "x0 += 64" in compiled.pyjit_source


def test_special_values_in_column_and_row_sums(cpp: Any) -> None:
    x = make((700, 6), "cpu")
    x[10, 0] = float("inf")  # inf stays inf (the compensation must not turn it into NaN)
    x[20, 1], x[30, 1] = float("inf"), float("-inf")  # inf - inf: NaN
    x[40, 2] = float("nan")
    x[50, 3] = float("-inf")
    x[:, 4] = 3.0e38  # overflows to inf, as eager's fp32 sum does
    check(lambda t: (t.sum(0), t.t().contiguous().sum(1), t.amax(0), t.amin(0)), x)


def _sequential_fp32(a: np.ndarray) -> float:
    """The sum a one-accumulator fp32 loop gives (no compensation, no blocking)."""
    return float(np.cumsum(a, dtype=np.float32)[-1])


def test_compensated_column_sums_stay_accurate_where_naive_fp32_drifts(cpp: Any) -> None:
    # 65536 values around 1000 per column: a plain fp32 running sum loses ~1e-5 relative, far
    # outside the tolerance; the compensated column sums stay at fp32 rounding of the exact sum.
    g = torch.Generator().manual_seed(0)
    x = 1000.0 + torch.randn(65536, 8, generator=g)
    exact = x.double().sum(0)
    naive = torch.tensor([_sequential_fp32(x[:, j].numpy()) for j in range(8)], dtype=torch.float64)
    assert ((naive - exact).abs() / exact).max() > 1e-6  # naive fp32 really drifts here
    compiled = compile_graph(lambda t: t.sum(0), [x])  # split into column chunks, then summed
    got = compiled(x)
    got = got[0] if isinstance(got, (tuple, list)) else got
    torch.testing.assert_close(got.double(), exact, rtol=2e-7, atol=0)
    torch.testing.assert_close(got, x.sum(0), rtol=1e-6, atol=0)


def test_blocked_row_sums_stay_accurate_where_naive_fp32_drifts(cpp: Any) -> None:
    g = torch.Generator().manual_seed(1)
    x = 1000.0 + torch.randn(4, 1 << 18, generator=g)
    exact = x.double().sum(1)
    naive = torch.tensor([_sequential_fp32(x[i].numpy()) for i in range(4)], dtype=torch.float64)
    assert ((naive - exact).abs() / exact).max() > 1e-6
    compiled = compile_graph(lambda t: (t.sum(1), t.mean(1)), [x])
    got_sum, got_mean = compiled(x)
    torch.testing.assert_close(got_sum.double(), exact, rtol=2e-7, atol=0)
    torch.testing.assert_close(got_mean.double(), exact / x.shape[1], rtol=2e-7, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_row_sums_of_every_length_and_dtype(cpp: Any, dtype: torch.dtype) -> None:
    for n in (1, 7, 511, 512, 513, 3000):
        check(lambda t: (t.sum(-1), torch.softmax(t, -1), torch.log_softmax(t, -1)), make((5, n), "cpu", dtype))


def test_reduction_outputs_keep_eager_strides(cpp: Any) -> None:
    x = make((40, 3, 70), "cpu").permute(2, 0, 1)  # non-contiguous input
    fn = (lambda t: (t.sum(1, keepdim=True), t.amax(0, keepdim=True), t.mean(2)))
    compiled = compile_graph(fn, [x])
    for got, want in zip(compiled(x), fn(x)):
        assert got.shape == want.shape and got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.bfloat16, torch.float16, torch.float64])
def test_column_reductions_of_other_dtypes(cpp: Any, dtype: torch.dtype) -> None:
    x = make((130, 70), "cpu", dtype) if dtype != torch.bool else make((130, 70), "cpu") > 0
    if dtype == torch.bool:
        compiled = check(lambda t: (t.sum(0), t.all(0)), x)
    else:
        compiled = check(lambda t: (t.sum(0), t.amax(0), t.amin(0)), x)
    assert "x0 += 64" in compiled.pyjit_source
