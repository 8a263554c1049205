"""Graph breaks that keep compiling: the replacement code of a frame that stops at a break point.

The tracer finds a break (an :class:`~pyjit.errors.Unsupported` raised while running the n-th
run of root-frame instruction ``I``), and :func:`pyjit.frame.convert.convert_frame` traces the
frame again from scratch, stopping *before* that run of ``I`` (so no half-executed handler
leaves the state dirty, and nothing of the first attempt — nodes, guards, side effects — is
kept). :func:`plan_break` then describes the replacement code, which

1. calls the compiled prefix graph (if the prefix did tensor work) and replays side effects;
2. rebuilds the values ``I`` needs: the live Python stack and locals, from graph outputs,
   sources and tracked Python values (each distinct tracker once, so aliasing is kept);
3. runs ``I`` itself natively, in the grad mode the trace had there;
4. calls a *resume function* (``<name>__resume_at_<offset>``, built by
   :func:`pyjit.bytecode.make_resume_code` from the original code) with the stack after ``I``
   and the live locals, and returns its result. A conditional jump gets one resume function per
   branch. The hook compiles resume functions like any other frame when they first run.

Where a break point cannot be resumed (inside an exception handler or a ``try`` body, a
``with`` block other than a grad-mode one, a live cell variable, a value with no
reconstruction) :class:`BreakUnsupported` says why, and the frame runs eagerly as before.
"""
from __future__ import annotations

import ast
import dataclasses
import sys
import types
import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..bytecode import (
    Instruction,
    ResumeError,
    create_call,
    create_instruction,
    create_load_closure,
    create_load_const,
    create_pop_jump_if,
    create_return_value,
    make_resume_code,
    resume_parameter_names,
    resume_point,
    stack_effect_split,
    with_push_null,
)
from ..bytecode.instruction import ExnHandler
from ..errors import PyjitError, Unsupported

if TYPE_CHECKING:
    from ..variables.base import VariableTracker
    from .output_graph import OutputCodegen
    from .pycodegen import PyCodegen
    from .translator import Translator

PY313 = sys.version_info >= (3, 13)

# Instructions a replacement may run natively at a break point (operands on the stack only).
_NATIVE_OPS = frozenset({
    "CALL", "CALL_KW", "CALL_FUNCTION_EX", "BINARY_OP", "BINARY_SUBSCR", "STORE_SUBSCR", "DELETE_SUBSCR",
    "BINARY_SLICE", "STORE_SLICE", "COMPARE_OP", "CONTAINS_OP", "IS_OP", "UNARY_NEGATIVE", "UNARY_NOT",
    "UNARY_INVERT", "TO_BOOL", "GET_ITER", "FORMAT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE",
    "BUILD_STRING", "LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR", "UNPACK_SEQUENCE", "UNPACK_EX",
    "IMPORT_NAME", "IMPORT_FROM", "STORE_GLOBAL", "DELETE_GLOBAL", "CALL_INTRINSIC_1", "GET_LEN",
    "LIST_EXTEND", "LIST_APPEND", "DICT_MERGE", "DICT_UPDATE", "SET_UPDATE", "MAP_ADD", "SET_ADD",
    "BUILD_LIST", "BUILD_TUPLE", "BUILD_MAP", "BUILD_SET", "BUILD_CONST_KEY_MAP", "BUILD_SLICE",
})
_COND_JUMPS = {"POP_JUMP_IF_TRUE": True, "POP_JUMP_IF_FALSE": False}
_JUMP_OR_POP = {"JUMP_IF_TRUE_OR_POP": True, "JUMP_IF_FALSE_OR_POP": False}  # 3.11
_RETURNS = frozenset({"RETURN_VALUE"})

# Resume code objects pyjit made (a break inside a loop of one of them runs it eagerly: see
# plan_break). Weak: resume code lives as long as the replacement code that calls it.
_resume_codes: "weakref.WeakSet[types.CodeType]" = weakref.WeakSet()


def is_resume_code(code: types.CodeType) -> bool:
    return code in _resume_codes


class BreakUnsupported(PyjitError):
    """This break point cannot be compiled around; the message says why (the frame runs eagerly)."""


