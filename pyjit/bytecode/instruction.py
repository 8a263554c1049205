"""The editable instruction model: :class:`Instruction`, :class:`ExnHandler` and positions.

An instruction list is the unit every other module of :mod:`pyjit.bytecode` works on. It hides
the encoding: there are no ``EXTENDED_ARG`` prefixes and no inline ``CACHE`` entries, jumps point
at their target :class:`Instruction` object (never at an offset), and the exception table is
spread over the instructions as one optional :class:`ExnHandler` each. So a list can be edited
freely (insert, delete, reorder); :func:`pyjit.bytecode.assemble` re-derives offsets, arguments,
caches, ``EXTENDED_ARG``, the exception table, the line table and the stack size.

Arguments: ``argval`` is the meaning (a constant, a name, a local's name, a compare operator,
a pair of local names for 3.13's ``LOAD_FAST_LOAD_FAST``); ``arg`` is the raw integer from the
decoded code or ``None`` when the assembler must derive it from ``argval``. Packed low bits that
are not part of the index (``LOAD_GLOBAL``'s push-NULL bit, 3.12+ ``LOAD_ATTR``'s method bit,
``COMPARE_OP``'s mask bits) live in ``flags`` so the index can be renumbered independently.
"""
from __future__ import annotations

import dataclasses
import dis
from typing import Any, Optional

from . import opcodes

Positions = dis.Positions
NO_POSITIONS = dis.Positions(None, None, None, None)


class _Unset:
    """Marker for "argval not given" (``None`` is a valid constant)."""

    _instance: Optional["_Unset"] = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()


@dataclasses.dataclass(eq=False)
class ExnHandler:
    """Exception-table entry covering one instruction: where to jump when it raises.

    ``target`` is the handler's first instruction; ``depth`` the number of stack values kept
    below the pushed exception; ``lasti`` whether the offset of the raising instruction is pushed
    too (used by ``with``/``finally`` cleanup to re-raise at the right place).
    Instructions that share one handler object (or equal fields) form one table entry.
    """

    target: "Instruction"
    depth: int
    lasti: bool

    def key(self) -> tuple[int, int, bool]:
        """Identity of the entry for grouping (handlers compare by target identity)."""
        return (id(self.target), self.depth, self.lasti)


@dataclasses.dataclass(eq=False, slots=True)
class Instruction:
    """One bytecode instruction, with jump targets and handlers as object references.

    Instructions compare by identity (two ``LOAD_FAST x`` at different places are different
    instructions), so they can be used as dict keys and jump targets.
    """

    opname: str
    opcode: int
    arg: Optional[int] = None
    argval: Any = None
    target: Optional["Instruction"] = None
    positions: Optional[dis.Positions] = None
    exn: Optional[ExnHandler] = None
    # Offset in the decoded code object (of the opcode itself, after any EXTENDED_ARG); None
    # for created instructions. Updated by assemble() to the offset in the code it produced.
    offset: Optional[int] = None
    # Low flag bits of packed arguments (see module docstring); 0 when not applicable.
    flags: int = 0

    @property
    def lineno(self) -> Optional[int]:
        return self.positions.lineno if self.positions is not None else None

    @property
    def is_jump(self) -> bool:
        return self.opname in opcodes.JUMPS

    def copy(self) -> "Instruction":
        """A shallow copy (same target/handler objects; callers remap them if copying a list)."""
        return dataclasses.replace(self)

    def __repr__(self) -> str:  # short, for debugging and test failure output
        text = self.opname
        if self.target is not None:
            tgt = self.target
            text += f" -> {tgt.opname}@{tgt.offset}"
        elif self.arg is not None or self.argval is not None:
            text += f" {self.argval!r}"
        if self.offset is not None:
            text = f"{self.offset}: {text}"
        return f"<Instruction {text}>"


def create_instruction(
    opname: str,
    *,
    arg: Optional[int] = None,
    argval: Any = UNSET,
    target: Optional[Instruction] = None,
    flags: int = 0,
    positions: Optional[dis.Positions] = None,
) -> Instruction:
    """Create an instruction of this interpreter's instruction set.

    For instructions that reference a constant, name or local give ``argval`` (the value or the
    name) and leave ``arg`` to the assembler. For plain integer arguments (``BUILD_TUPLE 3``)
    give ``arg``. Jumps take ``target``. Unknown opnames raise ``ValueError`` naming the version.
    """
    op = opcodes.opcode_of(opname)
    if opname in opcodes.COMPARE_OPS and not flags and argval in opcodes.COMPARE_MASKS:
        flags = opcodes.COMPARE_MASKS[argval]
    if opname in opcodes.JUMPS and target is None:
        raise ValueError(f"jump instruction {opname} needs a target instruction")
    if argval is UNSET:
        argval = arg
    elif arg is None and not (
        opname in opcodes.CONST_OPS
        or opname in opcodes.NAME_OPS
        or opname in opcodes.LOCAL_OPS
        or opname in opcodes.COMPARE_OPS
    ):
        # Plain integer argument given as argval: keep both in sync.
        arg = argval if isinstance(argval, int) else None
    return Instruction(
        opname=opname,
        opcode=op,
        arg=arg,
        argval=argval,
        target=target,
        positions=positions,
        flags=flags,
    )


def copy_instructions(instructions: list[Instruction]) -> list[Instruction]:
    """Deep-enough copy of an instruction list: new Instruction and ExnHandler objects, with
    jump targets and handlers pointing into the copy (targets outside the list are kept)."""
    copies = {id(inst): dataclasses.replace(inst) for inst in instructions}
    handlers: dict[int, ExnHandler] = {}
    out = []
    for inst in instructions:
        new = copies[id(inst)]
        if inst.target is not None:
            new.target = copies.get(id(inst.target), inst.target)
        if inst.exn is not None:
            h = handlers.get(id(inst.exn))
            if h is None:
                h = handlers[id(inst.exn)] = ExnHandler(
                    copies.get(id(inst.exn.target), inst.exn.target), inst.exn.depth, inst.exn.lasti
                )
            new.exn = h
        out.append(new)
    return out
