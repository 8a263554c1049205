"""Resume functions: continue a function at an instruction, after a graph break.

:func:`make_resume_code` turns an original code object and a break point into a new code object
whose parameters are (stack values..., live locals...) and which continues with the original's
semantics from the break point on. Construction, always from the *original* code (so nested
breaks never compound):

1. decode the original and drop its prologue (``COPY_FREE_VARS``/``MAKE_CELL``/``RESUME``);
2. prepend a new prologue: the same frame setup, then push the stack values from the
   parameters (``PUSH_NULL`` for NULL slots, ``BEFORE_WITH; POP_TOP`` for ``with`` blocks whose
   context manager is passed in: the resume code re-enters the block and leaves a fresh
   ``__exit__`` where the original had one), install passed cells, and jump to the break point;
3. keep the original instructions, exception table and positions (so ``for``/``with``/``try``
   machinery and tracebacks behave as in the original), dropping what is unreachable;
4. reads of live locals the caller did not pass become ``LOAD_FAST_CHECK`` (3.12+), so a
   missing variable raises ``UnboundLocalError`` instead of crashing the interpreter.

Parameters (:func:`resume_parameter_names`): stack slots are ``___stack0``...; a live local keeps
its own name. A cell variable is passed as its *cell object* (closures created before the break
share it with the resume code): its parameter slot is the cell slot and the prologue does not
wrap it again. Cell variables not passed start as fresh empty cells. When the original can use
zero-argument ``super()`` (``__class__`` is a free variable), its first argument is moved to the
front of the parameters, because ``super()`` reads the frame's first slot.

Results are cached by (original code, offset, stack depth, live locals, NULL slots, context slots).
"""
from __future__ import annotations

import dataclasses
import dis
import types
import weakref
from typing import Optional, Sequence

from ..errors import PyjitError
from . import opcodes
from .analysis import StackSlot, live_locals_map, stack_contents
from .assemble import assemble, compute_layout
from .create import prologue
from .decode import decode
from .disasm import publish
from .instruction import Instruction, create_instruction
from .transform import CO_GENERATOR_FLAGS, CO_NESTED, CO_NEWLOCALS, CO_OPTIMIZED

STACK_PREFIX = "___stack"


class ResumeError(PyjitError):
    """A resume function cannot be built for this break point (the message says why and where)."""


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """What a break point needs: the stack on entry and the variables to pass."""

    code: types.CodeType
    instruction: Instruction
    stack: tuple[StackSlot, ...]
    live_locals: frozenset[str]  # plain fast locals that may be read from here on
    cellvars: tuple[str, ...]  # cell variables (passed as cells when listed in live_locals)
    unsupported_reason: Optional[str] = None

    @property
    def stack_depth(self) -> int:
        return len(self.stack)

    @property
    def supported(self) -> bool:
        return self.unsupported_reason is None

    @property
    def context_slots(self) -> tuple[int, ...]:
        """Stack positions holding a ``with`` block's ``__exit__``."""
        return tuple(i for i, slot in enumerate(self.stack) if slot.is_with_exit)

    @property
    def null_slots(self) -> tuple[int, ...]:
        """Stack positions that may hold NULL (pushed for a pending call)."""
        return tuple(i for i, slot in enumerate(self.stack) if _may_be_null(slot))


def _may_be_null(slot: StackSlot) -> bool:
    p = slot.producer
    if p is None:
        return False
    if p.opname in ("PUSH_NULL", "LOAD_FAST_AND_CLEAR"):  # (the latter: an unbound comprehension variable)
        return True
    if p.opname == "LOAD_GLOBAL" and p.flags & 1:
        # 3.11/3.12 push NULL below the global, 3.13 above it.
        return slot.index == (1 if opcodes.PY313 else 0)
    if p.opname == "LOAD_METHOD" or (p.opname in ("LOAD_ATTR", "LOAD_SUPER_ATTR") and p.flags & 1):
        # Method loads push (method, self) or (NULL, attribute); 3.13 (attribute, NULL).
        return slot.index == (1 if opcodes.PY313 else 0)
    return False


def _where(code: types.CodeType, inst: Optional[Instruction]) -> str:
    line = inst.lineno if inst is not None and inst.lineno is not None else code.co_firstlineno
    return f"{code.co_filename}:{line} in {code.co_qualname}"


