"""Lowerings of elementwise aten ops: unary math, binary arithmetic with broadcasting and type
promotion, comparisons, ``where``/``clamp``, casts and activations.

Every lowering here builds one :class:`~pyjit.backend.ir.Pointwise` through
:func:`make_pointwise`; type promotion follows torch's ``elementwise_dtypes``.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ..ir import IRNode, unwrap
from .registry import (
    ELEMENTWISE_TYPE_PROMOTION_KIND as K,
    aten,
    make_pointwise,
    prims,
    promote,
    register_lowering,
    to_dtype_node,
)

# --------------------------------------------------------------------------- unary ops
# aten op -> (ops-handler unary op, promotion kind)
_FLOAT_UNARY = {
    aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1", aten.log: "log", aten.log2: "log2",
    aten.log10: "log10", aten.log1p: "log1p", aten.sqrt: "sqrt", aten.rsqrt: "rsqrt",
    aten.sin: "sin", aten.cos: "cos", aten.tan: "tan", aten.asin: "asin", aten.acos: "acos",
    aten.atan: "atan", aten.sinh: "sinh", aten.cosh: "cosh", aten.tanh: "tanh",
    aten.asinh: "asinh", aten.acosh: "acosh", aten.atanh: "atanh", aten.erf: "erf",
    aten.erfc: "erfc", aten.erfinv: "erfinv", aten.sigmoid: "sigmoid", aten.reciprocal: "reciprocal",
    aten.lgamma: "lgamma",
}
_SAME_UNARY = {aten.neg: "neg", aten.abs: "abs", aten.sign: "sign", aten.sgn: "sign",
               aten.bitwise_not: "bitwise_not", aten.square: "square"}
_ROUNDING = {aten.floor: "floor", aten.ceil: "ceil", aten.trunc: "trunc", aten.round: "round"}


def _register_float_unary(op: Any, name: str) -> None:
    @register_lowering(op)
    def lower(ctx: Any, x: IRNode) -> IRNode:
        cdt, rdt = promote(x, kind=K.INT_TO_FLOAT)
        return make_pointwise(ctx, [x], lambda ops, v: ops.unary(name, v), rdt, compute_dtype=cdt)


def _register_same_unary(op: Any, name: str) -> None:
    @register_lowering(op)
    def lower(ctx: Any, x: IRNode) -> IRNode:
        dt = x.get_dtype()
        if name == "bitwise_not" and dt == torch.bool:
            return make_pointwise(ctx, [x], lambda ops, v: ops.unary("logical_not", v), dt)
        if name == "abs" and dt == torch.bool:
            return x
        if name == "neg" and dt == torch.bool:
            raise NotImplementedError("neg of bool")
        return make_pointwise(ctx, [x], lambda ops, v: ops.unary(name, v), dt)


def _register_rounding(op: Any, name: str) -> None:
    @register_lowering(op)
    def lower(ctx: Any, x: IRNode) -> IRNode:
        if not x.get_dtype().is_floating_point:
            return x  # rounding an integer tensor is the identity (a copy in eager)
        return make_pointwise(ctx, [x], lambda ops, v: ops.unary(name, v), x.get_dtype())


for _op, _name in _FLOAT_UNARY.items():
    _register_float_unary(_op, _name)
for _op, _name in _SAME_UNARY.items():
    _register_same_unary(_op, _name)
for _op, _name in _ROUNDING.items():
    _register_rounding(_op, _name)


@register_lowering(aten.round.decimals, override=True)  # the overload-wide rounding above has no decimals
def _round_decimals(ctx: Any, x: IRNode, *, decimals: int = 0) -> IRNode:
    scale = 10.0 ** decimals
    dt = x.get_dtype()
    return make_pointwise(
        ctx, [x],
        lambda ops, v: ops.binary("truediv", ops.unary("round", ops.binary("mul", v, ops.constant(scale, dt))),
                                  ops.constant(scale, dt)), dt)


@register_lowering(aten.isnan, aten.isinf, aten.signbit, aten.logical_not, aten.isfinite)
def _bool_unary(ctx: Any, x: IRNode) -> IRNode:
    name = ctx.current_target_name()
    dt = x.get_dtype()
    if name == "logical_not":
        return make_pointwise(ctx, [x], lambda ops, v: ops.unary("logical_not", v), torch.bool)
    if not dt.is_floating_point:
        if name == "signbit" and dt != torch.bool:
            return make_pointwise(ctx, [x], lambda ops, v: ops.binary("lt", v, ops.constant(0, dt)), torch.bool)
        const = name == "isfinite"  # integers are finite, never NaN/inf, and bools have no sign
        return make_pointwise(ctx, [x], lambda ops, v: ops.constant(const, torch.bool), torch.bool)
    if name == "isfinite":
        return make_pointwise(
            ctx, [x], lambda ops, v: ops.unary("logical_not", ops.binary(
                "logical_or", ops.unary("isnan", v), ops.unary("isinf", v))), torch.bool)
    return make_pointwise(ctx, [x], lambda ops, v: ops.unary(name, v), torch.bool)


# --------------------------------------------------------------------------- binary ops
def _binary(ctx: Any, a: Any, b: Any, name: str, kind: K = K.DEFAULT) -> IRNode:
    cdt, rdt = promote(a, b, kind=kind)
    return make_pointwise(ctx, [a, b], lambda ops, x, y: ops.binary(name, x, y), rdt, compute_dtype=cdt)


@register_lowering(aten.add, aten.sub)
def _add_sub(ctx: Any, a: Any, b: Any, *, alpha: Any = 1) -> IRNode:
    name = ctx.current_target_name()
    cdt, rdt = promote(a, b)
    if alpha != 1:
        def fn(ops: Any, x: Any, y: Any) -> Any:
            return ops.binary(name, x, ops.binary("mul", y, ops.constant(alpha, cdt)))
    else:
        def fn(ops: Any, x: Any, y: Any) -> Any:
            return ops.binary(name, x, y)
    if rdt == torch.bool and name == "add":
        return make_pointwise(ctx, [a, b], lambda ops, x, y: ops.binary("logical_or", x, y), rdt)
    return make_pointwise(ctx, [a, b], fn, rdt, compute_dtype=cdt)


@register_lowering(aten.rsub)
def _rsub(ctx: Any, a: Any, b: Any, *, alpha: Any = 1) -> IRNode:
    cdt, rdt = promote(a, b)
    return make_pointwise(
        ctx, [a, b], lambda ops, x, y: ops.binary("sub", y, ops.binary("mul", x, ops.constant(alpha, cdt))),
        rdt, compute_dtype=cdt)


@register_lowering(aten.mul)
def _mul(ctx: Any, a: Any, b: Any) -> IRNode:
    cdt, rdt = promote(a, b)
    if rdt == torch.bool:
        return make_pointwise(ctx, [a, b], lambda ops, x, y: ops.binary("logical_and", x, y), rdt)
    return _binary(ctx, a, b, "mul")


@register_lowering(aten.div, aten.true_divide, prims.div)
def _div(ctx: Any, a: Any, b: Any, *, rounding_mode: str | None = None) -> IRNode:
    if ctx.current_target_name() == "div" and ctx.current_namespace() == "prims":
        # prims.div: true division for floats, truncation for integers.
        cdt, _ = promote(a, b)
        rounding_mode = None if cdt.is_floating_point else "trunc"
    if rounding_mode is None:
        return _binary(ctx, a, b, "truediv", K.INT_TO_FLOAT)
    cdt, rdt = promote(a, b)
    if rounding_mode == "trunc":
        if cdt.is_floating_point:
            return make_pointwise(ctx, [a, b], lambda ops, x, y: ops.unary("trunc", ops.binary("truediv", x, y)),
                                  rdt, compute_dtype=cdt)
        return _binary(ctx, a, b, "truncdiv")
    return _binary(ctx, a, b, "floordiv")


@register_lowering(aten.floor_divide)
def _floor_divide(ctx: Any, a: Any, b: Any) -> IRNode:
    return _binary(ctx, a, b, "floordiv")


@register_lowering(aten.remainder)
def _remainder(ctx: Any, a: Any, b: Any) -> IRNode:
    return _binary(ctx, a, b, "mod")


@register_lowering(aten.fmod)
def _fmod(ctx: Any, a: Any, b: Any) -> IRNode:
    return _binary(ctx, a, b, "fmod")


@register_lowering(aten.pow)
def _pow(ctx: Any, a: Any, b: Any) -> IRNode:
    cdt, rdt = promote(a, b, kind=K.BOOL_TO_LONG)
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        if b == 2:
            return make_pointwise(ctx, [a], lambda ops, x: ops.binary("mul", x, x), rdt, compute_dtype=cdt)
        if b == 1:
            return to_dtype_node(ctx, a, rdt)
        # sqrt/rsqrt for 0.5/-0.5 only where aten takes that path for every device (fp32/fp64):
        # they differ from pow at -inf (pow(-inf, 0.5) = inf, sqrt(-inf) = nan).
        exact_root = rdt in (torch.float32, torch.float64)
        if b == 0.5 and exact_root:
            return make_pointwise(ctx, [a], lambda ops, x: ops.unary("sqrt", x), rdt, compute_dtype=cdt)
        # The small exponents aten's pow kernels special-case (same arithmetic, so same results):
        # a libm powf call costs ~20x a multiply and stops the C++ loops from vectorising.
        if b == 3:
            return make_pointwise(ctx, [a], lambda ops, x: ops.binary("mul", ops.binary("mul", x, x), x), rdt,
                                  compute_dtype=cdt)
        if cdt.is_floating_point and (b in (-1, -2) or (b == -0.5 and exact_root)):
            def negative(ops: Any, x: Any) -> Any:
                if b == -0.5:
                    return ops.unary("rsqrt", x)
                return ops.unary("reciprocal", x if b == -1 else ops.binary("mul", x, x))
            return make_pointwise(ctx, [a], negative, rdt, compute_dtype=cdt)
    if not cdt.is_floating_point:
        raise NotImplementedError("integer pow is left to aten (exact integer semantics)")
    return _binary(ctx, a, b, "pow", K.BOOL_TO_LONG)


@register_lowering(aten.maximum, aten.minimum, aten.atan2, aten.copysign, aten.hypot)
def _simple_binary(ctx: Any, a: Any, b: Any) -> IRNode:
    name = ctx.current_target_name()
    kind = K.INT_TO_FLOAT if name in ("atan2", "copysign", "hypot") else K.DEFAULT
    if name in ("maximum", "minimum") and promote(a, b)[1] == torch.bool:
        op = "logical_or" if name == "maximum" else "logical_and"
        return make_pointwise(ctx, [a, b], lambda ops, x, y: ops.binary(op, x, y), torch.bool)
    return _binary(ctx, a, b, name, kind)


@register_lowering(aten.eq, aten.ne, aten.lt, aten.le, aten.gt, aten.ge)
def _compare(ctx: Any, a: Any, b: Any) -> IRNode:
    name = ctx.current_target_name()
    cdt, _ = promote(a, b)
    return make_pointwise(ctx, [a, b], lambda ops, x, y: ops.binary(name, x, y), torch.bool, compute_dtype=cdt)


@register_lowering(aten.logical_and, aten.logical_or, aten.logical_xor)
def _logical(ctx: Any, a: Any, b: Any) -> IRNode:
    name = ctx.current_target_name()
    return make_pointwise(ctx, [a, b], lambda ops, x, y: ops.binary(name, x, y), torch.bool,
                          compute_dtype=torch.bool)


@register_lowering(aten.bitwise_and, aten.bitwise_or, aten.bitwise_xor)
def _bitwise(ctx: Any, a: Any, b: Any) -> IRNode:
    name = ctx.current_target_name()
    cdt, rdt = promote(a, b)
    if rdt == torch.bool:
        name = name.replace("bitwise", "logical")
    return make_pointwise(ctx, [a, b], lambda ops, x, y: ops.binary(name, x, y), rdt, compute_dtype=cdt)


# --------------------------------------------------------------------------- where / clamp
@register_lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx: Any, cond: Any, a: Any, b: Any) -> IRNode:
    cdt, rdt = promote(a, b)
    return make_pointwise(
        ctx, [cond, a, b],
        lambda ops, c, x, y: ops.where(c, ops.to_dtype(x, rdt), ops.to_dtype(y, rdt)), rdt)


@register_lowering(aten.masked_fill)
def _masked_fill(ctx: Any, x: IRNode, mask: IRNode, value: Any) -> IRNode:
    dt = x.get_dtype()
    if isinstance(value, IRNode):
        return make_pointwise(ctx, [mask, value, x], lambda ops, m, v, y: ops.where(m, ops.to_dtype(v, dt), y), dt)
    return make_pointwise(ctx, [mask, x], lambda ops, m, y: ops.where(m, ops.constant(value, dt), y), dt)


def _clamp_value(ctx: Any, x: IRNode, lo: Any, hi: Any) -> IRNode:
    cdt, rdt = promote(*[v for v in (x, lo, hi) if v is not None])
    inputs = [x] + [v for v in (lo, hi) if v is not None]

    def fn(ops: Any, v: Any, *bounds: Any) -> Any:
        k = 0
        if lo is not None:
            # maximum() propagates NaN of v, as torch.clamp does.
            v = ops.binary("maximum", v, bounds[k])
            k += 1
        if hi is not None:
            v = ops.binary("minimum", v, bounds[k])
        return v

    return make_pointwise(ctx, inputs, fn, rdt, compute_dtype=cdt)


@register_lowering(aten.clamp)
def _clamp(ctx: Any, x: IRNode, min: Any = None, max: Any = None) -> IRNode:
    return _clamp_value(ctx, x, min, max)


@register_lowering(aten.clamp_min)
def _clamp_min(ctx: Any, x: IRNode, min: Any) -> IRNode:
    return _clamp_value(ctx, x, min, None)


@register_lowering(aten.clamp_max)
def _clamp_max(ctx: Any, x: IRNode, max: Any) -> IRNode:
    return _clamp_value(ctx, x, None, max)


# --------------------------------------------------------------------------- activations
@register_lowering(aten.relu)
def _relu(ctx: Any, x: IRNode) -> IRNode:
    dt = x.get_dtype()
    return make_pointwise(ctx, [x], lambda ops, v: ops.binary("maximum", v, ops.constant(0, dt)), dt)


@register_lowering(aten.hardtanh)
def _hardtanh(ctx: Any, x: IRNode, min_val: float = -1.0, max_val: float = 1.0) -> IRNode:
    return _clamp_value(ctx, x, min_val, max_val)


@register_lowering(aten.leaky_relu)
def _leaky_relu(ctx: Any, x: IRNode, negative_slope: float = 0.01) -> IRNode:
    dt = x.get_dtype()
    return make_pointwise(
        ctx, [x], lambda ops, v: ops.where(ops.binary("gt", v, ops.constant(0, dt)), v,
                                           ops.binary("mul", v, ops.constant(negative_slope, dt))), dt)


@register_lowering(aten.threshold)
def _threshold(ctx: Any, x: IRNode, threshold: float, value: float) -> IRNode:
    dt = x.get_dtype()
    return make_pointwise(
        ctx, [x], lambda ops, v: ops.where(ops.binary("le", v, ops.constant(threshold, dt)),
                                           ops.constant(value, dt), v), dt)


@register_lowering(aten.hardsigmoid)
def _hardsigmoid(ctx: Any, x: IRNode) -> IRNode:
    dt = x.get_dtype()

    def fn(ops: Any, v: Any) -> Any:
        t = ops.binary("add", v, ops.constant(3.0, dt))
        t = ops.binary("minimum", ops.binary("maximum", t, ops.constant(0.0, dt)), ops.constant(6.0, dt))
        return ops.binary("truediv", t, ops.constant(6.0, dt))

    return make_pointwise(ctx, [x], fn, dt)


@register_lowering(aten.hardswish)
def _hardswish(ctx: Any, x: IRNode) -> IRNode:
    dt = x.get_dtype()

    def fn(ops: Any, v: Any) -> Any:
        t = ops.binary("add", v, ops.constant(3.0, dt))
        t = ops.binary("minimum", ops.binary("maximum", t, ops.constant(0.0, dt)), ops.constant(6.0, dt))
        return ops.binary("truediv", ops.binary("mul", v, t), ops.constant(6.0, dt))

    return make_pointwise(ctx, [x], fn, dt)


@register_lowering(aten.elu)
def _elu(ctx: Any, x: IRNode, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> IRNode:
    dt = x.get_dtype()

    def fn(ops: Any, v: Any) -> Any:
        neg = ops.binary("mul", ops.constant(alpha, dt),
                         ops.unary("expm1", ops.binary("mul", v, ops.constant(input_scale, dt))))
        out = ops.where(ops.binary("gt", v, ops.constant(0, dt)), v, neg)
        return ops.binary("mul", out, ops.constant(scale, dt))

    return make_pointwise(ctx, [x], fn, dt)


@register_lowering(aten.softplus)
def _softplus(ctx: Any, x: IRNode, beta: float = 1.0, threshold: float = 20.0) -> IRNode:
    dt = x.get_dtype()

    def fn(ops: Any, v: Any) -> Any:
        bx = ops.binary("mul", v, ops.constant(beta, dt))
        soft = ops.binary("truediv", ops.unary("log1p", ops.unary("exp", bx)), ops.constant(beta, dt))
        return ops.where(ops.binary("gt", bx, ops.constant(threshold, dt)), v, soft)

    return make_pointwise(ctx, [x], fn, dt)


@register_lowering(aten.nan_to_num)
def _nan_to_num(ctx: Any, x: IRNode, nan: float | None = None, posinf: float | None = None,
                neginf: float | None = None) -> IRNode:
    dt = x.get_dtype()
    if not dt.is_floating_point:
        return x
    info = torch.finfo(dt)
    nan_v = 0.0 if nan is None else nan
    pos_v = info.max if posinf is None else posinf
    neg_v = info.min if neginf is None else neginf

    def fn(ops: Any, v: Any) -> Any:
        v = ops.where(ops.unary("isnan", v), ops.constant(nan_v, dt), v)
        v = ops.where(ops.binary("eq", v, ops.constant(math.inf, dt)), ops.constant(pos_v, dt), v)
        return ops.where(ops.binary("eq", v, ops.constant(-math.inf, dt)), ops.constant(neg_v, dt), v)

    return make_pointwise(ctx, [x], fn, dt)


@register_lowering(aten.lerp)
def _lerp(ctx: Any, a: IRNode, b: IRNode, weight: Any) -> IRNode:
    cdt, rdt = promote(a, b, weight)
    return make_pointwise(
        ctx, [a, b, weight],
        lambda ops, x, y, w: ops.binary("add", x, ops.binary("mul", w, ops.binary("sub", y, x))),
        rdt, compute_dtype=cdt)


@register_lowering(aten.addcmul, aten.addcdiv)
def _addc(ctx: Any, x: IRNode, t1: IRNode, t2: IRNode, *, value: Any = 1) -> IRNode:
    name = "mul" if ctx.current_target_name() == "addcmul" else "truediv"
    cdt, rdt = promote(x, t1, t2)
    return make_pointwise(
        ctx, [x, t1, t2],
        lambda ops, a, b, c: ops.binary("add", a, ops.binary("mul", ops.constant(value, cdt),
                                                             ops.binary(name, b, c))),
        rdt, compute_dtype=cdt)


@register_lowering(aten.frac)
def _frac(ctx: Any, x: IRNode) -> IRNode:
    dt = x.get_dtype()
    return make_pointwise(ctx, [x], lambda ops, v: ops.binary("sub", v, ops.unary("trunc", v)), dt)


@register_lowering(aten.logit)
def _logit(ctx: Any, x: IRNode, eps: float | None = None) -> IRNode:
    cdt, rdt = promote(x, kind=K.INT_TO_FLOAT)

    def fn(ops: Any, v: Any) -> Any:
        if eps is not None:
            v = ops.binary("minimum", ops.binary("maximum", v, ops.constant(eps, cdt)), ops.constant(1 - eps, cdt))
        return ops.unary("log", ops.binary("truediv", v, ops.binary("sub", ops.constant(1.0, cdt), v)))

    return make_pointwise(ctx, [x], fn, rdt, compute_dtype=cdt)


@register_lowering(aten.xlogy)
def _xlogy(ctx: Any, a: Any, b: Any) -> IRNode:
    cdt, rdt = promote(a, b, kind=K.INT_TO_FLOAT)

    def fn(ops: Any, x: Any, y: Any) -> Any:
        out = ops.where(ops.binary("eq", x, ops.constant(0, cdt)), ops.constant(0.0, cdt),
                        ops.binary("mul", x, ops.unary("log", y)))
        return ops.where(ops.unary("isnan", y), y, out)

    return make_pointwise(ctx, [a, b], fn, rdt, compute_dtype=cdt)


@register_lowering(aten.deg2rad, aten.rad2deg)
def _angle_units(ctx: Any, x: IRNode) -> IRNode:
    factor = math.pi / 180 if ctx.current_target_name() == "deg2rad" else 180 / math.pi
    cdt, rdt = promote(x, kind=K.INT_TO_FLOAT)
    return make_pointwise(ctx, [x], lambda ops, v: ops.binary("mul", v, ops.constant(factor, cdt)), rdt,
                          compute_dtype=cdt)


@register_lowering(aten.logaddexp)
def _logaddexp(ctx: Any, a: Any, b: Any) -> IRNode:
    cdt, rdt = promote(a, b, kind=K.INT_TO_FLOAT)

    def fn(ops: Any, x: Any, y: Any) -> Any:
        m = ops.binary("maximum", x, y)
        d = ops.unary("neg", ops.unary("abs", ops.binary("sub", x, y)))
        out = ops.binary("add", m, ops.unary("log1p", ops.unary("exp", d)))
        # Both infinite with the same sign: the difference is NaN, the result is that infinity.
        return ops.where(ops.binary("eq", x, y), ops.binary("add", x, ops.constant(math.log(2.0), cdt)), out)

    return make_pointwise(ctx, [a, b], fn, rdt, compute_dtype=cdt)


@register_lowering(aten.heaviside)
def _heaviside(ctx: Any, x: IRNode, values: IRNode) -> IRNode:
    cdt, rdt = promote(x, values)
    zero = 0

    def fn(ops: Any, v: Any, h: Any) -> Any:
        pos = ops.to_dtype(ops.binary("gt", v, ops.constant(zero, cdt)), cdt)
        return ops.where(ops.binary("eq", v, ops.constant(zero, cdt)), h, pos)

    return make_pointwise(ctx, [x, values], fn, rdt, compute_dtype=cdt)


# --------------------------------------------------------------------------- casts and copies
@register_lowering(prims.convert_element_type)
def _convert(ctx: Any, x: IRNode, dtype: torch.dtype) -> IRNode:
    return make_pointwise(ctx, [x], lambda ops, v: ops.to_dtype(v, dtype), dtype)


@register_lowering(aten._to_copy)
def _to_copy(ctx: Any, x: IRNode, *, dtype: torch.dtype | None = None, layout: Any = None,
             device: Any = None, pin_memory: Any = None, non_blocking: bool = False,
             memory_format: Any = None) -> IRNode:
    if device is not None and torch.device(device) != x.get_device():
        raise NotImplementedError("device copies are left to aten")
    dt = dtype or x.get_dtype()
    return make_pointwise(ctx, [x], lambda ops, v: ops.to_dtype(v, dt), dt)


@register_lowering(aten.clone, aten.positive, aten.alias, aten.lift_fresh_copy, aten.detach)
def _clone(ctx: Any, x: IRNode, *, memory_format: Any = None) -> IRNode:
    name = ctx.current_target_name()
    if name in ("alias", "detach", "positive"):
        return x
    out = make_pointwise(ctx, [x], lambda ops, v: v, x.get_dtype())
    # Readers that take any strides (externs) may read ``x`` itself (graph.GraphLowering._strided_view).
    unwrap(out).copy_of = x
    return out


@register_lowering(aten.copy)
def _copy(ctx: Any, dst: IRNode, src: IRNode, non_blocking: bool = False) -> IRNode:
    from .registry import expand_to

    dt = dst.get_dtype()
    src = expand_to(src, dst.get_size())
    return make_pointwise(ctx, [src], lambda ops, v: ops.to_dtype(v, dt), dt)


@register_lowering(aten.fmax, aten.fmin)
def _fmax(ctx: Any, a: Any, b: Any) -> IRNode:
    cmp = "gt" if ctx.current_target_name() == "fmax" else "lt"
    cdt, rdt = promote(a, b)

    def fn(ops: Any, x: Any, y: Any) -> Any:
        # NaN-ignoring: take x when it wins or when y is NaN.
        take_x = ops.binary("logical_or", ops.binary(cmp, x, y), ops.unary("isnan", y))
        if not cdt.is_floating_point:
            take_x = ops.binary(cmp, x, y)
            take_x = ops.binary("logical_or", take_x, ops.binary("eq", x, y))
        return ops.where(take_x, x, y)

    return make_pointwise(ctx, [a, b], fn, rdt, compute_dtype=cdt)


@register_lowering(aten.logaddexp2)
def _logaddexp2(ctx: Any, a: Any, b: Any) -> IRNode:
    cdt, rdt = promote(a, b, kind=K.INT_TO_FLOAT)
    ln2 = math.log(2.0)

    def fn(ops: Any, x: Any, y: Any) -> Any:
        m = ops.binary("maximum", x, y)
        d = ops.unary("neg", ops.unary("abs", ops.binary("sub", x, y)))
        tail = ops.binary("truediv", ops.unary("log1p", ops.unary("exp2", d)), ops.constant(ln2, cdt))
        out = ops.binary("add", m, tail)
        return ops.where(ops.binary("eq", x, y), ops.binary("add", x, ops.constant(1.0, cdt)), out)

    return make_pointwise(ctx, [a, b], fn, rdt, compute_dtype=cdt)


@register_lowering(aten.ldexp)
def _ldexp(ctx: Any, a: Any, b: Any) -> IRNode:
    cdt, rdt = promote(a, b, kind=K.INT_TO_FLOAT)
    return make_pointwise(
        ctx, [a, b], lambda ops, x, e: ops.binary("mul", x, ops.unary("exp2", e)), rdt, compute_dtype=cdt)


@register_lowering(aten.alias_copy)
def _alias_copy(ctx: Any, x: IRNode) -> IRNode:
    return make_pointwise(ctx, [x], lambda ops, v: v, x.get_dtype())
