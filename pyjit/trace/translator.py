"""The symbolic bytecode interpreter: one :class:`Translator` per (root or inlined) frame.

It walks the frame's instructions (decoded by :func:`pyjit.bytecode.decode`: jump targets as
instruction references, names and constants resolved, the same model on 3.11-3.13), keeping a
stack and locals of variable trackers.
Each opcode's handler lives in the registry :data:`pyjit.trace.opcodes.OPCODES` (split by
family). Jumps whose condition is a Python constant are followed; loops over constant-length
iterables unroll naturally because iterators are materialised. Calls into user Python functions
are inlined by running a child Translator on the callee's code (depth-limited).

The root translator's result is the traced return value; the graph, guards and fake mode live
on the shared :class:`~pyjit.trace.output_graph.OutputGraph`.

Graph breaks: all frames of one trace count *steps* together; an :class:`Unsupported` records
the step at which its innermost frame's instruction began (``break_at``), and a trace restarted
with ``stop_step`` raises :class:`StopAtBreak` there, carrying the chain of frames
(:mod:`pyjit.trace.breaks` builds the replacement from it). An exception the traced code raises
(kind ``exception``, a known class) inside a ``try`` of the same frame continues at the
handler, as CPython does (``_catchable``/``_enter_handler``).
"""
from __future__ import annotations

import builtins
import dataclasses
import linecache
import sys
import types
from typing import TYPE_CHECKING, Any

from ..bytecode import Instruction, decode
from ..config import config
from ..errors import GraphBreak, Unsupported, UserLocation
from ..guards.source import AttrSource, GlobalSource, ItemSource, ModuleGlobalSource, Source
from .graph_breaks import unsupported

if TYPE_CHECKING:
    from ..variables.base import VariableTracker
    from ..variables.functions import CellVariable
    from .output_graph import OutputGraph

PY = sys.version_info[:2]


def _grad_enabled() -> bool:
    global _grad_enabled
    import torch

    _grad_enabled = torch.is_grad_enabled  # type: ignore[assignment]  # bound once, per step after
    return torch.is_grad_enabled()


def _is_with_exit(handler: object) -> bool:
    """A ``with`` block's exit handler: PUSH_EXC_INFO then WITH_EXCEPT_START (3.11-3.13)."""
    return bool(getattr(handler, "lasti", False))


@dataclasses.dataclass(frozen=True)
class DecodedCode:
    """A code object's instructions as the interpreter walks them (cached per code object).

    ``instructions`` come from :func:`pyjit.bytecode.decode`: jump targets are
    :class:`~pyjit.bytecode.Instruction` references (``inst.target``), ``arg`` is the raw
    argument (flag bits included) and ``argval`` its meaning. ``index`` maps ``id(instruction)``
    to its position (for jumps); ``lines[i]`` is the source line of instruction ``i``, carried
    forward over instructions without a location so every graph-break message has a line.
    """

    instructions: list[Instruction]
    index: dict[int, int]
    lines: list[int]


_decoded: dict[types.CodeType, DecodedCode] = {}


def decode_for_trace(code: types.CodeType) -> DecodedCode:
    """The decoded instructions of ``code`` (cached; decoding is the slow part of inlining)."""
    hit = _decoded.get(code)
    if hit is not None:
        return hit
    insts = decode(code)
    lines: list[int] = []
    line = code.co_firstlineno
    for ins in insts:
        if ins.lineno is not None:
            line = ins.lineno
        lines.append(line)
    result = DecodedCode(insts, {id(ins): i for i, ins in enumerate(insts)}, lines)
    if len(_decoded) > 4096:
        _decoded.clear()
    _decoded[code] = result
    return result


class StopAtBreak(Exception):
    """Raised when a restarted trace reaches its planned break point; ``frames`` lists the
    translators from the one that stopped (innermost) out to the root."""

    def __init__(self, innermost: "Translator") -> None:
        super().__init__()
        self.frames: list[Translator] = [innermost]


