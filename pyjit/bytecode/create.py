"""Version-aware builders of common instruction sequences (for replacement and resume code).

Each helper returns instructions that do the same thing on 3.11, 3.12 and 3.13, hiding the
differences: 3.11's ``PRECALL``/``CALL`` pair, where the NULL of a call goes (below the callable
on 3.11/3.12, above it on 3.13), ``LOAD_METHOD`` vs ``LOAD_ATTR`` with the method bit,
``KW_NAMES`` vs ``CALL_KW``, ``LOAD_CLOSURE`` vs ``LOAD_FAST`` of a cell slot.

Call protocol used by all helpers (identical on every version)::

    create_load_global("f", push_null=True)   # or: with_push_null(<load callable>)
    <load nargs arguments>
    create_call(nargs)
"""
from __future__ import annotations

import dis
from typing import Any, Optional, Sequence

from . import opcodes
from .instruction import Instruction, create_instruction


# BINARY_OP arguments by operator (dis._nb_ops order: plain operators then in-place ones).
BINARY_OPS: dict[str, int] = {sym: i for i, (_, sym) in enumerate(dis._nb_ops)}  # type: ignore[attr-defined]


def create_load_const(value: Any) -> Instruction:
    """Push ``value`` (any object: it goes into ``co_consts`` as is, e.g. a compiled graph)."""
    return create_instruction("LOAD_CONST", argval=value)


def create_load_fast(name: str) -> Instruction:
    return create_instruction("LOAD_FAST", argval=name)


def create_load_fast_check(name: str) -> Instruction:
    """Push a local that may be unbound (raises UnboundLocalError instead of crashing)."""
    return create_instruction("LOAD_FAST" if opcodes.PY311 else "LOAD_FAST_CHECK", argval=name)


def create_store_fast(name: str) -> Instruction:
    return create_instruction("STORE_FAST", argval=name)


def create_delete_fast(name: str) -> Instruction:
    return create_instruction("DELETE_FAST", argval=name)


def create_load_deref(name: str) -> Instruction:
    return create_instruction("LOAD_DEREF", argval=name)


def create_store_deref(name: str) -> Instruction:
    return create_instruction("STORE_DEREF", argval=name)


def create_load_closure(name: str) -> Instruction:
    """Push the cell object of cell/free variable ``name`` (not its contents)."""
    # 3.13 has no real LOAD_CLOSURE: the compiler emits LOAD_FAST of the cell slot.
    return create_instruction("LOAD_FAST" if opcodes.PY313 else "LOAD_CLOSURE", argval=name)


def create_load_global(name: str, push_null: bool = False) -> Instruction:
    """Push global ``name``; with ``push_null`` also the NULL a following call expects."""
    return create_instruction("LOAD_GLOBAL", argval=name, flags=int(push_null))


def create_store_global(name: str) -> Instruction:
    return create_instruction("STORE_GLOBAL", argval=name)


def create_load_attr(name: str) -> Instruction:
    """Replace TOS with ``TOS.name``."""
    return create_instruction("LOAD_ATTR", argval=name)


def create_load_method(name: str) -> Instruction:
    """Replace TOS with the pair a call of method ``name`` expects (then args, create_call)."""
    if opcodes.PY311:
        return create_instruction("LOAD_METHOD", argval=name)
    return create_instruction("LOAD_ATTR", argval=name, flags=1)


def create_store_attr(name: str) -> Instruction:
    """``TOS.name = TOS1`` (pops both)."""
    return create_instruction("STORE_ATTR", argval=name)


def create_push_null() -> Instruction:
    return create_instruction("PUSH_NULL")


def with_push_null(load_callable: Sequence[Instruction]) -> list[Instruction]:
    """Wrap the instructions that push a callable so a plain ``create_call`` can follow:
    the NULL goes below the callable on 3.11/3.12 and above it on 3.13."""
    if opcodes.PY313:
        return [*load_callable, create_push_null()]
    return [create_push_null(), *load_callable]


def create_call(nargs: int) -> list[Instruction]:
    """Call ``callable(*nargs values)`` set up by :func:`with_push_null`/:func:`create_load_method`."""
    if opcodes.PY311:
        return [create_instruction("PRECALL", arg=nargs), create_instruction("CALL", arg=nargs)]
    return [create_instruction("CALL", arg=nargs)]


def create_call_kw(nargs: int, kw_names: tuple[str, ...]) -> list[Instruction]:
    """Call with ``nargs`` values of which the last ``len(kw_names)`` are keyword arguments."""
    names = tuple(kw_names)
    if opcodes.PY313:
        return [create_load_const(names), create_instruction("CALL_KW", arg=nargs)]
    kw = create_instruction("KW_NAMES", argval=names)
    if opcodes.PY311:
        return [kw, create_instruction("PRECALL", arg=nargs), create_instruction("CALL", arg=nargs)]
    return [kw, create_instruction("CALL", arg=nargs)]


