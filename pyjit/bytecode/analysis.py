"""Static analysis of instruction lists: control flow, stack depth, stack contents, liveness.

- :func:`stack_depths` / :func:`compute_stacksize`: the stack depth on entry to every reachable
  instruction (following jumps and exception handlers) and the maximum (``co_stacksize``).
- :func:`stack_contents`: for every reachable instruction, which instruction produced each value
  on the stack (so a break point can tell a ``for`` iterator from a ``with`` block's ``__exit__``).
- :func:`basic_blocks`: leaders, blocks and successor edges.
- :func:`live_locals`: local variables that may be read later, at any instruction.

All functions take a decoded/edited instruction list (see :mod:`.instruction`).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional, Sequence

from . import opcodes
from .instruction import Instruction
from .stack_effect import stack_effect_split

_GEN_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


class StackAnalysisError(ValueError):
    """The instruction list is inconsistent (a join with different stack depths, underflow)."""


def raw_arg(inst: Instruction) -> Optional[int]:
    """The argument as far as the stack effect needs it (index bits are irrelevant there)."""
    if inst.arg is not None:
        return inst.arg
    # Created instructions: only the packed flag bits matter for stack effects.
    return inst.flags if inst.opname in opcodes.NAME_ARG_SHIFT else inst.arg


def initial_depth(instructions: Sequence[Instruction], co_flags: int = 0) -> int:
    """Depth on entry. 3.11/3.12 generators start with the sent value accounted on the stack."""
    if not opcodes.PY313 and co_flags & _GEN_FLAGS:
        return 1
    return 0


def _successors(
    instructions: Sequence[Instruction], index_of: dict[int, int], i: int
) -> list[tuple[int, bool]]:
    """(successor index, via_jump) pairs of instruction i (exception edges excluded)."""
    inst = instructions[i]
    out = []
    if inst.target is not None:
        out.append((index_of[id(inst.target)], True))
    if inst.opname not in opcodes.TERMINATORS and i + 1 < len(instructions):
        out.append((i + 1, False))
    return out


def stack_depths(
    instructions: Sequence[Instruction], start_depth: int = 0
) -> tuple[dict[int, int], int]:
    """({id(instruction): depth on entry} for reachable instructions, maximum depth).

    Raises :class:`StackAnalysisError` when two paths reach an instruction with different depths
    or the stack underflows: such code would crash the interpreter, so it is never assembled.
    """
    n = len(instructions)
    if not n:
        return {}, start_depth
    index_of = {id(inst): i for i, inst in enumerate(instructions)}
    depth = [-1] * n
    max_depth = start_depth
    work: list[int] = []
    terminators = opcodes.TERMINATORS
    precall_ok = opcodes.PY311

    def conflict(i: int, new: int, origin: Instruction) -> StackAnalysisError:
        return StackAnalysisError(
            f"stack depth mismatch at {instructions[i]!r}: {depth[i]} vs {new} (from {origin!r})"
        )

    depth[0] = start_depth
    work.append(0)
    # Handlers are roots too, even when the code they protect is unreachable: CPython's compiler
    # sizes the stack for them (3.11 keeps handlers of try bodies it optimised away).
    for inst in instructions:
        exn = inst.exn
        if exn is not None:
            h = index_of[id(exn.target)]
            hd = exn.depth + 1 + exn.lasti
            if depth[h] < 0:
                depth[h] = hd
                work.append(h)
                max_depth = max(max_depth, hd)
            elif depth[h] != hd:
                raise conflict(h, hd, inst)
    while work:
        i = work.pop()
        d = depth[i]
        inst = instructions[i]
        opname = inst.opname
        arg = raw_arg(inst)
        target = inst.target
        if target is not None:
            pops, pushes = stack_effect_split(opname, arg, True)
            new = d - pops + pushes
            if new > max_depth:
                max_depth = new
            t = index_of[id(target)]
            if depth[t] < 0:
                depth[t] = new
                work.append(t)
            elif depth[t] != new:
                raise conflict(t, new, inst)
        pops, pushes = stack_effect_split(opname, arg, False)
        if d < pops and not (precall_ok and opname == "PRECALL"):
            raise StackAnalysisError(f"stack underflow at {inst!r}: depth {d}, pops {pops}")
        new = d - pops + pushes
        if opname in terminators:
            if target is None and new > max_depth:
                # Returns/raises: their effect still counts toward the maximum, as in CPython.
                max_depth = new
            continue
        if new > max_depth:
            max_depth = new
        if i + 1 < n:
            if depth[i + 1] < 0:
                depth[i + 1] = new
                work.append(i + 1)
            elif depth[i + 1] != new:
                raise conflict(i + 1, new, inst)
    return {id(instructions[i]): d for i, d in enumerate(depth) if d >= 0}, max_depth


def compute_stacksize(instructions: Sequence[Instruction], co_flags: int = 0) -> int:
    """``co_stacksize`` for the instruction list (the maximum depth over all paths)."""
    return stack_depths(instructions, initial_depth(instructions, co_flags))[1]


@dataclasses.dataclass(frozen=True)
class StackSlot:
    """A value on the stack: produced by ``producer`` as its ``index``-th pushed value
    (``producer`` is None for values present on entry, e.g. a generator's sent value)."""

    producer: Optional[Instruction]
    index: int = 0

    @property
    def is_with_exit(self) -> bool:
        """The bound ``__exit__`` that ``BEFORE_WITH`` leaves under the ``__enter__`` result."""
        return self.producer is not None and self.producer.opname == "BEFORE_WITH" and self.index == 0

    @property
    def is_iterator(self) -> bool:
        return self.producer is not None and self.producer.opname in ("GET_ITER", "GET_AITER")

    @property
    def is_exception_state(self) -> bool:
        """Pushed by exception handling (handler entry, PUSH_EXC_INFO): not reconstructible."""
        return self.producer is not None and (
            self.producer.opname == "PUSH_EXC_INFO" or self.index < 0
        )


def stack_contents(
    instructions: Sequence[Instruction], start_depth: int = 0
) -> dict[int, tuple[StackSlot, ...]]:
    """{id(instruction): stack on entry (bottom first)} for every reachable instruction."""
    index_of = {id(inst): i for i, inst in enumerate(instructions)}
    result: dict[int, tuple[StackSlot, ...]] = {}
    if not instructions:
        return result
    start = tuple(StackSlot(None, k) for k in range(start_depth))
    result[id(instructions[0])] = start
    work = [0]
    while work:
        i = work.pop()
        inst = instructions[i]
        stack = result[id(inst)]
        targets: list[tuple[int, tuple[StackSlot, ...]]] = []
        if inst.exn is not None:
            handler = inst.exn
            # Index -1/-2 mark the lasti/exception values the unwinder pushes.
            pushed = tuple(StackSlot(inst, -1 - k) for k in range(1 + int(handler.lasti)))
            targets.append((index_of[id(handler.target)], stack[: handler.depth] + pushed))
        arg = raw_arg(inst)
        for succ, via_jump in _successors(instructions, index_of, i):
            targets.append((succ, _apply(inst, arg, stack, via_jump)))
        for succ, new_stack in targets:
            key = id(instructions[succ])
            if key not in result:
                result[key] = new_stack
                work.append(succ)
    return result


def _apply(inst: Instruction, arg: Optional[int], stack: tuple[StackSlot, ...], jump: bool) -> tuple[StackSlot, ...]:
    if inst.opname == "COPY" and arg:
        return stack + (stack[-arg],)
    if inst.opname == "SWAP" and arg:
        items = list(stack)
        items[-1], items[-arg] = items[-arg], items[-1]
        return tuple(items)
    pops, pushes = stack_effect_split(inst.opname, arg, jump)
    if inst.opname == "FOR_ITER" and pushes == 2:
        # The iterator stays where it is (the table counts it as popped and pushed again).
        return stack + (StackSlot(inst, 1),)
    kept = stack[: len(stack) - pops] if pops else stack
    return kept + tuple(StackSlot(inst, k) for k in range(pushes))


@dataclasses.dataclass
class BasicBlock:
    """A maximal straight-line run: entered only at ``instructions[0]``."""

    instructions: list[Instruction]
    successors: list["BasicBlock"] = dataclasses.field(default_factory=list)
    # Exception handlers reachable from some instruction of the block.
    handlers: list["BasicBlock"] = dataclasses.field(default_factory=list)

    @property
    def first(self) -> Instruction:
        return self.instructions[0]

    @property
    def last(self) -> Instruction:
        return self.instructions[-1]


def basic_blocks(instructions: Sequence[Instruction]) -> list[BasicBlock]:
    """Split into basic blocks; a new block starts at jump/handler targets and after branches."""
    if not instructions:
        return []
    leaders = {0}
    index_of = {id(inst): i for i, inst in enumerate(instructions)}
    for i, inst in enumerate(instructions):
        if inst.target is not None:
            leaders.add(index_of[id(inst.target)])
        if inst.exn is not None:
            leaders.add(index_of[id(inst.exn.target)])
        if (inst.target is not None or inst.opname in opcodes.TERMINATORS) and i + 1 < len(instructions):
            leaders.add(i + 1)
    starts = sorted(leaders)
    blocks = [
        BasicBlock(list(instructions[s:e]))
        for s, e in zip(starts, starts[1:] + [len(instructions)])
    ]
    block_at = {id(b.first): b for b in blocks}
    for b in blocks:
        last = b.last
        if last.target is not None:
            b.successors.append(block_at[id(last.target)])
        if last.opname not in opcodes.TERMINATORS:
            nxt = index_of[id(last)] + 1
            if nxt < len(instructions):
                b.successors.append(block_at[id(instructions[nxt])])
        seen = set()
        for inst in b.instructions:
            if inst.exn is not None and id(inst.exn.target) not in seen:
                seen.add(id(inst.exn.target))
                b.handlers.append(block_at[id(inst.exn.target)])
    return blocks


# ---------------------------------------------------------------- liveness

# DELETE_FAST reads too: it raises UnboundLocalError when the variable is unbound.
_READS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "DELETE_FAST"})
_WRITES = frozenset({"STORE_FAST", "DELETE_FAST", "LOAD_FAST_AND_CLEAR"})


