"""Lowerings that move elements between positions: cat, index/gather/embedding/index_select,
constant_pad_nd, slice_scatter/select_scatter.

Reads that may fall outside an input (the other branch of a ``cat``, a padded border) use
clamped indices, so every address a kernel touches is valid, and a ``where`` selects the value.
Indirect (gathered) indices wrap negative values like eager; out-of-range indices, an error in
eager, are clamped (no device-side assert yet).
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ..ir import InputBuffer, IRNode, Pointwise, StorageBox
from ..ops_handler import loads_masked_by
from ..symbolic import FloorDiv, as_size, is_static, known_true
from .registry import (
    aten,
    broadcast_shapes,
    canonical_dim,
    expand_to,
    promote,
    register_lowering,
)


def _clamp(expr: sympy.Expr, hi: int) -> sympy.Expr:
    """``expr`` clamped into ``[0, hi - 1]`` (an address that is always valid)."""
    return sympy.Min(sympy.Max(expr, 0), max(hi - 1, 0) if is_static(hi) else hi - 1)


def _in_range(ops: Any, expr: sympy.Expr, lo: Any, hi: Any) -> Any:
    v = ops.index_expr(expr, torch.int64)

    def bound(b: Any) -> Any:
        return ops.constant(int(b), torch.int64) if is_static(b) else ops.index_expr(b, torch.int64)

    return ops.binary("logical_and", ops.binary("ge", v, bound(lo)), ops.binary("lt", v, bound(hi)))


def _box(ctx: Any, inputs: Sequence[IRNode], dtype: torch.dtype, size: Sequence[int], inner_fn: Any) -> StorageBox:
    origins = set().union(*[i.get_origins() for i in inputs]) | ctx.current_origins()
    return StorageBox(Pointwise(inputs[0].get_device(), dtype, [as_size(s) for s in size], origins, inner_fn=inner_fn))


@register_lowering(aten.cat)
def _cat(ctx: Any, tensors: Sequence[IRNode], dim: int = 0) -> IRNode:
    _, dtype = promote(*tensors)  # eager promotes over every input, empty ones included
    # Legacy 1-D empty tensors are skipped by eager whatever the rank of the others.
    tensors = [t for t in tensors if not (len(t.get_size()) == 1 and t.get_size()[0] == 0)] or list(tensors[:1])
    dim = canonical_dim(dim, len(tensors[0].get_size()))
    # Inputs of (static) size 0 along `dim` contribute nothing; reading them would address an
    # empty allocation (no clamped index is valid), e.g. a key/value cache still empty.
    tensors = [t for t in tensors if not (is_static(t.get_size()[dim]) and t.get_size()[dim] == 0)] or tensors[:1]
    if len(tensors) == 1:
        only = tensors[0]
        if only.get_dtype() == dtype:
            return only
        load = only.make_loader()
        return _box(ctx, [only], dtype, only.get_size(), lambda ops, index: ops.to_dtype(load(ops, index), dtype))
    size = list(tensors[0].get_size())
    offsets = []
    total = 0
    for t in tensors:
        offsets.append(total)
        total += t.get_size()[dim]
    size[dim] = total
    loaders = [(t.make_loader(), t.get_size()[dim], t.get_dtype()) for t in tensors]

    def inner_fn(ops: Any, index: Sequence[sympy.Expr]) -> Any:
        result = None
        for k in range(len(loaders) - 1, -1, -1):
            loader, n, dt = loaders[k]
            idx = list(index)
            idx[dim] = _clamp(index[dim] - offsets[k], n)
            in_range = _in_range(ops, index[dim], offsets[k], offsets[k] + n)
            # Each input is read only inside its own range (Triton: masked loads), not at a
            # clamped address for every element: a 3-way cat reads its inputs once, not 3 times.
            with loads_masked_by(ops, in_range):
                v = loader(ops, idx)
            if dt != dtype:
                v = ops.to_dtype(v, dtype)
            result = v if result is None else ops.where(in_range, v, result)
        return result

    return _box(ctx, tensors, dtype, size, inner_fn)


def _indirect(ops: Any, value: Any, size: int) -> sympy.Expr:
    # Negative indices count from the end, as in eager.
    wrapped = ops.where(ops.binary("lt", value, ops.constant(0, torch.int64)),
                        ops.binary("add", value, ops.constant(size, torch.int64)), value)
    # The lower bound is applied to the value: the symbol standing for it is non-negative by
    # assumption, so Max(symbol, 0) would simplify away and an index below -size (computed in
    # the graph, or on CUDA where inputs are not range-checked) would address memory before the
    # tensor. The upper bound stays on the symbol.
    safe = ops.binary("maximum", wrapped, ops.constant(0, torch.int64))
    return _clamp(ops.indirect_indexing(safe, size), size)


def _check_input_index(ctx: Any, index: IRNode, size: Any, negative: bool) -> None:
    """Have the wrapper check a gather's index tensor when it is a graph input of a CPU graph
    with a static indexed size (``GraphLowering.gather_checks``): eager raises for an index
    outside ``[-size, size)`` (``x[idx]``) or ``[0, size)`` (``index_select``, ``embedding``,
    ``gather``), the kernels only clamp it. Not on CUDA (reading the range would synchronize)."""
    if isinstance(index, InputBuffer) and index.get_device().type == "cpu" and is_static(size):
        op = ctx.current_target_name()
        where = ctx.current_user_location()
        ctx.gather_checks.append((index.name, int(size), negative, f"{op}" + (f" <- {where}" if where else "")))


@register_lowering(aten.index.Tensor)
def _index(ctx: Any, x: IRNode, indices: Sequence[IRNode | None], negative: bool = True) -> IRNode:
    size = x.get_size()
    if any(i is not None and i.get_dtype() in (torch.bool, torch.uint8) for i in indices):
        raise NotImplementedError("boolean masks make data-dependent shapes")
    indexed = [d for d, i in enumerate(indices) if i is not None]
    tensors = [indices[d] for d in indexed]
    bshape = broadcast_shapes(*[t.get_size() for t in tensors])  # type: ignore[union-attr]
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    rest = [d for d in range(len(size)) if d not in indexed]
    if adjacent:
        before = [d for d in rest if d < indexed[0]]
        after = [d for d in rest if d > indexed[-1]]
        out_size = [size[d] for d in before] + bshape + [size[d] for d in after]
        bpos = len(before)
    else:
        before, after = [], rest
        out_size = bshape + [size[d] for d in rest]
        bpos = 0
    for d, t in zip(indexed, tensors):
        _check_input_index(ctx, t, size[d], negative)
    loaders = [expand_to(t, bshape).make_loader() for t in tensors]  # type: ignore[arg-type]
    xload = x.make_loader()

    def inner_fn(ops: Any, index: Sequence[sympy.Expr]) -> Any:
        bidx = list(index[bpos:bpos + len(bshape)])
        full: list[sympy.Expr] = [sympy.Integer(0)] * len(size)
        for pos, d in enumerate(before):
            full[d] = index[pos]
        for pos, d in enumerate(after):
            full[d] = index[bpos + len(bshape) + pos]
        for d, loader in zip(indexed, loaders):
            v = ops.to_dtype(loader(ops, bidx), torch.int64)
            full[d] = _indirect(ops, v, size[d])
        return xload(ops, full)

    return _box(ctx, [x, *tensors], x.get_dtype(), out_size, inner_fn)  # type: ignore[list-item]


@register_lowering(aten.index_select)
def _index_select(ctx: Any, x: IRNode, dim: int, index: IRNode) -> IRNode:
    dim = canonical_dim(dim, len(x.get_size()))
    if len(x.get_size()) == 0:
        return x
    indices: list[IRNode | None] = [None] * dim + [index]
    return _index(ctx, x, indices, negative=False)


@register_lowering(aten.embedding)
def _embedding(ctx: Any, weight: IRNode, indices: IRNode, padding_idx: int = -1, scale_grad_by_freq: bool = False,
               sparse: bool = False) -> IRNode:
    return _index(ctx, weight, [indices], negative=False)


@register_lowering(aten.gather)
def _gather(ctx: Any, x: IRNode, dim: int, index: IRNode, *, sparse_grad: bool = False) -> IRNode:
    size = x.get_size()
    dim = canonical_dim(dim, len(size))
    if size:
        _check_input_index(ctx, index, size[dim], False)
    iload = index.make_loader()
    xload = x.make_loader()

    def inner_fn(ops: Any, idx: Sequence[sympy.Expr]) -> Any:
        full = list(idx)
        if size:
            full[dim] = _indirect(ops, ops.to_dtype(iload(ops, idx), torch.int64), size[dim])
        return xload(ops, full)

    return _box(ctx, [x, index], x.get_dtype(), index.get_size(), inner_fn)


@register_lowering(aten.constant_pad_nd)
def _constant_pad_nd(ctx: Any, x: IRNode, pad: Sequence[int], value: Any = 0) -> IRNode:
    size = x.get_size()
    nd = len(size)
    out_size = list(size)
    lows: dict[int, Any] = {}
    for k in range(len(pad) // 2):
        d = nd - 1 - k
        # Pads may be symbolic: eager's attention pads its mask's rows to a multiple of 8
        # elements, ``(8 - s % 8) % 8`` columns under a dynamic sequence length.
        lo, hi = (int(p) if is_static(p) else as_size(p) for p in (pad[2 * k], pad[2 * k + 1]))
        lows[d] = lo
        out_size[d] = size[d] + lo + hi
    dtype = x.get_dtype()
    xload = x.make_loader()

    def inner_fn(ops: Any, index: Sequence[sympy.Expr]) -> Any:
        full = list(index)
        cond = None
        for d, lo in lows.items():
            src = index[d] - lo
            full[d] = _clamp(src, size[d])
            c = _in_range(ops, src, 0, size[d])
            cond = c if cond is None else ops.binary("logical_and", cond, c)
        v = xload(ops, full)
        if cond is None:
            return v
        return ops.where(cond, v, ops.constant(value, dtype))

    return _box(ctx, [x], dtype, out_size, inner_fn)


@register_lowering(aten.slice_scatter)
def _slice_scatter(ctx: Any, x: IRNode, src: IRNode, dim: int = 0, start: int | None = None,
                   end: int | None = None, step: int = 1) -> IRNode:
    size = x.get_size()
    dim = canonical_dim(dim, len(size))
    n = size[dim]
    m = src.get_size()[dim]
    if all(is_static(v) for v in (n, 0 if start is None else start, 0 if end is None else end, m)):
        start = 0 if start is None else (start + n if start < 0 else start)
        end = n if end is None else (end + n if end < 0 else end)
        start, end = max(0, min(n, start)), max(0, min(n, end))
    else:
        # Symbolic sizes: the start as ``slice_view`` takes it (provably inside [0, n], else
        # refused); the region ends after ``src``'s traced length (torch's clamped end).
        start = 0 if start is None else as_size(start)
        if known_true(sympy.sympify(start) < 0):
            start = as_size(n + start)
        if not (known_true(sympy.sympify(start) >= 0) and known_true(sympy.sympify(start) <= n)):
            raise NotImplementedError(f"slice_scatter into a symbolic size from {start} (not provably inside)")
        end = as_size(start + (m - 1) * step + 1)
    xload, sload = x.make_loader(), src.make_loader()
    dtype = x.get_dtype()

    def inner_fn(ops: Any, index: Sequence[sympy.Expr]) -> Any:
        i = index[dim]
        sidx = list(index)
        sidx[dim] = _clamp(FloorDiv(sympy.Max(i - start, 0), step) if step != 1 else i - start, m)
        inside = _in_range(ops, i, start, end)
        if step != 1:
            rel = ops.binary("sub", ops.index_expr(i, torch.int64), ops.constant(start, torch.int64))
            on_step = ops.binary("eq", ops.binary("mod", rel, ops.constant(step, torch.int64)),
                                 ops.constant(0, torch.int64))
            inside = ops.binary("logical_and", inside, on_step)
        return ops.where(inside, ops.to_dtype(sload(ops, sidx), dtype), xload(ops, index))

    return _box(ctx, [x, src], dtype, size, inner_fn)


@register_lowering(aten.select_scatter)
def _select_scatter(ctx: Any, x: IRNode, src: IRNode, dim: int, index: int) -> IRNode:
    size = x.get_size()
    dim = canonical_dim(dim, len(size))
    index = index + size[dim] if index < 0 else index
    xload, sload = x.make_loader(), src.make_loader()
    dtype = x.get_dtype()

    def inner_fn(ops: Any, idx: Sequence[sympy.Expr]) -> Any:
        sidx = list(idx[:dim]) + list(idx[dim + 1:])
        hit = ops.binary("eq", ops.index_expr(idx[dim], torch.int64), ops.constant(index, torch.int64))
        return ops.where(hit, ops.to_dtype(sload(ops, sidx), dtype), xload(ops, idx))

    return _box(ctx, [x, src], dtype, size, inner_fn)