def _find(instructions: Sequence[Instruction], offset: int, code: types.CodeType) -> Instruction:
    for inst in instructions:
        if inst.offset == offset:
            return inst
    raise ResumeError(
        f"offset {offset} starts no instruction of {code.co_qualname} ({code.co_filename}); "
        "pass an offset from pyjit.bytecode.decode(code)"
    )


def resume_point(code: types.CodeType, offset: int) -> ResumePoint:
    """Analyse the break point at ``offset`` of ``code`` (stack contents, live variables)."""
    instructions = decode(code)
    inst = _find(instructions, offset, code)
    contents = stack_contents(instructions)
    if id(inst) not in contents:
        stack: tuple[StackSlot, ...] = ()
        reason: Optional[str] = "the instruction is unreachable"
    else:
        stack = contents[id(inst)]
        reason = unsupported_reason(code, instructions, inst, stack)
    live = live_locals_map(instructions).get(id(inst), frozenset()) | _super_self(code)
    return ResumePoint(code, inst, stack, live, tuple(code.co_cellvars), reason)


def _super_self(code: types.CodeType) -> frozenset[str]:
    """Zero-argument ``super()`` reads the frame's first slot without any LOAD_FAST: in a code
    object that can call it (``__class__`` is free), the first argument is always live."""
    if "__class__" in code.co_freevars and code.co_argcount:
        return frozenset({code.co_varnames[0]})
    return frozenset()


def unsupported_reason(
    code: types.CodeType, instructions: Sequence[Instruction], inst: Instruction, stack: tuple[StackSlot, ...]
) -> Optional[str]:
    """Why resuming at ``inst`` (with ``stack`` on entry) is impossible, or None."""
    if code.co_flags & CO_GENERATOR_FLAGS:
        return "generators and coroutines are not resumable"
    if not code.co_flags & CO_OPTIMIZED:
        return "module and class bodies are not resumable"
    if inst.opname in opcodes.PROLOGUE_OPS:
        return "the frame prologue is not a resumable point"
    for slot in stack:
        if slot.is_exception_state:
            return "inside an exception handler (the active exception cannot be rebuilt)"
    if inst.opname == "END_FOR" or (opcodes.PY313 and inst.opname == "POP_TOP" and _previous(instructions, inst) == "END_FOR"):
        # FOR_ITER (3.12+) jumps over these when the iterator is exhausted: they are never
        # executed as a step of their own.
        return "loop-exit bookkeeping skipped by FOR_ITER"
    return None


def _previous(instructions: Sequence[Instruction], inst: Instruction) -> Optional[str]:
    for prev, cur in zip(instructions, instructions[1:]):
        if cur is inst:
            return prev.opname
    return None


# Keyed by the identity of the original (code objects compare equal by contents: a clone made for
# a second backend must get resume functions of its own, with their own cache entries).
_CACHE: "dict[int, tuple[weakref.ref[types.CodeType], dict[tuple, types.CodeType]]]" = {}


def _per_code(code: types.CodeType) -> "dict[tuple, types.CodeType]":
    entry = _CACHE.get(id(code))
    if entry is None or entry[0]() is not code:
        key = id(code)
        entry = (weakref.ref(code, lambda _ref, key=key: _CACHE.pop(key, None)), {})
        _CACHE[key] = entry
    return entry[1]


def resume_cache_size(code: Optional[types.CodeType] = None) -> int:
    """Number of cached resume code objects (for ``code`` or in total)."""
    if code is not None:
        entry = _CACHE.get(id(code))
        return len(entry[1]) if entry is not None and entry[0]() is code else 0
    return sum(len(v) for _ref, v in _CACHE.values())


def resume_parameter_names(
    original: types.CodeType,
    stack_depth: int,
    live_locals: Sequence[str],
    null_slots: Sequence[int] = (),
) -> list[str]:
    """Parameter names of a resume function of ``original``, in calling order: the stack
    values (bottom first, NULL slots skipped) then ``live_locals`` in the given order, except
    that a passed first argument of a method using zero-argument ``super()`` comes first."""
    nulls = set(null_slots)
    names = [f"{STACK_PREFIX}{i}" for i in range(stack_depth) if i not in nulls]
    names += list(live_locals)
    if "__class__" in original.co_freevars and original.co_argcount and original.co_varnames[0] in live_locals:
        first = original.co_varnames[0]
        names.remove(first)
        names.insert(0, first)
    return names