@dataclasses.dataclass
class _Slot:
    """One stack value at the break: ``kind`` is value / null / context / iter."""

    kind: str
    value: Any = None  # the tracker (value, iter) or the grad mode to re-enter (context)


@dataclasses.dataclass
class _Continuation:
    """A call of one resume function: which stack slots and locals it takes."""

    resume: types.CodeType
    params: list[str]       # resume_parameter_names order
    stack: list[_Slot]      # the stack after the native instruction (bottom first)
    pushed_from: int        # slots >= pushed_from are produced by the native instruction


@dataclasses.dataclass
class BreakPlan:
    """Everything the replacement code of a break needs (see module docstring)."""

    tx: "Translator"
    instruction: Instruction
    stack: list[_Slot]
    consumed: int                    # how many top stack values the native instruction pops
    locals: dict[str, "VariableTracker"]
    continuations: list[_Continuation]  # one, two for a conditional jump, none for a return
    grad_mode: bool                  # grad mode at the break point
    entry_grad_mode: bool            # grad mode when the frame was entered
    outer_grad_mode: bool | None     # mode outside the with-blocks spanning the break
    exprs: dict[int, ast.expr] = dataclasses.field(default_factory=dict)  # id(tracker) -> rebuild
    cell_names: set[str] = dataclasses.field(default_factory=set)  # locals passed as new cells
    resume_codes: list[types.CodeType] = dataclasses.field(default_factory=list)


def plan_break(tx: "Translator", cg: "OutputCodegen", entry_grad_mode: bool) -> BreakPlan:
    """Describe the replacement of ``tx``'s frame at its current instruction (not yet run)."""
    from ..variables.base import NullVariable
    from ..variables.lists import ListIteratorVariable, TupleVariable
    from ..variables.torch_fns import GradModeVariable, _BoundCtx

    code = tx.code
    inst = tx.instructions[tx.current_index]
    op = inst.opname
    where = f"{code.co_filename}:{tx.decoded.lines[tx.current_index]}"
    check_at = inst
    if op == "CALL" and tx.current_index > 0 and tx.instructions[tx.current_index - 1].opname == "PRECALL":
        # 3.11: PRECALL pops the arguments in the bytecode's stack model, but the tracer treats
        # it as a no-op and CALL as the whole call; check the point where the two agree.
        check_at = tx.instructions[tx.current_index - 1]
    point = resume_point(code, check_at.offset)
    if not point.supported:
        raise BreakUnsupported(f"cannot resume at {where}: {point.unsupported_reason}")
    if inst.exn is not None and not _is_with_cleanup(inst.exn):
        raise BreakUnsupported(f"the break at {where} is inside a try block (its handler must see the exception)")
    if op not in _NATIVE_OPS and op not in _COND_JUMPS and op not in _JUMP_OR_POP and op not in _RETURNS:
        raise BreakUnsupported(f"{op} at {where} cannot be run on its own")
    if is_resume_code(code) and _in_loop(tx, inst):
        # The loop would break again on every iteration, each time nesting one more resume
        # call (and recompiling for the shrinking iterator): run it natively instead; the
        # functions it calls are still compiled as frames of their own.
        raise BreakUnsupported(f"a graph break inside a loop at {where} repeats on every iteration")

    stack: list[_Slot] = []
    outer: bool | None = None
    for v in tx.stack:
        if isinstance(v, NullVariable):
            stack.append(_Slot("null"))
        elif isinstance(v, _BoundCtx) and not v.is_enter:
            if not isinstance(v.ctx, GradModeVariable):
                raise BreakUnsupported(f"a graph break at {where} inside `with` on an autocast/inference-mode "
                                       "context is not resumable")
            if outer is None:
                outer = bool(v.ctx.prev)
            stack.append(_Slot("context", v.ctx.mode))
        elif isinstance(v, ListIteratorVariable):
            stack.append(_Slot("iter", TupleVariable(v.items[v.index:])))
        else:
            stack.append(_Slot("value", v))
    if len(stack) != point.stack_depth:
        raise BreakUnsupported(f"stack mismatch at {where}: traced {len(stack)} values, bytecode has {point.stack_depth}")

    plan = BreakPlan(tx, inst, stack, 0, {}, [], torch.is_grad_enabled(), entry_grad_mode, outer)
    if op in _RETURNS:
        plan.consumed = 1
    elif op in _COND_JUMPS or op in _JUMP_OR_POP:
        plan.consumed = 1
        cond = stack[-1]
        if cond.kind != "value":
            raise BreakUnsupported(f"the condition at {where} is not a value")
        rest = stack[:-1]
        fall = _continuation(tx, tx.instructions[tx.current_index + 1], rest, len(rest), where)
        jump_stack = rest + [cond] if op in _JUMP_OR_POP else rest
        assert inst.target is not None
        jump = _continuation(tx, inst.target, jump_stack, len(rest), where)
        plan.continuations = [fall, jump]
    else:
        if op == "CALL":  # the tracer's model: callable and self/NULL slots, then the arguments
            pops, pushes = (inst.arg or 0) + 2, 1
        elif op == "CALL_KW":
            pops, pushes = (inst.arg or 0) + 3, 1
        else:
            pops, pushes = stack_effect_split(op, inst.arg)
        if op in ("LOAD_ATTR", "LOAD_METHOD") and (op == "LOAD_METHOD" or inst.flags & 1):
            pushes = 1  # run as a plain attribute load; the NULL is re-made by the resume code
            method_null = True
        else:
            method_null = False
        if pops > len(stack) or any(s.kind not in ("value", "null") for s in stack[len(stack) - pops:]):
            raise BreakUnsupported(f"{op} at {where} consumes values that cannot be rebuilt")
        plan.consumed = pops
        kept = stack[: len(stack) - pops]
        produced = [_Slot("value") for _ in range(pushes)]
        if method_null:
            produced = [produced[0], _Slot("null")] if PY313 else [_Slot("null"), produced[0]]
        nxt = tx.instructions[tx.current_index + 1]
        plan.continuations = [_continuation(tx, nxt, kept + produced, len(kept), where)]

    live: set[str] = set()
    for c in plan.continuations:
        live.update(p for p in c.params if not p.startswith("___stack"))
    for name in live:
        cell = _bound_cell(tx, name) if name in code.co_cellvars else None
        if cell is not None:
            plan.locals[name] = cell
            plan.cell_names.add(name)
        else:
            plan.locals[name] = tx.locals[name]
    _capture_all(plan, cg, where)
    return plan


