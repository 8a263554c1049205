"""Building and taking apart containers and strings: BUILD_*, LIST_APPEND/EXTEND, SET_ADD,
MAP_ADD, DICT_UPDATE/MERGE, LIST_TO_TUPLE, UNPACK_SEQUENCE/EX, FORMAT_*, BUILD_STRING."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...variables.constant import ConstantVariable
from ...variables.dicts import DictVariable, SetVariable, dict_key
from ...variables.lists import ListVariable, TupleVariable
from ..graph_breaks import unsupported
from ...variables.symbolic import SymNodeVariable, SymSliceVariable
from . import register

if TYPE_CHECKING:
    from ..translator import Instruction, Translator


@register("BUILD_TUPLE")
def build_tuple(tx: "Translator", inst: "Instruction") -> None:
    tx.push(TupleVariable(tx.popn(inst.arg)))


@register("BUILD_LIST")
def build_list(tx: "Translator", inst: "Instruction") -> None:
    tx.push(ListVariable(tx.popn(inst.arg)))


@register("BUILD_SET")
def build_set(tx: "Translator", inst: "Instruction") -> None:
    tx.push(SetVariable([SetVariable.member(tx, v) for v in tx.popn(inst.arg)]))


@register("BUILD_MAP")
def build_map(tx: "Translator", inst: "Instruction") -> None:
    flat = tx.popn(2 * inst.arg)
    tx.push(DictVariable({dict_key(tx, flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}))


@register("BUILD_CONST_KEY_MAP")
def build_const_key_map(tx: "Translator", inst: "Instruction") -> None:
    keys = tx.pop().as_python_constant()
    values = tx.popn(inst.arg)
    tx.push(DictVariable(dict(zip(keys, values))))


@register("BUILD_SLICE")
def build_slice(tx: "Translator", inst: "Instruction") -> None:
    parts = tx.popn(inst.arg)
    if not all(p.is_python_constant() for p in parts):
        unsupported("data_dependent", "a slice bound that is a tensor")
    if any(isinstance(p, SymNodeVariable) for p in parts):
        tx.push(SymSliceVariable(parts))  # x[:, :n] with a symbolic n
        return
    tx.push(ConstantVariable(slice(*[p.as_python_constant() for p in parts])))


@register("LIST_APPEND")
def list_append(tx: "Translator", inst: "Instruction") -> None:
    v = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "append", [v], {})


@register("LIST_EXTEND")
def list_extend(tx: "Translator", inst: "Instruction") -> None:
    v = tx.pop()
    target = tx.stack[-inst.arg]
    assert isinstance(target, ListVariable)
    target.items.extend(v.unpack(tx))


@register("SET_ADD")
def set_add(tx: "Translator", inst: "Instruction") -> None:
    v = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "add", [v], {})


@register("SET_UPDATE")
def set_update(tx: "Translator", inst: "Instruction") -> None:
    v = tx.pop()
    target = tx.stack[-inst.arg]
    for item in v.unpack(tx):
        target.call_method(tx, "add", [item], {})


@register("MAP_ADD")
def map_add(tx: "Translator", inst: "Instruction") -> None:
    value = tx.pop()
    key = tx.pop()
    target = tx.stack[-inst.arg]
    assert isinstance(target, DictVariable)
    target.items[dict_key(tx, key)] = value


@register("DICT_UPDATE", "DICT_MERGE")
def dict_update(tx: "Translator", inst: "Instruction") -> None:
    v = tx.pop()
    target = tx.stack[-inst.arg]
    assert isinstance(target, DictVariable)
    if isinstance(v, DictVariable):
        if inst.opname == "DICT_MERGE" and set(v.items) & set(target.items):
            unsupported("exception", "TypeError: got multiple values for a keyword argument")
        target.items.update(v.items)
    else:
        unsupported("unsupported_object", f"** of {v}")


@register("LIST_TO_TUPLE")
def list_to_tuple(tx: "Translator", inst: "Instruction") -> None:
    tx.push(TupleVariable(tx.pop().unpack(tx)))


@register("UNPACK_SEQUENCE")
def unpack_sequence(tx: "Translator", inst: "Instruction") -> None:
    items = tx.pop().unpack(tx)
    if len(items) != inst.arg:
        unsupported("exception", f"ValueError: expected {inst.arg} values to unpack, got {len(items)}")
    for item in reversed(items):
        tx.push(item)


@register("UNPACK_EX")
def unpack_ex(tx: "Translator", inst: "Instruction") -> None:
    items = tx.pop().unpack(tx)
    before = inst.arg & 0xFF
    after = inst.arg >> 8
    if len(items) < before + after:
        unsupported("exception", "ValueError: not enough values to unpack")
    head = items[:before]
    mid = items[before: len(items) - after]
    tail = items[len(items) - after:]
    for item in reversed(tail):
        tx.push(item)
    tx.push(ListVariable(mid))
    for item in reversed(head):
        tx.push(item)


def _format(tx: "Translator", value: object, spec: str, conv: str | None) -> None:
    from ...variables.base import VariableTracker

    assert isinstance(value, VariableTracker)
    if not value.is_python_constant():
        unsupported("data_dependent" if type(value).__name__ == "TensorVariable" else "unsupported_object",
                    f"formatting {value} into a string")
    v = value.as_python_constant()
    if conv == "r":
        v = repr(v)
    elif conv == "s":
        v = str(v)
    elif conv == "a":
        v = ascii(v)
    tx.push(ConstantVariable(format(v, spec)))


@register("FORMAT_VALUE")
def format_value(tx: "Translator", inst: "Instruction") -> None:  # 3.11/3.12
    flags = inst.arg or 0
    spec = tx.pop().as_python_constant() if flags & 0x04 else ""
    conv = {0: None, 1: "s", 2: "r", 3: "a"}[flags & 0x03]
    _format(tx, tx.pop(), spec, conv)


@register("FORMAT_SIMPLE")
def format_simple(tx: "Translator", inst: "Instruction") -> None:  # 3.13
    _format(tx, tx.pop(), "", None)


@register("FORMAT_WITH_SPEC")
def format_with_spec(tx: "Translator", inst: "Instruction") -> None:  # 3.13
    spec = tx.pop().as_python_constant()
    _format(tx, tx.pop(), spec, None)


@register("CONVERT_VALUE")
def convert_value(tx: "Translator", inst: "Instruction") -> None:  # 3.13
    v = tx.pop()
    if not v.is_python_constant():
        unsupported("unsupported_object", f"str()/repr() of {v}")
    fn = {1: str, 2: repr, 3: ascii}[inst.arg]
    tx.push(ConstantVariable(fn(v.as_python_constant())))


@register("BUILD_STRING")
def build_string(tx: "Translator", inst: "Instruction") -> None:
    parts = tx.popn(inst.arg)
    tx.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))
