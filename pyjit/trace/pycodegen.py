"""Instruction emission for generated code with a frame's *flat* signature (replacement code,
Python guard checkers), built on :mod:`pyjit.bytecode`.

The C core runs a replacement code object in place of a frame. Its contract (docs/contracts.md):
parameters are the original's argument slots as plain positionals (positional, keyword-only,
``*args`` tuple, ``**kwargs`` dict, in frame order) and ``co_freevars`` is identical to the
original's. :class:`PyCodegen` collects instructions for such a body — argument slots are read
with ``LOAD_FAST``, the original's free variables with ``LOAD_DEREF``, globals with
``LOAD_GLOBAL`` (the code runs with the user function's globals), and every other object the
code needs (the compiled graph, types, expected values) is a ``LOAD_CONST`` of the object
itself, so nothing is ever added to the user's module globals — and
:meth:`PyCodegen.finish` hands them to :func:`pyjit.bytecode.make_flat_replacement`, which adds
the prologue and assembles the code object with the original's filename, so tracebacks of the
generated code name the user's file and the lines given with :meth:`PyCodegen.set_line`.
"""
from __future__ import annotations

import dis
import types
from typing import Any, Callable, Sequence

from ..bytecode import (
    Instruction,
    argument_slot_count,
    create_binary_subscr,
    create_build_list,
    create_build_map,
    create_build_tuple,
    create_call,
    create_instruction,
    create_load_attr,
    create_load_const,
    create_load_deref,
    create_load_fast,
    create_load_global,
    create_pop_jump_if,
    create_return_value,
    create_store_fast,
    decode,
    make_flat_replacement,
    with_push_null,
)

Emit = Callable[[], None]


def flat_arg_names(code: types.CodeType) -> list[str]:
    """The names of the frame's argument slots in frame order (what the C callback's args hold)."""
    return list(code.co_varnames[: argument_slot_count(code)])


class PyCodegen:
    """An instruction list under construction for a flat-signature replacement of ``original``."""

    def __init__(self, original: types.CodeType) -> None:
        self.original = original
        self.arg_names = flat_arg_names(original)
        self._args = frozenset(self.arg_names)
        self._free = frozenset(original.co_freevars)
        self.instructions: list[Instruction] = []
        self._positions: dis.Positions | None = None
        # Sources whose value a local of the generated code holds (see load_source).
        self.source_locals: dict[Any, str] = {}

    # -- locations -----------------------------------------------------------------------------
    def set_line(self, line: int | None) -> None:
        """Instructions appended from now on carry this line of the user's file (tracebacks)."""
        self._positions = dis.Positions(line, line, None, None) if line is not None else None

    def append(self, *instructions: Instruction) -> None:
        for inst in instructions:
            if inst.positions is None:
                inst.positions = self._positions
            self.instructions.append(inst)

    # -- loads -----------------------------------------------------------------------------
    def load_const(self, value: Any) -> None:
        """Push ``value`` itself (any object; it lives in the code's ``co_consts``)."""
        self.append(create_load_const(value))

    def load_frame_variable(self, name: str) -> None:
        """Push an argument slot or a free variable of the original frame."""
        if name in self._args:
            self.append(create_load_fast(name))
        elif name in self._free:
            self.append(create_load_deref(name))
        else:
            raise AssertionError(f"{name!r} is neither an argument nor a free variable of {self.original.co_qualname}")

    def load_global(self, name: str) -> None:
        """Push a global of the user function's module (or a builtin), looked up at run time."""
        self.append(create_load_global(name))

    def load_attr(self, name: str) -> None:
        """Replace TOS with ``getattr(TOS, name)`` (any string, identifiers or not)."""
        self.append(create_load_attr(name))

    def load_item(self, key: Any) -> None:
        """Replace TOS with ``TOS[key]`` for a constant key."""
        self.append(create_load_const(key), create_binary_subscr())

    def load_source(self, source: Any) -> None:
        """Push the value of ``source`` (a :class:`pyjit.guards.source.Source`): from the local
        holding it if one does (``source_locals``), else through ``source.reconstruct``."""
        local = self.source_locals.get(source)
        if local is not None:
            self.load_local(local)
        else:
            source.reconstruct(self)

    def load_local(self, name: str) -> None:
        """Push a local created by the generated code itself (see :meth:`store_local`)."""
        self.append(create_load_fast(name))

    def store_local(self, name: str) -> None:
        """Pop TOS into a new local of the generated code (names start with ``___``)."""
        self.append(create_store_fast(name))

    # -- calls and containers ----------------------------------------------------------------
    def call(self, emit_callable: Emit, emit_args: Sequence[Emit]) -> None:
        """Push ``callable(*args)``; each ``emit_*`` appends the instructions pushing one value."""
        start = len(self.instructions)
        emit_callable()
        # The NULL of the call protocol goes below the callable on 3.11/3.12, above it on 3.13.
        self.instructions[start:] = with_push_null(self.instructions[start:])
        for inst in self.instructions[start:]:
            if inst.positions is None:  # the PUSH_NULL just added
                inst.positions = self._positions
        for emit in emit_args:
            emit()
        self.append(*create_call(len(emit_args)))

    def call_const(self, fn: Any, emit_args: Sequence[Emit]) -> None:
        """Push ``fn(*args)`` for an object ``fn`` known now (a helper, a compiled graph)."""
        self.call(lambda: self.load_const(fn), emit_args)

    def build(self, kind: type, count: int) -> None:
        """Build a tuple/list from the top ``count`` values, or a dict from ``count`` key/value pairs."""
        builder = {tuple: create_build_tuple, list: create_build_list, dict: create_build_map}[kind]
        self.append(builder(count))

    def is_same(self, negate: bool = False) -> None:
        """Replace TOS1, TOS with ``TOS1 is TOS`` (``is not`` when ``negate``)."""
        self.append(create_instruction("IS_OP", arg=int(negate)))

    # -- control flow ------------------------------------------------------------------------
    def new_label(self) -> Instruction:
        """An instruction to jump to; place it with :meth:`place`."""
        return create_instruction("NOP")

    def place(self, label: Instruction) -> None:
        self.append(label)

    def pop_jump_if(self, value: bool, target: Instruction) -> None:
        """Pop TOS and jump to ``target`` (a later label) when its truth is ``value``."""
        self.append(*create_pop_jump_if(value, target))

    def return_value(self) -> None:
        self.append(create_return_value())

    # -- result ----------------------------------------------------------------------------
    def finish(self, name: str) -> types.CodeType:
        """The flat-signature code object running the collected instructions.

        Arguments stay plain locals even when the original keeps them in cells
        (``cellvars=()``): the generated code only reads them.
        """
        return make_flat_replacement(self.original, self.instructions, name=name, cellvars=())


def body_first_line(code: types.CodeType) -> int:
    """The line of the first statement of ``code``'s body (where a replacement's work is placed)."""
    for inst in decode(code):
        if inst.opname not in ("RESUME", "COPY_FREE_VARS", "MAKE_CELL", "NOP") and inst.lineno is not None:
            return inst.lineno
    return code.co_firstlineno


def make_function(code: types.CodeType, func: types.FunctionType) -> types.FunctionType:
    """A function running ``code`` with ``func``'s globals and closure (the pure-Python runtime)."""
    return types.FunctionType(code, func.__globals__, code.co_name, None, func.__closure__)
