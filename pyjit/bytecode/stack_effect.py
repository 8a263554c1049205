"""Stack effect of every opcode of CPython 3.11-3.13 as (pops, pushes), written out per version.

This is pyjit's own table, not a call into :func:`dis.stack_effect`: the analysis needs the
split into values consumed and produced (to know which instruction produced each stack slot,
e.g. the ``__exit__`` pushed by ``BEFORE_WITH``), which ``dis`` does not give. The net effect
``pushes - pops`` equals ``dis.stack_effect`` for every instruction; the test suite checks that
over the whole standard library on each version.

Where CPython's compiler accounts differently from the runtime, the table follows the compiler
(it decides ``co_stacksize``): on 3.11 ``PRECALL n`` counts ``-n`` and ``CALL n`` counts ``-1``.
"""
from __future__ import annotations

from typing import Callable, Optional

from .opcodes import PY311, PY312, PY313

# (pops, pushes) given the raw argument.
_Effect = Callable[[int], tuple[int, int]]


def _fixed(pops: int, pushes: int) -> _Effect:
    return lambda arg: (pops, pushes)


_TABLE: dict[str, _Effect] = {}


def _set(names: str, effect: _Effect) -> None:
    for name in names.split():
        _TABLE[name] = effect


# ---- effects shared by 3.11, 3.12 and 3.13
_set("NOP RESUME EXTENDED_ARG CACHE RESERVED SETUP_ANNOTATIONS COPY_FREE_VARS MAKE_CELL "
     "DELETE_FAST DELETE_DEREF DELETE_NAME DELETE_GLOBAL JUMP_FORWARD JUMP_BACKWARD "
     "JUMP_BACKWARD_NO_INTERRUPT ENTER_EXECUTOR", _fixed(0, 0))
_set("POP_TOP RETURN_VALUE STORE_NAME STORE_GLOBAL STORE_FAST STORE_DEREF DELETE_ATTR POP_EXCEPT "
     "LIST_EXTEND SET_UPDATE DICT_UPDATE DICT_MERGE LIST_APPEND SET_ADD IMPORT_STAR PRINT_EXPR "
     "RERAISE INTERPRETER_EXIT EXIT_INIT_CHECK", _fixed(1, 0))
_set("PUSH_NULL LOAD_CONST LOAD_NAME LOAD_FAST LOAD_FAST_CHECK LOAD_FAST_AND_CLEAR LOAD_DEREF "
     "LOAD_CLOSURE LOAD_CLASSDEREF LOAD_BUILD_CLASS LOAD_ASSERTION_ERROR LOAD_LOCALS",
     _fixed(0, 1))
_set("UNARY_INVERT UNARY_NEGATIVE UNARY_NOT UNARY_POSITIVE GET_ITER GET_YIELD_FROM_ITER "
     "GET_AITER GET_AWAITABLE LIST_TO_TUPLE ASYNC_GEN_WRAP YIELD_VALUE CALL_INTRINSIC_1 TO_BOOL "
     "FORMAT_SIMPLE CONVERT_VALUE LOAD_FROM_DICT_OR_DEREF LOAD_FROM_DICT_OR_GLOBALS",
     _fixed(1, 1))
_set("CHECK_EXC_MATCH CHECK_EG_MATCH", _fixed(2, 2))
_set("BINARY_OP BINARY_SUBSCR COMPARE_OP IS_OP CONTAINS_OP IMPORT_NAME CALL_INTRINSIC_2 "
     "FORMAT_WITH_SPEC END_SEND SET_FUNCTION_ATTRIBUTE PREP_RERAISE_STAR", _fixed(2, 1))
_set("BINARY_SLICE", _fixed(3, 1))
_set("STORE_SLICE", _fixed(4, 0))
_set("STORE_SUBSCR", _fixed(3, 0))
_set("STORE_ATTR DELETE_SUBSCR END_ASYNC_FOR MAP_ADD", _fixed(2, 0))
_set("GET_LEN GET_ANEXT MATCH_MAPPING MATCH_SEQUENCE IMPORT_FROM BEFORE_WITH BEFORE_ASYNC_WITH "
     "PUSH_EXC_INFO", _fixed(1, 2))
_set("MATCH_KEYS", _fixed(2, 3))
_set("MATCH_CLASS", _fixed(3, 1))
_set("WITH_EXCEPT_START", _fixed(4, 5))
_set("CLEANUP_THROW", _fixed(3, 2))
_set("POP_JUMP_IF_TRUE POP_JUMP_IF_FALSE POP_JUMP_IF_NONE POP_JUMP_IF_NOT_NONE "
     "POP_JUMP_FORWARD_IF_TRUE POP_JUMP_FORWARD_IF_FALSE POP_JUMP_FORWARD_IF_NONE "
     "POP_JUMP_FORWARD_IF_NOT_NONE POP_JUMP_BACKWARD_IF_TRUE POP_JUMP_BACKWARD_IF_FALSE "
     "POP_JUMP_BACKWARD_IF_NONE POP_JUMP_BACKWARD_IF_NOT_NONE", _fixed(1, 0))