def make_resume_code(
    original: types.CodeType,
    offset: int,
    stack_depth: int,
    live_locals: Sequence[str],
    *,
    null_slots: Sequence[int] = (),
    context_slots: Sequence[int] = (),
    iter_slots: Sequence[int] = (),
) -> types.CodeType:
    """Code that continues ``original`` at the instruction at ``offset`` (cached).

    Call it with the stack values (bottom first; skip ``null_slots``; for ``context_slots``
    pass the *context manager*, which is entered again; for ``iter_slots`` pass an iterable
    whose iterator the prologue makes, e.g. the tuple of a ``for`` loop's remaining items)
    followed by the values of
    ``live_locals`` in that order (cell objects for cell variables), with the original
    function's globals and closure. Raises :class:`ResumeError` for unsupported points.
    """
    key = (offset, stack_depth, tuple(live_locals), tuple(sorted(null_slots)), tuple(sorted(context_slots)),
           tuple(sorted(iter_slots)))
    per_code = _per_code(original)
    cached = per_code.get(key)
    if cached is not None:
        return cached
    code = _build(original, offset, stack_depth, tuple(live_locals), frozenset(null_slots), frozenset(context_slots),
                  frozenset(iter_slots))
    per_code[key] = code
    publish(code, f"resume function for {original.co_filename}:{_line_at(original, offset)} ({original.co_qualname})")
    return code


def _line_at(code: types.CodeType, offset: int) -> Optional[int]:
    for start, _end, line in code.co_lines():
        if start <= offset < _end:
            return line
    return None


def _build(
    original: types.CodeType,
    offset: int,
    stack_depth: int,
    live_locals: tuple[str, ...],
    null_slots: frozenset[int],
    context_slots: frozenset[int],
    iter_slots: frozenset[int] = frozenset(),
) -> types.CodeType:
    instructions = decode(original)
    target = _find(instructions, offset, original)
    contents = stack_contents(instructions)
    if id(target) not in contents:
        raise ResumeError(f"cannot resume at {_where(original, target)}: the instruction is unreachable")
    stack = contents[id(target)]
    reason = unsupported_reason(original, instructions, target, stack)
    if reason is not None:
        raise ResumeError(f"cannot resume at {_where(original, target)}: {reason}")
    if len(stack) != stack_depth:
        raise ResumeError(
            f"cannot resume at {_where(original, target)}: the stack holds {len(stack)} values "
            f"there, not {stack_depth}"
        )
    for i in context_slots:
        if not (0 <= i < stack_depth and stack[i].is_with_exit):
            raise ResumeError(f"stack slot {i} at {_where(original, target)} is not a with block's __exit__")
    if iter_slots & (null_slots | context_slots) or any(not 0 <= i < stack_depth for i in iter_slots):
        raise ResumeError(f"iter_slots {sorted(iter_slots)} at {_where(original, target)} are not plain stack slots")
    for i in null_slots:
        # A NULL where the original has a value would crash the interpreter: only slots that
        # can hold NULL there (pushed for a pending call) may be declared.
        if not (0 <= i < stack_depth and _may_be_null(stack[i])):
            raise ResumeError(f"stack slot {i} at {_where(original, target)} never holds NULL")
    if len(set(live_locals)) != len(live_locals):
        raise ResumeError(f"live_locals {live_locals!r} names a variable twice")
    free = set(original.co_freevars)
    cells = set(original.co_cellvars)
    for name in live_locals:
        if name in free:
            raise ResumeError(f"{name!r} is a free variable of {original.co_qualname}: it comes from the closure, do not pass it")
        if name not in cells and name not in original.co_varnames:
            raise ResumeError(f"{name!r} is not a local variable of {original.co_qualname}")
    live_at_target = live_locals_map(instructions)[id(target)]
    for name in _super_self(original):
        if name not in live_locals:
            raise ResumeError(
                f"cannot resume at {_where(original, target)} without {name!r}: zero-argument "
                "super() reads the first argument; pass it (resume_point() lists it as live)"
            )

    params = resume_parameter_names(original, stack_depth, live_locals, tuple(null_slots))
    varnames = params + [n for n in original.co_varnames if n not in params]
    cellvars = list(original.co_cellvars)
    freevars = list(original.co_freevars)
    layout = compute_layout(varnames, cellvars, freevars)
    passed_cells = [n for n in live_locals if n in cells]

    # Body: the original without its prologue.
    first = 0
    while instructions[first].opname in opcodes.PROLOGUE_OPS:
        first += 1
    body = instructions[first:]
    passed = set(live_locals)
    if not opcodes.PY311:
        body = _check_unpassed_loads(body, live_at_target - passed)

    pos = target.positions
    # Passed cells arrive as cell objects in their (argument) slots: no MAKE_CELL for them.
    new: list[Instruction] = prologue(freevars, [c for c in cellvars if c not in passed_cells], layout)
    new[-1].positions = dis.Positions(original.co_firstlineno, original.co_firstlineno, None, None)
    restore: list[Instruction] = []
    clear: list[str] = []
    for i in range(stack_depth):
        if i in null_slots:
            restore.append(create_instruction("PUSH_NULL"))
            continue
        name = f"{STACK_PREFIX}{i}"
        restore.append(_load_and_clear(name, clear))
        if i in iter_slots:
            restore.append(create_instruction("GET_ITER"))
        if i in context_slots:
            restore.append(create_instruction("BEFORE_WITH"))
            restore.append(create_instruction("POP_TOP"))  # the __enter__ result (the with target was already bound)
    restore += [create_instruction("DELETE_FAST", argval=n) for n in clear]
    restore.append(create_instruction("JUMP_FORWARD", target=target))
    for inst in restore:
        inst.positions = pos
    new += restore
    new += body
    new = _reachable(new)

    name = f"{original.co_name}__resume_at_{offset}"
    qual_prefix = original.co_qualname.rpartition(".")[0]
    fields = dict(
        co_name=name,
        co_qualname=f"{qual_prefix}.{name}" if qual_prefix else name,
        co_argcount=len(params),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=CO_OPTIMIZED | CO_NEWLOCALS | (original.co_flags & CO_NESTED),
        co_varnames=tuple(varnames),
        co_cellvars=tuple(cellvars),
        co_freevars=tuple(freevars),
    )
    return assemble(new, original, **fields)


