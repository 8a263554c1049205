"""Test helpers: running corpus cases, rebuilding functions from edited code, the no-op
insertion edit, and the break-point capture used by the resume differential test."""
from __future__ import annotations

import copy
import dataclasses
import functools
import io
import sys
import types
from typing import Any, Callable, Optional

from bytecode_corpus_base import LOG, Case, Snippet, reset_state

from pyjit.bytecode import (
    CodeSpec,
    Instruction,
    create_build_tuple,
    create_call_const,
    create_instruction,
    create_load_closure,
    create_load_const,
    create_load_fast,
    create_return_value,
    create_store_fast,
    opcodes,
    transform_code,
)


def all_code_objects(code: types.CodeType):
    """``code`` and every code object nested in its constants, depth first."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from all_code_objects(const)


@dataclasses.dataclass
class Outcome:
    """Everything observable about one run."""

    result: Any
    error: Optional[tuple[str, str]]
    args_after: Any
    log: list

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Outcome):
            return NotImplemented
        return (
            _same(self.result, other.result)
            and self.error == other.error
            and _same(self.args_after, other.args_after)
            and _same(self.log, other.log)
        )


def _same(a: Any, b: Any) -> bool:
    try:
        if type(a) is not type(b):
            return False
        return bool(a == b) or repr(a) == repr(b)
    except Exception:
        return repr(a) == repr(b)


def with_code(fn: Callable, code: types.CodeType) -> types.FunctionType:
    """A function like ``fn`` (globals, defaults, closure) running ``code``."""
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = copy.copy(fn.__kwdefaults__)
    new.__qualname__ = fn.__qualname__
    return new


def run(fn: Callable, c: Case) -> Outcome:
    """Run ``fn`` on a fresh copy of the case's arguments and record the outcome."""
    reset_state()
    args = copy.deepcopy(c.args)
    kwargs = copy.deepcopy(c.kwargs)
    result, error = None, None
    try:
        result = fn(*args, **kwargs)
    except Exception as e:  # the exception is part of the compared behaviour
        error = (type(e).__name__, str(e))
    return Outcome(result, error, (args, kwargs), list(LOG))


def run_snippet(s: Snippet, transform: Optional[Callable[[types.CodeType], types.CodeType]] = None) -> Outcome:
    """exec a module-level snippet (interactive mode output captured) and record the outcome."""
    reset_state()
    code = compile(s.source, f"<snippet {s.name}>", s.mode)
    if transform is not None:
        code = transform(code)
    ns: dict[str, Any] = {"__name__": f"snippet_{s.name}"}
    out = io.StringIO()
    old_out, old_hook = sys.stdout, sys.displayhook
    sys.stdout = out
    sys.displayhook = sys.__displayhook__
    error = None
    try:
        exec(code, ns)
    except Exception as e:
        error = (type(e).__name__, str(e))
    finally:
        sys.stdout, sys.displayhook = old_out, old_hook
    return Outcome(ns.get("result"), error, out.getvalue(), list(LOG))


# ---------------------------------------------------------------- no-op insertion edit

PAD_CONSTS = 300  # extra constants: the inserted LOAD_CONST needs EXTENDED_ARG
PAD_NOPS = 260  # NOPs around jump targets: jumps across them need EXTENDED_ARG


def _may_insert_before(prev: Optional[Instruction], cur: Instruction) -> bool:
    """Where CPython requires adjacency, nothing may be inserted (see docs/bytecode.md)."""
    if cur.opname in ("RESUME", "END_FOR", "CACHE"):
        return False  # RESUME must follow YIELD_VALUE; FOR_ITER (3.12+) skips exactly END_FOR
    if prev is None:
        return False
    if prev.opname in ("PRECALL", "KW_NAMES"):
        return False  # 3.11 PRECALL specialisations jump over the following CALL
    if opcodes.PY313 and prev.opname == "END_FOR":
        return False  # 3.13 FOR_ITER skips END_FOR and the POP_TOP after it
    return True


