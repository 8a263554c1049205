"""Version-aware facts about CPython opcodes (3.11, 3.12, 3.13) used by the bytecode layer.

This module owns the classification of opcodes: which take an argument, how many inline cache
entries follow them, which are jumps (and in which direction), which index ``co_consts``,
``co_names`` or the frame's ``localsplus`` array, and how packed arguments (``LOAD_GLOBAL``'s
push-NULL bit, ``LOAD_ATTR``'s method bit, ``COMPARE_OP``'s mask bits, 3.13's two-local
super-instructions) are split. Everything is derived from :mod:`dis`/:mod:`opcode` of the running
interpreter where CPython exposes it, so the tables cannot drift from the interpreter.

Virtual opnames: on 3.11 the conditional jumps have direction-specific opcodes
(``POP_JUMP_FORWARD_IF_TRUE``/``POP_JUMP_BACKWARD_IF_TRUE``...). The instruction model presents
them under the 3.12+ names (``POP_JUMP_IF_TRUE``...) and the assembler picks the direction from
the target's position, so tracer and code builders handle one name on every version.
"""
from __future__ import annotations

import dis
import opcode as _opcode
import sys

PY_VERSION: tuple[int, int] = sys.version_info[:2]
PY311 = PY_VERSION == (3, 11)
PY312 = PY_VERSION == (3, 12)
PY313 = PY_VERSION >= (3, 13)

if PY_VERSION < (3, 11) or PY_VERSION >= (3, 14):
    # 3.14 changes the instruction set again (LOAD_SPECIAL, LOAD_SMALL_INT...); refuse loudly
    # instead of producing wrong code.
    raise ImportError(
        f"pyjit.bytecode supports CPython 3.11-3.13, not {sys.version.split()[0]}; "
        "run pyjit under one of those versions"
    )

OPMAP: dict[str, int] = {name: op for name, op in _opcode.opmap.items() if op < 256}
OPNAME: dict[int, str] = {op: name for name, op in OPMAP.items()}
EXTENDED_ARG: int = OPMAP["EXTENDED_ARG"]
CACHE: int = OPMAP["CACHE"]

# Cache entries (2-byte code units) following each opcode.
_ice = _opcode._inline_cache_entries  # type: ignore[attr-defined]
if isinstance(_ice, dict):  # 3.13: keyed by name
    CACHE_ENTRIES: dict[str, int] = {name: int(_ice.get(name, 0)) for name in OPMAP}
else:  # 3.11/3.12: list indexed by opcode
    CACHE_ENTRIES = {name: int(_ice[op]) for name, op in OPMAP.items()}

_hasarg = set(getattr(dis, "hasarg", ()))


def has_arg(op: int) -> bool:
    """Whether the opcode uses its argument byte (otherwise the byte is written as 0)."""
    if _hasarg:
        return op in _hasarg
    return op >= _opcode.HAVE_ARGUMENT


def _names(ops: list[int]) -> frozenset[str]:
    return frozenset(OPNAME[o] for o in ops if o in OPNAME)


_jump_ops = list(dis.hasjrel) + list(dis.hasjabs) + list(getattr(dis, "hasjump", []))
# Real (encodable) jump opcodes of this version.
REAL_JUMPS: frozenset[str] = _names(_jump_ops)
BACKWARD_JUMPS: frozenset[str] = frozenset(n for n in REAL_JUMPS if "BACKWARD" in n)

# 3.11 direction-specific conditional jumps and the version-neutral name the model uses.
_DIRECTIONAL_311 = {
    "POP_JUMP_IF_TRUE": ("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE"),
    "POP_JUMP_IF_FALSE": ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE"),
    "POP_JUMP_IF_NONE": ("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE"),
    "POP_JUMP_IF_NOT_NONE": ("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE"),
}
VIRTUAL_TO_REAL: dict[str, tuple[str, str]] = _DIRECTIONAL_311 if PY311 else {}
REAL_TO_VIRTUAL: dict[str, str] = {
    real: virt for virt, pair in VIRTUAL_TO_REAL.items() for real in pair
}