def _uses_defs(inst: Instruction) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(read names, then written names) of plain fast locals by one instruction."""
    name = inst.opname
    if name == "LOAD_FAST_LOAD_FAST":
        return tuple(inst.argval), ()
    if name == "STORE_FAST_STORE_FAST":
        return (), tuple(inst.argval)
    if name == "STORE_FAST_LOAD_FAST":
        stored, loaded = inst.argval
        # The store happens first: reading the just-stored name is not a use of the old value.
        return (() if loaded == stored else (loaded,)), (stored,)
    uses = (inst.argval,) if name in _READS else ()
    defs = (inst.argval,) if name in _WRITES and name != "LOAD_FAST_AND_CLEAR" else ()
    if name == "LOAD_FAST_AND_CLEAR":
        defs = (inst.argval,)
    return uses, defs


def live_locals_map(instructions: Sequence[Instruction]) -> dict[int, frozenset[str]]:
    """{id(instruction): fast locals live on entry}: read on some path before being written.

    Exception edges count: a handler's live variables are live at every instruction it covers
    (the write of a raising instruction does not happen). Cell and free variables are not
    tracked here (a closure may read a cell at any time): callers treat cells as always live.
    """
    n = len(instructions)
    index_of = {id(inst): i for i, inst in enumerate(instructions)}
    uses_defs = [_uses_defs(inst) for inst in instructions]
    live_in: list[frozenset[str]] = [frozenset()] * n
    changed = True
    while changed:  # iterate to a fixed point, backward order converges quickly
        changed = False
        for i in range(n - 1, -1, -1):
            inst = instructions[i]
            out: set[str] = set()
            for succ, _ in _successors(instructions, index_of, i):
                out |= live_in[succ]
            uses, defs = uses_defs[i]
            new = set(uses) | (out - set(defs))
            if inst.exn is not None:
                new |= live_in[index_of[id(inst.exn.target)]]
            frozen = frozenset(new)
            if frozen != live_in[i]:
                live_in[i] = frozen
                changed = True
    return {id(inst): live_in[i] for i, inst in enumerate(instructions)}


def live_locals(instructions: Sequence[Instruction], at: Instruction) -> frozenset[str]:
    """Fast locals live on entry to ``at`` (see :func:`live_locals_map`)."""
    return live_locals_map(instructions)[id(at)]


def jump_targets(instructions: Iterable[Instruction]) -> set[int]:
    """ids of the instructions that some jump or exception handler targets."""
    out = set()
    for inst in instructions:
        if inst.target is not None:
            out.add(id(inst.target))
        if inst.exn is not None:
            out.add(id(inst.exn.target))
    return out
