"""The Triton target's pointwise op tables: op name -> the Triton expression computing it.

``Kernel.unary``/``Kernel.binary`` (``common.py``) look the op up here, give the result its
dtype (the protocol's rule: comparisons, logical ops and predicates are bool, others keep the
(promoted) input dtype) and reuse an equal expression already computed. An entry gets the
kernel (to emit an intermediate value) and the operands; adding an op is one entry here, one
in ``cpp_ops.py``, and the lowering that calls it.
"""
from __future__ import annotations

from typing import Any

import torch

from .common import BinaryFormat, CSEVar, UnaryFormat, triton_dtype


def _sign(k: Any, x: CSEVar) -> str:
    # NaN gives 0, as eager's (0 < x) - (x < 0) on CPU and CUDA.
    zero = "0.0" if x.dtype.is_floating_point else "0"
    t = triton_dtype(x.dtype)
    return f"({x} > {zero}).to({t}) - ({x} < {zero}).to({t})"


def _abs(k: Any, x: CSEVar) -> str:
    return f"tl.abs({x})" if x.dtype.is_floating_point else f"tl.where({x} < 0, -{x}, {x})"


def _call(fn: str) -> UnaryFormat:
    return lambda k, x: f"{fn}({x})"


def _rounding(fn: str) -> UnaryFormat:
    # Rounding an integer is the integer itself.
    return lambda k, x: f"{fn}({x})" if x.dtype.is_floating_point else x


def _infix(sym: str) -> BinaryFormat:
    return lambda k, a, b, dt: f"{a} {sym} {b}"


def _call2(fn: str) -> BinaryFormat:
    return lambda k, a, b, dt: f"{fn}({a}, {b})"


UNARY: dict[str, UnaryFormat] = {
    "isnan": lambda k, x: f"{x} != {x}",
    "isinf": lambda k, x: f'tl.abs({x}) == float("inf")',
    "signbit": lambda k, x: f"libdevice.signbit({x}) != 0",
    "logical_not": lambda k, x: f"{x} == 0",
    "neg": lambda k, x: f"-{x}",
    "bitwise_not": lambda k, x: f"~{x}",
    "square": lambda k, x: f"{x} * {x}",
    "reciprocal": lambda k, x: f"1.0 / {x}",
    "round": lambda k, x: f"libdevice.nearbyint({x})" if x.dtype.is_floating_point else x,
    "sign": _sign,
    "abs": _abs,
}
for _op, _fn in {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2", "sqrt": "tl.sqrt",
                 "sin": "tl.sin", "cos": "tl.cos", "erf": "tl.erf", "rsqrt": "tl.rsqrt", "sigmoid": "tl.sigmoid"}.items():
    UNARY[_op] = _call(_fn)
for _op in ("expm1", "log10", "log1p", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
            "atanh", "erfc", "erfinv", "lgamma"):
    UNARY[_op] = _call(f"libdevice.{_op}")
for _op, _fn in {"floor": "tl.floor", "ceil": "tl.ceil", "trunc": "libdevice.trunc"}.items():
    UNARY[_op] = _rounding(_fn)


def _maximum_minimum(op: str) -> BinaryFormat:
    def fmt(k: Any, a: CSEVar, b: CSEVar, dt: torch.dtype) -> str:
        if dt.is_floating_point:
            cmp = ">" if op == "maximum" else "<"
            return f"tl.where(({a} {cmp} {b}) | ({a} != {a}), {a}, {b})"  # NaN-propagating, as torch
        return f"tl.{op}({a}, {b})"
    return fmt


def _floordiv(k: Any, a: CSEVar, b: CSEVar, dt: torch.dtype) -> str:
    if dt.is_floating_point:
        return f"tl.floor({a} / {b})"
    q = k._emit(f"{a} // {b}", dt)  # Triton's // truncates: step down when signs differ
    return f"tl.where(({a} % {b} != 0) & (({a} < 0) != ({b} < 0)), {q} - 1, {q})"


def _fmod_expr(a: CSEVar, b: CSEVar, dt: torch.dtype) -> str:
    return f"libdevice.fmod({a}, {b})" if dt.is_floating_point else f"{a} % {b}"


def _mod(k: Any, a: CSEVar, b: CSEVar, dt: torch.dtype) -> str:
    r = k._emit(_fmod_expr(a, b, dt), dt)  # Python's sign rule: the result takes b's sign
    return f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})"


BINARY: dict[str, BinaryFormat] = {
    "logical_and": lambda k, a, b, dt: f"({a} != 0) & ({b} != 0)",
    "logical_or": lambda k, a, b, dt: f"({a} != 0) | ({b} != 0)",
    "logical_xor": lambda k, a, b, dt: f"({a} != 0) ^ ({b} != 0)",
    "maximum": _maximum_minimum("maximum"),
    "minimum": _maximum_minimum("minimum"),
    "floordiv": _floordiv,
    "truncdiv": lambda k, a, b, dt: f"libdevice.trunc({a} / {b})" if dt.is_floating_point else f"{a} // {b}",
    "mod": _mod,
    "remainder": _mod,
    "fmod": lambda k, a, b, dt: _fmod_expr(a, b, dt),
}
for _op, _sym in {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "bitwise_and": "&", "bitwise_or": "|",
                  "bitwise_xor": "^", "lshift": "<<", "rshift": ">>", "eq": "==", "ne": "!=", "lt": "<",
                  "le": "<=", "gt": ">", "ge": ">="}.items():
    BINARY[_op] = _infix(_sym)
for _op in ("pow", "atan2", "copysign", "hypot"):
    BINARY[_op] = _call2(f"libdevice.{_op}")
