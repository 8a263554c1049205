"""Lowerings that create tensors from nothing: full/zeros/ones, scalar_tensor, arange/iota, *_like.

``empty``-style ops are extern calls (an allocation, no kernel): see ``fallbacks.py``.
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ..ir import IRNode, Pointwise, StorageBox
from ..symbolic import as_size
from .registry import aten, prims, register_lowering


def _default_dtype(value: Any, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.get_default_dtype()


def full(ctx: Any, size: Sequence[int], value: Any, dtype: torch.dtype, device: Any) -> IRNode:
    dev = torch.device(device) if device is not None else ctx.device

    def inner_fn(ops: Any, index: Sequence[sympy.Expr]) -> Any:
        return ops.constant(value, dtype)

    return StorageBox(Pointwise(dev, dtype, [as_size(s) for s in size], set(ctx.current_origins()), inner_fn=inner_fn))


@register_lowering(aten.full.default)
def _full(ctx: Any, size: Sequence[int], fill_value: Any, *, dtype: torch.dtype | None = None, layout: Any = None,
          device: Any = None, pin_memory: Any = None) -> IRNode:
    return full(ctx, size, fill_value, _default_dtype(fill_value, dtype), device)


@register_lowering(aten.zeros.default, aten.ones.default)
def _zeros(ctx: Any, size: Sequence[int], *, dtype: torch.dtype | None = None, layout: Any = None,
           device: Any = None, pin_memory: Any = None) -> IRNode:
    value = 0 if ctx.current_target_name() == "zeros" else 1
    return full(ctx, size, value, dtype or torch.get_default_dtype(), device)


@register_lowering(aten.full_like, aten.zeros_like, aten.ones_like)
def _full_like(ctx: Any, x: IRNode, *args: Any, dtype: torch.dtype | None = None, layout: Any = None,
               device: Any = None, pin_memory: Any = None, memory_format: Any = None) -> IRNode:
    name = ctx.current_target_name()
    value = args[0] if name == "full_like" else (0 if name == "zeros_like" else 1)
    return full(ctx, x.get_size(), value, dtype or x.get_dtype(), device or x.get_device())


@register_lowering(aten.fill.Scalar)
def _fill(ctx: Any, x: IRNode, value: Any) -> IRNode:
    return full(ctx, x.get_size(), value, x.get_dtype(), x.get_device())


@register_lowering(aten.scalar_tensor)
def _scalar_tensor(ctx: Any, value: Any, *, dtype: torch.dtype | None = None, layout: Any = None,
                   device: Any = None, pin_memory: Any = None) -> IRNode:
    return full(ctx, [], value, dtype or torch.get_default_dtype(), device)


def _range(ctx: Any, start: Any, step: Any, length: int, dtype: torch.dtype, device: Any) -> IRNode:
    dev = torch.device(device) if device is not None else ctx.device
    # Floating ranges are computed in float64 then rounded, as eager computes start + i * step.
    cdt = torch.float64 if dtype.is_floating_point else torch.int64

    def inner_fn(ops: Any, index: Sequence[sympy.Expr]) -> Any:
        i = ops.index_expr(index[0], torch.int64)
        v = ops.binary("add", ops.binary("mul", ops.to_dtype(i, cdt), ops.constant(step, cdt)), ops.constant(start, cdt))
        return ops.to_dtype(v, dtype)

    return StorageBox(Pointwise(dev, dtype, [length], set(ctx.current_origins()), inner_fn=inner_fn))


@register_lowering(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(ctx: Any, *args: Any, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
            pin_memory: Any = None) -> IRNode:
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    elif len(args) == 2:
        (start, end), step = args, 1
    else:
        start, end, step = args[:3]
    val = ctx.current_meta_val()
    length = as_size(val.shape[0])
    if dtype is None:
        dtype = val.dtype
    return _range(ctx, start, step, length, dtype, device)


@register_lowering(prims.iota)
def _iota(ctx: Any, length: int, *, start: int, step: int, dtype: torch.dtype, device: Any,
          requires_grad: bool) -> IRNode:
    return _range(ctx, start, step, as_size(length), dtype, device)