def _continuation(tx: "Translator", at: Instruction, stack: list[_Slot], pushed_from: int, where: str) -> _Continuation:
    code = tx.code
    point = resume_point(code, at.offset)
    if not point.supported:
        raise BreakUnsupported(f"cannot continue after the break at {where}: {point.unsupported_reason}")
    if point.stack_depth != len(stack):
        raise BreakUnsupported(f"stack depth after the break at {where}: expected {point.stack_depth}, got {len(stack)}")
    cells = set(code.co_cellvars)
    live = sorted(n for n in point.live_locals if n in tx.locals and n not in cells)
    # Cell variables are read through LOAD_DEREF (not in the liveness of fast locals): every
    # bound one is passed, as a new cell holding its value (no closure made before the break
    # can still need the old cell: such a closure has no reconstruction and stops the break).
    live += sorted(n for n in cells if _bound_cell(tx, n) is not None)
    nulls = [i for i, s in enumerate(stack) if s.kind == "null"]
    contexts = [i for i, s in enumerate(stack) if s.kind == "context"]
    iters = [i for i, s in enumerate(stack) if s.kind == "iter"]
    try:
        resume = make_resume_code(code, at.offset, len(stack), live, null_slots=nulls, context_slots=contexts,
                                  iter_slots=iters)
    except ResumeError as e:
        raise BreakUnsupported(str(e)) from None
    _resume_codes.add(resume)
    return _Continuation(resume, resume_parameter_names(code, len(stack), live, nulls), stack, pushed_from)


def _bound_cell(tx: "Translator", name: str) -> "VariableTracker | None":
    """The value of cell variable ``name`` of the root frame, or None when it is unbound."""
    cell = tx.cells.get(name)
    return getattr(cell, "contents", None) if cell is not None else None


