"""Control flow: jumps (followed only on Python-constant conditions), loops (GET_ITER/FOR_ITER
over materialised iterators, i.e. unrolled), returns, generator bodies (yields collected),
raises and asserts."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ...variables.base import NULL
from ...variables.constant import ConstantVariable
from ..graph_breaks import unsupported
from . import register

if TYPE_CHECKING:
    from ..translator import Instruction, Translator

PY = sys.version_info[:2]


@register("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
def jump(tx: "Translator", inst: "Instruction") -> None:
    tx.jump(inst)


def _cond_jump(truth_wanted: bool | None, none_test: bool = False):  # type: ignore[no-untyped-def]
    def handler(tx: "Translator", inst: "Instruction") -> None:
        v = tx.pop()
        if none_test:
            is_none = isinstance(v, ConstantVariable) and v.value is None
            if truth_wanted is None:  # IF_NONE
                take = is_none
            else:  # IF_NOT_NONE
                take = not is_none
        else:
            take = v.truth(tx) == truth_wanted
        if take:
            tx.jump(inst)

    return handler


# pyjit.bytecode.decode presents 3.11's direction-specific conditional jumps under these names.
register("POP_JUMP_IF_TRUE")(_cond_jump(True))
register("POP_JUMP_IF_FALSE")(_cond_jump(False))
register("POP_JUMP_IF_NONE")(_cond_jump(None, True))
register("POP_JUMP_IF_NOT_NONE")(_cond_jump(False, True))


def _jump_or_pop(wanted: bool):  # type: ignore[no-untyped-def]
    def handler(tx: "Translator", inst: "Instruction") -> None:
        v = tx.stack[-1]
        if v.truth(tx) == wanted:
            tx.jump(inst)
        else:
            tx.pop()

    return handler


register("JUMP_IF_TRUE_OR_POP")(_jump_or_pop(True))
register("JUMP_IF_FALSE_OR_POP")(_jump_or_pop(False))


@register("TO_BOOL")
def to_bool(tx: "Translator", inst: "Instruction") -> None:  # 3.13
    tx.push(ConstantVariable(tx.pop().truth(tx)))


@register("GET_ITER")
def get_iter(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.lists import ListIteratorVariable

    v = tx.pop()
    if isinstance(v, ListIteratorVariable):
        tx.push(v)
    else:
        tx.push(ListIteratorVariable(v.unpack(tx)))


@register("FOR_ITER")
def for_iter(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.lists import ListIteratorVariable

    it = tx.stack[-1]
    if not isinstance(it, ListIteratorVariable):
        unsupported("unsupported_object", f"iterating over {it}")
    item = it.next_item()
    if item is not None:
        tx.push(item)
        return
    if PY >= (3, 12):
        # The target is END_FOR, which pops (iterator, value) on 3.12; on 3.13 END_FOR pops the
        # value and the following POP_TOP the iterator. Push a dummy value for it to pop.
        tx.push(NULL)
    else:
        tx.pop()
    tx.jump(inst)


@register("END_FOR")
def end_for(tx: "Translator", inst: "Instruction") -> None:
    tx.pop()
    if PY == (3, 12):
        tx.pop()


@register("POP_ITER")
def pop_iter(tx: "Translator", inst: "Instruction") -> None:
    tx.pop()


@register("RETURN_VALUE")
def return_value(tx: "Translator", inst: "Instruction") -> None:
    tx.return_value = tx.pop()


@register("RETURN_GENERATOR")
def return_generator(tx: "Translator", inst: "Instruction") -> None:
    if tx.yielded is None:
        unsupported("generator", tx.code.co_name)
    tx.push(ConstantVariable(None))  # popped by the POP_TOP that follows


@register("YIELD_VALUE")
def yield_value(tx: "Translator", inst: "Instruction") -> None:
    if tx.yielded is None:
        unsupported("generator", tx.code.co_name)
    tx.yielded.append(tx.pop())
    tx.push(ConstantVariable(None))  # the value sent back in


@register("END_SEND", "SEND", "GET_YIELD_FROM_ITER", "GET_AWAITABLE")
def send(tx: "Translator", inst: "Instruction") -> None:
    unsupported("generator", f"{inst.opname} (yield from / await)")


@register("WITH_EXCEPT_START", "CLEANUP_THROW")
def raise_(tx: "Translator", inst: "Instruction") -> None:
    unsupported("exception", f"{inst.opname} (an exception leaving a `with` block while tracing)")


# -- exceptions: `raise`, and `try`/`except` around code that raises while tracing -----------------
# The translator (Translator._catchable/_enter_handler) jumps to a `try` block's handler when
# traced code raises an exception of a known class; these opcodes run the handler's protocol.

@register("RAISE_VARARGS")
def raise_varargs(tx: "Translator", inst: "Instruction") -> None:
    from ...errors import Unsupported
    from ...variables.misc import ExceptionVariable, raised_exception_text

    if not inst.arg:  # bare `raise` inside a handler: re-raise the one being handled
        unsupported("exception", "raise (re-raising the exception being handled)")
    if inst.arg > 1:
        tx.pop()  # `raise X from Y`: the cause does not change which handler matches
    v = tx.stack[-1]
    text = raised_exception_text(v)
    try:
        unsupported("exception", text or "raise of an exception pyjit cannot name")
    except Unsupported as e:
        if isinstance(v, ExceptionVariable):
            e.exc_type, e.exc_value = v.cls, v  # type: ignore[attr-defined]
        elif issubclass(type(getattr(v, "value", None)), type) and issubclass(v.value, BaseException):  # type: ignore[attr-defined]
            e.exc_type = v.value  # type: ignore[attr-defined]
        raise


@register("LOAD_ASSERTION_ERROR")
def load_assertion_error(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.builder import wrap

    tx.push(wrap(tx, AssertionError, None))


@register("PUSH_EXC_INFO")
def push_exc_info(tx: "Translator", inst: "Instruction") -> None:
    exc = tx.pop()
    tx.push(ConstantVariable(None))  # the exception being handled before (none while tracing)
    tx.push(exc)


@register("CHECK_EXC_MATCH")
def check_exc_match(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.misc import ExceptionVariable

    classes = tx.pop().as_python_constant()
    exc = tx.stack[-1]
    if not isinstance(exc, ExceptionVariable):
        unsupported("exception", "an except clause over an exception pyjit does not model")
    tx.push(ConstantVariable(issubclass(exc.cls, classes)))


@register("POP_EXCEPT")
def pop_except(tx: "Translator", inst: "Instruction") -> None:
    tx.pop()


@register("RERAISE")
def reraise(tx: "Translator", inst: "Instruction") -> None:
    from ...errors import Unsupported
    from ...variables.misc import ExceptionVariable

    exc = tx.pop()
    try:
        unsupported("exception", exc.raise_text() if isinstance(exc, ExceptionVariable) else "re-raised exception")
    except Unsupported as e:
        if isinstance(exc, ExceptionVariable):
            e.exc_type, e.exc_value = exc.cls, exc  # type: ignore[attr-defined]
        raise


@register("SETUP_ANNOTATIONS", "IMPORT_STAR", "LOAD_BUILD_CLASS", "LOAD_NAME",
          "STORE_NAME", "DELETE_NAME", "LOAD_LOCALS", "BEFORE_ASYNC_WITH", "GET_AITER", "GET_ANEXT", "END_ASYNC_FOR", "ASYNC_GEN_WRAP",
          "LOAD_FROM_DICT_OR_DEREF", "LOAD_FROM_DICT_OR_GLOBALS", "CALL_INTRINSIC_2", "INTERPRETER_EXIT",
          "ENTER_EXECUTOR", "LOAD_SPECIAL", "WITH_EXCEPT_START_", "BEFORE_WITH_")
def not_supported(tx: "Translator", inst: "Instruction") -> None:
    unsupported("unsupported_opcode", inst.opname)


# -- structural pattern matching (`match`) --------------------------------------------------------

_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


@register("GET_LEN")
def get_len(tx: "Translator", inst: "Instruction") -> None:
    tx.push(tx.stack[-1].call_method(tx, "__len__", [], {}))


@register("MATCH_SEQUENCE")
def match_sequence(tx: "Translator", inst: "Instruction") -> None:
    import collections.abc

    t = tx.stack[-1].python_type()
    ok = issubclass(t, collections.abc.Sequence) and not issubclass(t, (str, bytes, bytearray))
    tx.push(ConstantVariable(ok))


@register("MATCH_MAPPING")
def match_mapping(tx: "Translator", inst: "Instruction") -> None:
    import collections.abc

    tx.push(ConstantVariable(issubclass(tx.stack[-1].python_type(), collections.abc.Mapping)))


@register("MATCH_KEYS")
def match_keys(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.lists import TupleVariable

    keys = tx.stack[-1].as_python_constant()
    subject = tx.stack[-2]
    values = []
    for k in keys:
        if not subject.call_method(tx, "__contains__", [ConstantVariable(k)], {}).truth(tx):
            tx.push(ConstantVariable(None))
            return
        values.append(subject.call_method(tx, "__getitem__", [ConstantVariable(k)], {}))
    tx.push(TupleVariable(values))


@register("MATCH_CLASS")
def match_class(tx: "Translator", inst: "Instruction") -> None:
    from ...variables.lists import TupleVariable

    names = tx.pop().as_python_constant()
    cls = tx.pop().as_python_constant()
    subject = tx.pop()
    if not isinstance(cls, type) or not issubclass(subject.python_type(), cls):
        tx.push(ConstantVariable(None))
        return
    count = inst.arg or 0
    attrs = []
    if count:
        if count == 1 and any(cls is c for c in _MATCH_SELF):  # identity: a metaclass __eq__ never runs
            attrs.append(subject)
        else:
            match_args = getattr(cls, "__match_args__", ())
            if len(match_args) < count:
                unsupported("exception", f"TypeError: {cls.__name__}() accepts {len(match_args)} positional sub-patterns")
            attrs.extend(subject.var_getattr(tx, name) for name in match_args[:count])
    attrs.extend(subject.var_getattr(tx, name) for name in names)
    tx.push(TupleVariable(attrs))
