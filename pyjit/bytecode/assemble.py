"""Assembling an instruction list into a ``types.CodeType`` (:func:`assemble`).

Steps, in order:
1. fix the local-variable layout (``co_varnames``/``co_cellvars``/``co_freevars``; new fast
   locals referenced by name are appended to ``co_varnames``) and compute the localsplus index
   of every name the way CPython's code constructor does;
2. derive every non-jump argument from ``argval`` (constants and names are appended to
   ``co_consts``/``co_names`` when new; arbitrary objects are fine as constants);
3. resolve jumps: choose the encodable opname for the direction, then iterate offsets and
   ``EXTENDED_ARG`` counts until stable (a longer jump argument can push other targets away);
4. emit ``co_code`` (with zeroed inline caches), the exception table and the line table, and
   compute ``co_stacksize`` by stack analysis.

The encoders mirror CPython's assembler, so an unedited decode/assemble round trip is
byte-identical.
"""
from __future__ import annotations

import dis
import types
from typing import Any, Optional, Sequence

from . import opcodes
from .analysis import compute_stacksize
from .codetables import NO_LOCATION, LineTableWriter, Location, RawExnEntry, encode_exceptiontable
from .decode import localsplus_names
from .instruction import Instruction


class AssemblyError(ValueError):
    """The instruction list cannot be encoded (unknown local, missing jump target...)."""


def _ext_count(arg: int) -> int:
    if arg < 0:
        raise AssemblyError(f"negative instruction argument {arg}")
    if arg <= 0xFF:
        return 0
    if arg <= 0xFFFF:
        return 1
    if arg <= 0xFFFFFF:
        return 2
    return 3


def compute_layout(varnames: Sequence[str], cellvars: Sequence[str], freevars: Sequence[str]) -> dict[str, int]:
    """localsplus index of every name, following CPython's code constructor: varnames first,
    cell variables that are also varnames share that slot, other cells next, free vars last.
    (A name that is both a cell and a free variable, as in 3.12 class-body comprehensions, maps
    to its first slot here; :func:`layout_slots` lists all of them.)"""
    index: dict[str, int] = {}
    for i, name in enumerate(layout_slots(varnames, cellvars, freevars)):
        index.setdefault(name, i)
    return index


def layout_slots(varnames: Sequence[str], cellvars: Sequence[str], freevars: Sequence[str]) -> list[str]:
    """Names of the localsplus slots in order (a name may occur twice: cell and free)."""
    slots = list(varnames)
    known = set(varnames)
    for name in cellvars:
        if name not in known:
            slots.append(name)
    slots.extend(freevars)
    return slots


_FAST_OPS = frozenset(
    {"LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"}
) | opcodes.PAIR_LOCAL_OPS


class _Tables:
    """co_consts / co_names under construction, with lookups that reuse existing entries."""

    def __init__(self, consts: Sequence[Any], names: Sequence[str]) -> None:
        self.consts = list(consts)
        self.names = list(names)
        self._name_index: dict[str, int] = {}
        for i, n in enumerate(self.names):
            self._name_index.setdefault(n, i)
        self._const_ids: dict[int, int] = {}
        for i, c in enumerate(self.consts):
            self._const_ids.setdefault(id(c), i)

    def const(self, value: Any, hint: Optional[int]) -> int:
        if hint is not None and hint < len(self.consts) and self.consts[hint] is value:
            return hint
        i = self._const_ids.get(id(value))
        if i is not None:
            return i
        # Reuse equal constants of the same exact type for simple immutables (never for floats:
        # 0.0 == -0.0 would merge distinct constants).
        if type(value) in (int, str, bytes, bool, type(None)):
            for j, c in enumerate(self.consts):
                if type(c) is type(value) and c == value:
                    return j
        self.consts.append(value)
        self._const_ids[id(value)] = len(self.consts) - 1
        return len(self.consts) - 1

    def name(self, value: str) -> int:
        i = self._name_index.get(value)
        if i is None:
            self.names.append(value)
            i = self._name_index[value] = len(self.names) - 1
        return i


def _split_pair(inst: Instruction) -> list[Instruction]:
    """3.13 two-local super-instruction -> two plain instructions (when an index is >= 16)."""
    first_name, second_name = {
        "LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
        "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
        "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST"),
    }[inst.opname]
    a, b = inst.argval
    second = Instruction(second_name, opcodes.OPMAP[second_name], None, b, positions=inst.positions, exn=inst.exn)
    # The first keeps the object identity so jumps that target the pair stay valid.
    inst.opname, inst.opcode, inst.arg, inst.argval = first_name, opcodes.OPMAP[first_name], None, a
    return [inst, second]


