"""Convert one frame: trace it, compile its graph with the backend, build guards and replacement code.

``convert_frame(func, args, backend)`` is the whole pipeline for one cache miss:

1. wrap the frame's argument slots and closure cells as trackers (installing their guards);
2. run the :class:`~pyjit.trace.translator.Translator` to the frame's return;
   A graph break restarts the trace and stops before the breaking step: the replacement of
   steps 4-5 then ends with the break (:mod:`pyjit.trace.breaks`: the instruction run natively,
   resume functions called) instead of the return;
3. no tensor operation recorded -> :class:`~pyjit.errors.SkipFrame` (the caller marks the code skip);
4. rebuild the return value (:class:`~pyjit.trace.output_graph.OutputCodegen`), finish the FX graph,
   hand it to the backend with the real example inputs;
5. assemble the replacement code with :mod:`pyjit.bytecode` (flat signature, same free
   variables, the user's filename and lines): read the graph inputs through their sources, call
   the compiled graph (a constant of the code), rebuild the return value. Its disassembly is
   logged on ``bytecode`` and, with ``PYJIT_DEBUG_DIR``, written next to the graph's code.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
import types
from typing import Any, Callable

# Time this module's imports (torch.fx, the trackers, the bytecode layer): reported once, as the
# ``imports`` phase of the first compile, instead of hiding in nobody's phase.
_IMPORT_T0 = time.perf_counter()

import torch  # noqa: E402 - after the import timer on purpose

from ..bytecode import decode, disassemble
from ..config import config
from ..errors import BackendError, GraphBreak, SkipFrame, Unsupported
from ..guards.guards import GuardKind, GuardSet
from ..guards.source import AttrSource, ClosureSource, LocalSource
from ..logs import get_logger
from ..trace.dynamic import DynamicPolicy, finalize_shape_guards
from ..trace.output_graph import OutputCodegen, OutputGraph, finalize_graph
from ..trace.pycodegen import PyCodegen, body_first_line, flat_arg_names
from ..trace.breaks import BreakPlan, BreakUnsupported, emit_break, plan_break
from ..trace.translator import StopAtBreak, Translator
# The translator loads its opcode handlers lazily (import cycle); load them here so their cost
# counts as `imports` of the first compile, not as `trace`.
from ..trace import opcodes as _opcodes  # noqa: F401, E402
from ..variables.builder import wrap
from ..variables.functions import CellVariable
from ..variables.torch_fns import install_global_state_guards
from ..report import events, profiler
from . import coldstart, warm_start
from .size_symbols import lift_size_symbols, wants_size_placeholders

coldstart.note_imports(time.perf_counter() - _IMPORT_T0)

_graph_log = get_logger("graph_code")
_guard_log = get_logger("guards")
_times_log = get_logger("compile_times")
_bytecode_log = get_logger("bytecode")
_break_log = get_logger("graph_breaks")
_dynamic_log = get_logger("dynamic")
_fallback_log = get_logger("fallbacks")

_counter = [0]
# Graphs compiled per function (file, first line, name): ``pyjit: forward graph 1`` names the
# second graph of ``forward`` in profiler traces and in the compile trace.
_graph_numbers: dict[tuple[str, int, str], int] = {}


@dataclasses.dataclass
class CompiledFrame:
    guards: GuardSet
    code: types.CodeType          # replacement code (flat signature)
    graph: torch.fx.GraphModule | None  # None: a break with no tensor work before it
    compiled: Callable[..., Any] | None
    arg_names: list[str]
    graph_break: GraphBreak | None = None  # the break this frame was compiled around
    resume_codes: list[types.CodeType] = dataclasses.field(default_factory=list)


def root_translator(func: types.FunctionType, args: tuple[Any, ...], output: OutputGraph) -> Translator:
    """The translator of the frame itself: argument slots and closure cells wrapped with sources."""
    code = func.__code__
    tx = Translator(code, {}, {}, func.__globals__, output)
    arg_names = flat_arg_names(code)
    # A resume function receives some cell variables as cell objects (no MAKE_CELL for them).
    made_cells = {inst.argval for inst in decode(code) if inst.opname == "MAKE_CELL"}
    f_locals: dict[str, Any] = {}
    cells: dict[str, CellVariable] = {}
    for i, (name, value) in enumerate(zip(arg_names, args)):
        if name in code.co_cellvars and name not in made_cells:
            try:
                contents = value.cell_contents
            except ValueError:
                cells[name] = CellVariable(None)
                continue
            cells[name] = CellVariable(wrap(tx, contents, AttrSource(LocalSource(name, i), "cell_contents")))
            continue
        f_locals[name] = wrap(tx, value, LocalSource(name, i))
    for name in code.co_cellvars:
        if name not in cells:
            cells[name] = CellVariable(f_locals.pop(name) if name in f_locals else None)
    for i, name in enumerate(code.co_freevars):
        cells[name] = output.side_effects.cell_variable(func.__closure__[i], ClosureSource(name, i))  # type: ignore[index]
    tx.locals = f_locals
    tx.cells = cells
    return tx


def _any_symbolic_input(gm: torch.fx.GraphModule) -> bool:
    """Whether a placeholder of ``gm`` is not a tensor of static sizes and strides: a tensor
    with a size or stride symbol (its TENSOR_MATCH leaves that dimension unchecked:
    trace/dynamic.py), a number, or anything else (compile_fx checks those per call)."""
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        v = node.meta.get("example_value")
        if not isinstance(v, torch.Tensor) or not all(isinstance(s, int) for s in (*v.shape, *v.stride())):
            return True
    return False


def convert_frame(func: types.FunctionType, args: tuple[Any, ...], backend: Callable[..., Any],
                  *, fullgraph: bool = False, dynamic: DynamicPolicy | None = None) -> CompiledFrame:
    """Trace, compile and build the replacement of one frame (see module docstring).

    A graph break (an :class:`~pyjit.errors.Unsupported` in the root frame or in a call it
    inlines) makes the frame trace again from scratch and stop before the step that met it; the
    replacement then runs the prefix graph, that instruction natively and the resume functions
    of the chain of frames (:mod:`pyjit.trace.breaks`). Where that chain cannot be resumed, the
    break moves out (before a ``with`` block in the way, or to the enclosing call), and at the
    root the frame runs eagerly. Under ``fullgraph`` the break is raised. Any step is a valid
    break point, so a restarted trace that stops elsewhere still gives a correct replacement."""
    # One-time torch initialisation (the first FakeTensorMode's imports) is not tracing.
    coldstart.ensure_initialized()
    t0 = time.perf_counter()
    code = func.__code__
    names = flat_arg_names(code)
    grad_mode = torch.is_grad_enabled()
    stop_step: int | None = None
    first_break: GraphBreak | None = None
    while True:
        output = OutputGraph(code.co_qualname if hasattr(code, "co_qualname") else code.co_name, dynamic)
        if not fullgraph:
            output.inline_budget = config.inline_instruction_budget
        tx = root_translator(func, args, output)
        tx.stop_step[0] = stop_step
        install_global_state_guards(tx)
        cg = OutputCodegen(output)
        plan: BreakPlan | None = None
        try:
            try:
                result = tx.run()
            except StopAtBreak as stop:
                assert first_break is not None
                try:
                    plan = plan_break(stop.frames, cg, grad_mode)
                except BreakUnsupported as e:
                    if e.retry_step is not None and e.retry_step != stop_step:
                        # Break before the `with` block instead: it runs natively from there.
                        stop_step = e.retry_step
                        continue
                    if len(stop.frames) == 1:
                        _break_log.info("graph break in %s (%s:%d) cannot resume (%s); the frame runs eagerly:\n%s",
                                        code.co_name, code.co_filename, code.co_firstlineno, e, first_break.format())
                        if events.enabled():
                            events.graph_break(first_break, f"cannot resume ({e}); the frame runs eagerly")
                        unresumable = Unsupported(first_break)
                        unresumable.logged = True  # type: ignore[attr-defined]  # policy: do not log twice
                        raise unresumable from None
                    # Break one frame further out instead: at the call that inlined the frame
                    # that cannot resume (the callee then runs as its own compiled frame).
                    _break_log.debug("graph break in %s: %s; breaking at the enclosing call", code.co_name, e)
                    stop_step = stop.frames[1].step_at_start
                    continue
        except Unsupported as e:
            if fullgraph or stop_step is not None or e.break_at is None:
                raise
            # Trace again and stop before the breaking step (nothing of this attempt kept).
            stop_step = e.break_at
            first_break = e.graph_break
            continue
        finally:
            for ctx in reversed(output.entered_contexts):  # a break inside `with torch.autocast(...)`
                ctx.__exit__(None, None, None)
            torch._C._set_grad_enabled(grad_mode)
        break
    if plan is None and output.call_count == 0:
        raise SkipFrame(f"{code.co_name}: no tensor operations")
    t1 = time.perf_counter()

    if plan is None:
        return_line = tx.location().lineno  # tx stopped at the frame's return instruction
        cg.capture_return(result)
    cg.capture_side_effects()  # the side-effect replay (trace/side_effects.py)
    try:
        finalize_shape_guards(output, dynamic)  # relations between symbolic sizes (trace/dynamic.py)
    except Exception as e:  # noqa: BLE001 - never a wrong guard: trace again with static shapes
        if dynamic is None or config.raise_on_internal_error:
            raise
        _dynamic_log.warning("pyjit: dynamic shapes failed for %s (%s:%d), tracing it with static shapes: %s: %s",
                             code.co_name, code.co_filename, code.co_firstlineno, type(e).__name__, e)
        return convert_frame(func, args, backend, fullgraph=fullgraph, dynamic=None)
    has_graph = output.call_count > 0 or bool(cg.out_nodes)
    gm = finalize_graph(output, cg)
    if output.module_in_training or _self_in_training(args):
        gm.meta["pyjit_modules_training"] = True  # backend/aot MODULES_TRAINING: save at once
    shared_memory = output.mutates and _inputs_share_memory([gi.value for gi in output.inputs])
    if output.mutates and len(output.inputs) > 1 and not shared_memory:
        # Compiled graphs update inputs functionally (new values written back after the graph),
        # which is eager's only while no input is a view of another: ``x = y[0]`` before a graph
        # break, then ``y.mul_(2)`` and a read of ``x`` after it.
        output.guards.add(GuardKind.DISTINCT, None, "memory", extra=tuple(gi.source for gi in output.inputs))
    compiled: Callable[..., Any] | None = None
    graph_key = (code.co_filename, code.co_firstlineno, code.co_name)
    graph_number = _graph_numbers.get(graph_key, 0)
    range_name = profiler.graph_range_name(code.co_name, graph_number)
    if has_graph:
        _graph_numbers[graph_key] = graph_number + 1
        gm.meta["pyjit_range_name"] = range_name  # training graphs name their backward after it
        _graph_log.info("graph for %s (%s:%d):\n%s", code.co_name, code.co_filename, code.co_firstlineno, gm.code)
        example_inputs = [gi.value for gi in output.inputs]
        if dynamic is None or not _any_symbolic_input(gm):
            # Every tensor input is pinned by a full TENSOR_MATCH guard (sizes, strides, dtype,
            # device, requires_grad; grad mode is a global-state guard): pyjit's backend skips
            # its own per-call input check (backend/compile_fx.py INPUTS_GUARDED). A trace under
            # a dynamic policy that made no size symbolic has the same full guards.
            gm.meta["pyjit_inputs_guarded"] = True  # compile_fx.INPUTS_GUARDED
        try:
            if shared_memory:
                # Inputs in one memory and in-place updates: the captured graph, run op by op on
                # the real tensors, updates and reads them as eager does.
                from ..backends import eager as captured

                _fallback_log.info("graph of %s (%s:%d) runs as captured: it updates inputs in place and some "
                                   "inputs share memory (views of one tensor)", code.co_name, code.co_filename,
                                   code.co_firstlineno)
                compiled = captured(gm, example_inputs)
            elif dynamic is not None and wants_size_placeholders(backend) and \
                    (lifted := lift_size_symbols(gm, example_inputs)) is not None:
                # A custom backend gets torch.compile's form: one int placeholder per size symbol.
                lifted_gm, lifted_inputs, adapt = lifted
                compiled = backend(lifted_gm, lifted_inputs)
                compiled = adapt(compiled) if compiled is not None else None
            else:
                compiled = backend(gm, example_inputs)
        except Exception as e:
            raise BackendError(f"backend {getattr(backend, '__name__', backend)!r} failed on the graph of {code.co_name} "
                               f"({code.co_filename}:{code.co_firstlineno}): {type(e).__name__}: {e}") from e
    if compiled is not None:
        _never_convert(compiled)  # e.g. a backend's own Python wrapper around the graph
        if not getattr(compiled, "pauses_frame_hook", False):
            # Frames the compiled graph runs (a backend's generated code, a custom operator's
            # Python kernel) are the backend's, not user code to compile as callees.
            compiled = _without_hook(compiled, range_name)
        from ..backends import _GuardedCompiled

        if isinstance(compiled, _GuardedCompiled):
            compiled.range_name = range_name
            compiled.prof = torch.autograd.profiler

        if not isinstance(compiled, _GuardedCompiled) and any(
                n.target is torch._C._set_grad_enabled for n in gm.graph.nodes):
            compiled = _restoring_grad_mode(compiled)  # pyjit's own backend restores it itself
    t2 = time.perf_counter()

    _counter[0] += 1
    fn_name = f"__pyjit_{_identifier(code.co_name)}_{_counter[0]}"
    pycg = PyCodegen(code)
    if plan is None:
        cg.emit(pycg, compiled, body_first_line(code), return_line)
    else:
        cg.emit_graph_call(pycg, compiled, body_first_line(code))
        cg.emit_side_effects(pycg)
        emit_break(plan, cg, pycg, func)
        assert first_break is not None
        native = (f"the rest of the frame runs natively from {plan.instruction.opname} on, in"
                  if plan.resumes_at_break else f"then {plan.instruction.opname} runs natively, resuming in")
        _break_log.info("graph break in %s (%s:%d), compiled around it: %s graph, %s %s:\n%s", code.co_name,
                        code.co_filename, code.co_firstlineno, "a" if has_graph else "no", native,
                        ", ".join(c.resume.co_name for c in plan.continuations) or "(returns)", first_break.format())
        if events.enabled():
            events.graph_break(first_break, f"compiled around it: {native} "
                                            f"{', '.join(c.resume.co_name for c in plan.continuations) or '(returns)'}")
    repl = pycg.finish(fn_name)
    if config.debug_dir or _bytecode_log.isEnabledFor(logging.INFO):
        text = disassemble(repl)
        _bytecode_log.info("replacement code for %s (%s:%d), graph inputs %s:\n%s", code.co_name, code.co_filename,
                           code.co_firstlineno, ", ".join(gi.source.name() for gi in output.inputs) or "(none)", text)
        if config.debug_dir:
            _dump(fn_name, gm, output, text, [c.resume for c in plan.continuations] if plan else [])
    _guard_log.info("guards for %s (%s:%d):\n%s", code.co_name, code.co_filename, code.co_firstlineno, output.guards.describe())
    t3 = time.perf_counter()
    phases = {"trace": t1 - t0, "backend": t2 - t1, "codegen": t3 - t2}
    once = coldstart.take_one_time_phases()  # non-empty on the process's first compile only
    if once:
        phases = {**once, **phases}
    _times_log.info("%s: %s", code.co_name, " ".join(f"{k}={v * 1e3:.2f}ms" for k, v in phases.items()),
                    extra={"phases": phases})
    if events.enabled():
        _trace_compile(code, gm if has_graph else None, output, range_name, graph_number, phases, t3)
    frame = CompiledFrame(output.guards, repl, gm if has_graph else None, compiled, names, first_break,
                          [c.resume for c in plan.continuations] if plan else [])
    warm_start.record(func, frame, [gi.value for gi in output.inputs], backend)  # for later processes
    return frame


def _trace_compile(code: types.CodeType, gm: torch.fx.GraphModule | None, output: OutputGraph, range_name: str,
                   graph_number: int, phases: dict[str, float], end: float) -> None:
    """The compile trace's ``graph`` event and the frontend's phase spans (pyjit/report)."""
    if gm is not None:
        nodes = len(gm.graph.nodes)
        events.emit("graph", id=events.next_id("g"), name=range_name.removeprefix("pyjit: "), number=graph_number,
                    function=code.co_name, file=code.co_filename, line=code.co_firstlineno,
                    code=gm.code, nodes=nodes, ops=sum(1 for n in gm.graph.nodes if n.op.startswith("call_")),
                    inputs=[gi.source.name() for gi in output.inputs], guards=[g.describe() for g in output.guards.guards])
    else:
        events.emit("guards", function=code.co_name, file=code.co_filename, line=code.co_firstlineno,
                    guards=[g.describe() for g in output.guards.guards])
    # perf_counter durations, placed on the wall clock by their end (the trace's ``t``).
    now_wall = time.time() - (time.perf_counter() - end)
    start = now_wall - sum(phases.values())
    for name, dur in phases.items():
        events.record_span("replacement" if name == "codegen" else name, code.co_name, start, dur)
        start += dur


def _inputs_share_memory(values: list[Any]) -> bool:
    """Some two tensors among ``values`` use the same storage."""
    seen: set[Any] = set()
    for v in values:
        if not isinstance(v, torch.Tensor) or v.layout != torch.strided or v.device.type == "meta":
            continue
        key = (v.device, v.untyped_storage().data_ptr())
        if key[1] == 0:
            continue  # an empty storage holds nothing to share
        if key in seen:
            return True
        seen.add(key)
    return False


def _never_convert(compiled: Callable[..., Any]) -> None:
    """Mark the compiled callable's own code skip: it runs inside the jitted call, and a
    backend's Python wrapper is not user code to compile as a callee."""
    from .policy import _C

    code = getattr(getattr(compiled, "__func__", compiled), "__code__", None)
    if _C is not None and isinstance(code, types.CodeType):
        _C.mark_skip(code)