@functools.lru_cache(maxsize=None)
def insert_noops(code: types.CodeType, retarget: bool) -> types.CodeType:
    """Recursively insert stack-neutral sequences before (nearly) every instruction (cached:
    several cases share a function, and the EXTENDED_ARG check reuses the edited code)."""

    def edit(instructions: list[Instruction], spec: CodeSpec) -> None:
        # Nested code objects first, so MAKE_FUNCTION builds the edited ones.
        replaced: dict[int, types.CodeType] = {}
        for i, const in enumerate(spec.consts):
            if isinstance(const, types.CodeType):
                replaced[id(const)] = spec.consts[i] = insert_noops(const, retarget)
        for inst in instructions:
            if inst.opname == "LOAD_CONST" and id(inst.argval) in replaced:
                inst.argval = replaced[id(inst.argval)]
        fillers = [("pad", i) for i in range(PAD_CONSTS)]
        spec.consts.extend(fillers)
        first_resume = next(i for i, inst in enumerate(instructions) if inst.opname == "RESUME")
        targets = {id(i.target) for i in instructions if i.target is not None}
        targets |= {id(i.exn.target) for i in instructions if i.exn is not None}
        out: list[Instruction] = []
        redirect: dict[int, Instruction] = {}
        for index, inst in enumerate(instructions):
            prev = instructions[index - 1] if index else None
            if index > first_resume and _may_insert_before(prev, inst):
                seq = [
                    create_load_const(fillers[(index * 7) % PAD_CONSTS]),
                    create_instruction("POP_TOP"),
                    create_instruction("NOP"),
                ]
                if id(inst) in targets or (prev is not None and id(prev) in targets):
                    seq += [create_instruction("NOP") for _ in range(PAD_NOPS)]
                for new in seq:
                    new.exn = inst.exn
                out += seq
                redirect[id(inst)] = seq[0]
            out.append(inst)
        if retarget:
            for inst in out:
                if inst.target is not None and inst.opname != "FOR_ITER" and id(inst.target) in redirect:
                    inst.target = redirect[id(inst.target)]
            handlers = {}
            for inst in out:
                if inst.exn is not None and id(inst.exn.target) in redirect:
                    key = id(inst.exn)
                    if key not in handlers:
                        h = copy.copy(inst.exn)
                        h.target = redirect[id(inst.exn.target)]
                        handlers[key] = h
                    inst.exn = handlers[key]
        instructions[:] = out

    return transform_code(code, edit)


# ---------------------------------------------------------------- break-point capture


@dataclasses.dataclass
class Captured:
    """What the prefix run saw at the break point."""

    stack: tuple
    local_values: dict
    cells: tuple


def _capture(stack: tuple, local_values: dict, cells: tuple) -> Captured:
    return Captured(stack, dict(local_values), cells)


def capture_code(code: types.CodeType, offset: int, depth: int) -> types.CodeType:
    """``code`` that, on first reaching the instruction at ``offset``, returns a
    :class:`Captured` with the stack, the bound locals and the cell objects."""

    def edit(instructions: list[Instruction], spec: CodeSpec) -> None:
        target = next(i for i in instructions if i.offset == offset)
        cells = [create_load_closure(name) for name in spec.cellvars]
        seq = [
            create_build_tuple(depth),
            create_store_fast("___captured_stack"),
            *create_call_const(
                _capture,
                [
                    create_load_fast("___captured_stack"),
                    *create_call_const(locals, []),
                    *cells,
                    create_build_tuple(len(cells)),
                ],
                nargs=3,
            ),
            create_return_value(),
        ]
        for inst in instructions:
            if inst.target is target:
                inst.target = seq[0]
            if inst.exn is not None and inst.exn.target is target:
                inst.exn.target = seq[0]
        at = instructions.index(target)
        instructions[at:at] = seq

    return transform_code(code, edit)
