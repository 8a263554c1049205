"""Column reductions (reducing a non-contiguous dimension, e.g. a bias gradient ``grad.sum(0)``):
results against eager, the kernel shape (wide-x tiles, the ``[split, columns]`` split) and the
launch rules' invariants.

Every case runs on CPU through Triton's interpreter and through the C++ generator (which shares
the lowering but never takes the column split), and on CUDA when present. Shapes include
non-powers of two (masked last program and chunk), short columns (persistent) and long ones
(looped, split when they have few columns).
"""
from __future__ import annotations

import re
from typing import Any, Callable

import pytest
import torch

import pyjit
from pyjit import config as cfg
from pyjit.backend.codegen.reduction_heuristics import (COLUMN_PERSISTENT_RMAX, column_element_bytes, column_meta,
                                                        column_multi_pass_rmax, column_split, index_steps)
from pyjit.backend.metrics import metrics
from pyjit.backend.symbolic import FloorDiv, ModularIndexing, sym

from .conftest import compile_graph


def _triton() -> bool:
    return cfg.config.cpu_backend != "cpp"


def _launches(source: str) -> list[dict[str, int]]:
    """The static launch parameters of each kernel launch in a generated module."""
    out = []
    for line in source.split("def call(args):")[1].splitlines():
        found = dict(re.findall(r"\b(XBLOCK|RBLOCK|num_warps)=(\d+)", line))
        if found:
            out.append({k: int(v) for k, v in found.items()})
    return out