def _restoring_grad_mode(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` restoring the caller's grad mode if it raises.

    A graph that switches grad mode inside (an optimizer step's ``no_grad`` decorator, a
    ``with torch.no_grad():`` block) records the switches as calls; eager's context managers
    restore the mode on an exception, a graph stopped half-way would not (the next forward of
    the program would then silently run without autograd).
    """
    def call(*args: Any) -> Any:
        mode = torch.is_grad_enabled()
        try:
            return compiled(*args)
        except BaseException:
            torch._C._set_grad_enabled(mode)
            raise

    for attr in ("pauses_frame_hook",):
        if hasattr(compiled, attr):
            setattr(call, attr, getattr(compiled, attr))
    _never_convert(call)
    return call


def _self_in_training(args: tuple[Any, ...]) -> bool:
    """The frame is a method of an ``nn.Module`` in training mode (``pyjit.jit(model)``: the
    root module's ``forward``). Read without running user code: exact MRO and instance dict."""
    if not args:
        return False
    first = args[0]
    return torch.nn.Module in type(first).__mro__ and getattr(first, "__dict__", {}).get("training") is True


def _without_hook(compiled: Callable[..., Any], range_name: str) -> Callable[..., Any]:
    """Run ``compiled`` with this thread's frame callback off, as torch.compile runs its graphs
    (pyjit's own backend does this itself: ``pauses_frame_hook``), inside a profiler range
    named ``range_name`` while a torch profiler records."""
    from .policy import _C

    if _C is None:
        return compiled
    set_callback = _C.set_callback
    prof = torch.autograd.profiler

    def graph_without_hook(*args: Any) -> Any:
        previous = set_callback(None)
        try:
            if prof._is_profiler_enabled:
                with prof.record_function(range_name):
                    return compiled(*args)
            return compiled(*args)
        finally:
            set_callback(previous)

    graph_without_hook.__wrapped__ = compiled  # type: ignore[attr-defined]
    graph_without_hook.pauses_frame_hook = True  # type: ignore[attr-defined]
    return graph_without_hook


def _dump(fn_name: str, gm: torch.fx.GraphModule, output: OutputGraph, disassembly: str,
          resumes: list[types.CodeType]) -> None:
    """Write the frame's graph code and replacement disassembly side by side in the debug dir."""
    assert config.debug_dir
    os.makedirs(config.debug_dir, exist_ok=True)
    base = os.path.join(config.debug_dir, re.sub(r"[^A-Za-z0-9_]+", "_", fn_name))
    with open(base + "_graph.py", "w", encoding="utf-8") as f:
        f.write(f"# graph inputs: {', '.join(gi.source.name() for gi in output.inputs)}\n{gm.code}")
    with open(base + "_replacement.txt", "w", encoding="utf-8") as f:
        f.write(disassembly + "\n")
    for resume in resumes:  # each resume function's disassembly next to the graph it follows
        with open(f"{base}_{_identifier(resume.co_name)}.txt", "w", encoding="utf-8") as f:
            f.write(f"# {resume.co_qualname}: resume function ({resume.co_filename})\n{disassemble(resume)}\n")


def _identifier(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)