class Translator:
    """Interprets one frame symbolically."""

    def __init__(
        self,
        code: types.CodeType,
        f_locals: dict[str, "VariableTracker"],
        cells: dict[str, "CellVariable"],
        f_globals: dict[str, Any],
        output: "OutputGraph",
        parent: "Translator | None" = None,
        fn_source: Source | None = None,
        root_globals: dict[str, Any] | None = None,
    ) -> None:
        self.code = code
        self.decoded = decode_for_trace(code)
        self.instructions = self.decoded.instructions
        self.locals = f_locals
        self.cells = cells
        self.f_globals = f_globals
        self.output = output
        self.parent = parent
        self.fn_source = fn_source
        self.root_globals = root_globals if root_globals is not None else f_globals
        self.depth = 0 if parent is None else parent.depth + 1
        self.stack: list[VariableTracker] = []
        self.ip = 0
        self.current: Instruction | None = None
        self.current_index = -1  # position of ``current`` in ``instructions``
        self.return_value: VariableTracker | None = None
        self.kw_names: tuple[str, ...] | None = None
        self.yielded: list[VariableTracker] | None = None  # set when inlining a generator body
        self.steps = parent.steps if parent is not None else [0]
        # A break point is a step number (all frames of the trace count steps together, so a
        # trace run again from scratch reaches the same point at the same step); a restarted
        # trace stops when it is about to run step ``stop_step[0]``, in whichever frame.
        self.stop_step: list[int | None] = parent.stop_step if parent is not None else [None]
        self.direct_call_pending = False  # see call_instruction
        self.with_steps: dict[int, int] = {}  # stack slot of a traced `with` exit -> its BEFORE_WITH step
        self.comprehension_steps: dict[int, int] = {}  # inlined comprehension's first index -> its step
        self.direct_return = False  # this frame's return value is its caller's call result
        self.step_at_start = -1   # the step at which ``current`` started
        self.depth_at_start = 0   # the stack depth when ``current`` started
        # An inlined frame: the step and graph size when its call began (inline budget).
        self.inline_start_step = self.steps[0]
        self.inline_start_calls = output.call_count

    # -- stack helpers -----------------------------------------------------------------------
    def push(self, v: "VariableTracker") -> None:
        self.stack.append(v)

    def pop(self) -> "VariableTracker":
        return self.stack.pop()

    def popn(self, n: int) -> list["VariableTracker"]:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump(self, inst: Instruction) -> None:
        assert inst.target is not None, inst
        self.ip = self.decoded.index[id(inst.target)]

    # -- the step loop -----------------------------------------------------------------------
    def run(self) -> "VariableTracker":
        from .opcodes import OPCODES

        insts = self.instructions
        max_steps = config.trace_instruction_limit
        budget = self.output.inline_budget if self.parent is not None else None
        while self.return_value is None:
            if self.ip >= len(insts):
                raise AssertionError(f"fell off the end of {self.code.co_name}")
            inst = insts[self.ip]
            self.current_index = self.ip
            self.current = inst
            self.output.current_tx = self  # whose file:line a specialisation is logged with
            self.steps[0] += 1
            step = self.steps[0]
            if step == self.stop_step[0]:
                # A restarted trace reached its break point: the state is as before `inst`.
                raise StopAtBreak(self)
            self.step_at_start = step
            self.depth_at_start = len(self.stack)
            contexts_at_start = len(self.output.entered_contexts)
            grad_at_start = _grad_enabled()
            self.ip += 1
            try:
                if step > max_steps:
                    unsupported("loop_limit", f"more than {max_steps} instructions")
                if budget is not None and step - self.inline_start_step > budget and \
                        self.output.call_count == self.inline_start_calls:
                    self.run_call_natively(f"{self.code.co_name} ran {budget} instructions without tensor work")
                handler = OPCODES.get(inst.opname)
                if handler is None:
                    unsupported("unsupported_opcode", inst.opname)
                handler(self, inst)
            except StopAtBreak as stop:
                stop.frames.append(self)  # a frame that was inlining the one that stopped
                raise
            except Unsupported as e:
                exc_type = self._catchable(e, inst, contexts_at_start, grad_at_start)
                if exc_type is not None:
                    self._enter_handler(inst, exc_type, e)
                    continue
                located = self._locate(e)
                if located.break_at is None:
                    # The innermost frame that ran an instruction for it: break before that step.
                    located.break_at = step
                raise located from None
        return self.return_value

    def run_call_natively(self, detail: str, *, calling: bool = False) -> None:
        """Stop tracing the pure-Python call this frame is part of (budgets in config): break
        before the call instruction that inlined the outermost enclosing inlined frame that has
        recorded no graph node since its call began, so that whole call runs natively (as its
        own frame under the hook, itself only traced if it reaches tensors). ``calling``: this
        frame is running the call of a function it has not inlined yet (that call is the
        innermost candidate)."""
        from ..errors import Unsupported as _Unsupported

        break_at = self.step_at_start if calling else None
        t: Translator = self
        # Frames inlined after a pure frame began are pure too: walk outwards while pure. A
        # comprehension, generator expression or lambda is made inside the traced code: the
        # call that runs it natively could not rebuild it, so it is never the one to break at.
        while t.parent is not None and t.inline_start_calls == self.output.call_count:
            if not t.code.co_name.startswith("<"):
                break_at = t.parent.step_at_start
            t = t.parent
        if break_at is None:
            self.inline_start_step = self.steps[0]  # nothing to run natively: a new budget
            return
        try:
            unsupported("inline_budget", detail)
        except _Unsupported as e:
            e.break_at = break_at
            raise

    # -- exceptions raised by the traced code ------------------------------------------------
    def _catchable(self, e: Unsupported, inst: Instruction, contexts_at_start: int, grad_at_start: bool) -> type | None:
        """The exception class a ``try`` around ``inst`` in this frame catches for ``e``, when
        pyjit may model it: ``e`` is an exception the code raises (kind ``exception``) of a
        known class, ``inst`` is covered by an ``except``/``finally`` handler (not a ``with``
        block's exit, which would call ``__exit__``), and no grad-mode or autocast state was
        changed by frames the exception unwound (their ``with`` exits would restore it)."""
        handler = inst.exn
        if handler is None or e.graph_break.kind != "exception" or self.yielded is not None:
            return None
        if handler.target.opname != "PUSH_EXC_INFO" or _is_with_exit(handler):
            return None
        if len(self.output.entered_contexts) != contexts_at_start or _grad_enabled() != grad_at_start:
            return None
        exc_type = getattr(e, "exc_type", None)
        if exc_type is None:
            from ..variables.misc import raised_exception_type

            exc_type = getattr(builtins, raised_exception_type(e), None)
        if not (isinstance(exc_type, type) and issubclass(exc_type, Exception)):
            return None  # unknown, or BaseException-only (KeyboardInterrupt...): never modelled
        return exc_type

    def _enter_handler(self, inst: Instruction, exc_type: type, e: Unsupported) -> None:
        """Continue at the handler as CPython does: the stack cut to the handler's depth, the
        offset of the raising instruction (``lasti`` handlers), then the exception."""
        from ..variables.constant import ConstantVariable
        from ..variables.misc import CaughtExceptionVariable

        handler = inst.exn
        assert handler is not None
        del self.stack[handler.depth:]
        if handler.lasti:
            self.push(ConstantVariable(inst.offset))
        exc = getattr(e, "exc_value", None)
        self.push(exc if exc is not None else CaughtExceptionVariable(exc_type, []))
        self.ip = self.decoded.index[id(handler.target)]

    def _locate(self, e: Unsupported) -> Unsupported:
        gb = e.graph_break
        if gb.location is not None:
            return e
        chain = []
        t = self.parent
        while t is not None:
            chain.append(t.location())
            t = t.parent
        located = GraphBreak(gb.kind, gb.explanation, self.location(), tuple(chain), gb.hint)
        new = type(e)(located)
        new.break_at = e.break_at
        for attr in ("exc_type", "exc_value"):
            if hasattr(e, attr):
                setattr(new, attr, getattr(e, attr))
        return new

    # -- locations ---------------------------------------------------------------------------
    def location(self) -> UserLocation:
        line = self.decoded.lines[self.current_index] if self.current_index >= 0 else self.code.co_firstlineno
        text = linecache.getline(self.code.co_filename, line)
        return UserLocation(self.code.co_filename, line, self.code.co_name, text)

    def stack_trace(self) -> str:
        """The user frames chain (outermost first), formatted like a traceback."""
        frames = []
        t: Translator | None = self
        while t is not None:
            loc = t.location()
            frames.append(f'  File "{loc.filename}", line {loc.lineno}, in {loc.function}\n    {loc.source_line.strip()}\n')
            t = t.parent
        return "".join(reversed(frames))

    # -- globals -----------------------------------------------------------------------------
    def global_source(self, name: str) -> Source | None:
        if self.f_globals is self.root_globals:
            return GlobalSource(name)
        if self.fn_source is not None:
            return ItemSource(AttrSource(self.fn_source, "__globals__"), name)
        from ..frame.policy import is_library_code

        if is_library_code(self.code):
            return None  # library code (torch.nn...) read without guards: assumed not to change
        module = self.f_globals.get("__name__")
        mod_obj = sys.modules.get(module) if isinstance(module, str) else None
        if mod_obj is not None and getattr(mod_obj, "__dict__", None) is self.f_globals:
            return ModuleGlobalSource(module, name)
        # A function whose globals are not a module's (exec'd code): its globals are read
        # unguarded. Documented limitation.
        return None

    def load_global(self, name: str) -> "VariableTracker":
        from ..variables.builder import wrap

        if name in self.f_globals:
            return wrap(self, self.f_globals[name], self.global_source(name))
        builtins_ns = self.f_globals.get("__builtins__", __builtins__)
        if isinstance(builtins_ns, types.ModuleType):
            builtins_ns = builtins_ns.__dict__
        if name in builtins_ns:
            return wrap(self, builtins_ns[name], None)
        unsupported("exception", f"NameError: name {name!r} is not defined")

    # -- calls -------------------------------------------------------------------------------
    def call(self, fn: "VariableTracker", args: list["VariableTracker"], kwargs: dict[str, "VariableTracker"]) -> "VariableTracker":
        return fn.call_function(self, args, kwargs)

    def call_instruction(self, fn: "VariableTracker", args: list["VariableTracker"],
                         kwargs: dict[str, "VariableTracker"]) -> "VariableTracker":
        """The call of a CALL/CALL_FUNCTION_EX instruction. When ``fn`` is a Python function,
        method or module, the frame inlined for it returns the instruction's result (a graph
        break inside it can resume there: see pyjit.trace.breaks); other callables (a class
        running ``__init__``, map/filter...) may inline frames whose return value is not it."""
        self.direct_call_pending = _inlines_as_call(fn)
        try:
            return fn.call_function(self, args, kwargs)
        finally:
            self.direct_call_pending = False

    def inline(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        args: list["VariableTracker"],
        kwargs: dict[str, "VariableTracker"],
        *,
        fn_source: Source | None,
        defaults: tuple[Any, ...] | None,
        kwdefaults: dict[str, Any] | None,
        cells: tuple["CellVariable", ...],
    ) -> "VariableTracker":
        """Run ``code`` symbolically with the given tracked arguments; return its result."""
        from ..variables.functions import CellVariable
        from ..variables.lists import ListIteratorVariable

        if self.depth + 1 > config.inline_depth_limit:
            unsupported("inline_depth", f"inlining {code.co_name}")
        if self.output.inline_budget is not None:
            recursion = 0
            t: Translator | None = self
            while t is not None:
                recursion += t.code is code
                t = t.parent
            pure = self.inline_start_calls == self.output.call_count if self.parent is not None \
                else self.output.call_count == 0
            if recursion > config.inline_recursion_limit and pure:
                # Recursion without tensor work: the outermost pure call runs natively.
                # Recursion that records tensor work keeps inlining (inline_depth_limit).
                self.run_call_natively(f"{code.co_name} recursed more than {config.inline_recursion_limit} times",
                                       calling=True)
        is_gen = bool(code.co_flags & (0x20 | 0x80 | 0x200))
        if code.co_flags & (0x80 | 0x200):
            unsupported("generator", f"{code.co_name} is a coroutine")
        f_locals = bind_arguments(code, args, kwargs, defaults, kwdefaults)
        cellmap: dict[str, CellVariable] = {}
        for name in code.co_cellvars:
            cellmap[name] = CellVariable(f_locals.pop(name) if name in f_locals else None)
        for name, cell in zip(code.co_freevars, cells):
            cellmap[name] = cell
        child = Translator(code, f_locals, cellmap, f_globals, self.output, parent=self,
                           fn_source=fn_source, root_globals=self.root_globals)
        if _passes_tensors([*args, *kwargs.values()]):
            # A call handed tensors (building an output object around them, say) is tensor
            # work even while it records no graph node: never run natively by the budget.
            child.inline_start_calls = -1
        child.direct_return = self.direct_call_pending  # only the first frame a call inlines
        self.direct_call_pending = False
        if is_gen:
            # A generator (e.g. a generator expression): run it to exhaustion, collecting yields.
            child.yielded = []
            child.run()
            return ListIteratorVariable(child.yielded)
        result = child.run()
        return result