def _load_and_clear(name: str, clear: list[str]) -> Instruction:
    """Push parameter ``name`` and drop the frame's own reference (values such as the loop
    iterator must not be kept alive by the parameter slot)."""
    if opcodes.PY311:
        clear.append(name)
        return create_instruction("LOAD_FAST", argval=name)
    return create_instruction("LOAD_FAST_AND_CLEAR", argval=name)


def _check_unpassed_loads(body: list[Instruction], unpassed: frozenset[str]) -> list[Instruction]:
    """Turn unchecked reads of live-but-not-passed locals into checked reads (3.12+)."""
    if not unpassed:
        return body
    out: list[Instruction] = []
    for inst in body:
        if inst.opname == "LOAD_FAST" and inst.argval in unpassed:
            inst.opname = "LOAD_FAST_CHECK"
            inst.arg = None
        elif inst.opname == "LOAD_FAST_LOAD_FAST" and set(inst.argval) & unpassed:
            a, b = inst.argval
            inst.opname, inst.argval, inst.arg = "LOAD_FAST_CHECK", a, None
            second = create_instruction("LOAD_FAST_CHECK", argval=b)
            second.positions, second.exn = inst.positions, inst.exn
            out += [inst, second]
            continue
        elif inst.opname == "STORE_FAST_LOAD_FAST" and inst.argval[1] in unpassed and inst.argval[1] != inst.argval[0]:
            stored, loaded = inst.argval
            inst.opname, inst.argval, inst.arg = "STORE_FAST", stored, None
            second = create_instruction("LOAD_FAST_CHECK", argval=loaded)
            second.positions, second.exn = inst.positions, inst.exn
            out += [inst, second]
            continue
        out.append(inst)
    return out


def _reachable(instructions: list[Instruction]) -> list[Instruction]:
    """The instructions reachable from the first one (jumps, fall-through, handlers), in order."""
    index_of = {id(inst): i for i, inst in enumerate(instructions)}
    seen = [False] * len(instructions)
    work = [0]
    while work:
        i = work.pop()
        if i >= len(instructions) or seen[i]:
            continue
        seen[i] = True
        inst = instructions[i]
        if inst.target is not None:
            work.append(index_of[id(inst.target)])
        if inst.exn is not None:
            work.append(index_of[id(inst.exn.target)])
        if inst.opname not in opcodes.TERMINATORS:
            work.append(i + 1)
    return [inst for i, inst in enumerate(instructions) if seen[i]]
