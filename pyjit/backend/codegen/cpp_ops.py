"""The C++ target's pointwise op tables (op name -> the C++ expression computing it), its C
types and literals.

``Kernel.unary``/``Kernel.binary`` (``common.py``) look the op up here, give the result its
dtype (comparisons, logical ops and predicates are bool, others keep the (promoted) input
dtype) and reuse an equal expression already computed. fp32 ``exp``/``tanh``/``erf`` call
vectorizable helpers of ``cpp_prelude.py``; other math calls the libm builtins. Adding an op
is one entry here, one in ``triton_ops.py``, and the lowering that calls it.
"""
from __future__ import annotations

import math
from typing import Any

import sympy
import torch

from ..symbolic import _Printer, is_static
from .common import BinaryFormat, CSEVar, UnaryFormat

CPP_TYPES = {
    torch.float32: "float", torch.float64: "double", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
    torch.float16: "uint16_t", torch.bfloat16: "uint16_t",
}


def cpp_type(dtype: torch.dtype) -> str:
    try:
        return CPP_TYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"no C++ type for {dtype}") from None


def literal(value: Any, dtype: torch.dtype) -> str:
    """``value`` as a C++ literal of ``dtype``."""
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        v = float(value)
        suffix = "f" if dtype == torch.float32 else ""
        t = cpp_type(dtype)
        if math.isnan(v):
            return f"({t})NAN"
        if math.isinf(v):
            return f"({t})INFINITY" if v > 0 else f"(-({t})INFINITY)"
        text = repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}{suffix}"
    v = int(value)
    if dtype == torch.int64 and v == -(2 ** 63):
        return "(-INT64_C(9223372036854775807) - 1)"
    return f"INT64_C({v})" if dtype == torch.int64 else f"({cpp_type(dtype)}){v}"


class _CppPrinter(_Printer):
    """Index expressions as C++ int64 arithmetic (``//`` is ``/``; a possibly negative base
    floors as :class:`_Printer` describes)."""

    _div = "/"

    def _print_TrueDiv(self, e: Any) -> str:
        return f"(static_cast<double>({self._print(e.args[0])}) / static_cast<double>({self._print(e.args[1])}))"

    def _print_Min(self, e: sympy.Min) -> str:
        args = [self._print(a) for a in e.args]
        text = args[0]
        for a in args[1:]:
            text = f"pyjit_min<int64_t>({text}, {a})"
        return text

    def _print_Max(self, e: sympy.Max) -> str:
        args = [self._print(a) for a in e.args]
        text = args[0]
        for a in args[1:]:
            text = f"pyjit_max<int64_t>({text}, {a})"
        return text

    def _print_Pow(self, e: sympy.Pow) -> str:
        base, exp = e.args
        if exp.is_Integer and int(exp) > 0:
            return "(" + " * ".join([self._paren(base)] * int(exp)) + ")"
        raise NotImplementedError(f"index expression {e}")

    def _print_Integer(self, e: sympy.Integer) -> str:
        v = int(e)
        return f"INT64_C({v})" if abs(v) >= 2 ** 31 else str(v)

    def _print_Float(self, e: sympy.Float) -> str:
        return repr(float(e))  # a double literal (symbolic float scalar inputs)

    def _print_Rational(self, e: sympy.Rational) -> str:
        return f"({int(e.p)}.0 / {int(e.q)}.0)"  # only in float expressions of scalar inputs

    def _print_Function(self, e: Any) -> str:
        raise NotImplementedError(f"no C++ code for the size expression {e} ({type(e).__name__})")

    _print_Relational = _print_Function
    _print_Piecewise = _print_Function


def cexpr(expr: sympy.Expr) -> str:
    """``expr`` (an int, or a sympy index/size expression) as C++ int64 arithmetic."""
    if isinstance(expr, int):
        return _CppPrinter()._print_Integer(sympy.Integer(expr))
    return _CppPrinter().doprint(expr)


def bound(size: Any) -> str:
    """A loop bound: the literal of a static size (exactly what static kernels always printed),
    else the C++ expression over the size parameters."""
    return str(size) if is_static(size) else cexpr(sympy.sympify(size))


_VECTOR_FP32 = {"exp": "pyjit_expf", "tanh": "pyjit_tanhf", "erf": "pyjit_erff"}


def math_fn(fn: str, dtype: torch.dtype) -> str:
    """The function computing ``fn`` for ``dtype``: a vectorizable helper for fp32 exp/tanh/erf,
    else the libm builtin (``__builtin_expf`` for float, ``__builtin_exp`` for double)."""
    if dtype == torch.float32 and fn in _VECTOR_FP32:
        return _VECTOR_FP32[fn]
    return f"__builtin_{fn}{'f' if dtype != torch.float64 else ''}"


def _t(x: CSEVar) -> str:
    return cpp_type(x.dtype)


def _sign(k: Any, x: CSEVar) -> str:
    # NaN gives 0, as eager's (0 < x) - (x < 0).
    return f"({_t(x)})({x} > 0) - ({_t(x)})({x} < 0)"