def assemble(instructions: list[Instruction], template: types.CodeType, **code_fields: Any) -> types.CodeType:
    """Build a code object from ``instructions`` using ``template`` for everything not given.

    ``code_fields`` are ``code.replace`` keywords (``co_name=``, ``co_varnames=``,
    ``co_argcount=``...). ``co_code``, ``co_linetable``, ``co_exceptiontable``,
    ``co_stacksize`` and ``co_nlocals`` are always computed. Instructions with ``arg=None``
    take their argument from ``argval``. The list may be modified in place (3.13
    super-instructions whose locals moved beyond index 15 are split) and every instruction's
    ``offset`` is set to its offset in the new code.
    """
    fields = dict(code_fields)
    varnames = list(fields.pop("co_varnames", template.co_varnames))
    cellvars = list(fields.pop("co_cellvars", template.co_cellvars))
    freevars = list(fields.pop("co_freevars", template.co_freevars))
    tables = _Tables(fields.pop("co_consts", template.co_consts), fields.pop("co_names", template.co_names))
    firstlineno = fields.get("co_firstlineno", template.co_firstlineno)
    flags = fields.get("co_flags", template.co_flags)
    for computed in ("co_code", "co_linetable", "co_exceptiontable", "co_stacksize", "co_nlocals"):
        fields.pop(computed, None)

    # 1. layout: unknown fast locals become new plain locals.
    known = set(varnames) | set(cellvars) | set(freevars)
    for inst in instructions:
        if inst.opname in _FAST_OPS:
            for name in inst.argval if inst.opname in opcodes.PAIR_LOCAL_OPS else (inst.argval,):
                if name not in known:
                    if not isinstance(name, str):
                        raise AssemblyError(f"{inst!r}: local variable name must be a str, not {name!r}")
                    varnames.append(name)
                    known.add(name)
    slots = layout_slots(varnames, cellvars, freevars)
    layout = compute_layout(varnames, cellvars, freevars)
    # Names with two slots (cell and free): Instruction.flags picks the occurrence.
    duplicated = {n: [i for i, m in enumerate(slots) if m == n] for n in set(slots) if slots.count(n) > 1}

    # 2. arguments of non-jump instructions.
    if opcodes.PAIR_LOCAL_OPS:
        expanded: list[Instruction] = []
        for inst in instructions:
            if inst.opname in opcodes.PAIR_LOCAL_OPS and any(layout[n] >= 16 for n in inst.argval):
                expanded.extend(_split_pair(inst))
            else:
                expanded.append(inst)
        instructions[:] = expanded
    for inst in instructions:
        inst.opcode = opcodes.opcode_of(inst.opname)
        if inst.opname in opcodes.JUMPS:
            if inst.target is None:
                raise AssemblyError(f"{inst!r} has no jump target")
            continue
        _encode_arg(inst, tables, layout, duplicated)

    # 3. jumps and EXTENDED_ARG, to a fixed point.
    position = {id(inst): i for i, inst in enumerate(instructions)}
    _check_for_iter_targets(instructions, position)
    real_names = [inst.opname for inst in instructions]  # encodable opname per instruction
    jumps: list[tuple[int, int, bool, int]] = []  # (index, target index, backward, caches)
    for i, inst in enumerate(instructions):
        if inst.target is None:
            continue
        t = position.get(id(inst.target))
        if t is None:
            raise AssemblyError(f"{inst!r} jumps to an instruction that is not in the list")
        backward = t <= i
        real = opcodes.real_jump_opname(inst.opname, backward)
        if (real in opcodes.BACKWARD_JUMPS) != backward:
            raise AssemblyError(
                f"{inst.opname} cannot jump {'backward' if backward else 'forward'} on "
                f"CPython {opcodes.PY_VERSION[0]}.{opcodes.PY_VERSION[1]}; add a JUMP_BACKWARD trampoline"
            )
        real_names[i] = real
        if inst.opname not in opcodes.VIRTUAL_TO_REAL:
            inst.opname = real
        inst.opcode = opcodes.OPMAP[real]
        if inst.arg is None:
            inst.arg = 0
        jumps.append((i, t, backward, opcodes.CACHE_ENTRIES.get(real, 0)))
    caches = [opcodes.CACHE_ENTRIES.get(name, 0) for name in real_names]
    sizes = [_ext_count(inst.arg or 0) + 1 + c for inst, c in zip(instructions, caches)]
    while True:
        starts = []
        total = 0
        for size in sizes:
            starts.append(total)
            total += size
        changed = False
        for i, t, backward, cache in jumps:
            end = starts[i] + sizes[i]
            arg = end - starts[t] if backward else starts[t] - end
            instructions[i].arg = arg
            new_size = _ext_count(arg) + 1 + cache
            if new_size != sizes[i]:
                sizes[i] = new_size
                changed = True
        if not changed:
            break

    # 4. emit.
    code = bytearray()
    lines = LineTableWriter(firstlineno, merge=not opcodes.PY311)
    exn_entries: list[RawExnEntry] = []
    run_key: Optional[tuple[int, int, bool]] = None
    run_start = 0
    run_owner = 0
    opmap = opcodes.OPMAP
    ext_op = opcodes.EXTENDED_ARG
    for i, inst in enumerate(instructions):
        arg = inst.arg or 0
        if arg > 0xFF:
            for k in range(_ext_count(arg), 0, -1):
                code += bytes((ext_op, (arg >> (8 * k)) & 0xFF))
        inst.offset = len(code)
        code += bytes((opmap[real_names[i]], arg & 0xFF))
        if caches[i]:
            code += bytes(2 * caches[i])
        lines.add(_location(inst.positions), sizes[i])
        key = inst.exn.key() if inst.exn is not None else None
        if key != run_key:
            if run_key is not None:
                exn_entries.append(_exn_entry(instructions[run_owner], run_start, starts[i], starts, position))
            run_key, run_start, run_owner = key, starts[i], i
    if run_key is not None:
        exn_entries.append(_exn_entry(instructions[run_owner], run_start, total, starts, position))

    stacksize = compute_stacksize(instructions, flags)
    result = template.replace(
        co_code=bytes(code),
        co_consts=tuple(tables.consts),
        co_names=tuple(tables.names),
        co_varnames=tuple(varnames),
        co_cellvars=tuple(cellvars),
        co_freevars=tuple(freevars),
        co_nlocals=len(varnames),
        co_stacksize=stacksize,
        co_linetable=lines.finish(),
        co_exceptiontable=encode_exceptiontable(exn_entries),
        **fields,
    )
    actual = localsplus_names(result)
    if actual != slots:  # our index computation must match CPython's constructor exactly
        raise AssemblyError(f"local layout mismatch: CPython {actual} vs computed {slots}")
    return result


