"""Inlined comprehensions (PEP 709, CPython 3.12+): find them and outline one as a function.

From 3.12 a list/set/dict comprehension inside a function is compiled into that function's own
code instead of a nested function: ``GET_ITER``, then ``LOAD_FAST_AND_CLEAR`` of each variable
the comprehension binds (saving the outer value, or NULL), the result container built under the
iterator, the loop, and after it the saved values stored back. Its body sits under a cleanup
handler that restores the saved values, so a graph break there cannot be resumed in place. On
3.11 the comprehension is a call of its own and a break inside it stops only that call; to keep
that behaviour the frontend breaks *before* the comprehension and runs it natively as an
outlined function (:func:`make_outlined_comprehension`), then resumes after the loop.

:func:`comprehension_regions` finds each region: its first ``LOAD_FAST_AND_CLEAR``, the loop
that builds the result, and the *exit*: where the exhausted loop continues, with the saved values
and the result on the stack (the code there stores them back, and the result where it goes).
:func:`outline_problem` says why a region cannot be outlined (stores to outer variables, cells,
jumps out, an enclosing ``try``/``with``). The outlined function takes the iterator and the outer
locals the region reads, runs the region's original instructions, puts the saved (unbound in the
new frame) values back, and returns the result.
"""
from __future__ import annotations

import dataclasses
import types
import weakref
from typing import Optional, Sequence

from . import opcodes
from .analysis import stack_contents
from .assemble import assemble, compute_layout
from .create import prologue
from .decode import decode
from .disasm import publish
from .instruction import ExnHandler, Instruction, create_instruction
from .resume import _check_unpassed_loads
from .transform import CO_NESTED, CO_NEWLOCALS, CO_OPTIMIZED

