"""Scatter-add lowerings: ``index_put`` with ``accumulate=True`` and ``embedding_dense_backward``.

Both become an :class:`~pyjit.backend.ir.ScatterAdd`: a fill kernel (a copy of ``self``, or
zeros) and a kernel over the source elements that atomically adds each value into its target
(codegen/scatter.py). Indices are handled as the gathers of ``indexing.py`` handle them:
negative values wrap, the address is clamped into the dimension so it is always valid, and an
index still outside it after wrapping (an error in eager) writes nothing: its add is masked.
A graph-input index tensor of a CPU graph is range-checked by the wrapper first, so such a
graph raises where eager raises.

What stays extern (``NotImplementedError``): ``accumulate=False`` (with duplicate indices the
result depends on which write lands last), boolean/uint8 masks (data-dependent shapes), dtypes
without an atomic add (bool, 8/16-bit integers, complex), ``scale_grad_by_freq=True``.
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ..ir import IRNode, Layout, Pointwise, ScatterAdd
from .indexing import _check_input_index, _clamp
from .registry import aten, broadcast_shapes, expand_to, register_lowering, to_dtype_node

# Element types ``tl.atomic_add`` supports (and the C++ read-modify-write handles).
_ATOMIC_DTYPES = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64}


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    """The buffer type the adds run in: fp32 for fp16/bf16 (rounded once at the end, as eager's
    CUDA kernels and torch's decomposition sum them: rounding after every add would lose the
    small contributions of frequent indices; Triton's interpreter, and GPUs before sm_90, have
    no 16-bit float atomic add either)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _target(ops: Any, value: Any, size: Any) -> tuple[sympy.Expr, Any]:
    """(clamped address, in-range flag) of a loaded int64 index into a dimension of ``size``."""
    zero = ops.constant(0, torch.int64)
    wrapped = ops.where(ops.binary("lt", value, zero), ops.binary("add", value, ops.constant(size, torch.int64)),
                        value)
    valid = ops.binary("logical_and", ops.binary("ge", wrapped, zero),
                       ops.binary("lt", wrapped, ops.constant(size, torch.int64)))
    return _clamp(ops.indirect_indexing(wrapped, size), size), valid


def _scatter_add(ctx: Any, size: Sequence[Any], dtype: torch.dtype, device: torch.device, init: Pointwise,
                 src_ranges: Sequence[Any], scatter_fn: Any, inputs: Sequence[IRNode]) -> ScatterAdd:
    origins = set().union(*[i.get_origins() for i in inputs]) | ctx.current_origins()
    buf = ScatterAdd(ctx.new_buffer_name(), Layout.contiguous(device, dtype, size), init, src_ranges, scatter_fn,
                     origins)
    ctx.register_buffer(buf)
    return buf