def _check(fn: Callable[..., Any], *inputs: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> Any:
    compiled = compile_graph(fn, inputs)
    torch.testing.assert_close(compiled(*inputs), fn(*inputs), atol=atol, rtol=rtol, equal_nan=True)
    return compiled


OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum": lambda x: x.sum(0),
    "amax": lambda x: x.amax(0),
    "mean": lambda x: x.mean(0),
    "var": lambda x: x.var(0),
}
# Short (persistent), looped, a prime row count, and long columns (split on Triton).
SHAPES = [(5, 3), (64, 96), (300, 100), (1000, 37), (4096, 96)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("op", sorted(OPS))
def test_column_reduction_matches_eager(target: str, op: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape, device=target) * 3 + 1
    compiled = _check(OPS[op], x)
    if _triton() and shape[1] >= 32:
        # The first kernel reads >= 128 contiguous bytes of each row per program.
        assert _launches(compiled.pyjit_source)[0]["XBLOCK"] >= 32, compiled.pyjit_source


def _gelu_backward(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    cdf = 0.5 * (1 + torch.erf(x * 0.7071067811865476))
    pdf = torch.exp(-0.5 * x * x) * 0.3989422804014327
    return (g * (cdf + x * pdf)).sum(0)


@pytest.mark.parametrize("rows,split", [(500, False), (4096, True)])
def test_gelu_backward_prologue_fuses_into_the_column_sum(target: str, rows: int, split: bool) -> None:
    """The pointwise prologue stays in the reduction kernel: one kernel (two with the split,
    the prologue in the first)."""
    g, x = torch.randn(rows, 96, device=target), torch.randn(rows, 96, device=target)
    compiled = _check(_gelu_backward, g, x)
    if _triton():
        source = compiled.pyjit_source
        assert source.count("@triton.jit") == (2 if split else 1), source
        assert source.count("tl.erf(") == 1
        assert all(m["XBLOCK"] >= 32 for m in _launches(source)), source


def test_sum_over_leading_dims_of_3d(target: str) -> None:
    x = torch.randn(6, 50, 40, device=target)
    compiled = _check(lambda a: a.sum((0, 1)), x)
    if _triton():
        assert _launches(compiled.pyjit_source)[0]["XBLOCK"] >= 32


def test_middle_dim_reduction_keeps_two_dims(target: str) -> None:
    """``x.sum(1)`` of ``[A, B, C]``: x is flat over (A, C), contiguous along C."""
    x = torch.randn(3, 700, 45, device=target)
    compiled = _check(lambda a: a.sum(1), x)
    if _triton():
        assert _launches(compiled.pyjit_source)[0]["XBLOCK"] >= 32


@pytest.mark.parametrize("shape", [(4096, 768), (2048, 3072)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_bias_grad_shapes(target: str, shape: tuple[int, int]) -> None:
    """``grad.sum(0)`` of a Linear's output gradient (GPT-2: tokens x 768 and x 3072)."""
    grad = torch.randn(*shape, device=target)
    compiled = _check(lambda gr: gr.sum(0), grad, atol=1e-3)
    if _triton():
        source = compiled.pyjit_source
        launches = _launches(source)
        assert len(launches) == 2, source  # split: chunks of columns, then the partials
        assert all(m["XBLOCK"] >= 32 for m in launches), source
        # The partials are [split, columns]: the second kernel reads rows of 768/3072 columns.
        assert re.search(rf"in_ptr0 \+ \({shape[1]} \* rindex \+ xindex\)", source), source


def test_split_partials_are_columns(target: str) -> None:
    """Large N, small C: split into chunks; any/all/amin/sum each combine their own partials."""
    x = torch.randn(8192, 20, device=target)
    x[5000, 3] = float("nan")
    b = x > 2.5

    def fn(a: torch.Tensor, m: torch.Tensor) -> Any:
        return a.sum(0), a.amin(0), a.amax(0), m.any(0), m.all(0), a.mean(0)

    compiled = _check(fn, x, b)
    if _triton():
        source = compiled.pyjit_source
        # Partials laid out [split, 20]: the first kernel's consecutive outputs are columns.
        assert re.search(r"empty_strided\(\((\d+), 20\), \(20, 1\)", source), source


def test_multi_output_and_welford_columns(target: str) -> None:
    """Several reductions of one tensor in one column kernel (var_mean's Welford and sum,
    argmax), looped with XBLOCK > 1, and an epilogue."""
    x = torch.randn(777, 130, device=target)
    x[10, 4] = float("nan")

    def fn(a: torch.Tensor) -> Any:
        var, mean = torch.var_mean(a, 0)
        return var, mean * 2, a.argmax(0), a.argmin(0), a.max(0).values

    compiled = _check(fn, x)
    if _triton():
        assert all(m["XBLOCK"] >= 32 for m in _launches(compiled.pyjit_source))


@pytest.mark.parametrize("rows", [40, 900])
def test_softmax_over_columns(target: str, rows: int) -> None:
    """max and sum(exp) over dim 0 in one column kernel (online log-sum-exp when looped)."""
    x = torch.randn(rows, 70, device=target) * 4
    _check(lambda a: torch.softmax(a, 0) + torch.log_softmax(a, 0), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_columns(target: str, dtype: torch.dtype) -> None:
    x = torch.randn(1500, 200, device=target).to(dtype)
    compiled = _check(lambda a: a.sum(0), x, atol=0.2, rtol=2e-2)
    if _triton():
        # 2-byte elements: 64 columns make the 128-byte tile row.
        assert _launches(compiled.pyjit_source)[0]["XBLOCK"] >= 64


def test_row_reductions_keep_their_rules() -> None:
    """A reduction along the contiguous dimension is not a column reduction (XBLOCK 1 looped)."""
    x = torch.randn(16, 10000)
    with cfg.patch(cpu_backend="triton_interpret", backend_disk_cache=False):
        compiled = compile_graph(lambda a: a.sum(1), [x])
    assert _launches(compiled.pyjit_source)[0]["XBLOCK"] == 1


def test_dynamic_rows_via_jit(target: str) -> None:
    """``pyjit.jit(dynamic=True)``: one symbolic graph serves every row count; on Triton short
    columns take the per-call persistent kernel (``column_meta`` of the call's sizes), long
    ones the looped kernel."""
    def fn(a: torch.Tensor) -> Any:
        return a.sum(0) * 2 + a.amax(0), a.var(0)

    pyjit.reset()
    try:
        with cfg.patch(backend_disk_cache=False, debug_dir=None):
            jf = pyjit.jit(fn, dynamic=True)
            for n in (40, 7, 300, 1000, COLUMN_PERSISTENT_RMAX, COLUMN_PERSISTENT_RMAX + 1):
                x = torch.randn(n, 96, device=target)
                got, want = jf(x), fn(x)
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=lambda m: f"rows {n}: {m}")
        assert metrics.dynamic_graphs == 1 and metrics.eager_graphs == []
    finally:
        pyjit.reset()


def test_symbolic_rows_pick_column_meta_per_call(target: str) -> None:
    """The module chooses the persistent column kernel per call with ``column_meta``."""
    from .test_dynamic_backend import check_sizes

    def fn(a: torch.Tensor) -> torch.Tensor:
        return a.sum(0)

    with cfg.patch(backend_disk_cache=False):
        compiled = check_sizes(fn, lambda n, d: (torch.randn(n, 50, device=d),), [[True, False]], target,
                               sizes=(30, 7, 64, 65, 500))
    if _triton():
        body = compiled.pyjit_source.split("def call(args):")[1]
        assert "column_meta(" in body and f"<= {COLUMN_PERSISTENT_RMAX}:" in body, body
        assert "persistent_meta(" not in body


# --------------------------------------------------------------------------- launch rules
def test_column_detection_from_index_steps() -> None:
    x, r, s0 = sym("xindex"), sym("rindex"), sym("s0")
    assert index_steps(768 * r + x) == (1, 768)
    assert index_steps(96 * r + 24576 * FloorDiv(x, 96) + ModularIndexing(x, 1, 96)) == (1, 96)
    assert column_element_bytes([(768 * r + x, 4)]) == 4
    assert column_element_bytes([(768 * r + x, 2), (x, 4)]) == 2  # the bias read decides nothing
    assert column_element_bytes([(768 * x + r, 4)]) is None  # a row reduction
    assert column_element_bytes([(768 * r + x, 4), (768 * x + r, 4)]) is None  # tie: rows win
    assert column_element_bytes([(x, 4)]) is None
    from pyjit.backend.symbolic import size_hints
    with size_hints({s0: 100}):
        assert column_element_bytes([(s0 * r + x, 4)]) == 4


@pytest.mark.parametrize("xnumel", [3, 20, 96, 768, 3072, 50000])
@pytest.mark.parametrize("rnumel", [2, 7, 64, 100, 1024, 4096, 65536])
@pytest.mark.parametrize("elem_bytes", [2, 4])
def test_column_meta_invariants(xnumel: int, rnumel: int, elem_bytes: int) -> None:
    # Persistent column kernels exist up to the multi-pass limit (static) or COLUMN_PERSISTENT_RMAX.
    held = rnumel <= column_multi_pass_rmax(elem_bytes)
    for persistent in (False, True) if held else (False,):
        meta = column_meta(xnumel, rnumel, persistent, elem_bytes)
        x, rb, w = meta["XBLOCK"], meta["RBLOCK"], meta["num_warps"]
        assert x & (x - 1) == 0 and rb & (rb - 1) == 0 and w in (2, 4, 8, 16)
        assert x <= max(1, 2 * xnumel)
        assert x * rb // (32 * w) <= 64  # values per thread: no spill
        if persistent:
            assert rb >= rnumel
        if held or not persistent:
            # >= 128 contiguous bytes per tile row wherever there are that many columns.
            assert x >= min(max(32, 128 // elem_bytes), 1 << (xnumel - 1).bit_length())


@pytest.mark.parametrize("xnumel", [8, 96, 768, 3072, 50000])
@pytest.mark.parametrize("rnumel", [100, 1024, 4096, 5000, 4099, 1 << 20])
def test_column_split_invariants(xnumel: int, rnumel: int) -> None:
    split = column_split(xnumel, rnumel)
    assert rnumel % split == 0 and 1 <= split <= 1024
    if split > 1:
        assert rnumel // split >= 256
    if rnumel < 1024 or xnumel >= 50000:
        assert split == 1


def test_column_split_fills_the_gpu() -> None:
    """GPT-2's bias gradients (4096 tokens x 768 / 3072 columns) are split; wide ones are not."""
    assert column_split(768, 4096) > 1 and column_split(3072, 4096) > 1
    assert column_split(768, 4096) * 768 // 32 >= 256  # programs of the first kernel
    assert column_split(65536, 4096) == 1


@pytest.mark.parametrize("shape", [(16, 32, 24, 24), (4, 64, 48, 48)], ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_statistics_split_like_sums(target: str, shape: tuple[int, ...]) -> None:
    """Training batch norm's ``var_mean`` over (N, H, W) of a channels-last activation: a long
    column reduction over few channels. The Welford ``m2`` splits into chunks like a sum (each
    chunk's ``m2`` and sum, then ``m2 = sum(m2_i) + chunk * m2(means)``), so no kernel walks a
    whole column alone. A large mean against a small spread checks the combine's precision."""
    x = (torch.randn(*shape, device=target) * 0.5 + 100.0).to(memory_format=torch.channels_last)

    def fn(a: torch.Tensor) -> Any:
        var, mean = torch.var_mean(a, [0, 2, 3], correction=0)
        return var, mean, torch.var(a, [0, 2, 3])

    compiled = _check(fn, x, atol=1e-4, rtol=1e-4)
    if _triton():
        source = compiled.pyjit_source
        rnumel = shape[0] * shape[2] * shape[3]
        assert not re.search(rf", {rnumel}, XBLOCK=", source), source  # chunks, not whole columns
        # The partials are [split, channels], written by the one kernel that reads ``a``.
        assert re.search(rf"empty_strided\(\((\d+), {shape[1]}\), \({shape[1]}, 1\)", source), source
        assert source.count("in_ptr0 + (") >= 1 and len(re.findall(r"\(arg0_1,", source)) == 1, source


def test_long_row_variance_splits(target: str) -> None:
    """``x.var()`` of a few long rows splits along the row (the row rule), Welford included."""
    x = torch.randn(3, 1 << 17, device=target) * 2 + 50.0
    compiled = _check(lambda a: (a.var(1), a.var()), x, atol=1e-3, rtol=1e-4)
    if _triton():
        assert not re.search(rf", ({1 << 17}|{3 << 17}), XBLOCK=", compiled.pyjit_source), compiled.pyjit_source
