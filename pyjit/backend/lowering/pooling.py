"""Pooling lowered to generated kernels: ``max_pool2d_with_indices``.

A 2-d max pool is a pointwise kernel over the output whose every element scans its window
(``kernel_size`` loads, unrolled: pooling windows are small) instead of an extern aten call, so
the batch norm and ReLU before it fuse into its loads and the network's stem runs as one kernel.
The scan follows ATen's kernels exactly: positions in row-major window order, out-of-bounds
positions (padding, or a ``ceil_mode`` window past the edge) skipped, a value taken when it is
greater than the best so far or NaN (so the last NaN of a window wins), and the index of the
window's first valid position when nothing is greater (a window of ``-inf``). The index is the
flat position ``h * W + w`` in the input's plane, as eager returns it (its backward reads it).

Windows larger than 64 positions stay extern (an unrolled scan would bloat the kernel), and so
does every pool of the C++ CPU generator, whose scan gcc does not vectorize (ATen's CPU kernel
is 10x faster there): the lowering serves Triton (CUDA, and the interpreter in tests).
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ..ir import IRNode, Pointwise, StorageBox
from ..symbolic import as_size, is_static
from .indexing import _clamp, _in_range
from .registry import aten, register_lowering

_MAX_WINDOW = 64


def _pair(v: Sequence[int] | int, default: Sequence[int] | None = None) -> list[int]:
    if isinstance(v, int):
        return [v, v]
    v = list(v) or list(default or [])
    return [int(v[0]), int(v[-1])] if v else []


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """ATen's pooling output size (``pooling_output_shape``)."""
    numerator = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = numerator // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


@register_lowering(aten.max_pool2d_with_indices)
def _max_pool2d_with_indices(ctx: Any, x: IRNode, kernel_size: Sequence[int], stride: Sequence[int] = (),
                             padding: Sequence[int] | int = 0, dilation: Sequence[int] | int = 1,
                             ceil_mode: bool = False) -> Any:
    from .fallbacks import make_extern

    from ..codegen.target import kernel_target

    size = x.get_size()
    k = _pair(kernel_size)
    s = _pair(stride, k)
    p = _pair(padding)
    d = _pair(dilation)
    dtype = x.get_dtype()
    if kernel_target(x.get_device()).name == "cpp":
        # gcc does not vectorize the scan's channel loop (its per-position selects of a float
        # and an int64 index): 10x slower than ATen's vectorized CPU kernel on a ResNet stem.
        return make_extern(ctx, aten.max_pool2d_with_indices.default,
                           (x, kernel_size, stride, padding, dilation, ceil_mode), {}, "the C++ generator")
    if (len(size) not in (3, 4) or not all(is_static(v) for v in size) or k[0] * k[1] > _MAX_WINDOW
            or not dtype.is_floating_point):
        return make_extern(ctx, aten.max_pool2d_with_indices.default,
                           (x, kernel_size, stride, padding, dilation, ceil_mode), {},
                           "a symbolic size, an integer input or a window above 64 positions")
    h, w = int(size[-2]), int(size[-1])
    oh, ow = (_out_size(n, k[i], s[i], p[i], d[i], ceil_mode) for i, n in enumerate((h, w)))
    out_size = [*size[:-2], oh, ow]
    load = x.make_loader()
    neg_inf = float("-inf")

    def scan(ops: Any, index: Sequence[sympy.Expr]) -> tuple[Any, Any]:
        lead, (i, j) = list(index[:-2]), index[-2:]
        best = best_idx = None
        for kh in range(k[0]):
            for kw in range(k[1]):
                ih = i * s[0] - p[0] + kh * d[0]
                iw = j * s[1] - p[1] + kw * d[1]
                valid = ops.binary("logical_and", _in_range(ops, ih, 0, h), _in_range(ops, iw, 0, w))
                v = load(ops, [*lead, _clamp(ih, h), _clamp(iw, w)])
                flat = ops.index_expr(ih * w + iw, torch.int64)
                if best is None:
                    # The first position: taken when valid; ``taken`` tells later positions
                    # whether a valid one was seen (the first valid index is eager's default).
                    best = ops.where(valid, v, ops.constant(neg_inf, dtype))
                    best_idx = ops.where(valid, flat, ops.constant(-1, torch.int64))
                    continue
                unset = ops.binary("eq", best_idx, ops.constant(-1, torch.int64))
                better = ops.binary("logical_or", ops.binary("gt", v, best), ops.unary("isnan", v))
                take = ops.binary("logical_and", valid, ops.binary("logical_or", better, unset))
                best = ops.where(take, v, best)
                best_idx = ops.where(take, flat, best_idx)
        return best, best_idx

    origins = x.get_origins() | ctx.current_origins()
    device = x.get_device()
    sizes = [as_size(v) for v in out_size]
    values = StorageBox(Pointwise(device, dtype, sizes, origins, inner_fn=lambda ops, idx: scan(ops, idx)[0]))
    indices = StorageBox(Pointwise(device, torch.int64, sizes, origins, inner_fn=lambda ops, idx: scan(ops, idx)[1]))
    return values, indices
