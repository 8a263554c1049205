"""A compact, readable disassembly for debugging output (:func:`disassemble`).

Jump and handler targets get labels (``L1``, ``L2``...), each instruction shows its source line
when it starts a new one, and the exception table is printed as label ranges::

    <code f at demo.py:3>
       3        RESUME             0
       4        LOAD_FAST          x
                POP_JUMP_IF_FALSE  L1
       5        LOAD_CONST         1
                RETURN_VALUE
      L1:
       6        RETURN_CONST       None
    exception table:
      (none)
"""
from __future__ import annotations

import os
import re
import types
from typing import Optional, Sequence, Union

from ..config import config
from ..logs import get_logger
from .analysis import jump_targets
from .decode import decode
from .instruction import Instruction


def _short(value: object, limit: int = 48) -> str:
    if isinstance(value, types.CodeType):
        return f"<code {value.co_name} line {value.co_firstlineno}>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def disassemble(code_or_instructions: Union[types.CodeType, Sequence[Instruction]]) -> str:
    """Text listing of a code object or an instruction list (created ones included)."""
    header = ""
    if isinstance(code_or_instructions, types.CodeType):
        code = code_or_instructions
        header = f"<code {code.co_qualname} at {code.co_filename}:{code.co_firstlineno}>\n"
        instructions: Sequence[Instruction] = decode(code)
    else:
        instructions = code_or_instructions
    targets = jump_targets(instructions)
    labels: dict[int, str] = {}
    for inst in instructions:
        if id(inst) in targets:
            labels[id(inst)] = f"L{len(labels) + 1}"
    lines = []
    last_line = None
    for inst in instructions:
        if id(inst) in labels:
            lines.append(f"  {labels[id(inst)]}:")
        line = inst.lineno
        line_text = f"{line:4d}" if line is not None and line != last_line else "    "
        if line is not None:
            last_line = line
        if inst.target is not None:
            arg_text = f"to {labels[id(inst.target)]}"
        elif inst.opname in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_SUPER_ATTR") and inst.flags & 1:
            arg_text = f"{inst.argval} (+NULL)" if inst.opname == "LOAD_GLOBAL" else f"{inst.argval} (method)"
        elif inst.arg is None and inst.argval is None:
            arg_text = ""
        else:
            arg_text = _short(inst.argval)
        lines.append(f"  {line_text}    {inst.opname:<24} {arg_text}".rstrip())
    lines.append("exception table:")
    entries = []
    run: list[Instruction] = []
    for inst in list(instructions) + [None]:  # type: ignore[list-item]
        key = inst.exn.key() if inst is not None and inst.exn is not None else None
        if run and (inst is None or key != run[0].exn.key()):  # type: ignore[union-attr]
            first, last = run[0], run[-1]
            exn = first.exn
            assert exn is not None
            entries.append(
                f"  {_name(first, labels, instructions)} to {_name(last, labels, instructions)} -> "
                f"{labels[id(exn.target)]} [depth {exn.depth}]{' lasti' if exn.lasti else ''}"
            )
            run = []
        if key is not None:
            run.append(inst)
    lines.extend(entries or ["  (none)"])
    return header + "\n".join(lines)


def _name(inst: Instruction, labels: dict[int, str], instructions: Sequence[Instruction]) -> str:
    """A label if the instruction has one, else its index and opname."""
    if id(inst) in labels:
        return labels[id(inst)]
    index = next(i for i, x in enumerate(instructions) if x is inst)  # debug output only
    return f"#{index} {inst.opname}"


_log = get_logger("bytecode")
_dump_counter = 0


def publish(code: types.CodeType, what: str) -> Optional[str]:
    """Report a generated code object: a line on the ``bytecode`` log channel and, when
    ``PYJIT_DEBUG_DIR`` is set, its disassembly in ``<debug_dir>/bytecode/``. Returns the path."""
    global _dump_counter
    _log.info("built %s: %s", code.co_qualname, what)
    if not config.debug_dir:
        return None
    _dump_counter += 1
    directory = os.path.join(config.debug_dir, "bytecode")
    os.makedirs(directory, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", code.co_qualname)[:80]
    path = os.path.join(directory, f"{_dump_counter:04d}_{safe}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# {what}\n{disassemble(code)}\n")
    return path