def _inlines_as_call(fn: "VariableTracker") -> bool:
    """Calling ``fn`` inlines one Python frame whose return value is the call's result: a
    function, a bound method, a module, ``functools.partial`` of one, or an object whose class
    defines ``__call__`` in Python (its ``__call__`` is the frame)."""
    from ..variables.functions import NestedFunctionVariable, PartialVariable, UserFunctionVariable, UserMethodVariable
    from ..variables.nn_module import NNModuleVariable
    from ..variables.user_defined import UserDefinedObjectVariable

    if isinstance(fn, PartialVariable):
        return _inlines_as_call(fn.func)
    from ..variables.objects import ObjectVariable

    if type(fn) is UserDefinedObjectVariable or type(fn) is ObjectVariable:  # read from outside / built here
        from ..variables.class_members import lookup_class_attr

        cls = fn.cls if isinstance(fn, ObjectVariable) else type(fn.value)
        return isinstance(lookup_class_attr(cls, "__call__"), types.FunctionType)
    return isinstance(fn, (UserFunctionVariable, UserMethodVariable, NNModuleVariable, NestedFunctionVariable))


def _passes_tensors(values: list["VariableTracker"], depth: int = 2) -> bool:
    """Whether any of the trackers is a tensor or symbolic value, or a list/tuple/dict holding
    one (``depth`` levels down)."""
    from ..variables.dicts import DictVariable
    from ..variables.lists import BaseListVariable
    from ..variables.symbolic import SymNodeVariable
    from ..variables.tensor import TensorVariable

    for v in values:
        if isinstance(v, (TensorVariable, SymNodeVariable)):
            return True
        if depth > 0:
            if isinstance(v, BaseListVariable) and _passes_tensors(v.items, depth - 1):
                return True
            if isinstance(v, DictVariable) and _passes_tensors(list(v.items.values()), depth - 1):
                return True
    return False


