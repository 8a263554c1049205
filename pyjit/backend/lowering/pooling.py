"""Pooling lowered to generated kernels: ``max_pool2d_with_indices`` and adaptive average and
max pooling.

A 2-d max pool is a pointwise kernel over the output whose every element scans its window
(``kernel_size`` loads, unrolled: pooling windows are small) instead of an extern aten call, so
the batch norm and ReLU before it fuse into its loads and the network's stem runs as one kernel.
The scan follows ATen's kernels exactly: positions in row-major window order, out-of-bounds
positions (padding, or a ``ceil_mode`` window past the edge) skipped, a value taken when it is
greater than the best so far or NaN (so the last NaN of a window wins), and the index of the
window's first valid position when nothing is greater (a window of ``-inf``) -- except where
eager runs CUDA's channels-last kernel (a CUDA input that eager lays out NHWC), whose index
starts at 0 and stays there for such a window. The index is the flat position ``h * W + w`` in
the input's plane, as eager returns it (its backward reads it).

Adaptive pooling (``AdaptiveAvgPool2d``/``AdaptiveMaxPool2d`` to any output size) has ATen's
windows: output row ``i`` of ``O`` over an input of ``H`` rows covers rows
``floor(i * H / O)`` up to ``ceil((i + 1) * H / O)``. The scan unrolls the largest window and
masks the positions past each window's end (none when ``O`` divides ``H``); the average divides
by each window's own element count and accumulates half-precision inputs in fp32, as ATen's
kernels do; the max scans like ``max_pool2d`` (the first position's index when nothing is
greater, the last NaN wins).

Windows larger than 64 positions stay extern (an unrolled scan would bloat the kernel), and so
does every pool of the C++ CPU generator, whose scan gcc does not vectorize (ATen's CPU kernel
is 10x faster there): the lowering serves Triton (CUDA, and the interpreter in tests).
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ..ir import IRNode, Pointwise, StorageBox
from ..symbolic import FloorDiv, as_size, is_static
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
    zero_default = x.get_device().type == "cuda" and _eager_input_is_nhwc(ctx)

    def scan(ops: Any, index: Sequence[sympy.Expr]) -> tuple[Any, Any]:
        lead, (i, j) = list(index[:-2]), index[-2:]
        best = best_idx = None
        if zero_default:  # CUDA's NHWC kernel: best -inf at index 0, replaced only when beaten
            best, best_idx = ops.constant(neg_inf, dtype), ops.constant(0, torch.int64)
        for kh in range(k[0]):
            for kw in range(k[1]):
                ih = i * s[0] - p[0] + kh * d[0]
                iw = j * s[1] - p[1] + kw * d[1]
                valid = ops.binary("logical_and", _in_range(ops, ih, 0, h), _in_range(ops, iw, 0, w))
                v = load(ops, [*lead, _clamp(ih, h), _clamp(iw, w)])
                flat = ops.index_expr(ih * w + iw, torch.int64)
                if zero_default:
                    better = ops.binary("logical_or", ops.binary("gt", v, best), ops.unary("isnan", v))
                    take = ops.binary("logical_and", valid, better)
                    best = ops.where(take, v, best)
                    best_idx = ops.where(take, flat, best_idx)
                    continue
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


def _eager_input_is_nhwc(ctx: Any) -> bool:
    """The pooled input, as eager saw it, is a 4-d channels-last tensor (not also row-major):
    ATen's ``suggest_memory_format`` then picks its NHWC kernel."""
    node = ctx.current_node
    val = node.args[0].meta.get("val") if node is not None and node.args and hasattr(node.args[0], "meta") else None
    return (isinstance(val, torch.Tensor) and val.dim() == 4 and not val.is_contiguous()
            and val.is_contiguous(memory_format=torch.channels_last))