@register_lowering(aten.index_put, aten._unsafe_index_put)
def _index_put(ctx: Any, x: IRNode, indices: Sequence[IRNode | None], values: IRNode,
               accumulate: bool = False) -> IRNode:
    if not accumulate:
        raise NotImplementedError("index_put without accumulate: duplicate indices make the result order-dependent")
    dtype = x.get_dtype()
    if dtype not in _ATOMIC_DTYPES:
        raise NotImplementedError(f"index_put accumulate on {dtype}: no atomic add")
    if values.get_dtype() != dtype:
        raise NotImplementedError("index_put with values of another dtype")  # eager raises
    size = x.get_size()
    if not indices or any(i is not None and i.get_dtype() in (torch.bool, torch.uint8) for i in indices):
        raise NotImplementedError("boolean masks make data-dependent shapes")
    if len(indices) > len(size) or not any(i is not None for i in indices):
        raise NotImplementedError("index_put without index tensors")
    indexed = [d for d, i in enumerate(indices) if i is not None]
    tensors: list[IRNode] = [indices[d] for d in indexed]  # type: ignore[misc]
    bshape = broadcast_shapes(*[t.get_size() for t in tensors])
    # The source positions are those of ``x[indices]`` (same layout rules as aten.index).
    rest = [d for d in range(len(size)) if d not in indexed]
    if indexed == list(range(indexed[0], indexed[-1] + 1)):
        before = [d for d in rest if d < indexed[0]]
        after = [d for d in rest if d > indexed[-1]]
        bpos = len(before)
    else:
        before, after, bpos = [], rest, 0
    src_size = [size[d] for d in before] + list(bshape) + [size[d] for d in after]
    if len(values.get_size()) > len(src_size):
        raise NotImplementedError("index_put values of higher rank than the indexed shape")
    broadcast_shapes(values.get_size(), src_size)  # raises on a mismatch rather than writing wrong values
    for d, t in zip(indexed, tensors):
        _check_input_index(ctx, t, size[d], True)
    loaders = [expand_to(t, bshape).make_loader() for t in tensors]
    vload = expand_to(values, src_size).make_loader()

    acc = _accumulator(dtype)

    def scatter_fn(ops: Any, index: Sequence[sympy.Expr]) -> tuple[list[Any], Any, Any]:
        bidx = list(index[bpos:bpos + len(bshape)])
        full: list[Any] = [sympy.Integer(0)] * len(size)
        for pos, d in enumerate(before):
            full[d] = index[pos]
        for pos, d in enumerate(after):
            full[d] = index[bpos + len(bshape) + pos]
        valid = None
        for d, loader in zip(indexed, loaders):
            full[d], ok = _target(ops, ops.to_dtype(loader(ops, bidx), torch.int64), size[d])
            valid = ok if valid is None else ops.binary("logical_and", valid, ok)
        value = vload(ops, index)
        return full, (ops.to_dtype(value, acc) if acc != dtype else value), valid

    xload = x.make_loader()
    init = Pointwise(x.get_device(), acc, list(size), set(x.get_origins()),
                     inner_fn=lambda ops, index: ops.to_dtype(xload(ops, index), acc) if acc != dtype
                     else xload(ops, index))
    buf = _scatter_add(ctx, size, acc, x.get_device(), init, src_size, scatter_fn, [x, values, *tensors])
    return to_dtype_node(ctx, buf, dtype) if acc != dtype else buf


@register_lowering(aten.embedding_dense_backward)
def _embedding_dense_backward(ctx: Any, grad_output: IRNode, indices: IRNode, num_weights: int, padding_idx: int,
                              scale_grad_by_freq: bool) -> IRNode:
    if scale_grad_by_freq:
        raise NotImplementedError("embedding backward with scale_grad_by_freq (needs per-index counts)")
    dtype = grad_output.get_dtype()
    if dtype not in _ATOMIC_DTYPES or not dtype.is_floating_point:
        raise NotImplementedError(f"embedding backward on {dtype}")
    acc = _accumulator(dtype)
    gsize = grad_output.get_size()
    nidx = len(indices.get_size())
    if len(gsize) != nidx + 1:
        raise NotImplementedError("embedding backward with grad_output not of shape indices.shape + [D]")
    out_size = [num_weights, gsize[-1]]
    iload = indices.make_loader()
    gload = grad_output.make_loader()

    def scatter_fn(ops: Any, index: Sequence[sympy.Expr]) -> tuple[list[Any], Any, Any]:
        token = ops.to_dtype(iload(ops, list(index[:-1])), torch.int64)
        row, valid = _target(ops, token, num_weights)
        # The padding index's row gets no gradient (compared before wrapping, as eager does).
        not_pad = ops.binary("ne", token, ops.constant(padding_idx, torch.int64))
        value = gload(ops, list(index))
        if acc != dtype:
            value = ops.to_dtype(value, acc)
        return [row, index[-1]], value, ops.binary("logical_and", valid, not_pad)

    init = Pointwise(grad_output.get_device(), acc, out_size, set(),
                     inner_fn=lambda ops, index: ops.constant(0, acc))
    buf = _scatter_add(ctx, out_size, acc, grad_output.get_device(), init, gsize, scatter_fn, [grad_output, indices])
    return to_dtype_node(ctx, buf, dtype) if acc != dtype else buf