def bind_arguments(
    code: types.CodeType,
    args: list["VariableTracker"],
    kwargs: dict[str, "VariableTracker"],
    defaults: tuple[Any, ...] | None,
    kwdefaults: dict[str, Any] | None,
) -> dict[str, "VariableTracker"]:
    """Python's argument binding, over trackers. Defaults are trackers already."""
    from ..variables.dicts import DictVariable
    from ..variables.lists import TupleVariable

    nargs = code.co_argcount
    nkw = code.co_kwonlyargcount
    names = code.co_varnames
    posonly = code.co_posonlyargcount
    has_varargs = bool(code.co_flags & 0x04)
    has_varkw = bool(code.co_flags & 0x08)
    result: dict[str, VariableTracker] = {}
    for i, a in enumerate(args[:nargs]):
        result[names[i]] = a
    extra = args[nargs:]
    if extra and not has_varargs:
        unsupported("exception", f"TypeError: {code.co_name}() takes {nargs} positional arguments but {len(args)} were given")
    varkw: dict[str, VariableTracker] = {}
    for k, v in kwargs.items():
        idx = _index_of(names, k, nargs + nkw)
        if idx is None or idx < posonly:
            if has_varkw:
                varkw[k] = v
                continue
            unsupported("exception", f"TypeError: {code.co_name}() got an unexpected keyword argument {k!r}")
        if k in result:
            unsupported("exception", f"TypeError: {code.co_name}() got multiple values for argument {k!r}")
        result[k] = v
    ndef = len(defaults) if defaults else 0
    for i in range(nargs):
        n = names[i]
        if n not in result:
            j = i - (nargs - ndef)
            if defaults is None or j < 0:
                unsupported("exception", f"TypeError: {code.co_name}() missing required argument {n!r}")
            result[n] = defaults[j]
    for i in range(nargs, nargs + nkw):
        n = names[i]
        if n not in result:
            if not kwdefaults or n not in kwdefaults:
                unsupported("exception", f"TypeError: {code.co_name}() missing keyword-only argument {n!r}")
            result[n] = kwdefaults[n]
    pos = nargs + nkw
    if has_varargs:
        result[names[pos]] = TupleVariable(list(extra))
        pos += 1
    if has_varkw:
        result[names[pos]] = DictVariable(varkw)
    return result


def _index_of(names: tuple[str, ...], name: str, limit: int) -> int | None:
    for i in range(limit):
        if names[i] == name:
            return i
    return None
