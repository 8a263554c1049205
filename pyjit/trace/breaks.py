"""Graph breaks that keep compiling: the replacement code of a frame that stops at a break point.

The tracer finds a break (an :class:`~pyjit.errors.Unsupported` raised while running a step of
some frame: the root frame or a call it inlines), and
:func:`pyjit.frame.convert.convert_frame` traces the frame again from scratch, stopping *before*
that step (so no half-executed handler leaves the state dirty, and nothing of the first attempt
— nodes, guards, side effects — is kept). The trace then stands in a chain of frames: the
innermost one about to run the breaking instruction ``I``, and each enclosing frame in the
middle of the call that inlined the next one. :func:`plan_break` describes the replacement code:

1. call the compiled prefix graph (if the prefix did tensor work) and replay side effects;
2. rebuild every value the rest needs: the Python stack and live locals of each frame of the
   chain, from graph outputs, sources and tracked Python values (each distinct tracker once,
   so aliasing is kept);
3. run ``I`` natively, in the grad mode the trace had there;
4. call the innermost frame's *resume function* (``<name>__resume_at_<offset>``, built by
   :func:`pyjit.bytecode.make_resume_code`) with its stack after ``I`` and its live locals; its
   result is what the inlined call returned, so each enclosing frame's resume function is then
   called with that result on its stack (continuing after its call), out to the root frame,
   whose resume function's result the replacement returns. A conditional jump gets one resume
   function per branch. The hook compiles resume functions like any other frame.

This is how torch.compile resumes inside nested frames (with its nested graph breaks): a break
deep in a call keeps the enclosing frames' graphs whole up to the break and after it. Every call
form whose callee is one frame returning the call's result takes part (functions, methods,
modules, ``functools.partial``, objects with a Python ``__call__``, decorator wrappers closing
over real cells). Where a level of the chain cannot be resumed (inside an exception handler or a
``try`` body, an autocast block, a generator, an inlining that was not a call, a closure over
cells pyjit cannot pass on, a value live there that cannot be rebuilt) :class:`BreakUnsupported` says
why; the caller then breaks one level further out (at that frame's call instruction, the callee
running natively as its own compiled frame), and at the root runs the frame eagerly.
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
from ..bytecode.comprehension import (
    comprehension_at,
    enclosing_comprehension,
    make_outlined_comprehension,
    outline_problem,
    region_reads,
)
from ..bytecode.instruction import ExnHandler
from ..errors import PyjitError, Unsupported
from ..guards.source import ClosureSource

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
_CALLS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})
_COND_JUMPS = {"POP_JUMP_IF_TRUE": True, "POP_JUMP_IF_FALSE": False}
_JUMP_OR_POP = {"JUMP_IF_TRUE_OR_POP": True, "JUMP_IF_FALSE_OR_POP": False}  # 3.11
_RETURNS = frozenset({"RETURN_VALUE"})
_RESULT = "___resume_result"

# Resume code objects pyjit made (a break inside a loop of one of them is not resumed: see
# _check_level). Weak: resume code lives as long as the replacement code that calls it.
_resume_codes: "weakref.WeakSet[types.CodeType]" = weakref.WeakSet()


# Resume functions that start *at* an instruction pyjit cannot run on its own (a `with` on a
# user context manager, a loop over an untraceable iterator...): compiling one would stop at that
# same first instruction, so the hook runs them natively (what they call is still compiled).
_native_resume_codes: "weakref.WeakSet[types.CodeType]" = weakref.WeakSet()


def is_resume_code(code: types.CodeType) -> bool:
    return code in _resume_codes


def runs_natively(code: types.CodeType) -> bool:
    """A resume function the hook must not compile (see ``_native_resume_codes``)."""
    return code in _native_resume_codes


class BreakUnsupported(PyjitError):
    """This break point cannot be compiled around at this level; the message says why.
    ``retry_step``: an earlier step where a break can be placed instead (the start of the
    ``with`` block that stood in the way)."""

    def __init__(self, message: str, retry_step: int | None = None) -> None:
        super().__init__(message)
        self.retry_step = retry_step


@dataclasses.dataclass
class _Slot:
    """One stack value: ``kind`` is value / null / context / iter / result (the value the
    inlined call returned, i.e. the next inner level's resume result)."""

    kind: str
    value: Any = None  # the tracker (value, iter) or the grad mode to re-enter (context)


@dataclasses.dataclass
class _Continuation:
    """A call of one resume function: which stack slots and locals it takes."""

    resume: types.CodeType
    params: list[str]       # resume_parameter_names order
    stack: list[_Slot]      # the stack it starts with (bottom first)
    pushed_from: int        # slots >= pushed_from are produced by the native instruction


@dataclasses.dataclass
class _Level:
    """One frame of the chain: its stack, live locals and how it continues."""

    tx: "Translator"
    stack: list[_Slot]
    locals: dict[str, "VariableTracker"]
    cell_names: set[str]                 # locals passed as new cells
    continuations: list[_Continuation]   # parents: one; innermost: one, two (jump) or none (return)
    outer_grad_mode: bool | None         # mode outside this frame's with-blocks spanning the break
    # An inlined comprehension run natively as a function (3.12+): its code and the locals it reads.
    outlined: "tuple[types.CodeType, tuple[str, ...]] | None" = None


@dataclasses.dataclass
class BreakPlan:
    """Everything the replacement code of a break needs (see module docstring)."""

    levels: list[_Level]             # root first, innermost last
    instruction: Instruction         # the innermost frame's breaking instruction
    consumed: int                    # how many top stack values it pops (-1: not run, see below)
    grad_mode: bool                  # grad mode at the break point
    entry_grad_mode: bool            # grad mode when the frame was entered
    exprs: dict[int, ast.expr] = dataclasses.field(default_factory=dict)  # id(tracker) -> rebuild
    cell_temps: dict[int, str] = dataclasses.field(default_factory=dict)  # id(CellVariable) -> new cell local

    @property
    def resumes_at_break(self) -> bool:
        """The instruction is not run by the replacement: the resume function starts at it."""
        return self.consumed < 0

    @property
    def innermost(self) -> _Level:
        return self.levels[-1]

    @property
    def continuations(self) -> list[_Continuation]:
        """Every resume call of the replacement (for logs and debug dumps)."""
        return [c for level in self.levels for c in level.continuations]

    @property
    def outermost_grad_mode(self) -> bool | None:
        for level in self.levels:
            if level.outer_grad_mode is not None:
                return level.outer_grad_mode
        return None


def plan_break(frames: list["Translator"], cg: "OutputCodegen", entry_grad_mode: bool) -> BreakPlan:
    """Describe the replacement at the chain ``frames`` (innermost first, root last), the
    innermost about to run its current instruction, each other one inside its call."""
    innermost = frames[0]
    inst = innermost.instructions[innermost.current_index]
    for child in frames[:-1]:
        if not child.direct_return:
            # e.g. __init__ run by a class call: its return value is not the call's result.
            raise BreakUnsupported(f"{child.code.co_qualname} was not inlined as the callee of a call instruction")
    levels = [_parent_level(tx) for tx in reversed(frames[1:])]
    level, consumed = _innermost_level(innermost)
    levels.append(level)
    plan = BreakPlan(levels, inst, consumed, torch.is_grad_enabled(), entry_grad_mode)
    _capture_all(plan, cg)
    return plan


def _where(tx: "Translator") -> str:
    return f"{tx.code.co_filename}:{tx.decoded.lines[tx.current_index]}"


def _check_level(tx: "Translator", inst: Instruction) -> None:
    where = _where(tx)
    if tx.yielded is not None:
        raise BreakUnsupported(f"the break at {where} is inside an inlined generator")
    if tx.parent is not None and tx.code.co_freevars and _closure_owner_cells(tx) is None:
        # Its resume function needs the inlined function's closure cells: the class cell of
        # zero-argument super(), or cells of enclosing frames of the chain (a comprehension or
        # a local function reading the caller's variables), which are passed along as new cells.
        raise BreakUnsupported(f"the break at {where} is inside an inlined closure over cells pyjit cannot pass")
    region = enclosing_comprehension(tx.code, tx.decoded.index[id(inst)])
    if region is not None and region.start in tx.comprehension_steps and outline_problem(tx.code, region) is None:
        # 3.12+ inlines comprehensions into the frame, under a cleanup handler: break before the
        # comprehension instead and run it natively (what 3.11 does with its own frame).
        raise BreakUnsupported(f"the break at {where} is inside an inlined comprehension, which runs natively",
                               retry_step=tx.comprehension_steps[region.start])
    if _inside_try(inst):
        raise BreakUnsupported(f"the break at {where} is inside a try block (its handler must see the exception)")
    if is_resume_code(tx.code) and _in_loop(tx, inst):
        # The loop would break again on every iteration, each time nesting one more resume
        # call (and recompiling for the shrinking iterator): run it natively instead; the
        # functions it calls are still compiled as frames of their own.
        raise BreakUnsupported(f"a graph break inside a loop at {where} repeats on every iteration")


def _closure_owner_cells(tx: "Translator") -> "list[tuple[str, Any]] | None":
    """For each free variable of inlined frame ``tx``: ("real", the cell) for ``__class__``
    or a cell of a function read from outside the trace through a source (a decorator's
    wrapper closing over the function it wraps: the function, and so its ``__closure__``, is
    guarded by identity, and stores into the cell are replayed before the resume function
    runs), or ("cell", CellVariable) when the cell is a bound cell variable of an enclosing
    frame of the chain (that frame passes it to its own resume function as a new cell, shared
    here), or ("frame", name) for a free variable of the compiled frame itself (the replacement's
    own cell: another closure of the same code has another). None when some cell is none of these."""
    out: list[tuple[str, Any]] = []
    for name in tx.code.co_freevars:
        cell = tx.cells.get(name)
        real = getattr(cell, "real_cell", None)
        if real is not None and isinstance(cell.source, ClosureSource):  # type: ignore[union-attr]
            out.append(("frame", cell.source.var))  # type: ignore[union-attr]  # the root's own free cell
            continue
        if real is not None and (name == "__class__" or cell.source is not None):  # type: ignore[union-attr]
            out.append(("real", real))
            continue
        owner = tx.parent
        found = False
        while owner is not None and not found:
            found = any(c is cell for n, c in owner.cells.items() if n in owner.code.co_cellvars)
            owner = owner.parent
        if not found or getattr(cell, "contents", None) is None:
            return None
        out.append(("cell", cell))
    return out


def _stack_slots(tx: "Translator") -> tuple[list[_Slot], bool | None]:
    from ..variables.base import NullVariable
    from ..variables.lists import ListIteratorVariable, TupleVariable
    from ..variables.torch_fns import GradModeVariable, _BoundCtx

    stack: list[_Slot] = []
    outer: bool | None = None
    for i, v in enumerate(tx.stack):
        if isinstance(v, NullVariable):
            stack.append(_Slot("null"))
        elif isinstance(v, _BoundCtx) and not v.is_enter:
            if not isinstance(v.ctx, GradModeVariable):
                raise BreakUnsupported(f"a graph break at {_where(tx)} inside `with` on an autocast/inference-mode "
                                       "context is not resumable", retry_step=tx.with_steps.get(i))
            if outer is None:
                outer = bool(v.ctx.prev)
            stack.append(_Slot("context", v.ctx.mode))
        elif isinstance(v, ListIteratorVariable):
            stack.append(_Slot("iter", TupleVariable(v.items[v.index:])))
        else:
            stack.append(_Slot("value", v))
    return stack, outer


def _check_with_blocks(tx: "Translator", slots: Any, stack: list[_Slot]) -> None:
    """Only grad-mode ``with`` blocks may span a break: the replacement restores their mode if
    the native step raises, and the resume function re-enters them. Another context manager's
    ``__exit__`` would be skipped on that path (a lock left held...)."""
    for i, (slot, traced) in enumerate(zip(slots, stack)):
        if getattr(slot, "is_with_exit", False) and traced.kind != "context":
            raise BreakUnsupported(f"the break at {_where(tx)} is inside a `with` block on a context manager "
                                   "pyjit cannot re-enter", retry_step=tx.with_steps.get(i))


def _innermost_level(tx: "Translator") -> tuple[_Level, int]:
    code = tx.code
    inst = tx.instructions[tx.current_index]
    op = inst.opname
    where = _where(tx)
    check_at = inst
    if op == "CALL" and tx.current_index > 0 and tx.instructions[tx.current_index - 1].opname == "PRECALL":
        # 3.11: PRECALL pops the arguments in the bytecode's stack model, but the tracer treats
        # it as a no-op and CALL as the whole call; check the point where the two agree.
        check_at = tx.instructions[tx.current_index - 1]
    point = resume_point(code, check_at.offset)
    if not point.supported:
        raise BreakUnsupported(f"cannot resume at {where}: {point.unsupported_reason}")
    _check_level(tx, inst)
    stack, outer = _stack_slots(tx)
    if len(stack) != point.stack_depth:
        raise BreakUnsupported(f"stack mismatch at {where}: traced {len(stack)} values, bytecode has {point.stack_depth}")
    _check_with_blocks(tx, point.stack, stack)

    level = _Level(tx, stack, {}, set(), [], outer)
    consumed = 1
    region = comprehension_at(code, tx.current_index) if op == "LOAD_FAST_AND_CLEAR" else None
    if region is not None and outline_problem(code, region) is None:
        _outline_comprehension(level, region)
        return level, consumed
    if op not in _NATIVE_OPS and op not in _COND_JUMPS and op not in _JUMP_OR_POP and op not in _RETURNS:
        # Not runnable on its own (BEFORE_WITH on a user context manager, FOR_ITER over an
        # untraceable iterator, ...): the rest of the frame, from this instruction on, runs
        # natively in a resume function that starts here.
        cont = _continuation(tx, inst, stack, len(stack))
        _native_resume_codes.add(cont.resume)
        level.continuations = [cont]
        _collect_locals(level)
        return level, -1
    if op in _RETURNS:
        pass
    elif op in _COND_JUMPS or op in _JUMP_OR_POP:
        cond = stack[-1]
        if cond.kind != "value":
            raise BreakUnsupported(f"the condition at {where} is not a value")
        rest = stack[:-1]
        fall = _continuation(tx, tx.instructions[tx.current_index + 1], rest, len(rest))
        jump_stack = rest + [cond] if op in _JUMP_OR_POP else rest
        assert inst.target is not None
        jump = _continuation(tx, inst.target, jump_stack, len(rest))
        level.continuations = [fall, jump]
    else:
        if op == "CALL":  # the tracer's model: callable and self/NULL slots, then the arguments
            pops, pushes = (inst.arg or 0) + 2, 1
        elif op == "CALL_KW":
            pops, pushes = (inst.arg or 0) + 3, 1
        else:
            pops, pushes = stack_effect_split(op, inst.arg)
        method_null = op in ("LOAD_ATTR", "LOAD_METHOD") and (op == "LOAD_METHOD" or bool(inst.flags & 1))
        if method_null:
            pushes = 1  # run as a plain attribute load; the NULL is re-made by the resume code
        if pops > len(stack) or any(s.kind not in ("value", "null", "iter") for s in stack[len(stack) - pops:]):
            raise BreakUnsupported(f"{op} at {where} consumes values that cannot be rebuilt")
        consumed = pops
        kept = stack[: len(stack) - pops]
        produced = [_Slot("value") for _ in range(pushes)]
        if method_null:
            produced = [produced[0], _Slot("null")] if PY313 else [_Slot("null"), produced[0]]
        nxt = tx.instructions[tx.current_index + 1]
        level.continuations = [_continuation(tx, nxt, kept + produced, len(kept))]
    _collect_locals(level)
    return level, consumed


def _outline_comprehension(level: _Level, region: Any) -> None:
    """The innermost level stops at the start of an inlined comprehension: the replacement
    calls it as an outlined function (with the iterator on the stack and the locals it reads)
    and continues where the exhausted loop would, with the comprehension variables' saved outer
    values and the result on the stack."""
    tx = level.tx
    stack = level.stack
    if not stack or stack[-1].kind not in ("value", "iter"):
        raise BreakUnsupported(f"the iterator of the comprehension at {_where(tx)} cannot be rebuilt")
    reads = tuple(n for n in region_reads(tx.code, region) if n in tx.locals)
    outlined = make_outlined_comprehension(tx.code, region, reads)
    _native_resume_codes.add(outlined)  # the hook runs it natively; what it calls is compiled
    kept = stack[:-1]
    saved = [_Slot("value", tx.locals[n]) if n in tx.locals else _Slot("null") for n in region.cleared]
    exit_inst = tx.instructions[region.exit]
    level.continuations = [_continuation(tx, exit_inst, kept + saved + [_Slot("value")], len(kept) + len(saved))]
    level.outlined = (outlined, reads)
    _collect_locals(level)
    for name in reads:
        level.locals.setdefault(name, tx.locals[name])


def _parent_level(tx: "Translator") -> _Level:
    """A frame in the middle of the call that inlined the next level: it continues after that
    call with the call's result (the next level's resume result) on its stack."""
    inst = tx.instructions[tx.current_index]
    where = _where(tx)
    if inst.opname not in _CALLS:
        raise BreakUnsupported(f"the call at {where} inlined through {inst.opname}, not a call instruction")
    _check_level(tx, inst)
    if inst.opname == "CALL":
        pops = (inst.arg or 0) + 2
    elif inst.opname == "CALL_KW":
        pops = (inst.arg or 0) + 3
    else:
        pops = 2 + 1 + bool((inst.arg or 0) & 1)  # NULL/callable, callable/self, args (and kwargs)
    if len(tx.stack) != tx.depth_at_start - pops:
        raise BreakUnsupported(f"the call at {where} is not in the state of a plain call")
    stack, outer = _stack_slots(tx)
    nxt = tx.instructions[tx.current_index + 1]
    after = resume_point(tx.code, nxt.offset)
    if after.supported and len(after.stack) == len(stack) + 1:
        _check_with_blocks(tx, after.stack[:-1], stack)
    level = _Level(tx, stack, {}, set(), [], outer)
    level.continuations = [_continuation(tx, nxt, stack + [_Slot("result")], len(stack))]
    _collect_locals(level)
    return level


def _continuation(tx: "Translator", at: Instruction, stack: list[_Slot], pushed_from: int) -> _Continuation:
    code = tx.code
    where = _where(tx)
    point = resume_point(code, at.offset)
    if not point.supported:
        raise BreakUnsupported(f"cannot continue after the break at {where}: {point.unsupported_reason}")
    if point.stack_depth != len(stack):
        raise BreakUnsupported(f"stack depth after the break at {where}: expected {point.stack_depth}, got {len(stack)}")
    cells = set(code.co_cellvars)
    live = sorted(n for n in point.live_locals if n in tx.locals and n not in cells)
    # Cell variables are read through LOAD_DEREF (not in the liveness of fast locals): every
    # bound one is passed, as a new cell holding its value (no closure made before the break
    # can still need the old cell: such a closure cannot be rebuilt, see _capture_all).
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


def _collect_locals(level: _Level) -> None:
    tx = level.tx
    live: set[str] = set()
    for c in level.continuations:
        live.update(p for p in c.params if not p.startswith("___stack"))
    for name in live:
        cell = _bound_cell(tx, name) if name in tx.code.co_cellvars else None
        if cell is not None:
            level.locals[name] = cell
            level.cell_names.add(name)
        else:
            level.locals[name] = tx.locals[name]


def _bound_cell(tx: "Translator", name: str) -> "VariableTracker | None":
    """The value of cell variable ``name`` of a frame, or None when it is unbound."""
    cell = tx.cells.get(name)
    return getattr(cell, "contents", None) if cell is not None else None


def _capture_all(plan: BreakPlan, cg: "OutputCodegen") -> None:
    """Register the rebuild expression of every tracker the replacement needs (graph outputs)."""
    # A resume function gets its cell variables as new cells, which it does not know to be the
    # cells of closures it receives: a closure over one of them cannot be rebuilt here.
    cg.cells_passed_on = {id(level.tx.cells[name]) for level in plan.levels for name in level.cell_names}
    for level in plan.levels:
        values: list[Any] = [s.value for s in level.stack if s.kind in ("value", "iter")]
        for c in level.continuations:
            values += [s.value for s in c.stack[: c.pushed_from] if s.kind in ("value", "iter")]
        values += list(level.locals.values())
        for v in values:
            if v is None or id(v) in plan.exprs:
                continue
            try:
                plan.exprs[id(v)] = cg.capture(v)
            except Unsupported as e:
                raise BreakUnsupported(f"a value live at the break at {_where(level.tx)} cannot be rebuilt: "
                                       f"{e.graph_break.explanation}") from None


def _inside_try(inst: Instruction) -> bool:
    """An exception raised at ``inst`` reaches a ``try`` handler of this frame: its own handler
    is one, or a ``with`` block's exit path around it (whose cleanup) leads to one. The
    replacement code has no such handler, so an exception of the native step or of a resume
    call would skip it (a ``finally`` would not run)."""
    handler = inst.exn
    seen = 0
    while handler is not None and seen < 64:
        if not handler.lasti:
            return True  # try/except/finally entries keep no lasti; with-exits and cleanups do
        handler = handler.target.exn
        seen += 1
    return False


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
    innermost = plan.innermost
    inst = plan.instruction
    root = plan.levels[0].tx
    pycg.set_line(root.decoded.lines[root.current_index])  # the root frame's line of the break
    # Each distinct tracker is built once into a temporary (aliasing between slots is kept).
    temps: dict[int, str] = {}
    for key, expr in plan.exprs.items():
        name = f"___break_value{len(temps)}"
        cg.emit_value(pycg, expr)
        pycg.store_local(name)
        temps[key] = name
    # Cell variables passed on are new cells made once, so a closure of an inlined frame and
    # the frame that owns the cell share it.
    cells: dict[int, str] = {}
    for level in plan.levels:
        for name in sorted(level.cell_names):
            cell_var = level.tx.cells[name]
            if id(cell_var) not in cells:
                local = f"___break_cell{len(cells)}"
                pycg.call_const(types.CellType, [lambda v=level.locals[name]: pycg.load_local(temps[id(v)])])
                pycg.store_local(local)
                cells[id(cell_var)] = local
    plan.cell_temps = cells
    if plan.grad_mode != plan.entry_grad_mode or plan.outermost_grad_mode is not None:
        _set_grad(pycg, plan.grad_mode)
    guarded_from = len(pycg.instructions)
    nested = len(plan.levels) > 1
    conts = innermost.continuations
    if plan.resumes_at_break:  # the resume function starts at the instruction itself
        _emit_resume_call(plan, innermost, conts[0], pycg, func, temps, native=None, last=not nested)
    elif len(conts) == 1:
        _emit_resume_call(plan, innermost, conts[0], pycg, func, temps,
                          native=lambda: _emit_native(plan, pycg, temps), last=not nested)
    else:
        _push_consumed(plan, pycg, temps)
        if not conts:  # a return: the value is rebuilt, the instruction returns it
            if nested:
                pycg.store_local(_RESULT)
            else:
                pycg.append(create_return_value())
        else:  # a conditional jump: evaluated natively, each branch has its own resume
            fall, jump = conts
            label = pycg.new_label()
            join = pycg.new_label()
            sense = _COND_JUMPS.get(inst.opname, _JUMP_OR_POP.get(inst.opname))
            pycg.append(*create_pop_jump_if(bool(sense), label))
            _emit_resume_call(plan, innermost, fall, pycg, func, temps, native=None, last=not nested)
            if nested:
                pycg.append(create_instruction("JUMP_FORWARD", target=join))
            pycg.place(label)
            _emit_resume_call(plan, innermost, jump, pycg, func, temps, native=None, last=not nested)
            if nested:
                pycg.place(join)
    for i, level in enumerate(reversed(plan.levels[:-1])):
        _emit_resume_call(plan, level, level.continuations[0], pycg, func, temps, native=None,
                          last=i == len(plan.levels) - 2)
    outer = plan.outermost_grad_mode
    if outer is not None and nested:
        # An exception from the native instruction or a resume call leaves the with-blocks of
        # the enclosing frames: restore the mode they would restore.
        _protect(pycg, guarded_from, outer)


def _emit_resume_call(plan: BreakPlan, level: _Level, cont: _Continuation, pycg: "PyCodegen",
                      func: types.FunctionType, temps: dict[int, str], native: Callable[[], None] | None,
                      last: bool) -> None:
    """``resume(<stack>, <live locals>)``, returned when ``last`` else stored as the result the
    next enclosing level continues with; ``native`` (when given) runs the break instruction in
    the middle, producing the slots from ``pushed_from`` on."""
    if native is None and level.outer_grad_mode is not None:
        # The resume function re-enters the with-blocks: it must start from the outer mode.
        _set_grad(pycg, level.outer_grad_mode)
    start = len(pycg.instructions)
    _load_resume_function(pycg, cont.resume, level.tx, func, plan.cell_temps)
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
            if index >= cont.pushed_from and native is not None:
                if not produced_done:
                    native()
                    produced_done = True
            else:
                _push_slot(slot, pycg, temps)
        elif name in level.cell_names:
            pycg.load_local(plan.cell_temps[id(level.tx.cells[name])])
        else:
            pycg.load_local(temps[id(level.locals[name])])
        nargs += 1
    if native is not None and not produced_done:
        native()  # the instruction produced nothing (a store): run it before the call
    pycg.append(*create_call(nargs))
    if last:
        pycg.return_value()
    else:
        pycg.store_local(_RESULT)


def _push_slot(slot: _Slot, pycg: "PyCodegen", temps: dict[int, str]) -> None:
    if slot.kind == "context":
        pycg.call_const(torch.enable_grad if slot.value else torch.no_grad, [])
    elif slot.kind in ("value", "iter"):
        pycg.load_local(temps[id(slot.value)])
    elif slot.kind == "result":
        pycg.load_local(_RESULT)
    else:
        raise AssertionError(f"cannot pass a {slot.kind} slot")


def _push_consumed(plan: BreakPlan, pycg: "PyCodegen", temps: dict[int, str]) -> None:
    """Push the stack values the break instruction consumes (NULLs included)."""
    stack = plan.innermost.stack
    for slot in stack[len(stack) - plan.consumed:]:
        if slot.kind == "null":
            pycg.append(create_instruction("PUSH_NULL"))
        else:
            _push_slot(slot, pycg, temps)
            if slot.kind == "iter":  # the instruction takes the iterator (a comprehension's argument)
                pycg.append(create_instruction("GET_ITER"))


def _emit_native(plan: BreakPlan, pycg: "PyCodegen", temps: dict[int, str]) -> None:
    """Push the consumed values and run the break instruction (with its exception path)."""
    _push_consumed(plan, pycg, temps)
    if plan.innermost.outlined is not None:
        _emit_outlined_call(plan, pycg, temps)
        return
    native = _native_instructions(plan.instruction, plan.innermost.tx)
    outer = plan.innermost.outer_grad_mode
    if outer is not None and len(plan.levels) == 1 and outer != plan.grad_mode:
        # If the instruction raises, the with-blocks around it would restore the grad mode.
        handler = pycg.new_label()
        after = pycg.new_label()
        exn = ExnHandler(handler, 0, False)
        for i in native:
            i.exn = exn
        pycg.append(*native)
        _set_grad(pycg, outer)
        pycg.append(create_instruction("JUMP_FORWARD", target=after))
        pycg.place(handler)
        _set_grad(pycg, outer)
        pycg.append(create_instruction("RERAISE", arg=0))
        pycg.place(after)
    else:
        pycg.append(*native)
        if outer is not None:
            _set_grad(pycg, outer)


def _emit_outlined_call(plan: BreakPlan, pycg: "PyCodegen", temps: dict[int, str]) -> None:
    """Replace the iterator on the stack with the result of the outlined comprehension."""
    level = plan.innermost
    assert level.outlined is not None
    code, reads = level.outlined
    fn = types.FunctionType(code, level.tx.f_globals, code.co_name)
    pycg.store_local("___comprehension_iterator")
    args: list[Callable[[], None]] = [lambda: pycg.load_local("___comprehension_iterator")]
    args += [lambda n=n: pycg.load_local(temps[id(level.locals[n])]) for n in reads]  # type: ignore[misc]
    pycg.call_const(fn, args)
    if level.outer_grad_mode is not None:
        _set_grad(pycg, level.outer_grad_mode)


def _protect(pycg: "PyCodegen", start: int, mode: bool) -> None:
    """Cover the instructions from ``start`` on with a handler that restores ``mode`` and
    re-raises (they have no handler of their own)."""
    handler = pycg.new_label()
    exn = ExnHandler(handler, 0, False)
    for inst in pycg.instructions[start:]:
        if inst.exn is None and inst.opname not in ("NOP",):
            inst.exn = exn
    pycg.place(handler)
    _set_grad(pycg, mode)
    pycg.append(create_instruction("RERAISE", arg=0))


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


def _load_resume_function(pycg: "PyCodegen", resume: types.CodeType, tx: "Translator",
                          func: types.FunctionType, cell_temps: dict[int, str]) -> None:
    """Push the resume function of ``tx``'s frame. The root frame's is made here with the
    running frame's own cells when it has a closure (the replacement serves every closure of
    this code); an inlined frame's is prebuilt with its globals and the real cells it closes
    over, or built when the replacement runs where it shares cells the replacement makes."""
    if tx.parent is not None:
        owners = _closure_owner_cells(tx) if resume.co_freevars else []
        assert owners is not None  # checked by _check_level
        if all(kind == "real" for kind, _ in owners):
            closure = tuple(cell for _, cell in owners) or None
            pycg.load_const(types.FunctionType(resume, tx.f_globals, resume.co_name, None, closure))
            return
        # A closure over cells the replacement makes: build the function when it runs.
        def emit_closure() -> None:
            for kind, cell in owners:
                if kind == "real":
                    pycg.load_const(cell)
                elif kind == "frame":
                    pycg.append(create_load_closure(cell))
                else:
                    pycg.load_local(cell_temps[id(cell)])
            pycg.append(create_instruction("BUILD_TUPLE", arg=len(owners)))

        pycg.call_const(types.FunctionType, [lambda: pycg.load_const(resume), lambda: pycg.load_const(tx.f_globals),
                                            lambda: pycg.load_const(resume.co_name), lambda: pycg.load_const(None),
                                            emit_closure])
        return
    if not resume.co_freevars:
        pycg.load_const(types.FunctionType(resume, func.__globals__, resume.co_name))
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
