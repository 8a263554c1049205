"""Reductions across row widths: results against eager, and the launch heuristics' invariants.

Row widths 1..65536 cover every kernel shape: persistent blocks holding several short rows,
one long row per program, multi-pass rows kept persistent, and looped rows (online
log-sum-exp for softmax/log_softmax/cross-entropy). On CPU the kernels run through Triton's
interpreter; on CUDA compiled.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend.codegen.reduction_heuristics import looped_meta, persistent_meta

from .conftest import compile_graph

WIDTHS = [1, 7, 64, 1000, 1024, 4097, 65536]


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b)


OPS = {
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1),
    "var": lambda x: x.var(-1, unbiased=False),
    "softmax": lambda x: F.softmax(x, -1),
    "log_softmax": lambda x: F.log_softmax(x, -1),
}


def _rows(width: int) -> int:
    return 3 if width >= 4096 else 37  # an odd count: the last program's rows are masked


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_reduction_matches_eager(device: str, op: str, width: int) -> None:
    x = torch.randn(_rows(width), width, device=device) * 3
    fn = OPS[op]
    out = compile_graph(fn, [x])(x)
    torch.testing.assert_close(out, fn(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("width", WIDTHS)
def test_layer_norm_matches_eager(device: str, width: int) -> None:
    x = torch.randn(_rows(width), width, device=device) + 5
    w, b = torch.randn(width, device=device), torch.randn(width, device=device)
    out = compile_graph(_layer_norm, [x, w, b])(x, w, b)
    torch.testing.assert_close(out, _layer_norm(x, w, b), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("width", [7, 1024, 32000])
def test_cross_entropy_matches_eager(device: str, width: int) -> None:
    rows = 5
    x = torch.randn(rows, width, device=device) * 4
    t = torch.randint(0, width, (rows,), device=device)

    def fn(a: torch.Tensor, tt: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(a, tt)

    torch.testing.assert_close(compile_graph(fn, [x, t])(x, t), fn(x, t), atol=1e-4, rtol=1e-4)


def _source(fn, inputs) -> str:  # type: ignore[no-untyped-def]
    with cfg.patch(cpu_backend="triton_interpret", backend_disk_cache=False):
        return backend.compile_fx(torch.fx.symbolic_trace(fn), inputs).pyjit_source


def test_layer_norm_reduces_each_statistic_once() -> None:
    """var_mean's mean and the normalisation's mean are one ``tl.sum``: two in all."""
    x, w, b = torch.randn(8, 1024), torch.randn(1024), torch.randn(1024)
    src = _source(_layer_norm, [x, w, b])
    assert src.count("tl.sum(") == 2, src


def test_cross_entropy_reads_rows_once() -> None:
    """Online log-sum-exp leaves one loop over the 32000-wide rows: it stays looped (not a
    32768-wide register block), and no second loop re-reads the rows."""
    x, t = torch.randn(4, 32000), torch.randint(0, 32000, (4,))
    src = _source(lambda a, tt: F.cross_entropy(a, tt), [x, t])
    assert src.count("for roffset") == 1, src
    assert "RBLOCK=32768" not in src


@pytest.mark.parametrize("xnumel", [1, 3, 64, 8192, 262144])
@pytest.mark.parametrize("rnumel", [2, 7, 64, 100, 1024, 4097, 8192, 32768])
def test_persistent_meta_invariants(xnumel: int, rnumel: int) -> None:
    meta = persistent_meta(xnumel, rnumel)
    x, r, w = meta["XBLOCK"], meta["RBLOCK"], meta["num_warps"]
    assert r >= rnumel and r & (r - 1) == 0 and x & (x - 1) == 0
    assert x <= max(1, 2 * xnumel)
    assert w in (2, 4, 8, 16)
    assert x * r // (32 * w) <= 64  # values per thread: no spill
    if x > 1:  # several rows per program only while at least 512 programs remain
        assert -(-xnumel // x) >= 512


@pytest.mark.parametrize("xnumel", [1, 256, 1024, 4096, 65536])
@pytest.mark.parametrize("rnumel", [100, 8193, 32000, 65536, 1 << 20])
def test_looped_meta_invariants(xnumel: int, rnumel: int) -> None:
    meta = looped_meta(xnumel, rnumel)
    assert meta["XBLOCK"] == 1
    assert meta["RBLOCK"] <= max(4096, rnumel) and meta["num_warps"] in (2, 4, 8, 16)
    assert 1 <= meta["RBLOCK"] // (32 * meta["num_warps"]) <= 8


def test_persistent_meta_fills_the_gpu() -> None:
    """Short rows share programs, but not at the cost of leaving SMs idle."""
    assert persistent_meta(262144, 64)["XBLOCK"] > 1
    assert persistent_meta(8192, 1024)["XBLOCK"] > 1
    for xnumel in (16, 256, 1024):
        meta = persistent_meta(xnumel, 64)
        assert -(-xnumel // meta["XBLOCK"]) >= min(xnumel, 512)