def _location(positions: Optional[dis.Positions]) -> Location:
    if positions is None:
        return NO_LOCATION
    return (positions.lineno, positions.end_lineno, positions.col_offset, positions.end_col_offset)


def _exn_entry(owner: Instruction, start: int, end: int, starts: list[int], position: dict[int, int]) -> RawExnEntry:
    exn = owner.exn
    assert exn is not None
    if id(exn.target) not in position:
        raise AssemblyError(f"exception handler of {owner!r} is not in the instruction list")
    return RawExnEntry(start, end, starts[position[id(exn.target)]], exn.depth, exn.lasti)


def _encode_arg(
    inst: Instruction, tables: _Tables, layout: dict[str, int], duplicated: dict[str, list[int]]
) -> None:
    """Set ``inst.arg`` from ``inst.argval`` for instructions that reference tables."""
    name = inst.opname
    if name in opcodes.CONST_OPS:
        inst.arg = tables.const(inst.argval, inst.arg)
    elif name in opcodes.NAME_OPS:
        shift = opcodes.NAME_ARG_SHIFT.get(name, 0)
        inst.arg = (tables.name(inst.argval) << shift) | inst.flags
    elif name in opcodes.PAIR_LOCAL_OPS:
        a, b = inst.argval
        inst.arg = (layout[a] << 4) | layout[b]
    elif name in opcodes.LOCAL_OPS:
        if inst.argval not in layout:
            raise AssemblyError(
                f"{inst!r}: {inst.argval!r} is not a local, cell or free variable of the code"
            )
        if inst.argval in duplicated:
            inst.arg = duplicated[inst.argval][inst.flags]
        else:
            inst.arg = layout[inst.argval]
    elif name in opcodes.COMPARE_OPS:
        if inst.argval in opcodes.CMP_OPS:
            inst.arg = (opcodes.CMP_OPS.index(inst.argval) << opcodes.COMPARE_SHIFT) | inst.flags
    elif not opcodes.has_arg(inst.opcode):
        inst.arg = None
    elif inst.arg is None:
        if isinstance(inst.argval, int):
            inst.arg = inst.argval
        else:
            raise AssemblyError(f"{inst!r} needs an integer argument")


def _check_for_iter_targets(instructions: Sequence[Instruction], position: dict[int, int]) -> None:
    """3.12+: an exhausted FOR_ITER jumps *past* its target END_FOR (3.13: and the POP_TOP
    after it), so the target must be exactly that sequence or execution lands mid-way."""
    if opcodes.PY311:
        return
    for inst in instructions:
        if inst.opname != "FOR_ITER" or inst.target is None:
            continue
        i = position.get(id(inst.target))
        ok = i is not None and instructions[i].opname == "END_FOR"
        if ok and opcodes.PY313:
            ok = i + 1 < len(instructions) and instructions[i + 1].opname == "POP_TOP"
        if not ok:
            raise AssemblyError(
                f"{inst!r} must target END_FOR{' followed by POP_TOP' if opcodes.PY313 else ''}: "
                "CPython skips that sequence when the loop ends; insert code after it instead"
            )
