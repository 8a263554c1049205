"""Convert one frame: trace it, compile its graph with the backend, build guards and replacement code.

``convert_frame(func, args, backend)`` is the whole pipeline for one cache miss:

1. wrap the frame's argument slots and closure cells as trackers (installing their guards);
2. run the :class:`~pyjit.trace.translator.Translator` to the frame's return;
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

from ..bytecode import disassemble
from ..config import config
from ..errors import BackendError, SkipFrame
from ..guards.guards import GuardKind, GuardSet
from ..guards.source import ClosureSource, LocalSource
from ..logs import get_logger
from ..trace.output_graph import OutputCodegen, OutputGraph, finalize_graph
from ..trace.pycodegen import PyCodegen, body_first_line, flat_arg_names
from ..trace.translator import Translator
# The translator loads its opcode handlers lazily (import cycle); load them here so their cost
# counts as `imports` of the first compile, not as `trace`.
from ..trace import opcodes as _opcodes  # noqa: F401, E402
from ..variables.builder import wrap
from ..variables.functions import CellVariable
from ..variables.torch_fns import install_global_state_guards
from . import coldstart

coldstart.note_imports(time.perf_counter() - _IMPORT_T0)

_graph_log = get_logger("graph_code")
_guard_log = get_logger("guards")
_times_log = get_logger("compile_times")
_bytecode_log = get_logger("bytecode")

_counter = [0]


@dataclasses.dataclass
class CompiledFrame:
    guards: GuardSet
    code: types.CodeType          # replacement code (flat signature)
    graph: torch.fx.GraphModule
    compiled: Callable[..., Any]
    arg_names: list[str]


def root_translator(func: types.FunctionType, args: tuple[Any, ...], output: OutputGraph) -> Translator:
    """The translator of the frame itself: argument slots and closure cells wrapped with sources."""
    code = func.__code__
    tx = Translator(code, {}, {}, func.__globals__, output)
    f_locals = {name: wrap(tx, value, LocalSource(name, i)) for i, (name, value) in enumerate(zip(flat_arg_names(code), args))}
    cells: dict[str, CellVariable] = {}
    for name in code.co_cellvars:
        cells[name] = CellVariable(f_locals.pop(name) if name in f_locals else None)
    for i, name in enumerate(code.co_freevars):
        cells[name] = CellVariable(real_cell=func.__closure__[i], source=ClosureSource(name, i))  # type: ignore[index]
    tx.locals = f_locals
    tx.cells = cells
    return tx


def convert_frame(func: types.FunctionType, args: tuple[Any, ...], backend: Callable[..., Any]) -> CompiledFrame:
    # One-time torch initialisation (first FakeTensorMode imports torch._dynamo) is not tracing.
    coldstart.ensure_initialized()
    t0 = time.perf_counter()
    code = func.__code__
    names = flat_arg_names(code)
    output = OutputGraph(code.co_qualname if hasattr(code, "co_qualname") else code.co_name)
    tx = root_translator(func, args, output)
    install_global_state_guards(tx)
    grad_mode = torch.is_grad_enabled()
    try:
        result = tx.run()
    finally:
        for ctx in reversed(output.entered_contexts):  # a break inside `with torch.autocast(...)`
            ctx.__exit__(None, None, None)
        torch._C._set_grad_enabled(grad_mode)
    if output.call_count == 0:
        raise SkipFrame(f"{code.co_name}: no tensor operations")
    t1 = time.perf_counter()

    return_line = tx.location().lineno  # tx stopped at the frame's return instruction
    cg = OutputCodegen(output)
    cg.capture_return(result)
    gm = finalize_graph(output, cg)
    if output.mutates and len(output.inputs) > 1:
        # The trace assumed its tensor inputs are distinct objects; in-place updates would
        # interact differently if they alias.
        output.guards.add(GuardKind.DISTINCT, None, extra=tuple(gi.source for gi in output.inputs))
    _graph_log.info("graph for %s (%s:%d):\n%s", code.co_name, code.co_filename, code.co_firstlineno, gm.code)
    example_inputs = [gi.value for gi in output.inputs]
    try:
        compiled = backend(gm, example_inputs)
    except Exception as e:
        raise BackendError(f"backend {getattr(backend, '__name__', backend)!r} failed on the graph of {code.co_name} "
                           f"({code.co_filename}:{code.co_firstlineno}): {type(e).__name__}: {e}") from e
    t2 = time.perf_counter()

    _counter[0] += 1
    fn_name = f"__pyjit_{_identifier(code.co_name)}_{_counter[0]}"
    pycg = PyCodegen(code)
    cg.emit(pycg, compiled, body_first_line(code), return_line)
    repl = pycg.finish(fn_name)
    if config.debug_dir or _bytecode_log.isEnabledFor(logging.INFO):
        text = disassemble(repl)
        _bytecode_log.info("replacement code for %s (%s:%d), graph inputs %s:\n%s", code.co_name, code.co_filename,
                           code.co_firstlineno, ", ".join(gi.source.name() for gi in output.inputs) or "(none)", text)
        if config.debug_dir:
            _dump(fn_name, gm, output, text)
    _guard_log.info("guards for %s (%s:%d):\n%s", code.co_name, code.co_filename, code.co_firstlineno, output.guards.describe())
    t3 = time.perf_counter()
    phases = {"trace": t1 - t0, "backend": t2 - t1, "codegen": t3 - t2}
    once = coldstart.take_one_time_phases()  # non-empty on the process's first compile only
    if once:
        phases = {**once, **phases}
    _times_log.info("%s: %s", code.co_name, " ".join(f"{k}={v * 1e3:.2f}ms" for k, v in phases.items()),
                    extra={"phases": phases})
    return CompiledFrame(output.guards, repl, gm, compiled, names)


def _dump(fn_name: str, gm: torch.fx.GraphModule, output: OutputGraph, disassembly: str) -> None:
    """Write the frame's graph code and replacement disassembly side by side in the debug dir."""
    assert config.debug_dir
    os.makedirs(config.debug_dir, exist_ok=True)
    base = os.path.join(config.debug_dir, re.sub(r"[^A-Za-z0-9_]+", "_", fn_name))
    with open(base + "_graph.py", "w", encoding="utf-8") as f:
        f.write(f"# graph inputs: {', '.join(gi.source.name() for gi in output.inputs)}\n{gm.code}")
    with open(base + "_replacement.txt", "w", encoding="utf-8") as f:
        f.write(disassembly + "\n")


def _identifier(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)