# Every jump opname an Instruction may carry (real ones plus the 3.11 virtual names).
JUMPS: frozenset[str] = frozenset(
    (REAL_JUMPS - set(REAL_TO_VIRTUAL)) | set(VIRTUAL_TO_REAL)
)
UNCONDITIONAL_JUMPS: frozenset[str] = frozenset(
    {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"}
)
CONDITIONAL_JUMPS: frozenset[str] = JUMPS - UNCONDITIONAL_JUMPS
# Instructions after which control never falls through to the next instruction.
TERMINATORS: frozenset[str] = UNCONDITIONAL_JUMPS | frozenset(
    {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
)

CONST_OPS: frozenset[str] = _names(dis.hasconst)
NAME_OPS: frozenset[str] = _names(dis.hasname)
# Opcodes whose argument indexes the frame's localsplus array (locals, cells, free variables).
LOCAL_OPS: frozenset[str] = _names(dis.haslocal) | _names(dis.hasfree)
# 3.13 super-instructions packing two 4-bit localsplus indices into one argument.
PAIR_LOCAL_OPS: frozenset[str] = frozenset(
    {"LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"}
) & frozenset(OPMAP)
COMPARE_OPS: frozenset[str] = _names(dis.hascompare)

# Low bits of a name argument that carry a flag, per opname: (shift, meaning).
NAME_ARG_SHIFT: dict[str, int] = {"LOAD_GLOBAL": 1}
if not PY311:
    NAME_ARG_SHIFT["LOAD_ATTR"] = 1  # 3.12+: bit 0 = load as method (push self/NULL)
    NAME_ARG_SHIFT["LOAD_SUPER_ATTR"] = 2  # bit 0 = method, bit 1 = two-argument super
# COMPARE_OP: 3.12 stores op << 4 | branch mask; 3.13 op << 5 | to_bool bit | mask.
COMPARE_SHIFT: int = 0 if PY311 else (4 if PY312 else 5)
CMP_OPS: tuple[str, ...] = tuple(dis.cmp_op)
# 3.12+: the low bits of COMPARE_OP say which outcomes (unordered 1, less 2, greater 4,
# equal 8) mean True. Specialised forms (COMPARE_OP_INT...) answer from these bits alone, so
# a created COMPARE_OP must carry them (a zero mask would make every int compare False).
COMPARE_MASKS: dict[str, int] = (
    {} if PY311 else {"<": 2, "<=": 2 | 8, "==": 8, "!=": 1 | 2 | 4, ">": 4, ">=": 4 | 8}
)

# Opcodes that are never part of a function's logic but of its frame setup (prologue).
PROLOGUE_OPS: frozenset[str] = frozenset({"COPY_FREE_VARS", "MAKE_CELL", "RESUME"})


def real_jump_opname(opname: str, backward: bool) -> str:
    """The encodable opname of a jump given its direction (resolves 3.11 virtual names,
    and swaps JUMP_FORWARD/JUMP_BACKWARD when an edit reversed the direction)."""
    if opname in VIRTUAL_TO_REAL:
        forward, back = VIRTUAL_TO_REAL[opname]
        return back if backward else forward
    if opname == "JUMP_FORWARD" and backward:
        return "JUMP_BACKWARD"
    if opname == "JUMP_BACKWARD" and not backward:
        return "JUMP_FORWARD"
    return opname


def opcode_of(opname: str) -> int:
    """Opcode number of a (possibly virtual) opname on this interpreter."""
    if opname in OPMAP:
        return OPMAP[opname]
    if opname in VIRTUAL_TO_REAL:
        return OPMAP[VIRTUAL_TO_REAL[opname][0]]
    raise ValueError(f"{opname!r} is not an opcode of CPython {PY_VERSION[0]}.{PY_VERSION[1]}")


def cache_entries(opname: str) -> int:
    """Inline cache entries following the (real) opname."""
    return CACHE_ENTRIES.get(opname, 0)
