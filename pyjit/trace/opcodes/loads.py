"""Loads, stores and stack shuffles: LOAD_FAST*, STORE_FAST*, LOAD_CONST, LOAD_GLOBAL,
LOAD_DEREF/STORE_DEREF/LOAD_CLOSURE, LOAD_ATTR/LOAD_METHOD/STORE_ATTR, POP_TOP, COPY, SWAP, ..."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ...variables.base import NULL
from ...variables.constant import ConstantVariable
from ..graph_breaks import unsupported
from . import register

if TYPE_CHECKING:
    from ..translator import Instruction, Translator
    from ...variables.base import VariableTracker

PY = sys.version_info[:2]


@register("NOP", "RESUME", "CACHE", "EXTENDED_ARG", "PRECALL", "MAKE_CELL", "COPY_FREE_VARS", "NOT_TAKEN")
def nop(tx: "Translator", inst: "Instruction") -> None:
    pass


def _load_local(tx: "Translator", name: str) -> None:
    v = tx.locals.get(name)
    if v is None:
        if name in tx.cells:
            # 3.13 compiles LOAD_CLOSURE to LOAD_FAST: on a cell variable it loads the cell itself
            # (values of cell variables are always read with LOAD_DEREF).
            tx.push(tx.cells[name])
            return
        unsupported("exception", f"UnboundLocalError: {name!r} referenced before assignment")
    tx.push(v)


@register("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW")
def load_fast(tx: "Translator", inst: "Instruction") -> None:
    _load_local(tx, inst.argval)


@register("LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW")
def load_fast_load_fast(tx: "Translator", inst: "Instruction") -> None:
    a, b = inst.argval
    _load_local(tx, a)
    _load_local(tx, b)


@register("LOAD_FAST_AND_CLEAR")
def load_fast_and_clear(tx: "Translator", inst: "Instruction") -> None:
    index = tx.current_index
    if not index or tx.instructions[index - 1].opname != "LOAD_FAST_AND_CLEAR":
        # The start of an inlined comprehension (3.12+): a break inside it moves here.
        tx.comprehension_steps[index] = tx.step_at_start
    tx.push(tx.locals.pop(inst.argval, NULL))


def _store_local(tx: "Translator", name: str, value: object) -> None:
    from ...variables.tensor import TensorVariable

    if value is NULL:  # restoring a cleared comprehension variable
        tx.locals.pop(name, None)
        return
    tx.locals[name] = value  # type: ignore[assignment]
    if isinstance(value, TensorVariable):
        tx.output.rename(value.node, name)


@register("STORE_FAST")
def store_fast(tx: "Translator", inst: "Instruction") -> None:
    _store_local(tx, inst.argval, tx.pop())


@register("STORE_FAST_LOAD_FAST")
def store_fast_load_fast(tx: "Translator", inst: "Instruction") -> None:
    a, b = inst.argval
    _store_local(tx, a, tx.pop())
    _load_local(tx, b)


@register("STORE_FAST_STORE_FAST")
def store_fast_store_fast(tx: "Translator", inst: "Instruction") -> None:
    a, b = inst.argval
    _store_local(tx, a, tx.pop())
    _store_local(tx, b, tx.pop())


@register("DELETE_FAST")
def delete_fast(tx: "Translator", inst: "Instruction") -> None:
    tx.locals.pop(inst.argval, None)


@register("LOAD_CONST", "LOAD_SMALL_INT")
def load_const(tx: "Translator", inst: "Instruction") -> None:
    tx.push(ConstantVariable(inst.argval))


@register("RETURN_CONST")
def return_const(tx: "Translator", inst: "Instruction") -> None:
    tx.return_value = ConstantVariable(inst.argval)


@register("LOAD_GLOBAL")
def load_global(tx: "Translator", inst: "Instruction") -> None:
    push_null = bool(inst.arg & 1) if inst.arg is not None else False
    if push_null and PY < (3, 13):
        tx.push(NULL)
    stored = tx.output.side_effects.pending_global(tx, inst.argval)  # assigned earlier in the trace
    tx.push(stored if stored is not None else tx.load_global(inst.argval))
    if push_null and PY >= (3, 13):
        tx.push(NULL)


@register("STORE_GLOBAL")
def store_global(tx: "Translator", inst: "Instruction") -> None:
    # applied to the symbolic state, replayed after the graph (pyjit/trace/side_effects.py)
    tx.output.side_effects.store_global(tx, inst.argval, tx.pop())


@register("DELETE_GLOBAL")
def delete_global(tx: "Translator", inst: "Instruction") -> None:
    from ..side_effects import DELETED

    tx.load_global(inst.argval)  # NameError (and its guard) when it does not exist
    tx.output.side_effects.store_global(tx, inst.argval, DELETED)


@register("LOAD_DEREF", "LOAD_CLASSDEREF")
def load_deref(tx: "Translator", inst: "Instruction") -> None:
    name = inst.argval
    cell = tx.cells.get(name)
    if cell is None:
        unsupported("exception", f"NameError: free variable {name!r}")
    tx.push(cell.get(tx, name))


@register("STORE_DEREF")
def store_deref(tx: "Translator", inst: "Instruction") -> None:
    name = inst.argval
    cell = tx.cells.get(name)
    if cell is None:
        unsupported("exception", f"NameError: cell {name!r}")
    cell.set(tx, tx.pop(), name)


@register("DELETE_DEREF")
def delete_deref(tx: "Translator", inst: "Instruction") -> None:
    unsupported("unsupported_opcode", "del of a closure variable")


@register("LOAD_CLOSURE")
def load_closure(tx: "Translator", inst: "Instruction") -> None:
    tx.push(tx.cells[inst.argval])


@register("LOAD_ATTR")
def load_attr(tx: "Translator", inst: "Instruction") -> None:
    obj = tx.pop()
    method = PY >= (3, 12) and bool(inst.arg & 1)
    value = tx.output.side_effects.pending_attr(obj, inst.argval)  # assigned earlier in the trace
    if value is None:
        value = obj.var_getattr(tx, inst.argval)
    if method:
        _push_bound_method(tx, value)
    else:
        tx.push(value)


def _push_bound_method(tx: "Translator", value: "VariableTracker") -> None:
    """A method load leaves two slots; we always bind: (NULL, bound) on 3.12, (bound, NULL) on 3.13+."""
    if PY >= (3, 13):
        tx.push(value)
        tx.push(NULL)
    else:
        tx.push(NULL)
        tx.push(value)


@register("LOAD_METHOD")
def load_method(tx: "Translator", inst: "Instruction") -> None:  # 3.11
    obj = tx.pop()
    tx.push(NULL)
    value = tx.output.side_effects.pending_attr(obj, inst.argval)
    tx.push(value if value is not None else obj.var_getattr(tx, inst.argval))


@register("LOAD_SUPER_ATTR")
def load_super_attr(tx: "Translator", inst: "Instruction") -> None:  # 3.12+: super().name
    from ...variables.builtins import BuiltinVariable

    self_v = tx.pop()
    cls_v = tx.pop()
    tx.pop()  # the global `super`
    sup = BuiltinVariable(super).call_function(tx, [cls_v, self_v], {})
    value = sup.var_getattr(tx, inst.argval)
    if inst.arg & 1:  # method load
        _push_bound_method(tx, value)
    else:
        tx.push(value)


@register("STORE_ATTR")
def store_attr(tx: "Translator", inst: "Instruction") -> None:
    """``TOS.name = TOS1``: applied to the symbolic state; on an outside object also recorded and
    replayed after the graph (pyjit/variables/objects.py, pyjit/trace/side_effects.py)."""
    from ...variables.objects import store_attribute

    obj = tx.pop()
    value = tx.pop()
    store_attribute(tx, obj, inst.argval, value)


@register("DELETE_ATTR")
def delete_attr(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.objects import store_attribute
    from ..side_effects import DELETED

    store_attribute(tx, tx.pop(), inst.argval, DELETED)


@register("POP_TOP")
def pop_top(tx: "Translator", inst: "Instruction") -> None:
    tx.pop()


@register("PUSH_NULL")
def push_null(tx: "Translator", inst: "Instruction") -> None:
    tx.push(NULL)


@register("COPY")
def copy(tx: "Translator", inst: "Instruction") -> None:
    tx.push(tx.stack[-inst.arg])


@register("SWAP")
def swap(tx: "Translator", inst: "Instruction") -> None:
    i = inst.arg
    tx.stack[-1], tx.stack[-i] = tx.stack[-i], tx.stack[-1]


@register("IMPORT_NAME")
def import_name(tx: "Translator", inst: "Instruction") -> None:
    """``import m`` inside traced code: imports are idempotent, so do it now and track the module."""
    from ...variables.builder import wrap

    fromlist = tx.pop().as_python_constant()
    level = tx.pop().as_python_constant()
    try:
        module = __import__(inst.argval, tx.f_globals, None, fromlist, level)
    except ImportError as e:
        unsupported("exception", f"ImportError: {e}")
    tx.push(wrap(tx, module, None))


@register("IMPORT_FROM")
def import_from(tx: "Translator", inst: "Instruction") -> None:
    tx.push(tx.stack[-1].var_getattr(tx, inst.argval))