def _capture_all(plan: BreakPlan, cg: "OutputCodegen", where: str) -> None:
    """Register the rebuild expression of every tracker the replacement needs (graph outputs)."""
    values: list[Any] = [s.value for s in plan.stack if s.kind in ("value", "iter")]
    for c in plan.continuations:
        values += [s.value for s in c.stack[: c.pushed_from] if s.kind in ("value", "iter")]
    values += list(plan.locals.values())
    for v in values:
        if v is None or id(v) in plan.exprs:
            continue
        try:
            plan.exprs[id(v)] = cg.capture(v)
        except Unsupported as e:
            raise BreakUnsupported(f"a value live at the break at {where} cannot be rebuilt: "
                                   f"{e.graph_break.explanation}") from None


def _is_with_cleanup(handler: ExnHandler) -> bool:
    """A handler that is a ``with`` block's exit path (PUSH_EXC_INFO; WITH_EXCEPT_START)."""
    return handler.target.opname == "PUSH_EXC_INFO" and handler.lasti


def _in_loop(tx: "Translator", inst: Instruction) -> bool:
    """``inst`` lies inside a loop: a backward jump at or after it goes to or before it."""
    index = tx.decoded.index
    here = index[id(inst)]
    for i, other in enumerate(tx.instructions):
        if other.target is not None and i >= here and index[id(other.target)] <= here:
            return True
    return False


# -- emission ----------------------------------------------------------------------------------

def emit_break(plan: BreakPlan, cg: "OutputCodegen", pycg: "PyCodegen", func: types.FunctionType) -> None:
    """Append the part of the replacement after the graph call (see module docstring)."""
    tx = plan.tx
    inst = plan.instruction
    line = tx.decoded.lines[tx.current_index]
    pycg.set_line(line)
    # Each distinct tracker is built once into a temporary (aliasing between slots is kept).
    temps: dict[int, str] = {}
    for key, expr in plan.exprs.items():
        name = f"___break_value{len(temps)}"
        cg.emit_value(pycg, expr)
        pycg.store_local(name)
        temps[key] = name
    if plan.grad_mode != plan.entry_grad_mode or plan.outer_grad_mode is not None:
        _set_grad(pycg, plan.grad_mode)
    if plan.continuations and len(plan.continuations) == 1:
        cont = plan.continuations[0]
        _emit_resume_call(plan, cont, pycg, func, temps, native=lambda: _emit_native(plan, pycg, temps))
        return
    # A return: run it natively (the value is rebuilt; the instruction returns it).
    _push_consumed(plan, pycg, temps)
    if not plan.continuations:
        pycg.append(create_return_value())
        return
    # A conditional jump: the condition is evaluated natively, each branch has its own resume.
    fall, jump = plan.continuations
    label = pycg.new_label()
    sense = _COND_JUMPS.get(inst.opname, _JUMP_OR_POP.get(inst.opname))
    pycg.append(*create_pop_jump_if(bool(sense), label))
    _emit_resume_call(plan, fall, pycg, func, temps, native=None)
    pycg.place(label)
    _emit_resume_call(plan, jump, pycg, func, temps, native=None)


def _emit_resume_call(plan: BreakPlan, cont: _Continuation, pycg: "PyCodegen", func: types.FunctionType,
                      temps: dict[int, str], native: Callable[[], None] | None) -> None:
    """``return resume(<stack after the instruction>, <live locals>)``; ``native`` (when given)
    runs the break instruction in the middle, producing the slots from ``pushed_from`` on."""
    if native is None and plan.outer_grad_mode is not None:
        # The resume function re-enters the with-blocks: it must start from the outer mode.
        _set_grad(pycg, plan.outer_grad_mode)
    start = len(pycg.instructions)
    _load_resume_function(pycg, cont.resume, func)
    pycg.instructions[start:] = with_push_null(pycg.instructions[start:])
    for inst in pycg.instructions[start:]:
        if inst.positions is None:
            inst.positions = pycg._positions
    stack_names = {f"___stack{i}": s for i, s in enumerate(cont.stack)}
    nargs = 0
    produced_done = False
    for name in cont.params:
        slot = stack_names.get(name)
        if slot is not None:
            index = int(name[len("___stack"):])
            if index >= cont.pushed_from:
                if not produced_done and native is not None:
                    native()
                    produced_done = True
                nargs += 1
                continue
            _push_slot(slot, pycg, temps)
        elif name in plan.cell_names:
            pycg.call_const(types.CellType, [lambda name=name: pycg.load_local(temps[id(plan.locals[name])])])
        else:
            pycg.load_local(temps[id(plan.locals[name])])
        nargs += 1
    if native is not None and not produced_done:
        native()  # the instruction produced nothing (a store): run it before the call
    pycg.append(*create_call(nargs))
    pycg.return_value()


