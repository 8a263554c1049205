"""Operators: BINARY_OP (all arithmetic and in-place forms), UNARY_*, COMPARE_OP, IS_OP,
CONTAINS_OP, BINARY_SUBSCR/STORE_SUBSCR/DELETE_SUBSCR, BINARY_SLICE/STORE_SLICE."""
from __future__ import annotations

import dis
import operator
import sys
from typing import TYPE_CHECKING, Any, Callable

from ...variables.builtins import binary_op, compare_op, contains, identical, subscript, unary_op
from ...variables.constant import ConstantVariable
from . import register

if TYPE_CHECKING:
    from ..translator import Instruction, Translator

PY = sys.version_info[:2]

# BINARY_OP's oparg indexes this table (Include/opcode.h NB_* order, identical on 3.11-3.13).
_NB_OPS: list[Callable[[Any, Any], Any]] = [
    operator.add, operator.and_, operator.floordiv, operator.lshift, operator.matmul, operator.mul,
    operator.mod, operator.or_, operator.pow, operator.rshift, operator.sub, operator.truediv, operator.xor,
    operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul, operator.imul,
    operator.imod, operator.ior, operator.ipow, operator.irshift, operator.isub, operator.itruediv, operator.ixor,
]
assert [name for name, _ in dis._nb_ops[:26]] == [  # type: ignore[attr-defined]
    "NB_ADD", "NB_AND", "NB_FLOOR_DIVIDE", "NB_LSHIFT", "NB_MATRIX_MULTIPLY", "NB_MULTIPLY", "NB_REMAINDER",
    "NB_OR", "NB_POWER", "NB_RSHIFT", "NB_SUBTRACT", "NB_TRUE_DIVIDE", "NB_XOR", "NB_INPLACE_ADD",
    "NB_INPLACE_AND", "NB_INPLACE_FLOOR_DIVIDE", "NB_INPLACE_LSHIFT", "NB_INPLACE_MATRIX_MULTIPLY",
    "NB_INPLACE_MULTIPLY", "NB_INPLACE_REMAINDER", "NB_INPLACE_OR", "NB_INPLACE_POWER", "NB_INPLACE_RSHIFT",
    "NB_INPLACE_SUBTRACT", "NB_INPLACE_TRUE_DIVIDE", "NB_INPLACE_XOR",
]

_CMP = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, ">=": operator.ge}


@register("BINARY_OP")
def binary(tx: "Translator", inst: "Instruction") -> None:
    b = tx.pop()
    a = tx.pop()
    if inst.arg == 26:  # NB_SUBSCR (3.14)
        tx.push(subscript(tx, a, b))
        return
    tx.push(binary_op(tx, _NB_OPS[inst.arg], a, b))


@register("UNARY_NEGATIVE")
def unary_negative(tx: "Translator", inst: "Instruction") -> None:
    tx.push(unary_op(tx, operator.neg, tx.pop()))


@register("UNARY_POSITIVE")
def unary_positive(tx: "Translator", inst: "Instruction") -> None:
    tx.push(unary_op(tx, operator.pos, tx.pop()))


@register("UNARY_INVERT")
def unary_invert(tx: "Translator", inst: "Instruction") -> None:
    tx.push(unary_op(tx, operator.invert, tx.pop()))


@register("UNARY_NOT")
def unary_not(tx: "Translator", inst: "Instruction") -> None:
    tx.push(ConstantVariable(not tx.pop().truth(tx)))


@register("COMPARE_OP")
def compare(tx: "Translator", inst: "Instruction") -> None:
    b = tx.pop()
    a = tx.pop()
    op = _CMP[inst.argval]  # pyjit.bytecode decodes the operator; mask bits are in inst.flags
    result = compare_op(tx, op, a, b)
    if PY >= (3, 13) and inst.flags & 16:  # the result is coerced to bool
        result = ConstantVariable(result.truth(tx))
    tx.push(result)


@register("IS_OP")
def is_op(tx: "Translator", inst: "Instruction") -> None:
    b = tx.pop()
    a = tx.pop()
    same = identical(tx, a, b)
    tx.push(ConstantVariable(same != bool(inst.arg)))


@register("CONTAINS_OP")
def contains_op(tx: "Translator", inst: "Instruction") -> None:
    container = tx.pop()
    item = tx.pop()
    result = contains(tx, container, item)
    if inst.arg:
        result = ConstantVariable(not result.truth(tx))
    tx.push(result)


@register("BINARY_SUBSCR")
def binary_subscr(tx: "Translator", inst: "Instruction") -> None:
    key = tx.pop()
    obj = tx.pop()
    tx.push(subscript(tx, obj, key))


@register("BINARY_SLICE")
def binary_slice(tx: "Translator", inst: "Instruction") -> None:  # 3.12+
    stop = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    tx.push(subscript(tx, obj, _slice_of(start, stop)))


def _slice_of(start: Any, stop: Any) -> Any:
    from ...variables.symbolic import SymNodeVariable, SymSliceVariable

    if isinstance(start, SymNodeVariable) or isinstance(stop, SymNodeVariable):
        return SymSliceVariable([start, stop, ConstantVariable(None)])
    return ConstantVariable(slice(start.as_python_constant(), stop.as_python_constant()))


@register("STORE_SUBSCR")
def store_subscr(tx: "Translator", inst: "Instruction") -> None:
    key = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    obj.call_method(tx, "__setitem__", [key, value], {})


@register("STORE_SLICE")
def store_slice(tx: "Translator", inst: "Instruction") -> None:  # 3.12+
    stop = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    obj.call_method(tx, "__setitem__", [_slice_of(start, stop), value], {})


@register("DELETE_SUBSCR")
def delete_subscr(tx: "Translator", inst: "Instruction") -> None:
    key = tx.pop()
    obj = tx.pop()
    obj.call_method(tx, "__delitem__", [key], {})