_set("COPY", lambda n: (n, n + 1))
_set("SWAP", lambda n: (n, n))
_set("BUILD_TUPLE BUILD_LIST BUILD_SET BUILD_STRING", lambda n: (n, 1))
_set("BUILD_MAP", lambda n: (2 * n, 1))
_set("BUILD_CONST_KEY_MAP", lambda n: (n + 1, 1))
_set("BUILD_SLICE", lambda n: (3 if n == 3 else 2, 1))
_set("UNPACK_SEQUENCE", lambda n: (1, n))
_set("UNPACK_EX", lambda n: (1, (n & 0xFF) + (n >> 8) + 1))
_set("RAISE_VARARGS", lambda n: (n, 0))
_set("LOAD_GLOBAL", lambda a: (0, 1 + (a & 1)))
_set("CALL_FUNCTION_EX", lambda a: (3 + (a & 1), 1))
_set("LOAD_SUPER_ATTR", lambda a: (3, 1 + (a & 1)))
_set("MATCH_CLASS", _fixed(3, 1))

if PY311:
    _set("LOAD_ATTR", _fixed(1, 1))
    _set("LOAD_METHOD", _fixed(1, 2))
    # The 3.11 compiler counts the arguments at PRECALL and the callable pair at CALL.
    _set("PRECALL", lambda n: (n, 0))
    _set("CALL", _fixed(2, 1))
    _set("KW_NAMES", _fixed(0, 0))
    _set("RETURN_GENERATOR", _fixed(0, 0))
    _set("MAKE_FUNCTION", lambda a: (1 + bin(a & 0xF).count("1"), 1))
    _set("FORMAT_VALUE", lambda a: (2 if a & 4 else 1, 1))
    _set("SEND", _fixed(2, 2))
    _set("JUMP_IF_TRUE_OR_POP JUMP_IF_FALSE_OR_POP", _fixed(1, 0))
    _set("FOR_ITER", _fixed(1, 2))
if PY312 or PY313:
    _set("LOAD_ATTR", lambda a: (1, 1 + (a & 1)))
    _set("CALL", lambda n: (n + 2, 1))
    _set("SEND", _fixed(2, 2))
    _set("FOR_ITER", _fixed(1, 2))
    _set("RETURN_CONST", _fixed(0, 0))
if PY312:
    _set("KW_NAMES", _fixed(0, 0))
    _set("RETURN_GENERATOR", _fixed(0, 0))
    _set("MAKE_FUNCTION", lambda a: (1 + bin(a & 0xF).count("1"), 1))
    _set("FORMAT_VALUE", lambda a: (2 if a & 4 else 1, 1))
    _set("END_FOR", _fixed(2, 0))
if PY313:
    _set("RETURN_GENERATOR", _fixed(0, 1))
    _set("MAKE_FUNCTION", _fixed(1, 1))
    _set("CALL_KW", lambda n: (n + 3, 1))
    _set("END_FOR", _fixed(1, 0))
    _set("LOAD_FAST_LOAD_FAST", _fixed(0, 2))
    _set("STORE_FAST_LOAD_FAST", _fixed(1, 1))
    _set("STORE_FAST_STORE_FAST", _fixed(2, 0))

# Effects when a conditional jump is taken, where they differ from falling through.
_JUMP_TAKEN: dict[str, _Effect] = {}
if PY311:
    _JUMP_TAKEN["FOR_ITER"] = _fixed(1, 0)  # exhausted: the iterator is popped
    _JUMP_TAKEN["SEND"] = _fixed(2, 1)  # sub-iterator returned: receiver replaced by result
    _JUMP_TAKEN["JUMP_IF_TRUE_OR_POP"] = _fixed(1, 1)
    _JUMP_TAKEN["JUMP_IF_FALSE_OR_POP"] = _fixed(1, 1)


def stack_effect_split(opname: str, arg: Optional[int], jump: bool = False) -> tuple[int, int]:
    """(pops, pushes) of ``opname`` with raw argument ``arg``; ``jump`` selects the taken branch."""
    a = arg or 0
    if jump and opname in _JUMP_TAKEN:
        return _JUMP_TAKEN[opname](a)
    effect = _TABLE.get(opname)
    if effect is None:
        raise ValueError(f"no stack effect known for {opname}")
    return effect(a)


def stack_effect(opname: str, arg: Optional[int], jump: bool = False) -> int:
    """Net stack effect (agrees with ``dis.stack_effect(op, arg, jump=jump)``)."""
    pops, pushes = stack_effect_split(opname, arg, jump)
    return pushes - pops