def _push_slot(slot: _Slot, pycg: "PyCodegen", temps: dict[int, str]) -> None:
    if slot.kind == "context":
        pycg.call_const(torch.enable_grad if slot.value else torch.no_grad, [])
    elif slot.kind in ("value", "iter"):
        pycg.load_local(temps[id(slot.value)])
    else:
        raise AssertionError(f"cannot pass a {slot.kind} slot")


def _push_consumed(plan: BreakPlan, pycg: "PyCodegen", temps: dict[int, str]) -> None:
    """Push the stack values the break instruction consumes (NULLs included)."""
    for slot in plan.stack[len(plan.stack) - plan.consumed:]:
        if slot.kind == "null":
            pycg.append(create_instruction("PUSH_NULL"))
        else:
            _push_slot(slot, pycg, temps)


def _emit_native(plan: BreakPlan, pycg: "PyCodegen", temps: dict[int, str]) -> None:
    """Push the consumed values and run the break instruction (with its exception path)."""
    inst = plan.instruction
    tx = plan.tx
    _push_consumed(plan, pycg, temps)
    native = _native_instructions(inst, tx)
    if plan.outer_grad_mode is not None and plan.outer_grad_mode != plan.grad_mode:
        # If the instruction raises, the with-blocks around it would restore the grad mode.
        handler = pycg.new_label()
        after = pycg.new_label()
        exn = ExnHandler(handler, 0, False)
        for i in native:
            i.exn = exn
        pycg.append(*native)
        _set_grad(pycg, plan.outer_grad_mode)
        pycg.append(create_instruction("JUMP_FORWARD", target=after))
        pycg.place(handler)
        _set_grad(pycg, plan.outer_grad_mode)
        pycg.append(create_instruction("RERAISE", arg=0))
        pycg.place(after)
    else:
        pycg.append(*native)
        if plan.outer_grad_mode is not None:
            _set_grad(pycg, plan.outer_grad_mode)


def _native_instructions(inst: Instruction, tx: "Translator") -> list[Instruction]:
    op = inst.opname
    if op == "CALL":
        kw = tx.kw_names
        out = []
        if kw:
            out.append(create_instruction("KW_NAMES", argval=tuple(kw)))
        return out + create_call(inst.arg or 0)
    if op in ("LOAD_ATTR", "LOAD_METHOD") and (op == "LOAD_METHOD" or inst.flags & 1):
        return [create_instruction("LOAD_ATTR", argval=inst.argval)]
    copy = inst.copy()
    copy.exn = None
    copy.offset = None
    copy.target = None
    return [copy]


def _set_grad(pycg: "PyCodegen", mode: bool) -> None:
    pycg.call_const(torch._C._set_grad_enabled, [lambda: pycg.load_const(mode)])
    pycg.append(create_instruction("POP_TOP"))


def _load_resume_function(pycg: "PyCodegen", resume: types.CodeType, func: types.FunctionType) -> None:
    """Push the resume function: prebuilt when the frame has no closure, else made here with
    the running frame's own cells (the replacement serves every closure of this code)."""
    if not resume.co_freevars:
        fn = types.FunctionType(resume, func.__globals__, resume.co_name)
        pycg.load_const(fn)
        return
    for name in resume.co_freevars:
        pycg.append(create_load_closure(name))
    pycg.append(create_instruction("BUILD_TUPLE", arg=len(resume.co_freevars)))
    pycg.append(create_load_const(resume))
    if PY313:
        pycg.append(create_instruction("MAKE_FUNCTION"), create_instruction("SET_FUNCTION_ATTRIBUTE", arg=0x08))
    else:
        pycg.append(create_instruction("MAKE_FUNCTION", arg=0x08))


__all__ = ["BreakPlan", "BreakUnsupported", "emit_break", "is_resume_code", "plan_break"]
