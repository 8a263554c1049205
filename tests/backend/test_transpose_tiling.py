"""Transposed copies: the fusion choice and 2-D tiling (``codegen/tiling.py``), against eager.

- Copies of disjoint slices of one buffer (q, k^T, v of a qkv projection) stay separate kernels:
  they share no load, so fusing them only forces their access patterns into one 1-D loop.
- Kernels whose loads *or* stores are transposed get ``[YBLOCK, XBLOCK]`` tiles; groups of
  nodes of different sizes tile over their common dims; symbolic sizes keep 1-D kernels.

CPU runs the generated Triton through Triton's interpreter, CUDA (when present) compiles it; the
C++ generator, which shares the tiling decision, is checked on CPU too.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import pytest
import torch

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend.codegen.tiling import Tiling, common_dims, tile_blocks

from .conftest import check, make


def _kernels(source: str) -> dict[str, str]:
    """Each generated Triton kernel's body by name."""
    return {m.group(1): m.group(0) for m in re.finditer(r"def (pyjit_fused_\w+)\(.*?(?=\n\n|\Z)", source, re.S)}


def _tiled(source: str) -> list[str]:
    return [name for name, body in _kernels(source).items() if "YBLOCK: tl.constexpr" in body]


def _launch(source: str, kernel: str) -> dict[str, int]:
    line = next(ln for ln in source.split("def call(args):")[1].splitlines() if f"{kernel}[" in ln)
    return {k: int(v) for k, v in re.findall(r"\b(YBLOCK|XBLOCK|num_warps)=(\d+)", line)}


def _check_layout(fn: Callable[..., Any], *inputs: torch.Tensor, **tol: Any) -> str:
    """``check`` plus equal strides (a permuted output layout is the point); the module source."""
    compiled = check(fn, *inputs, **tol)
    got, expected = compiled(*inputs), fn(*inputs)
    for g, e in zip(*(x if isinstance(x, (tuple, list)) else (x,) for x in (got, expected))):
        assert g.stride() == e.stride(), (g.stride(), e.stride())
    return compiled.pyjit_source


# --------------------------------------------------------------------------- transposed loads
@pytest.mark.parametrize("shape,dims", [([3, 40, 36], (1, 2)), ([2, 3, 20, 40], (-2, -1)), ([2, 17, 3, 33], (1, 3))])
def test_transposed_load_copy_is_tiled(device: str, shape: list[int], dims: tuple[int, int]) -> None:
    src = _check_layout(lambda x: x.transpose(*dims).contiguous(), make(shape, device))
    assert len(_tiled(src)) == 1 and backend.metrics.generated_kernel_count == 1


def test_tile_rows_fill_a_cache_line_for_half_precision(device: str) -> None:
    """fp16: 64-element tile sides (128 bytes) along both axes, masked at the edges (70, 90)."""
    src = _check_layout(lambda x: x.transpose(1, 2).contiguous(), make([2, 70, 90], device, torch.float16))
    (name,) = _tiled(src)
    meta = _launch(src, name)
    assert meta["XBLOCK"] * 2 >= 128 and meta["YBLOCK"] * 2 >= 128, meta


# --------------------------------------------------------------------------- transposed stores
def test_transposed_store_is_tiled(device: str) -> None:
    """The output keeps eager's permuted layout: the load is contiguous in the last iteration
    dim, the store in another one."""
    src = _check_layout(lambda x: x.permute(0, 2, 1).contiguous().permute(0, 2, 1) * 2, make([3, 40, 36], device))
    (name,) = _tiled(src)
    store = re.search(r"tl\.store\(out_ptr0 \+ \((.*?)\), ", _kernels(src)[name]).group(1)  # type: ignore[union-attr]
    assert "yindex" in store and "xindex" in store


def test_channels_last_copy_is_tiled(device: str) -> None:
    src = _check_layout(lambda x: torch.relu(x.contiguous(memory_format=torch.channels_last)),
                        make([2, 24, 10, 12], device))
    assert len(_tiled(src)) == 1


def test_layout_preserving_pointwise_on_transposed_input_is_tiled(device: str) -> None:
    """``x.t() + 1`` is stored in ``x``'s layout: every access is contiguous in dim 0, none in
    the last iteration dim, so a 1-D kernel would be strided everywhere."""
    src = _check_layout(lambda x: x.t() + 1, make([40, 33], device))
    assert len(_tiled(src)) == 1


def test_per_channel_bias_keeps_1d_blocks(device: str) -> None:
    """``b[c]`` steps by one along the channels but not along the last dim: a 1-D warp reads
    one address of it, so it asks for no tile (every full-size access is contiguous)."""
    src = _check_layout(lambda x, b: x + b[:, None, None], make([2, 24, 10, 12], device), make([24], device))
    assert not _tiled(src)


def test_cat_with_a_transposed_input_is_tiled(device: str) -> None:
    """A cat whose middle input is read transposed (GPT-2's q/k/v gradients: the key's arrives
    as ``[B, D, T]``): the cat's masked loads clamp their index, which once hid the transposed
    input's movement from the tiling decision (probed where that load is masked off)."""
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.cat([q, k.transpose(1, 2), v], dim=-1) * 2

    src = _check_layout(fn, make([2, 48, 32], device), make([2, 32, 48], device), make([2, 48, 32], device))
    assert len(_tiled(src)) == 1 and backend.metrics.generated_kernel_count == 1


