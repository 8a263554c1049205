"""Lowerings of reductions: sum, mean, prod, amax/amin, max/min.dim, argmax/argmin, any/all,
var/std/var_mean (through the ``m2`` Welford reduction).

A reduction is always realized into its own buffer (a :class:`Reduction` loop); the scheduler
fuses its pointwise producers (inlined here when single-use) and consumers back into one
kernel. Accumulation happens in fp32 for fp16/bf16 and in int64 for integers. A few very long
rows (e.g. ``x.sum()`` of a large tensor) are split into chunks reduced in parallel, then combined.
So are long *column* reductions with few columns (``grad.sum(0)`` of a ``[4096, 768]`` bias
gradient) on devices whose kernels are Triton: a column kernel covers 32+ columns per program
(coalesced loads, ``codegen/reduction_heuristics.py``), which leaves few programs; the chunks'
partials are laid out ``[split, *kept]`` so both reductions stay column reductions. Welford's
``m2`` (variance) splits the same way, combining the chunks' ``m2`` and means exactly: a
training batch norm's statistics over (N, H, W) of a channels-last activation are such a column.
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ...config import config
from ..codegen.reduction_heuristics import column_element_bytes, column_split
from ..codegen.target import kernel_target
from ..ir import IRNode, Reduction, StorageBox
from ..ops_handler import RecordHandler, ReductionType
from ..symbolic import is_static, known_true, prod, sym, unflatten_index
from .registry import aten, canonical_dims, make_pointwise, prims, register_lowering
from .views import _view


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if dtype == torch.bool or not dtype.is_floating_point:
        return torch.int64
    return dtype


def make_reduction(ctx: Any, x: IRNode, dims: Any, keepdim: bool, reduction_type: ReductionType,
                   out_dtype: torch.dtype, value_dtype: torch.dtype | None = None) -> IRNode:
    """Reduce ``x`` over ``dims``; ``value_dtype`` is the dtype the values are reduced in."""
    size = x.get_size()
    ndim = len(size)
    # A 0-dim tensor reduces over "dim 0 or -1" as over nothing: one element.
    rdims = canonical_dims(dims, ndim) if ndim else []
    kept = [d for d in range(ndim) if d not in rdims]
    ranges = [size[d] for d in kept]
    rranges = [size[d] for d in rdims]
    vdt = value_dtype or acc_dtype(x.get_dtype())
    loader = x.make_loader()
    src_dtype = x.get_dtype()
    if prod(rranges) == 0:
        raise NotImplementedError("reduction over an empty dimension is left to aten")
    if ndim == 0:
        rdims, kept, ranges, rranges = [], [], [], [1]

    def inner_fn(ops: Any, index: Sequence[sympy.Expr], rindex: Sequence[sympy.Expr]) -> Any:
        full: list[sympy.Expr] = [sympy.Integer(0)] * ndim
        for pos, d in enumerate(kept):
            full[d] = index[pos]
        # The reduction index is flat over the reduced dims (row-major), as argmax expects.
        flat = unflatten_index(rindex[0], rranges) if len(rindex) == 1 and len(rranges) > 1 else rindex
        for pos, d in enumerate(rdims):
            full[d] = flat[pos]
        v = loader(ops, full)
        if src_dtype != vdt:
            v = ops.to_dtype(v, vdt)
        return v

    if prod(rranges) == 1:
        # Reducing one element: no loop at all (argmax -> 0, m2 -> 0, others -> the value).
        def single(ops: Any, index: Sequence[sympy.Expr]) -> Any:
            if reduction_type in ("argmax", "argmin", "m2"):
                return ops.constant(0, out_dtype)
            return ops.to_dtype(inner_fn(ops, index, [sympy.Integer(0)]), out_dtype)

        from ..ir import Pointwise
        out1: IRNode = StorageBox(Pointwise(x.get_device(), out_dtype, ranges, x.get_origins() | ctx.current_origins(),
                                            inner_fn=single))
        if keepdim:
            out1 = _view(ctx, out1, [1 if d in rdims else size[d] for d in range(ndim)])
        return out1
    origins = x.get_origins() | ctx.current_origins()
    column = _is_triton_column(x, ranges, rranges, reduction_type, inner_fn)
    split = column_split(prod(ranges), prod(rranges)) if column \
        else _split_factor(prod(ranges), prod(rranges), reduction_type)
    if split > 1:
        out: IRNode = _split_reduction(ctx, x, ranges, prod(rranges), split, inner_fn, reduction_type, out_dtype,
                                       vdt, origins, column)
    else:
        red = Reduction(x.get_device(), out_dtype, ranges, origins, inner_fn=inner_fn,
                        reduction_ranges=[prod(rranges)], reduction_type=reduction_type, src_dtype=vdt)
        out = ctx.realize(StorageBox(red))
    if keepdim:
        out = _view(ctx, out, [1 if d in rdims else size[d] for d in range(ndim)])
    return out


# Reductions whose partial results combine with the same reduction (sum of sums, max of maxes).
_SPLITTABLE = {"sum": "sum", "max": "max", "min": "min", "any": "any", "all": "all"}
# ... and those that split too, with a combine of their own (``_split_m2``).
_SPLIT_KINDS = frozenset(_SPLITTABLE) | {"m2"}


def _is_triton_column(x: IRNode, ranges: list[Any], rranges: list[Any], reduction_type: ReductionType,
                      inner_fn: Any) -> bool:
    """A splittable static column reduction whose kernels will be Triton (CUDA, or CPU under
    ``triton_interpret``). The C++ generator walks rows with its own loops: its split stays the
    row rule below (a column split there would only add a pass and a buffer)."""
    device = x.get_device()
    if not kernel_target(device).column_split or reduction_type not in _SPLIT_KINDS:
        return False
    if not (is_static(prod(ranges)) and is_static(prod(rranges))):
        return False  # symbolic: no split (chunks must divide every size the graph serves)
    rec = RecordHandler()
    inner_fn(rec, unflatten_index(sym("xindex"), ranges), [sym("rindex")])
    if rec.has_indirect:
        return False
    return column_element_bytes((dep.index, 4) for dep in rec.reads) is not None


def _split_factor(xnumel: int, rnumel: int, reduction_type: ReductionType) -> int:
    """How many chunks to cut each row into: > 1 when few long rows would leave the GPU idle.

    A power of two dividing ``rnumel`` (so chunks need no tail masking), keeping chunks of at
    least 1024 elements and at most 1024 chunks.
    """
    if not (is_static(xnumel) and is_static(rnumel)):
        return 1  # symbolic: no split (chunks must divide every size the graph serves)
    if reduction_type not in _SPLIT_KINDS or xnumel >= 128 or rnumel < config.backend_split_reduction_min:
        return 1
    split = 1
    while split < 1024 and rnumel % (split * 2) == 0 and rnumel // (split * 2) >= 1024 \
            and xnumel * split * 2 <= 2048:
        split *= 2
    return split


def _split_reduction(ctx: Any, x: IRNode, ranges: list[int], rnumel: int, split: int, inner_fn: Any,
                     reduction_type: ReductionType, out_dtype: torch.dtype, vdt: torch.dtype,
                     origins: set[str], column: bool = False) -> IRNode:
    """Two reductions: each of ``split`` chunks of a row into a partial, then the partials.

    Row layout: partials ``[*kept, split]`` (a row's chunks side by side, the second kernel
    reads each row of partials contiguously). Column layout: ``[split, *kept]``, so the first
    kernel's consecutive outputs are consecutive columns of one chunk (its loads stay
    contiguous along x) and the second is a short column reduction over ``split`` rows.
    """
    chunk = rnumel // split

    def first(ops: Any, index: Sequence[sympy.Expr], rindex: Sequence[sympy.Expr]) -> Any:
        if column:
            return inner_fn(ops, index[1:], [index[0] * chunk + rindex[0]])
        return inner_fn(ops, index[:-1], [index[-1] * chunk + rindex[0]])

    if reduction_type == "m2":
        return _split_m2(ctx, x, ranges, chunk, split, first, out_dtype, vdt, origins, column)
    partial_dtype = torch.bool if reduction_type in ("any", "all") else vdt
    partial = ctx.realize(StorageBox(Reduction(
        x.get_device(), partial_dtype, [split] + ranges if column else ranges + [split], set(origins),
        inner_fn=first, reduction_ranges=[chunk], reduction_type=reduction_type, src_dtype=vdt)))
    load_partial = partial.make_loader()

    def second(ops: Any, index: Sequence[sympy.Expr], rindex: Sequence[sympy.Expr]) -> Any:
        return load_partial(ops, [rindex[0], *index] if column else [*index, rindex[0]])

    return ctx.realize(StorageBox(Reduction(
        x.get_device(), out_dtype, ranges, set(origins), inner_fn=second, reduction_ranges=[split],
        reduction_type=_SPLITTABLE[reduction_type], src_dtype=partial_dtype)))


def _split_m2(ctx: Any, x: IRNode, ranges: list[int], chunk: int, split: int, first: Any,
              out_dtype: torch.dtype, vdt: torch.dtype, origins: set[str], column: bool) -> IRNode:
    """The sum of squared deviations over ``split`` equal chunks, combined exactly (Chan et al.):

    ``m2 = sum_i m2_i + chunk * sum_i (mean_i - mean)^2``, where the second sum is itself the
    ``m2`` of the chunks' means. Each chunk's ``m2`` and sum come from one pass over the input
    (two reductions of the same loop, fused into one kernel), the combine is two short
    reductions over the partials and one pointwise step.
    """
    partial_ranges = [split] + ranges if column else ranges + [split]

    def partial(kind: ReductionType) -> IRNode:
        return ctx.realize(StorageBox(Reduction(
            x.get_device(), vdt, partial_ranges, set(origins), inner_fn=first, reduction_ranges=[chunk],
            reduction_type=kind, src_dtype=vdt)))

    load_m2, load_sum = partial("m2").make_loader(), partial("sum").make_loader()

    def at(index: Sequence[sympy.Expr], rindex: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        return [rindex[0], *index] if column else [*index, rindex[0]]

    def m2_of_chunks(ops: Any, index: Sequence[sympy.Expr], rindex: Sequence[sympy.Expr]) -> Any:
        return load_m2(ops, at(index, rindex))

    def chunk_mean(ops: Any, index: Sequence[sympy.Expr], rindex: Sequence[sympy.Expr]) -> Any:
        return ops.binary("truediv", load_sum(ops, at(index, rindex)), ops.constant(float(chunk), vdt))

    within = ctx.realize(StorageBox(Reduction(
        x.get_device(), vdt, ranges, set(origins), inner_fn=m2_of_chunks, reduction_ranges=[split],
        reduction_type="sum", src_dtype=vdt)))
    between = ctx.realize(StorageBox(Reduction(
        x.get_device(), vdt, ranges, set(origins), inner_fn=chunk_mean, reduction_ranges=[split],
        reduction_type="m2", src_dtype=vdt)))
    return make_pointwise(
        ctx, [within, between],
        lambda ops, w, b: ops.binary("add", w, ops.binary("mul", b, ops.constant(float(chunk), vdt))),
        out_dtype, compute_dtype=vdt)


def _float_size(n: Any) -> Any:
    """A count as a float constant; a symbolic count stays an expression (printed in the kernel)."""
    return float(n) if is_static(n) else n


def reduced_numel(x: IRNode, dim: Any) -> int:
    size = x.get_size()
    return prod(size[d] for d in canonical_dims(dim, len(size))) if size else 1


def _sum_dtype(x: IRNode, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    dt = x.get_dtype()
    return torch.int64 if (dt == torch.bool or not dt.is_floating_point) else dt


@register_lowering(aten.sum.dim_IntList, aten.sum.default)
def _sum(ctx: Any, x: IRNode, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> IRNode:
    out = _sum_dtype(x, dtype)
    return make_reduction(ctx, x, dim, keepdim, "sum", out, acc_dtype(out))


@register_lowering(prims.sum)
def _prims_sum(ctx: Any, x: IRNode, dims: Any, *, output_dtype: torch.dtype | None = None) -> IRNode:
    return _sum(ctx, x, dims, False, dtype=output_dtype)


@register_lowering(aten.prod.dim_int, aten.prod.default)
def _prod(ctx: Any, x: IRNode, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> IRNode:
    raise NotImplementedError("prod has no Triton reduction yet (needs a custom combine function)")


@register_lowering(aten.mean.dim, aten.mean.default)
def _mean(ctx: Any, x: IRNode, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> IRNode:
    out = dtype or x.get_dtype()
    if not out.is_floating_point:
        raise NotImplementedError("mean of an integer tensor raises in eager")
    n = reduced_numel(x, dim)
    total = make_reduction(ctx, x, dim, keepdim, "sum", out, acc_dtype(out))
    return make_pointwise(ctx, [total], lambda ops, v: ops.binary("truediv", v, ops.constant(_float_size(n), out)), out)


@register_lowering(aten.amax, aten.amin)
def _amax(ctx: Any, x: IRNode, dim: Any = (), keepdim: bool = False) -> IRNode:
    kind: ReductionType = "max" if ctx.current_target_name() == "amax" else "min"
    dt = x.get_dtype()
    return make_reduction(ctx, x, dim, keepdim, kind, dt, torch.float32 if dt in (torch.float16, torch.bfloat16) else dt)


@register_lowering(aten.max.default, aten.min.default)
def _max_all(ctx: Any, x: IRNode) -> IRNode:
    kind: ReductionType = "max" if ctx.current_target_name() == "max" else "min"
    dt = x.get_dtype()
    return make_reduction(ctx, x, None, False, kind, dt, torch.float32 if dt in (torch.float16, torch.bfloat16) else dt)


@register_lowering(aten.argmax, aten.argmin)
def _argmax(ctx: Any, x: IRNode, dim: int | None = None, keepdim: bool = False) -> IRNode:
    kind: ReductionType = "argmax" if ctx.current_target_name() == "argmax" else "argmin"
    dt = x.get_dtype()
    vdt = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    if dim is None:
        out = make_reduction(ctx, x, None, False, kind, torch.int64, vdt)
        return _view(ctx, out, [1] * len(x.get_size())) if keepdim else out
    return make_reduction(ctx, x, dim, keepdim, kind, torch.int64, vdt)


@register_lowering(aten.max.dim, aten.min.dim)
def _max_dim(ctx: Any, x: IRNode, dim: int, keepdim: bool = False) -> tuple[IRNode, IRNode]:
    name = ctx.current_target_name()
    values = _amax_like(ctx, x, dim, keepdim, "max" if name == "max" else "min")
    indices = _argmax_like(ctx, x, dim, keepdim, "argmax" if name == "max" else "argmin")
    return values, indices


def _amax_like(ctx: Any, x: IRNode, dim: Any, keepdim: bool, kind: ReductionType) -> IRNode:
    dt = x.get_dtype()
    return make_reduction(ctx, x, dim, keepdim, kind, dt, torch.float32 if dt in (torch.float16, torch.bfloat16) else dt)


def _argmax_like(ctx: Any, x: IRNode, dim: Any, keepdim: bool, kind: ReductionType) -> IRNode:
    dt = x.get_dtype()
    return make_reduction(ctx, x, dim, keepdim, kind, torch.int64,
                          torch.float32 if dt in (torch.float16, torch.bfloat16) else dt)


@register_lowering(aten.any, aten.all)
def _any(ctx: Any, x: IRNode, dim: Any = None, keepdim: bool = False) -> IRNode:
    kind: ReductionType = "any" if ctx.current_target_name() == "any" else "all"
    as_bool = make_pointwise(ctx, [x], lambda ops, v: ops.to_dtype(v, torch.bool), torch.bool) \
        if x.get_dtype() != torch.bool else x
    return make_reduction(ctx, as_bool, dim, keepdim, kind, torch.bool, torch.bool)


def _var_parts(ctx: Any, x: IRNode, dim: Any, correction: float | None, keepdim: bool) -> tuple[IRNode, IRNode]:
    dt = x.get_dtype()
    if not dt.is_floating_point:
        raise NotImplementedError("var of an integer tensor raises in eager")
    n = reduced_numel(x, dim)
    corr = 1.0 if correction is None else float(correction)
    vdt = acc_dtype(dt)
    m2 = make_reduction(ctx, x, dim, keepdim, "m2", dt, vdt)
    if is_static(n):
        denom = max(0.0, n - corr)
    elif known_true(n - corr >= 0):
        denom = n - corr
    else:
        raise NotImplementedError(f"var with correction {corr} over a symbolic count {n}")
    var = make_pointwise(ctx, [m2], lambda ops, v: ops.binary("truediv", v, ops.constant(denom, vdt)), dt,
                         compute_dtype=vdt)
    total = make_reduction(ctx, x, dim, keepdim, "sum", dt, vdt)
    mean = make_pointwise(ctx, [total], lambda ops, v: ops.binary("truediv", v, ops.constant(_float_size(n), vdt)), dt,
                          compute_dtype=vdt)
    return var, mean


@register_lowering(aten.var.correction, aten.var.dim, aten.var.default)
def _var(ctx: Any, x: IRNode, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
         correction: float | None = None) -> IRNode:
    if isinstance(dim, bool):  # var.default(self, unbiased)
        dim, unbiased = None, dim
    if correction is None and unbiased is not None and not isinstance(unbiased, (list, tuple)):
        correction = 1.0 if unbiased else 0.0
    return _var_parts(ctx, x, dim, correction, keepdim)[0]


@register_lowering(aten.var_mean.correction, aten.var_mean.dim)
def _var_mean(ctx: Any, x: IRNode, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
              correction: float | None = None) -> tuple[IRNode, IRNode]:
    if correction is None and isinstance(unbiased, bool):
        correction = 1.0 if unbiased else 0.0
    return _var_parts(ctx, x, dim, correction, keepdim)


@register_lowering(aten.std.correction, aten.std.dim)
def _std(ctx: Any, x: IRNode, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
         correction: float | None = None) -> IRNode:
    if correction is None and isinstance(unbiased, bool):
        correction = 1.0 if unbiased else 0.0
    var = _var_parts(ctx, x, dim, correction, keepdim)[0]
    return make_pointwise(ctx, [var], lambda ops, v: ops.unary("sqrt", v), var.get_dtype(),
                          compute_dtype=acc_dtype(var.get_dtype()))


@register_lowering(prims.var)
def _prims_var(ctx: Any, x: IRNode, dims: Any, correction: float, *, output_dtype: Any = None) -> IRNode:
    return _var_parts(ctx, x, dims, correction, False)[0]