_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"})
_PAIR_LOADS = frozenset({"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})
_STORES = frozenset({"STORE_FAST", "DELETE_FAST", "LOAD_FAST_AND_CLEAR"})
_CELL_OPS = frozenset({"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE", "MAKE_CELL",
                       "LOAD_FROM_DICT_OR_DEREF", "COPY_FREE_VARS"})
_LEAVE = frozenset({"RETURN_VALUE", "RETURN_CONST", "YIELD_VALUE", "RAISE_VARARGS", "RERAISE"})


@dataclasses.dataclass(frozen=True)
class ComprehensionRegion:
    """One inlined comprehension of a code object, by instruction index in ``decode(code)``.

    ``start``: the first ``LOAD_FAST_AND_CLEAR``; ``exit``: the instruction the exhausted loop
    continues at (stack there: the entry stack without the iterator, then one saved value per
    name of ``cleared``, then the result); ``depth``: the stack depth at ``start`` (the iterator
    on top)."""

    start: int
    exit: int
    cleared: tuple[str, ...]
    depth: int

    def contains(self, index: int) -> bool:
        """``index`` is an instruction of the comprehension after its start (its body)."""
        return self.start < index < self.exit


_REGIONS: "weakref.WeakKeyDictionary[types.CodeType, tuple[ComprehensionRegion, ...]]" = weakref.WeakKeyDictionary()


def comprehension_regions(code: types.CodeType) -> tuple[ComprehensionRegion, ...]:
    """The inlined comprehensions of ``code``, outermost first (empty before 3.12)."""
    cached = _REGIONS.get(code)
    if cached is not None:
        return cached
    regions: list[ComprehensionRegion] = []
    if not opcodes.PY311:
        instructions = decode(code)
        index = {id(inst): i for i, inst in enumerate(instructions)}
        depths: Optional[dict[int, int]] = None
        i = 0
        while i < len(instructions):
            inst = instructions[i]
            if inst.opname != "LOAD_FAST_AND_CLEAR" or (i and instructions[i - 1].opname == "LOAD_FAST_AND_CLEAR"):
                i += 1
                continue
            j = i
            cleared: list[str] = []
            while j < len(instructions) and instructions[j].opname == "LOAD_FAST_AND_CLEAR":
                cleared.append(instructions[j].argval)
                j += 1
            k = j
            while k < len(instructions) and instructions[k].opname == "MAKE_CELL":  # variables closed over
                k += 1
            if not i or instructions[i - 1].opname != "GET_ITER" or k >= len(instructions) \
                    or instructions[k].opname != "SWAP":
                # Not the compiler's comprehension prologue (a resume function's own prologue
                # also moves its parameters with LOAD_FAST_AND_CLEAR).
                i = j
                continue
            loop = next((k for k in range(j, len(instructions)) if instructions[k].opname == "FOR_ITER"), None)
            target = instructions[loop].target if loop is not None else None
            if target is None:
                i = j
                continue
            exit_ = index[id(target)]
            if instructions[exit_].opname == "END_FOR":
                exit_ += 1
                if opcodes.PY313 and exit_ < len(instructions) and instructions[exit_].opname == "POP_TOP":
                    exit_ += 1
            if depths is None:
                contents = stack_contents(instructions)
                depths = {id(x): len(s) for x, s in ((x, contents.get(id(x))) for x in instructions) if s is not None}
            depth = depths.get(id(inst))
            if depth is not None and exit_ < len(instructions):
                regions.append(ComprehensionRegion(i, exit_, tuple(cleared), depth))
            i = j
    # By start: an enclosing comprehension comes before the ones nested in its body.
    result = tuple(sorted(regions, key=lambda r: r.start))
    _REGIONS[code] = result
    return result


def enclosing_comprehension(code: types.CodeType, index: int) -> Optional[ComprehensionRegion]:
    """The outermost inlined comprehension whose body holds instruction ``index``."""
    for region in comprehension_regions(code):
        if region.contains(index):
            return region
    return None


def comprehension_at(code: types.CodeType, index: int) -> Optional[ComprehensionRegion]:
    """The inlined comprehension that starts at instruction ``index``."""
    for region in comprehension_regions(code):
        if region.start == index:
            return region
    return None


def region_reads(code: types.CodeType, region: ComprehensionRegion) -> tuple[str, ...]:
    """Outer fast locals the comprehension reads (its own variables excluded), in order."""
    instructions = decode(code)
    names: list[str] = []
    for inst in instructions[region.start:region.exit]:
        if inst.opname in _LOADS:
            found: Sequence[str] = (inst.argval,)
        elif inst.opname in _PAIR_LOADS:
            found = inst.argval
        elif inst.opname == "STORE_FAST_LOAD_FAST":
            found = (inst.argval[1],)
        else:
            continue
        for name in found:
            if name not in region.cleared and name not in names:
                names.append(name)
    return tuple(names)


def outline_problem(code: types.CodeType, region: ComprehensionRegion) -> Optional[str]:
    """Why ``region`` cannot run as an outlined function, or None."""
    instructions = decode(code)
    body = instructions[region.start:region.exit]
    if instructions[region.start].exn is not None:
        return "it is inside a try or with block"
    own = set(id(i) for i in body)
    for inst in body:
        op = inst.opname
        if op in _CELL_OPS:
            return "it uses closure cells"
        if op in _LEAVE and op != "RERAISE":
            return f"it leaves the function ({op})"
        stored: Sequence[str] = ()
        if op in _STORES:
            stored = (inst.argval,)
        elif op == "STORE_FAST_STORE_FAST":
            stored = inst.argval
        elif op == "STORE_FAST_LOAD_FAST":
            stored = (inst.argval[0],)
        if any(name not in region.cleared for name in stored):
            return "it assigns a variable of the enclosing function (:=)"
        if inst.target is not None and id(inst.target) not in own and inst.target is not instructions[region.exit]:
            return "it jumps out of the comprehension"
    return None


def make_outlined_comprehension(code: types.CodeType, region: ComprehensionRegion,
                                reads: Sequence[str]) -> types.CodeType:
    """A function ``f(iterator, *reads)`` running the comprehension ``region`` of ``code`` and
    returning its result (see module docstring). ``reads``: the outer locals passed (a read of
    one not passed raises ``UnboundLocalError``, as in the original)."""
    problem = outline_problem(code, region)
    if problem is not None:
        raise ValueError(f"cannot outline the comprehension at offset "
                         f"{decode(code)[region.start].offset} of {code.co_qualname}: {problem}")
    instructions = decode(code)
    start = instructions[region.start]
    stop = instructions[region.exit]
    shift = region.depth - 1  # the values under the iterator are not in the new frame
    params = ["___iterator", *reads]
    varnames = params + [n for n in code.co_varnames if n not in params]
    layout = compute_layout(varnames, [], [])
    checked = set(region_reads(code, region)) - set(reads)

    ret = create_instruction("RETURN_VALUE")
    tail: list[Instruction] = []
    for name in reversed(region.cleared):  # put the saved (here: unbound) values back
        tail += [create_instruction("SWAP", arg=2), create_instruction("STORE_FAST", argval=name)]
    tail.append(ret)
    for inst in tail:
        inst.positions = stop.positions
    mapped: dict[int, Instruction] = {id(stop): tail[0]}
    copies: list[Instruction] = []
    for inst in instructions:
        copy = inst.copy()
        mapped.setdefault(id(inst), copy)
        copies.append(copy)
    handlers: dict[int, ExnHandler] = {}
    for copy in copies:
        if copy.target is not None:
            copy.target = mapped[id(copy.target)]
        if copy.exn is not None:
            key = id(copy.exn)
            if key not in handlers:
                handlers[key] = ExnHandler(mapped[id(copy.exn.target)], copy.exn.depth - shift, copy.exn.lasti)
            copy.exn = handlers[key]
    entry = prologue([], [], layout)
    jump = create_instruction("JUMP_FORWARD", target=mapped[id(start)])
    load = create_instruction("LOAD_FAST", argval="___iterator")
    load.positions = jump.positions = start.positions
    body = _check_unpassed_loads(copies[region.start:region.exit], frozenset(checked)) + tail
    # Cleanup handlers live after the function's main code: keep the ones the body reaches.
    reached = _handler_blocks(copies, body)
    new = entry + [load, jump] + body + reached
    name = f"{code.co_name}__comprehension_at_{start.offset}"
    qual_prefix = code.co_qualname.rpartition(".")[0]
    outlined = assemble(
        new, code,
        co_name=name,
        co_qualname=f"{qual_prefix}.{name}" if qual_prefix else name,
        co_argcount=len(params),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=CO_OPTIMIZED | CO_NEWLOCALS | (code.co_flags & CO_NESTED),
        co_varnames=tuple(varnames),
        co_cellvars=(),
        co_freevars=(),
    )
    publish(outlined, f"comprehension of {code.co_filename}:{start.lineno} ({code.co_qualname}), run natively")
    return outlined


def _handler_blocks(copies: list[Instruction], body: list[Instruction]) -> list[Instruction]:
    """The handler code ``body`` can reach through its exception entries: from each handler's
    first instruction up to its ``RERAISE`` (cleanup blocks are straight-line)."""
    position = {id(c): i for i, c in enumerate(copies)}
    in_body = {id(i) for i in body}
    out: list[Instruction] = []
    seen: set[int] = set()
    work = [i.exn.target for i in body if i.exn is not None]
    while work:
        head = work.pop()
        if id(head) in seen or id(head) in in_body:
            continue
        k = position[id(head)]
        while True:
            inst = copies[k]
            if id(inst) in seen:
                break
            seen.add(id(inst))
            out.append(inst)
            if inst.exn is not None:
                work.append(inst.exn.target)
            if inst.target is not None:
                work.append(inst.target)
            if inst.opname in opcodes.TERMINATORS:
                break
            k += 1
    return out


__all__ = ["ComprehensionRegion", "comprehension_at", "comprehension_regions", "enclosing_comprehension",
           "make_outlined_comprehension", "outline_problem", "region_reads"]
