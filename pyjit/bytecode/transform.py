"""Building new code objects from old ones: :func:`transform_code`, :func:`make_flat_replacement`.

:class:`CodeSpec` is the editable metadata of a code object (names, flags, argument counts,
variable tuples, constants); together with an instruction list it is everything
:func:`pyjit.bytecode.assemble` needs.

Flat-signature replacement code (``docs/contracts.md``, ``notes/cpython-frames.md`` §3): the C
core calls the replacement with the frame's argument slots in frame order (positional,
keyword-only, the ``*args`` tuple, the ``**kwargs`` dict) as plain positionals, and with the
original function's closure. So the replacement keeps ``co_varnames[:N]`` and ``co_freevars``
of the original, has ``co_argcount == N`` and no ``*``/``**`` flags, and is never a generator.
"""
from __future__ import annotations

import dataclasses
import dis
import inspect
import types
from typing import Any, Callable, Optional, Sequence, Union

from .assemble import assemble, compute_layout
from .create import prologue
from .decode import decode
from .disasm import publish
from .instruction import Instruction

CO_OPTIMIZED = inspect.CO_OPTIMIZED
CO_NEWLOCALS = inspect.CO_NEWLOCALS
CO_VARARGS = inspect.CO_VARARGS
CO_VARKEYWORDS = inspect.CO_VARKEYWORDS
CO_NESTED = inspect.CO_NESTED
CO_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def argument_slot_count(code: types.CodeType) -> int:
    """N: the number of argument slots of a frame of ``code`` (what the C core passes)."""
    return (
        code.co_argcount
        + code.co_kwonlyargcount
        + bool(code.co_flags & CO_VARARGS)
        + bool(code.co_flags & CO_VARKEYWORDS)
    )


# CodeSpec field <-> ``co_<field>``; list-valued fields are lists here and tuples on the code.
_CODE_FIELDS = ("name", "qualname", "filename", "firstlineno", "argcount", "posonlyargcount", "kwonlyargcount",
                "flags", "varnames", "cellvars", "freevars", "consts", "names")
_LIST_FIELDS = ("varnames", "cellvars", "freevars", "consts", "names")


@dataclasses.dataclass
class CodeSpec:
    """Editable metadata of a code object under construction (lists may be mutated)."""

    name: str
    qualname: str
    filename: str
    firstlineno: int
    argcount: int
    posonlyargcount: int
    kwonlyargcount: int
    flags: int
    varnames: list[str]
    cellvars: list[str]
    freevars: list[str]
    consts: list[Any]
    names: list[str]

    @classmethod
    def from_code(cls, code: types.CodeType) -> "CodeSpec":
        values = {field: getattr(code, "co_" + field) for field in _CODE_FIELDS}
        values.update({field: list(values[field]) for field in _LIST_FIELDS})
        return cls(**values)

    @property
    def arg_names(self) -> list[str]:
        n = self.argcount + self.kwonlyargcount + bool(self.flags & CO_VARARGS) + bool(self.flags & CO_VARKEYWORDS)
        return self.varnames[:n]

    def layout(self) -> dict[str, int]:
        """localsplus index of every variable (before the assembler appends new locals)."""
        return compute_layout(self.varnames, self.cellvars, self.freevars)

    def code_fields(self) -> dict[str, Any]:
        """``code.replace`` keywords for :func:`pyjit.bytecode.assemble`."""
        return {"co_" + field: tuple(getattr(self, field)) if field in _LIST_FIELDS else getattr(self, field)
                for field in _CODE_FIELDS}


def transform_code(
    code: types.CodeType, edit: Callable[[list[Instruction], CodeSpec], None]
) -> types.CodeType:
    """Decode ``code``, let ``edit`` change its instruction list and metadata in place, and
    assemble the result (same name, filename and first line unless ``edit`` changed them)."""
    instructions = decode(code)
    spec = CodeSpec.from_code(code)
    edit(instructions, spec)
    return assemble(instructions, code, **spec.code_fields())


Builder = Callable[[CodeSpec], Sequence[Instruction]]


def flat_spec(original: types.CodeType, name: Optional[str] = None, cellvars: Optional[Sequence[str]] = None) -> CodeSpec:
    """Metadata of a flat-signature replacement for ``original`` (no instructions yet)."""
    n = argument_slot_count(original)
    flags = CO_OPTIMIZED | CO_NEWLOCALS | (original.co_flags & CO_NESTED)
    return CodeSpec(
        name=name or original.co_name,
        qualname=original.co_qualname if name is None else name,
        filename=original.co_filename,
        firstlineno=original.co_firstlineno,
        argcount=n,
        posonlyargcount=0,
        kwonlyargcount=0,
        flags=flags,
        varnames=list(original.co_varnames[:n]),
        cellvars=list(original.co_cellvars if cellvars is None else cellvars),
        freevars=list(original.co_freevars),
        consts=[None],  # slot 0 is read as the docstring by 3.11/3.12 function objects
        names=[],
    )


def make_flat_replacement(
    original: types.CodeType,
    body: Union[Sequence[Instruction], Builder],
    *,
    name: Optional[str] = None,
    cellvars: Optional[Sequence[str]] = None,
) -> types.CodeType:
    """A code object with the flat signature of ``original`` running ``body``.

    Parameters are ``original.co_varnames[:N]`` (N = :func:`argument_slot_count`) as plain
    positionals; free variables are the original's, in order; cell variables default to the
    original's (an argument that is a cell holds a *cell object* after the prologue: read it
    with ``LOAD_DEREF``, pass it on with :func:`~pyjit.bytecode.create_load_closure`). Pass
    ``cellvars=()`` for plain arguments. ``body`` is the instruction list without the prologue
    (``COPY_FREE_VARS``/``MAKE_CELL``/``RESUME`` are added here), or a builder called with the
    :class:`CodeSpec` (which it may extend) that returns it. New locals named in the body are
    added to ``co_varnames``; constants may be arbitrary objects.
    """
    spec = flat_spec(original, name, cellvars)
    instructions = list(body(spec) if callable(body) else body)
    pro = prologue(spec.freevars, spec.cellvars, spec.layout())
    resume_pos = dis.Positions(original.co_firstlineno, original.co_firstlineno, None, None)
    pro[-1].positions = resume_pos
    code = assemble(pro + instructions, original, **spec.code_fields())
    publish(code, f"flat replacement for {original.co_filename}:{original.co_firstlineno} ({original.co_qualname})")
    return code
