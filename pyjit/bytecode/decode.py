"""Decoding a code object into the editable instruction model (:func:`decode`).

Reads ``co_code`` unit by unit, folds ``EXTENDED_ARG`` prefixes into the argument, skips inline
caches, turns arguments into ``argval`` (constants, names, local names, compare operators),
resolves jump offsets to target instructions, and attaches line-table positions and
exception-table handlers to every instruction.
"""
from __future__ import annotations

import bisect
import dis
import types

from . import opcodes
from .codetables import decode_exceptiontable, decode_linetable, iter_units
from .instruction import ExnHandler, Instruction


# Per-opcode lookup tables (decode runs once per instruction of every traced function).
_EXTENDED_ARG = opcodes.EXTENDED_ARG
_OPNAME: list = [opcodes.OPNAME.get(op) for op in range(256)]
_CACHES = [opcodes.cache_entries(name) if name else 0 for name in _OPNAME]
_HAS_ARG = [opcodes.has_arg(op) for op in range(256)]
_IS_JUMP = [name in opcodes.REAL_JUMPS for name in _OPNAME]
_PLAIN_ARG = [
    not (
        name in opcodes.CONST_OPS
        or name in opcodes.NAME_OPS
        or name in opcodes.LOCAL_OPS
        or name in opcodes.COMPARE_OPS
    )
    for name in _OPNAME
]


def localsplus_names(code: types.CodeType) -> list[str]:
    """Names of the frame's localsplus slots in index order (locals, cells, free variables).

    Uses CPython's own mapping (``_varname_from_oparg``), which accounts for arguments that are
    also cells sharing one slot.
    """
    names = []
    upper = len(code.co_varnames) + len(code.co_cellvars) + len(code.co_freevars)
    for i in range(upper):
        try:
            names.append(code._varname_from_oparg(i))  # type: ignore[attr-defined]
        except IndexError:
            break
    return names


def decode_argval(
    opname: str, arg: int, code: types.CodeType, local_names: list[str], duplicated: frozenset[str] = frozenset()
) -> tuple[object, int]:
    """(argval, flags) of a non-jump instruction's raw argument."""
    if opname in opcodes.CONST_OPS:
        return code.co_consts[arg], 0
    if opname in opcodes.NAME_OPS:
        shift = opcodes.NAME_ARG_SHIFT.get(opname, 0)
        return code.co_names[arg >> shift], arg & ((1 << shift) - 1)
    if opname in opcodes.PAIR_LOCAL_OPS:
        return (local_names[arg >> 4], local_names[arg & 15]), 0
    if opname in opcodes.LOCAL_OPS:
        name = local_names[arg]
        # A name with two slots (cell and free, 3.12 class-body comprehensions): flags records
        # which occurrence the instruction uses.
        return name, (local_names[:arg].count(name) if name in duplicated else 0)
    if opname in opcodes.COMPARE_OPS:
        shift = opcodes.COMPARE_SHIFT
        return opcodes.CMP_OPS[arg >> shift], arg & ((1 << shift) - 1)
    return arg, 0


def decode(code: types.CodeType) -> list[Instruction]:
    """The instructions of ``code`` (no caches, no ``EXTENDED_ARG``), with targets, positions
    and exception handlers resolved. ``Instruction.offset`` is the byte offset in ``co_code``."""
    raw = code.co_code
    local_names = localsplus_names(code)
    duplicated = frozenset(n for n in set(local_names) if local_names.count(n) > 1)
    instructions: list[Instruction] = []
    by_start: dict[int, Instruction] = {}  # start offset (incl. EXTENDED_ARG prefix) -> instr
    jump_offsets: list[tuple[Instruction, int]] = []
    locs = list(iter_units(decode_linetable(code.co_linetable, code.co_firstlineno)))
    positions: dict[tuple, dis.Positions] = {}  # one Positions object per distinct location
    no_location = (None, None, None, None)

    i = 0
    ext = 0
    start = 0
    n = len(raw)
    n_locs = len(locs)
    while i < n:
        op = raw[i]
        oparg = raw[i + 1] | ext
        if op == _EXTENDED_ARG:
            ext = oparg << 8
            i += 2
            continue
        ext = 0
        name = _OPNAME[op]
        if name is None:
            raise ValueError(f"unknown opcode {op} at offset {i} in {code.co_name} ({code.co_filename})")
        caches = _CACHES[op]
        arg = oparg if _HAS_ARG[op] else None
        loc = locs[i >> 1] if (i >> 1) < n_locs else no_location
        pos = positions.get(loc)
        if pos is None:
            pos = positions[loc] = dis.Positions(*loc)
        inst = Instruction(name, op, arg, None, None, pos, None, i)
        if _IS_JUMP[op]:
            end = i + 2 + 2 * caches
            delta = 2 * (oparg if arg is not None else 0)
            jump_offsets.append((inst, end - delta if name in opcodes.BACKWARD_JUMPS else end + delta))
            if name in opcodes.REAL_TO_VIRTUAL:  # 3.11: present one name for both directions
                inst.opname = opcodes.REAL_TO_VIRTUAL[name]
        elif arg is not None:
            if _PLAIN_ARG[op]:
                inst.argval = arg
            else:
                inst.argval, inst.flags = decode_argval(name, arg, code, local_names, duplicated)
        instructions.append(inst)
        by_start[start] = inst
        i += 2 + 2 * caches
        start = i

    for inst, target_offset in jump_offsets:
        target = by_start.get(target_offset)
        if target is None:
            raise ValueError(
                f"jump at offset {inst.offset} of {code.co_name} ({code.co_filename}) "
                f"targets offset {target_offset}, which starts no instruction"
            )
        inst.target = target
        inst.argval = target.offset

    entries = decode_exceptiontable(code.co_exceptiontable)
    if entries:
        handlers: dict[tuple[int, int, bool], ExnHandler] = {}
        starts = sorted(by_start)
        for entry in entries:
            target = by_start.get(entry.target * 2)
            if target is None:
                raise ValueError(
                    f"exception handler of {code.co_name} ({code.co_filename}) targets offset "
                    f"{entry.target * 2}, which starts no instruction"
                )
            key = (entry.target, entry.depth, entry.lasti)
            handler = handlers.get(key)
            if handler is None:
                handler = handlers[key] = ExnHandler(target, entry.depth, entry.lasti)
            lo = bisect.bisect_left(starts, entry.start * 2)
            hi = bisect.bisect_left(starts, entry.end * 2)
            for s in starts[lo:hi]:
                by_start[s].exn = handler
    return instructions