def _libm(fn: str, int_result: str | None = None) -> UnaryFormat:
    """A libm function of a float; on an integer: ``int_result`` (None: the value itself)."""
    def fmt(k: Any, x: CSEVar) -> str | CSEVar:
        if x.dtype.is_floating_point:
            return f"{math_fn(fn, x.dtype)}({x})"
        return x if int_result is None else int_result.format(x=x, t=_t(x))
    return fmt


def _math_call(fn: str) -> UnaryFormat:
    return lambda k, x: f"{math_fn(fn, x.dtype)}({x})"


def _infix(sym: str) -> BinaryFormat:
    return lambda k, a, b, dt: f"{a} {sym} {b}"


def _math_call2(fn: str) -> BinaryFormat:
    return lambda k, a, b, dt: f"{math_fn(fn, dt)}(({cpp_type(dt)}){a}, ({cpp_type(dt)}){b})"


UNARY: dict[str, UnaryFormat] = {
    "isnan": lambda k, x: f"{x} != {x}" if x.dtype.is_floating_point else "false",
    "isinf": lambda k, x: f"__builtin_isinf({x})" if x.dtype.is_floating_point else "false",
    "signbit": lambda k, x: f"__builtin_signbit({x}) != 0" if x.dtype.is_floating_point else f"{x} < 0",
    "logical_not": lambda k, x: f"{x} == 0",
    "neg": lambda k, x: f"-{x}",
    "bitwise_not": lambda k, x: f"!{x}" if x.dtype == torch.bool else f"~{x}",
    "square": lambda k, x: f"{x} * {x}",
    "reciprocal": lambda k, x: f"({_t(x)})1 / {x}",
    "rsqrt": lambda k, x: f"({_t(x)})1 / {math_fn('sqrt', x.dtype)}({x})",
    "sigmoid": lambda k, x: f"({_t(x)})1 / (({_t(x)})1 + {math_fn('exp', x.dtype)}(-{x}))",
    "sign": _sign,
    "erfinv": lambda k, x: f"({_t(x)})pyjit_erfinv((double){x})",
    "abs": _libm("fabs", "{x} < 0 ? ({t})-{x} : {x}"),
    "round": _libm("nearbyint"),
    "floor": _libm("floor"),
    "ceil": _libm("ceil"),
    "trunc": _libm("trunc"),
}
for _op in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan", "asin", "acos",
            "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma"):
    UNARY[_op] = _math_call(_op)

_INT_DIVISION = {"truediv": "pyjit_truncdiv", "truncdiv": "pyjit_truncdiv", "floordiv": "pyjit_floordiv",
                 "mod": "pyjit_mod", "remainder": "pyjit_mod", "fmod": "pyjit_fmod"}


def _division(op: str) -> BinaryFormat:
    """Integer division ops call the prelude's helpers (C++ ``/`` and ``%`` truncate, and
    divide by zero is undefined); float ones libm."""
    def fmt(k: Any, a: CSEVar, b: CSEVar, dt: torch.dtype) -> str | CSEVar:
        t = cpp_type(dt)
        if not dt.is_floating_point:
            return f"{_INT_DIVISION[op]}<{t}>({a}, {b})"
        ca, cb = f"({t}){a}", f"({t}){b}"
        if op == "truediv":
            return f"{a} / {b}"
        if op in ("floordiv", "truncdiv"):
            return f"{math_fn('floor' if op == 'floordiv' else 'trunc', dt)}({ca} / {cb})"
        r = k._emit(f"{math_fn('fmod', dt)}({ca}, {cb})", dt)
        if op == "fmod":
            return r
        return f"({r} != 0 && (({r} < 0) != ({b} < 0))) ? {r} + {cb} : {r}"  # the sign of b, as Python
    return fmt


def _maximum_minimum(op: str) -> BinaryFormat:
    def fmt(k: Any, a: CSEVar, b: CSEVar, dt: torch.dtype) -> str:
        t, cmp = cpp_type(dt), (">" if op == "maximum" else "<")
        if dt.is_floating_point:  # NaN-propagating, as torch.maximum/minimum
            return f"({a} {cmp} {b} || {a} != {a}) ? ({t}){a} : ({t}){b}"
        return f"{a} {cmp} {b} ? ({t}){a} : ({t}){b}"
    return fmt


BINARY: dict[str, BinaryFormat] = {
    "logical_and": lambda k, a, b, dt: f"({a} != 0) && ({b} != 0)",
    "logical_or": lambda k, a, b, dt: f"({a} != 0) || ({b} != 0)",
    "logical_xor": lambda k, a, b, dt: f"({a} != 0) != ({b} != 0)",
    "maximum": _maximum_minimum("maximum"),
    "minimum": _maximum_minimum("minimum"),
}
for _op in _INT_DIVISION:
    BINARY[_op] = _division(_op)
for _op, _sym in {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
                  "lshift": "<<", "rshift": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
                  "ge": ">="}.items():
    BINARY[_op] = _infix(_sym)
for _op in ("pow", "atan2", "copysign", "hypot"):
    BINARY[_op] = _math_call2(_op)