# --------------------------------------------------------------------------- fusion choice
def test_qkv_head_split_copies_are_separate_kernels(device: str) -> None:
    """q, k^T, v of one projection read disjoint slices: no fusion for traffic. k^T (the
    transposed one) is a tiled kernel storing only k^T; q and v are plain 1-D copies of the
    same small size, which share one kernel only to save a launch (small siblings)."""
    b, t, h, d = 2, 40, 3, 20
    w = make([24, 3 * h * d], device)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = (x @ w).view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
        return q.contiguous(), k.transpose(-2, -1).contiguous(), v.contiguous()

    src = _check_layout(fn, make([b, t, 24], device), atol=1e-4, rtol=1e-4)
    kernels = _kernels(src)
    assert backend.metrics.generated_kernel_count == 2
    (tiled,) = _tiled(src)
    assert kernels[tiled].count("tl.store(") == 1, src
    assert [body.count("tl.store(") for name, body in kernels.items() if name != tiled] == [2], src


def test_reads_at_the_same_index_still_fuse(device: str) -> None:
    check(lambda x: (x.exp(), x * 2), make([40, 36], device))
    assert backend.metrics.generated_kernel_count == 1


def test_reads_at_other_indices_do_not_fuse(device: str) -> None:
    """A transposed copy and an elementwise op of one input read it in different orders: no
    load is shared, so each gets its own (tiled / 1-D) kernel."""
    src = _check_layout(lambda x: (x.t().contiguous(), x * 2), make([40, 36], device))
    assert backend.metrics.generated_kernel_count == 2 and len(_tiled(src)) == 1


# --------------------------------------------------------------------------- groups of nodes
def test_producer_and_consumer_of_different_sizes_tile_together(device: str) -> None:
    """A transposed copy and a consumer seen through a view ([3, 36, 24] and [3, 108, 8]) fuse
    and tile over their common dims [3, 36, 3, 8]."""
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.transpose(1, 2).contiguous()
        return y, y.view(3, -1, 8) * 2

    src = _check_layout(fn, make([3, 24, 36], device))
    assert backend.metrics.generated_kernel_count == 1 and len(_tiled(src)) == 1


def test_sizes_without_common_dims_stay_correct(device: str) -> None:
    """[3, 36, 20] and [3, 90, 8] cut across each other (20 vs 8): no tiling, same results."""
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.transpose(1, 2).contiguous()
        return y, y.view(3, -1, 8) * 2

    _check_layout(fn, make([3, 20, 36], device))
    assert backend.metrics.generated_kernel_count == 1


def test_multi_node_group_of_equal_sizes(device: str) -> None:
    """Two outputs of the same transposed iteration (a copy and a function of it) in one tile."""
    src = _check_layout(lambda x: (x.transpose(1, 2).contiguous(), x.transpose(1, 2).sigmoid() * 3),
                        make([2, 33, 40], device))
    assert backend.metrics.generated_kernel_count == 1 and len(_tiled(src)) == 1


# --------------------------------------------------------------------------- other generators / sizes
def test_cpp_generator_shares_the_tiling(tmp_path: Any) -> None:
    from pyjit.runtime import cpp_build
    if cpp_build.compiler() is None:
        pytest.skip("no C++ compiler")
    with cfg.patch(cpu_backend="cpp", raise_on_internal_error=True, cache_dir=str(tmp_path)):
        x = make([3, 24, 36], "cpu")
        _check_layout(lambda a: (lambda y: (y, y.view(3, -1, 8) * 2))(a.transpose(1, 2).contiguous()), x)
        _check_layout(lambda a: a.permute(0, 2, 1).contiguous().permute(0, 2, 1) * 2, make([3, 40, 36], "cpu"))
        _check_layout(lambda a: a.t() + 1, make([40, 33], "cpu"))


def test_symbolic_sizes_keep_1d_kernels(device: str) -> None:
    from .test_dynamic_backend import symbolic_graph

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous() + 1

    example = make([2, 20, 36], device)
    compiled = backend.compile_fx(symbolic_graph(fn, [example], [[False, True, False]]), [example])
    assert backend.metrics.dynamic_graphs == 1 and not _tiled(compiled.pyjit_source)
    for n in (20, 7, 45):
        x = make([2, n, 36], device)
        torch.testing.assert_close(compiled(x), fn(x))


# --------------------------------------------------------------------------- pure rules
def test_common_dims() -> None:
    assert common_dims([[4, 8], [32]]) == [4, 8]
    assert common_dims([[2, 12], [8, 3]]) == [2, 4, 3]
    assert common_dims([[3, 36, 24], [3, 108, 8]]) == [3, 36, 3, 8]
    assert common_dims([[1, 5, 1, 7]]) == [5, 7]
    assert common_dims([[6, 4], [4, 6]]) is None


@pytest.mark.parametrize("ynumel,xnumel", [(16, 16), (40, 33), (128, 16), (16, 5000), (6144, 512), (10 ** 6, 24)])
@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_tile_blocks_invariants(ynumel: int, xnumel: int, itemsize: int) -> None:
    y, x, warps = tile_blocks(Tiling((ynumel, xnumel), 1, ynumel, xnumel), itemsize)
    assert y & (y - 1) == 0 and x & (x - 1) == 0
    for block, extent in ((y, ynumel), (x, xnumel)):
        # a full 128-byte line along each axis (a warp's 32 lanes at least), unless the extent is shorter
        assert block >= min(extent, max(32, min(64, 128 // itemsize))), (block, extent)
        assert block < 2 * extent
    assert y * x <= 4096 and warps in (1, 2, 4, 8)
    assert y * x // (32 * warps) <= 16  # elements per lane
