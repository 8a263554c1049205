"""Calls and function creation: CALL, CALL_KW, KW_NAMES, CALL_FUNCTION_EX, MAKE_FUNCTION,
SET_FUNCTION_ATTRIBUTE, BEFORE_WITH (context managers), CALL_INTRINSIC_1."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ...variables.base import NULL, VariableTracker
from ...variables.constant import ConstantVariable
from ..graph_breaks import unsupported
from . import register

if TYPE_CHECKING:
    from ..translator import Instruction, Translator

PY = sys.version_info[:2]


def _callable_and_self(tx: "Translator") -> tuple[VariableTracker, VariableTracker | None]:
    """Pop the two slots under the arguments: (NULL, fn) / (meth, self) on 3.11-3.12, (fn, NULL|self) on 3.13."""
    b = tx.pop()
    a = tx.pop()
    if PY >= (3, 13):
        return a, (None if b is NULL else b)
    if a is NULL:
        return b, None
    return a, b


@register("KW_NAMES")
def kw_names(tx: "Translator", inst: "Instruction") -> None:
    tx.kw_names = inst.argval


def _do_call(tx: "Translator", argc: int, kwnames: tuple[str, ...]) -> None:
    args = tx.popn(argc)
    fn, self_arg = _callable_and_self(tx)
    kwargs: dict[str, VariableTracker] = {}
    if kwnames:
        kwvals = args[len(args) - len(kwnames):]
        args = args[: len(args) - len(kwnames)]
        kwargs = dict(zip(kwnames, kwvals))
    if self_arg is not None:
        args = [self_arg, *args]
    tx.push(tx.call_instruction(fn, args, kwargs))


@register("CALL")
def call(tx: "Translator", inst: "Instruction") -> None:
    kwnames = tx.kw_names or ()
    tx.kw_names = None
    _do_call(tx, inst.arg, kwnames)


@register("CALL_KW")
def call_kw(tx: "Translator", inst: "Instruction") -> None:  # 3.13
    names = tx.pop().as_python_constant()
    _do_call(tx, inst.arg, tuple(names))


@register("CALL_FUNCTION_EX")
def call_function_ex(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.dicts import DictVariable

    kwargs_v = tx.pop() if (inst.arg or 0) & 1 or PY >= (3, 14) else None
    args_v = tx.pop()
    top = tx.pop()
    if top is NULL:  # 3.13: [fn, NULL, args]
        fn = tx.pop()
    else:
        fn = top
        if tx.stack and tx.stack[-1] is NULL:  # 3.11/3.12: [NULL, fn, args]
            tx.pop()
    args = args_v.unpack(tx)
    kwargs: dict[str, VariableTracker] = {}
    if kwargs_v is not None and not (isinstance(kwargs_v, ConstantVariable) and kwargs_v.value is None):
        if not isinstance(kwargs_v, DictVariable):
            unsupported("builtin_arguments", f"**{kwargs_v}")
        kwargs = {str(k): v for k, v in kwargs_v.items.items()}
    tx.push(tx.call_instruction(fn, args, kwargs))


@register("MAKE_FUNCTION")
def make_function(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.functions import NestedFunctionVariable

    code_v = tx.pop()
    if PY == (3, 11) and not isinstance(code_v.as_python_constant(), type(make_function.__code__)):
        code_v = tx.pop()  # defensive: a qualname on top (pre-3.11 layout)
    code = code_v.as_python_constant()
    fn = NestedFunctionVariable(code, tx.f_globals, code.co_qualname if hasattr(code, "co_qualname") else code.co_name)
    flags = inst.arg or 0
    if PY < (3, 13):
        if flags & 0x08:
            fn.closure = tuple(tx.pop().unpack(tx))  # type: ignore[arg-type]
        if flags & 0x04:
            tx.pop()  # annotations
        if flags & 0x02:
            kw = tx.pop()
            fn.kwdefaults = dict(kw.items)  # type: ignore[attr-defined]
        if flags & 0x01:
            fn.defaults = tuple(tx.pop().unpack(tx))
    tx.push(fn)


@register("SET_FUNCTION_ATTRIBUTE")
def set_function_attribute(tx: "Translator", inst: "Instruction") -> None:  # 3.13
    fn = tx.pop()
    value = tx.pop()
    flag = inst.arg
    if flag == 0x08:
        fn.closure = tuple(value.unpack(tx))  # type: ignore[attr-defined]
    elif flag == 0x02:
        fn.kwdefaults = dict(value.items)  # type: ignore[attr-defined]
    elif flag == 0x01:
        fn.defaults = tuple(value.unpack(tx))  # type: ignore[attr-defined]
    tx.push(fn)


@register("BEFORE_WITH")
def before_with(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.torch_fns import GradModeVariable, StateContextVariable

    ctx = tx.pop()
    if isinstance(ctx, (GradModeVariable, StateContextVariable)):
        if isinstance(ctx, StateContextVariable):  # autocast/inference_mode: a break inside moves here
            tx.with_steps[len(tx.stack)] = tx.step_at_start
        tx.push(ctx.var_getattr(tx, "__exit__"))
        tx.push(ctx.enter(tx))
        return
    # Any other context manager whose __enter__/__exit__ pyjit can trace (Python methods:
    # contextlib.nullcontext, user classes): entered and, at the block's end, exited
    # symbolically. An exception inside the block stops the trace (the exit path is not traced).
    from ...errors import Unsupported

    try:
        exit_ = ctx.var_getattr(tx, "__exit__")
        enter = ctx.var_getattr(tx, "__enter__")
    except Unsupported:
        unsupported("context_manager", f"`with` on {ctx} (its __enter__/__exit__ cannot be traced)")
    tx.with_steps[len(tx.stack)] = tx.step_at_start  # a break inside can move out to here
    tx.push(exit_)
    tx.push(enter.call_function(tx, [], {}))


@register("CALL_INTRINSIC_1")
def call_intrinsic_1(tx: "Translator", inst: "Instruction") -> None:
    import operator

    from ...variables.builtins import unary_op
    from ...variables.lists import TupleVariable

    v = tx.pop()
    # Include/internal/pycore_intrinsics.h numbering (the same on 3.12 and 3.13).
    if inst.arg == 5:  # INTRINSIC_UNARY_POSITIVE
        tx.push(unary_op(tx, operator.pos, v))
    elif inst.arg == 6:  # INTRINSIC_LIST_TO_TUPLE
        tx.push(TupleVariable(v.unpack(tx)))
    elif inst.arg == 3:  # INTRINSIC_STOPITERATION_ERROR
        unsupported("exception", "StopIteration inside a generator")
    else:
        unsupported("unsupported_opcode", f"CALL_INTRINSIC_1 {inst.arg}")