def _windows(size: int, out: int) -> tuple[int, bool]:
    """The largest adaptive window over ``size`` positions cut into ``out``, and whether every
    window has that size (``out`` divides ``size``)."""
    spans = [-(-((o + 1) * size) // out) - (o * size) // out for o in range(out)]
    return max(spans), size % out == 0


def _window_bounds(i: sympy.Expr, size: int, out: int) -> tuple[sympy.Expr, sympy.Expr]:
    return FloorDiv(i * size, out), FloorDiv((i + 1) * size + out - 1, out)


def _adaptive_plan(x: IRNode, output_size: Sequence[int]) -> tuple | str:
    """(h, w, oh, ow, kh, kw, uniform_h, uniform_w) for a generated adaptive pool, or why the
    pool stays extern."""
    from ..codegen.target import kernel_target

    size = x.get_size()
    out = _pair(output_size)
    if kernel_target(x.get_device()).name == "cpp":
        return "the C++ generator (ATen's CPU kernel is vectorized)"
    if len(size) not in (3, 4) or not all(is_static(v) for v in size) or not x.get_dtype().is_floating_point \
            or len(out) != 2 or min(out) <= 0 or min(int(size[-2]), int(size[-1])) <= 0:
        return "a symbolic or empty size, an integer input or an unusual output size"
    h, w = int(size[-2]), int(size[-1])
    (kh, uh), (kw, uw) = _windows(h, out[0]), _windows(w, out[1])
    if kh * kw > _MAX_WINDOW:
        return "a window above 64 positions"
    return h, w, out[0], out[1], kh, kw, uh, uw


def _adaptive_positions(ops: Any, index: Sequence[sympy.Expr], plan: tuple) -> Any:
    """Each window position of the output element at ``index``: (load index, valid or None, flat)."""
    h, w, oh, ow, kh, kw, uh, uw = plan
    lead, (i, j) = list(index[:-2]), index[-2:]
    (h0, h1), (w0, w1) = _window_bounds(i, h, oh), _window_bounds(j, w, ow)
    for a in range(kh):
        for b in range(kw):
            ih, iw = h0 + a, w0 + b
            # A window's first row and column always exist; later ones only before its end
            # (always, when the windows are uniform).
            checks = [ops.binary("lt", ops.index_expr(pos, torch.int64), ops.index_expr(end, torch.int64))
                      for pos, end, offset, uniform in ((ih, h1, a, uh), (iw, w1, b, uw)) if offset and not uniform]
            valid = None if not checks else checks[0] if len(checks) == 1 else \
                ops.binary("logical_and", checks[0], checks[1])
            yield [*lead, _clamp(ih, h), _clamp(iw, w)], valid, ih * w + iw


@register_lowering(aten._adaptive_avg_pool2d)
def _adaptive_avg_pool2d(ctx: Any, x: IRNode, output_size: Sequence[int]) -> Any:
    plan = _adaptive_plan(x, output_size)
    if isinstance(plan, str):
        from .fallbacks import make_extern
        return make_extern(ctx, aten._adaptive_avg_pool2d.default, (x, output_size), {}, plan)
    h, w, oh, ow = plan[:4]
    dtype = x.get_dtype()
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    load = x.make_loader()

    def mean(ops: Any, index: Sequence[sympy.Expr]) -> Any:
        total = None
        for at, valid, _ in _adaptive_positions(ops, index, plan):
            v = ops.to_dtype(load(ops, at), acc)
            if valid is not None:
                v = ops.where(valid, v, ops.constant(0.0, acc))
            total = v if total is None else ops.binary("add", total, v)
        i, j = index[-2:]
        (h0, h1), (w0, w1) = _window_bounds(i, h, oh), _window_bounds(j, w, ow)
        count = ops.to_dtype(ops.index_expr((h1 - h0) * (w1 - w0), torch.int64), acc)
        return ops.to_dtype(ops.binary("truediv", total, count), dtype)

    sizes = [as_size(v) for v in [*x.get_size()[:-2], oh, ow]]
    return StorageBox(Pointwise(x.get_device(), dtype, sizes, x.get_origins() | ctx.current_origins(), inner_fn=mean))


@register_lowering(aten.adaptive_max_pool2d)
def _adaptive_max_pool2d(ctx: Any, x: IRNode, output_size: Sequence[int]) -> Any:
    plan = _adaptive_plan(x, output_size)
    if isinstance(plan, str):
        from .fallbacks import make_extern
        return make_extern(ctx, aten.adaptive_max_pool2d.default, (x, output_size), {}, plan)
    oh, ow = plan[2:4]
    dtype = x.get_dtype()
    load = x.make_loader()

    def scan(ops: Any, index: Sequence[sympy.Expr]) -> tuple[Any, Any]:
        best = best_idx = None
        for at, valid, flat_expr in _adaptive_positions(ops, index, plan):
            v = load(ops, at)
            flat = ops.index_expr(flat_expr, torch.int64)
            if best is None:  # the window's first position always exists: ATen's default
                best, best_idx = v, flat
                continue
            take = ops.binary("logical_or", ops.binary("gt", v, best), ops.unary("isnan", v))
            if valid is not None:
                take = ops.binary("logical_and", valid, take)
            best = ops.where(take, v, best)
            best_idx = ops.where(take, flat, best_idx)
        return best, best_idx

    origins = x.get_origins() | ctx.current_origins()
    sizes = [as_size(v) for v in [*x.get_size()[:-2], oh, ow]]
    values = StorageBox(Pointwise(x.get_device(), dtype, sizes, origins, inner_fn=lambda ops, idx: scan(ops, idx)[0]))
    indices = StorageBox(Pointwise(x.get_device(), torch.int64, sizes, origins,
                                   inner_fn=lambda ops, idx: scan(ops, idx)[1]))
    return values, indices