def create_call_function_ex(has_kwargs: bool) -> Instruction:
    """``callable(*TOS1, **TOS)`` (or ``callable(*TOS)``), callable set up by with_push_null."""
    return create_instruction("CALL_FUNCTION_EX", arg=int(has_kwargs))


def create_compare_op(op: str) -> Instruction:
    """``TOS1 <op> TOS`` for op in ``< <= == != > >=`` (3.12+ outcome mask bits included)."""
    if op not in opcodes.CMP_OPS:
        raise ValueError(f"{op!r} is not a comparison operator; use one of {opcodes.CMP_OPS}")
    return create_instruction("COMPARE_OP", argval=op)


def create_binary_op(op: str) -> Instruction:
    """``TOS1 <op> TOS`` for a binary operator spelled as in source (``+``, ``//=``...)."""
    return create_instruction("BINARY_OP", arg=BINARY_OPS[op])


def create_build_tuple(n: int) -> Instruction:
    return create_instruction("BUILD_TUPLE", arg=n)


def create_build_list(n: int) -> Instruction:
    return create_instruction("BUILD_LIST", arg=n)


def create_build_map(n: int) -> Instruction:
    return create_instruction("BUILD_MAP", arg=n)


def create_unpack_sequence(n: int) -> Instruction:
    return create_instruction("UNPACK_SEQUENCE", arg=n)


def create_binary_subscr() -> Instruction:
    return create_instruction("BINARY_SUBSCR")


def create_store_subscr() -> Instruction:
    """``TOS1[TOS] = TOS2`` (pops three)."""
    return create_instruction("STORE_SUBSCR")


def create_pop_top() -> Instruction:
    return create_instruction("POP_TOP")


def create_copy(n: int) -> Instruction:
    """Push a copy of the n-th value from the top (1 = TOS)."""
    return create_instruction("COPY", arg=n)


def create_swap(n: int) -> Instruction:
    return create_instruction("SWAP", arg=n)


def create_rotate(n: int) -> list[Instruction]:
    """Move TOS down to position n (1-based from the top), shifting the others up."""
    return [create_swap(k) for k in range(n, 1, -1)]


def create_return_value() -> Instruction:
    return create_instruction("RETURN_VALUE")


def create_return_const(value: Any) -> list[Instruction]:
    return [create_load_const(value), create_return_value()]


def create_nop() -> Instruction:
    return create_instruction("NOP")


def create_jump(target: Instruction) -> Instruction:
    """Unconditional jump; the assembler picks forward/backward from the target's position."""
    return create_instruction("JUMP_FORWARD", target=target)


def create_pop_jump_if(value: bool, target: Instruction) -> list[Instruction]:
    """Pop TOS and jump to ``target`` if its truth is ``value`` (forward jumps only on 3.12+)."""
    name = "POP_JUMP_IF_TRUE" if value else "POP_JUMP_IF_FALSE"
    if opcodes.PY313:
        # 3.13 conditional jumps need an exact bool: convert first.
        return [create_instruction("TO_BOOL"), create_instruction(name, target=target)]
    return [create_instruction(name, target=target)]


def create_raise(nargs: int = 1) -> Instruction:
    return create_instruction("RAISE_VARARGS", arg=nargs)


def create_resume(kind: int = 0) -> Instruction:
    return create_instruction("RESUME", arg=kind)


def create_before_with() -> Instruction:
    """Enter the context manager on TOS: leaves ``__exit__`` then the ``__enter__`` result."""
    return create_instruction("BEFORE_WITH")


def create_call_const(fn: Any, load_args: Sequence[Instruction], nargs: Optional[int] = None) -> list[Instruction]:
    """``fn(<args>)`` for a constant callable ``fn``; ``load_args`` push the arguments."""
    n = len(load_args) if nargs is None else nargs
    return [*with_push_null([create_load_const(fn)]), *load_args, *create_call(n)]


def prologue(freevars: Sequence[str], cellvars: Sequence[str], layout_index: dict[str, int]) -> list[Instruction]:
    """The frame-setup prefix CPython emits: ``COPY_FREE_VARS n``, ``MAKE_CELL`` per cell
    (in localsplus order), then ``RESUME 0``."""
    out: list[Instruction] = []
    if freevars:
        out.append(create_instruction("COPY_FREE_VARS", arg=len(freevars)))
    for name in sorted(cellvars, key=lambda n: layout_index[n]):
        out.append(create_instruction("MAKE_CELL", argval=name))
    out.append(create_resume(0))
    return out
