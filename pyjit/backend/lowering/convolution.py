"""Depthwise convolutions lowered to generated kernels; every other convolution is an extern call.

A depthwise convolution (``groups`` equal to the input and output channel count, one filter per
channel: MobileNet, EfficientNet and ConvNeXt blocks) does ``kh * kw`` multiply-adds per output
element, so it is bound by memory, not arithmetic: a pointwise kernel over the output whose every
element sums its window (``kh * kw`` loads of the input and of its channel's filter, unrolled, as
the max pool in ``pooling.py`` scans its window) reads the input about once and writes the output
once. Written so, the batch norm and activation after it fuse into the same kernel (cuDNN writes
the convolution's output and a second kernel reads it back), and no cuDNN plan has to be built on
the first call (for bf16 channels-last depthwise convolutions cuDNN compiles kernels at run time,
seconds per shape).

The sum runs in row-major window order in fp32 for half-precision inputs (ATen's accumulation
type), the bias added last, and the result cast to the output dtype once; positions outside the
input (padding) contribute nothing. The input is realized first: a producer inlined into
``kh * kw`` loads would be recomputed that many times.

``config.conv_template`` (off by default) turns the lowering on, on every target. Off, every
convolution is an extern call: on an H200 (timm MobileNetV3, EfficientNet-B0 and ConvNeXt-T, bf16
channels-last, batch 32) the generated kernels took 1.6-1.8x cuDNN's device time per step and
made first calls longer, and on the CPU the C++ generator's windows do not vectorize
(docs/performance.md, "Depthwise convolutions"). Grouped convolutions with several channels per
group, transposed convolutions and symbolic sizes stay extern, and so does the backward
(``convolution_backward``) of a training graph.
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ...config import config
from ..ir import IRNode, Pointwise, StorageBox
from ..symbolic import as_size, is_static
from .indexing import _clamp, _in_range
from .registry import aten, register_lowering

_MAX_WINDOW = 64


def depthwise_plan(x: IRNode, weight: IRNode, stride: Sequence[int], padding: Sequence[int],
                   dilation: Sequence[int], transposed: bool, groups: int) -> tuple[list[int], ...] | str:
    """``(stride, padding, dilation, window, out_hw)`` of a depthwise convolution this module
    generates, or why it stays an extern call."""
    from ..codegen.target import kernel_target

    if not config.conv_template:
        return "conv_template is off"
    if kernel_target(x.get_device()).name not in ("triton", "cpp"):
        return "no generated kernels on this device"
    size, wsize = x.get_size(), weight.get_size()
    if transposed or len(size) != 4 or len(wsize) != 4 or not all(is_static(v) for v in (*size, *wsize)):
        return "not a 2-d convolution with static sizes"
    channels = int(size[1])
    if groups != channels or int(wsize[0]) != channels or int(wsize[1]) != 1 or groups == 1:
        return "not depthwise (one filter per channel)"
    if not x.get_dtype().is_floating_point or weight.get_dtype() != x.get_dtype():
        return "not one floating-point dtype"
    window = [int(wsize[2]), int(wsize[3])]
    if window[0] * window[1] > _MAX_WINDOW:
        return "a window above 64 positions"
    s, p, d = (_pair(v) for v in (stride, padding, dilation))
    out_hw = [(int(size[2 + i]) + 2 * p[i] - d[i] * (window[i] - 1) - 1) // s[i] + 1 for i in range(2)]
    if min(out_hw) <= 0 or int(size[0]) == 0 or channels == 0:
        return "an empty output"
    return s, p, d, window, out_hw


def _pair(v: Sequence[int] | int) -> list[int]:
    if isinstance(v, int):
        return [v, v]
    v = [int(e) for e in v]
    return v * 2 if len(v) == 1 else v


@register_lowering(aten.convolution)
def _convolution(ctx: Any, x: IRNode, weight: IRNode, bias: IRNode | None, stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                 groups: int) -> Any:
    plan = depthwise_plan(x, weight, stride, padding, dilation, transposed, groups)
    if isinstance(plan, str):
        from .fallbacks import make_extern

        return make_extern(ctx, aten.convolution.default,
                           (x, weight, bias, stride, padding, dilation, transposed, output_padding, groups), {},
                           plan)
    s, p, d, (kh, kw), (oh, ow) = plan
    n, c, h, w = (int(v) for v in x.get_size())
    dtype = x.get_dtype()
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    ctx.realize(x)
    load_x, load_w = x.make_loader(), weight.make_loader()
    load_b = bias.make_loader() if bias is not None else None

    def depthwise(ops: Any, index: Sequence[sympy.Expr]) -> Any:
        b, ch, i, j = index
        total = None
        for a in range(kh):
            ih = i * s[0] - p[0] + a * d[0]
            row_valid = None if _always_inside(oh, s[0], p[0], a * d[0], h) else _in_range(ops, ih, 0, h)
            for e in range(kw):
                iw = j * s[1] - p[1] + e * d[1]
                col_valid = None if _always_inside(ow, s[1], p[1], e * d[1], w) else _in_range(ops, iw, 0, w)
                v = ops.to_dtype(load_x(ops, [b, ch, _clamp(ih, h), _clamp(iw, w)]), acc)
                term = ops.binary("mul", v, ops.to_dtype(load_w(ops, [ch, sympy.Integer(0), sympy.Integer(a),
                                                                      sympy.Integer(e)]), acc))
                valid = row_valid if col_valid is None else col_valid if row_valid is None else \
                    ops.binary("logical_and", row_valid, col_valid)
                if valid is not None:
                    term = ops.where(valid, term, ops.constant(0.0, acc))
                total = term if total is None else ops.binary("add", total, term)
        if load_b is not None:
            total = ops.binary("add", total, ops.to_dtype(load_b(ops, [ch]), acc))
        return ops.to_dtype(total, dtype)

    origins = x.get_origins() | weight.get_origins() | ctx.current_origins()
    sizes = [as_size(v) for v in (n, c, oh, ow)]
    return StorageBox(Pointwise(x.get_device(), dtype, sizes, origins, inner_fn=depthwise))


def _always_inside(out: int, stride: int, pad: int, offset: int, size: int) -> bool:
    """Every output position's input position ``o * stride - pad + offset`` lies in ``[0, size)``
    (no padding reached at this window offset): the mask is left out."""
    return -pad + offset >= 0 and (out - 1) * stride - pad + offset < size
