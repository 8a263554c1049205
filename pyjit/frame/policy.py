"""What to do with a frame the C hook hands to Python (the ``pyjit._C`` callback), and the
pure-Python runtime used when the C core is not built.

Decisions, in order, for ``callback(func, args)``:

- ``DistributedDataParallel.forward`` runs natively (never marked skip) and registers the
  forward of the module it wraps as a target with the options of the call or ``enable()``
  (:mod:`pyjit.distributed.ddp`), which is then compiled even when its class is torch's own;
- library/generated code (torch, pyjit, the stdlib, runtime packages such as Triton, ``<...>``
  files such as FX's generated ``forward``) is marked *skip* so it never calls back again;
- any other frame called while a jitted call runs (or under ``pyjit.enable()``) is a *compiled
  callee*: registered with the options of the call that installed the callback (never
  ``fullgraph``), so code running natively between graphs still compiles what it calls;
  ``pyjit.disable``d functions are skipped;
- a frame that reaches no tensor (arguments, closure cells, the globals it names:
  :mod:`pyjit.frame.precheck`) is not traced: it runs natively and gets the C core's *plain
  mark* (later calls with arguments of the same exact types run natively with no callback);
- otherwise convert the frame (:func:`pyjit.frame.convert.convert_frame`):
  * no tensor operation -> mark skip (one look only);
  * a graph break -> compiled around it (``pyjit.trace.breaks``); ``GraphBreakError`` under
    ``fullgraph=True``; where it cannot be resumed, log it on ``graph_breaks``, mark skip,
    run eagerly;
  * an internal error -> one warning line on ``fallbacks`` naming the frame's file:line, once
    per function, and run natively; its traceback only on the channel's verbose form
    (``PYJIT_LOGS=+fallbacks``) and in ``<PYJIT_DEBUG_DIR>/fallbacks/`` (raised instead under
    ``config.raise_on_internal_error``). An exception of the program's own met while tracing
    (``lst.pop()`` on an empty list) is no failure: an ``exception`` graph break, so the
    program's code raises it;
  * a recompile (the code already has entries) is logged on ``recompiles`` with the first
    failing guard of each previous entry, in source form, expected vs actual.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import sysconfig
import threading
import traceback
import types
from typing import Any, Callable

from ..config import config
from ..errors import BackendError, GraphBreakError, SkipFrame, Unsupported
from ..guards.source import FrameValues
from ..logs import get_logger
from ..report import events, progress
from ..report import profiler as _profiler
from . import stance, warm_start

try:
    from .. import _C
except ImportError:  # the C extension is not built: JitFunction runs its own Python cache
    _C = None  # type: ignore[assignment]

_break_log = get_logger("graph_breaks")
_recompile_log = get_logger("recompiles")
_fallback_log = get_logger("fallbacks")


@dataclasses.dataclass(eq=False)
class JitOptions:
    backend: Callable[..., Any]
    fullgraph: bool = False
    dynamic: bool | None = None

    def same_as(self, other: "JitOptions") -> bool:
        # Backends compare by identity: two distinct (even equal-looking) backends are two caches.
        return self.backend is other.backend and self.fullgraph == other.fullgraph and self.dynamic == other.dynamic


@dataclasses.dataclass
class CodeState:
    """What Python remembers about a jit target's code object (the entries themselves live in C)."""

    options: JitOptions
    code: types.CodeType | None = None
    frames: list[Any] = dataclasses.field(default_factory=list)  # CompiledFrame, newest last
    compiles: int = 0
    broke: bool = False
    callee: bool = False  # registered as a compiled callee (not by pyjit.jit/enable): reset forgets it
    # The forward of a module DistributedDataParallel wraps (pyjit/distributed/ddp.py): compiled
    # with the options it was registered with, even when its class is library code.
    wrapped_by_ddp: bool = False
    # Sizes and scalar values earlier traces saw (automatic dynamic shapes, trace/dynamic.py).
    shape_memory: Any = dataclasses.field(default_factory=lambda: _shape_memory())

    def dynamic_policy(self) -> Any:
        """How the next trace chooses symbols (a ``DynamicPolicy``); None for backends that
        need static graphs (they specialise on the example inputs' sizes)."""
        from ..backends import accepts_symbolic

        if not accepts_symbolic(self.options.backend):
            return None
        from ..trace.dynamic import DynamicPolicy

        name = self.code.co_name if self.code is not None else ""
        return DynamicPolicy(self.options.dynamic, self.shape_memory, name)


def _shape_memory() -> Any:
    from ..trace.dynamic import ShapeMemory  # torch-free callers never build a CodeState with it

    return ShapeMemory()


# Keyed by id(code): equal-but-distinct code objects (a clone made for a second backend) are
# different targets with their own cache entries. CodeState.code keeps the key alive.
_targets: dict[int, CodeState] = {}
# pyjit.enable()'s options, per thread (one thread's enable() never changes another's backend).
_enable_state = threading.local()


def enable_stack() -> list[JitOptions]:
    """This thread's stack of active ``pyjit.enable()`` options (innermost last)."""
    stack = getattr(_enable_state, "stack", None)
    if stack is None:
        stack = _enable_state.stack = []
    return stack


def lookup_target(code: types.CodeType) -> CodeState | None:
    return _targets.get(id(code))


def register_target(code: types.CodeType, options: JitOptions) -> CodeState:
    state = _targets.get(id(code))
    if state is None or not state.options.same_as(options):
        state = CodeState(options, code)
        _targets[id(code)] = state
    if _C is not None:
        _C.mark_skip(code, False)  # it may have been marked while running inside another jitted call
        _C.set_plain(code, None)
    return state


def reset() -> None:
    _failures_logged.clear()
    convert = sys.modules.get("pyjit.frame.convert")
    if convert is not None:
        convert._graph_numbers.clear()  # graph names (``f graph 0``) start again
    for key in [k for k, state in _targets.items() if state.callee]:
        del _targets[key]  # the next jitted call that reaches them registers them with its options
    for state in _targets.values():
        state.frames.clear()
        state.compiles = 0
        state.broke = False
        state.shape_memory.clear()
    if _C is not None:
        _C.reset()


# Codes of functions wrapped by pyjit.disable(fn): never traced (a call to one is a graph break).
_disabled_codes: "set[types.CodeType]" = set()

# Observers of frame conversions (pyjit.explain): called with (event, code, detail) where event is
# "compiled" (detail: the CompiledFrame), "eager" (detail: the GraphBreak that made the frame run
# eagerly) or "skipped" (detail: the reason).
_observers: list[Callable[[str, types.CodeType, Any], None]] = []


def _notify(event: str, code: types.CodeType, detail: Any) -> None:
    for observe in list(_observers):
        observe(event, code, detail)


# -- which code is library code ---------------------------------------------------------------

def _library_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(stdlib roots, package roots): stdlib minus its site-packages; pyjit and torch entirely."""
    std = []
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            std.append(os.path.realpath(p) + os.sep)
    pkgs = [os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep]
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None and getattr(torch_mod, "__file__", None):
        pkgs.append(os.path.dirname(os.path.realpath(torch_mod.__file__)) + os.sep)
    try:  # generated kernels and wrappers loaded from pyjit's cache
        pkgs.append(os.path.realpath(config.default_cache_dir()) + os.sep)
    except Exception:
        pass
    return tuple(std), tuple(pkgs)


# Third-party packages that are pyjit's or the test harness's machinery, not model code: their
# frames are never compiled, even when called while a jitted call runs (e.g. Triton's launcher
# under a compiled graph). Model libraries (transformers, ...) are compiled like user code.
_RUNTIME_PACKAGES = ("triton", "numpy", "sympy", "networkx", "filelock", "_pytest", "pytest", "pluggy",
                     "expecttest", "typing_extensions")


_roots_cache: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
_library_cache: dict[str, bool] = {}


def is_library_code(code: types.CodeType) -> bool:
    """Frames of torch, pyjit, the stdlib and generated code are never compiled (marked skip)."""
    filename = code.co_filename
    hit = _library_cache.get(filename)
    if hit is not None:
        return hit
    if not _roots_cache:
        _roots_cache.append(_library_roots())
    std, pkgs = _roots_cache[0]
    if filename.startswith("<"):
        # generated code: FX graph modules ('<eval_with_key>'), pyjit's own code, frozen stdlib.
        result = filename.startswith(("<eval_with_key", "<pyjit", "<frozen"))
    else:
        real = os.path.realpath(filename)
        result = any(real.startswith(r) for r in pkgs) or (
            any(real.startswith(r) for r in std) and "site-packages" not in real and "dist-packages" not in real) or (
            any(f"-packages{os.sep}{p}{os.sep}" in real or real.endswith(f"-packages{os.sep}{p}.py")
                for p in _RUNTIME_PACKAGES))
    _library_cache[filename] = result
    return result


# -- the callback ---------------------------------------------------------------------------------

def callback(target: CodeState | None, func: types.FunctionType, args: tuple[Any, ...]) -> tuple[Any, types.CodeType] | None:
    """The C callback; ``target`` is the state of the JitFunction whose call installed it
    (``functools.partial``), or None under ``pyjit.enable()``."""
    code = func.__code__
    fullgraph_ok = True
    if target is not None and target.code is code:
        state = target
        if _is_ddp_forward(code):
            # pyjit.jit(DDP(model)): DDP's own Python runs natively, the module it wraps compiles.
            _ddp().compile_wrapped(args, state.options)
            return None
        if not state.options.fullgraph and _runs_plain(func, args):
            return None
    else:
        # A callee of a jitted call is compiled around its breaks, whatever jitted it elsewhere.
        fullgraph_ok = target is None
        wrapped = _targets.get(id(code))
        if wrapped is not None and wrapped.wrapped_by_ddp:
            fullgraph_ok = True  # keeps the options of the jit call or enable() that reached it
        elif is_library_code(code) or _is_namedtuple_new(func):
            if _is_ddp_forward(code):
                # DDP.forward reached from a jitted call or under enable(): not marked skip, so
                # each DDP instance it runs for gets its wrapped module registered.
                enabled = enable_stack()
                options = target.options if target is not None else (enabled[-1] if enabled else None)
                if options is not None:
                    _ddp().compile_wrapped(args, options)
                return None
            _C.mark_skip(code)
            return None
        if _runs_plain(func, args):
            return None
        state = _targets.get(id(code))
        if state is None:
            from ..trace.breaks import runs_natively

            if code in _disabled_codes or runs_natively(code):
                _C.mark_skip(code)
                return None
            # A frame called while a jitted call runs (from its replacement code, a resume
            # function, code between graphs, or a frame that runs eagerly): a compiled callee,
            # with the options of the call that installed the callback (never fullgraph: the
            # callee was not asked to be whole).
            enabled = enable_stack()
            options = target.options if target is not None else (enabled[-1] if enabled else None)
            if options is None:
                return None
            if options.fullgraph:
                options = JitOptions(options.backend, False, options.dynamic)
            state = register_target(code, options)
            state.callee = True
    if _C.get_entry_limit() != config.entry_limit:
        _C.set_entry_limit(config.entry_limit)
    with _compile_lock(code):
        if _compiled_meanwhile(func, args, state):
            # Another thread compiled an entry valid for these arguments while this one waited:
            # run this call natively once; later calls hit that entry (no duplicate entry).
            return None
        if not _observers and (warm := warm_start.install(func, args, state)) is not None:
            if events.enabled():
                events.emit("warm_start", function=code.co_name, file=code.co_filename, line=code.co_firstlineno,
                            stack=events.user_stack(code))
            return warm  # an entry recorded by an earlier process, installed without tracing
        if stance.miss_action(func, args, state.frames) == "eager":
            return None  # pyjit.set_stance: this call runs natively, nothing is compiled or marked
        frame = compile_for(func, args, state, fullgraph=state.options.fullgraph and fullgraph_ok)
    if frame is None:
        _C.mark_skip(code)
        return None
    from ..guards.guards import compile_c_tree

    names = frame.arg_names
    try:
        tree = compile_c_tree(frame.guards, _C, lambda a: frame_values(func, names, tuple(a)))
    except Exception as e:  # e.g. a guard value the C tree cannot hold: run eagerly, never break
        if config.raise_on_internal_error:
            raise
        log_internal_error(code, e, "could not build the guards of")
        state.frames.pop()
        _C.mark_skip(code)
        return None
    return tree, frame.code


def _is_ddp_forward(code: types.CodeType) -> bool:
    """``code`` is DistributedDataParallel.forward (only looked at once torch's DDP is loaded)."""
    return "torch.nn.parallel.distributed" in sys.modules and _ddp().is_ddp_forward(code)


def _ddp() -> Any:
    from ..distributed import ddp

    return ddp


def _is_namedtuple_new(func: types.FunctionType) -> bool:
    """``collections.namedtuple``'s generated ``__new__`` (code from ``<string>``): it only builds
    a tuple, so there is nothing to compile; library code building namedtuples of tensors (FSDP's
    all-gather results) called it natively once per call, each a traced frame and a break."""
    return func.__code__.co_filename == "<string>" and str(func.__globals__.get("__name__", "")).startswith("namedtuple_")


def _runs_plain(func: types.FunctionType, args: tuple[Any, ...]) -> bool:
    """A frame that reaches no tensor (``pyjit.frame.precheck``) is not traced: it runs
    natively, and the C core's plain mark makes later calls with arguments of the same types
    run natively without calling back."""
    from .precheck import plain_types, reaches_tensors

    code = func.__code__
    if "__resume_at_" in code.co_name:
        # pyjit's resume functions are shared by every frame that breaks at the same place;
        # one that got plain values from one caller may carry another's tensor work.
        return False
    if reaches_tensors(func, args):
        return False
    marked = plain_types(_C.get_plain(code), args)
    if marked is not None:
        _C.set_plain(code, marked)
    if _observers:
        _notify("skipped", code, "no tensor in reach")
    if events.enabled():  # once per code and argument types: later calls carry the plain mark
        with events.frame_scope(code) as record:
            record.status, record.reason = "skipped", "no tensor in reach (runs natively)"
    return True


def compile_for(func: types.FunctionType, args: tuple[Any, ...], state: CodeState, *, fullgraph: bool | None = None) -> Any:
    """Convert the frame; None means "run eagerly from now on" (already logged)."""
    from .convert import convert_frame

    code = func.__code__
    if fullgraph is None:
        fullgraph = state.options.fullgraph
    if code.co_flags & (0x20 | 0x80 | 0x200):  # generators/coroutines: never converted
        return None
    label = f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
    with progress.compiling(label), events.frame_scope(code) as record, events.span("frame", code.co_name):
        if state.frames:
            _log_recompile(func, args, state)
        try:
            frame = convert_frame(func, args, state.options.backend, fullgraph=fullgraph, dynamic=state.dynamic_policy())
        except SkipFrame as e:
            record.status, record.reason = "skipped", str(e)
            _notify("skipped", code, str(e))
            return None
        except GraphBreakError:
            raise
        except Unsupported as e:
            if fullgraph:
                raise GraphBreakError(e.graph_break) from None
            state.broke = True
            record.status, record.reason = "eager", f"graph break [{e.graph_break.kind}]"
            _notify("eager", code, e.graph_break)
            if not getattr(e, "logged", False):
                _break_log.info("graph break in %s (%s:%d); running it eagerly:\n%s", code.co_name, code.co_filename,
                                code.co_firstlineno, e.graph_break.format())
                if events.enabled():
                    events.graph_break(e.graph_break, "the frame runs eagerly")
            return None
        except Exception as e:
            record.status, record.reason = "failed", f"{type(e).__name__}: {e}"
            if config.raise_on_internal_error:
                raise
            if isinstance(e, BackendError) and not config.suppress_errors and not _is_pyjit_backend(state.options.backend):
                raise  # the user's own backend failed: their error, as torch.compile's BackendCompilerFailed
            log_internal_error(code, e, "failed to compile")
            return None
    state.frames.append(frame)
    state.compiles += 1
    _notify("compiled", code, frame)
    return frame


# Where an internal error was logged: one line per function of the program. Keyed by its source
# location, not the code object: pyjit.jit with another backend compiles a clone of the code.
_failures_logged: set[tuple[str, int, str]] = set()


def log_internal_error(code: types.CodeType, e: BaseException, what: str) -> None:
    """A pyjit failure on ``code`` (called in its ``except`` block): one warning line on
    ``fallbacks``, the first time for that function; the traceback at DEBUG (``PYJIT_LOGS=+fallbacks``) and,
    with ``PYJIT_DEBUG_DIR``, in a file. Nothing of pyjit's internals reaches the program's
    stderr by default: the frame runs natively, as if pyjit were not there."""
    tb = traceback.format_exc()
    where = f"{code.co_filename}:{code.co_firstlineno}"
    dumped = _dump_traceback(code, tb)
    key = (code.co_filename, code.co_firstlineno, getattr(code, "co_qualname", code.co_name))
    if key not in _failures_logged:
        _failures_logged.add(key)
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if len(message) > 200:
            message = message[:197] + "..."
        more = f"traceback in {dumped}" if dumped else "PYJIT_LOGS=+fallbacks shows the traceback"
        _fallback_log.warning("pyjit %s %s (%s) and runs it eagerly: %s%s (a pyjit bug; %s)", what, code.co_name,
                              where, type(e).__name__, f": {message}" if message else "", more)
    _fallback_log.debug("pyjit %s %s (%s):\n%s", what, code.co_name, where, tb)


def _dump_traceback(code: types.CodeType, tb: str) -> str | None:
    """Write the traceback under ``<debug_dir>/fallbacks/``; the path, or None."""
    if not config.debug_dir:
        return None
    try:
        directory = os.path.join(config.debug_dir, "fallbacks")
        os.makedirs(directory, exist_ok=True)
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in code.co_name)
        path = os.path.join(directory, f"{base}_{os.path.basename(code.co_filename).replace('.', '_')}_"
                                       f"{code.co_firstlineno}.txt")
        with open(path, "a") as f:
            f.write(f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})\n{tb}\n")
        return path
    except OSError:
        return None


# One compile at a time per code object: concurrent first calls of one function from several
# threads compile it once (the others wait, then find the new entry valid for them).
_locks_guard = threading.Lock()
_compile_locks: "dict[int, threading.RLock]" = {}


def _compile_lock(code: types.CodeType) -> "threading.RLock":
    with _locks_guard:
        lock = _compile_locks.get(id(code))
        if lock is None:
            lock = _compile_locks[id(code)] = threading.RLock()
        return lock


def _compiled_meanwhile(func: types.FunctionType, args: tuple[Any, ...], state: CodeState) -> bool:
    """A compiled entry of ``state`` (made by another thread) whose guards pass for ``args``."""
    if not state.frames:
        return False
    frame = state.frames[-1]
    try:
        return frame.guards.first_failure(frame_values(func, frame.arg_names, args)) is None
    except Exception:  # noqa: BLE001 - cannot tell: compile as usual
        return False


def _is_pyjit_backend(backend: Any) -> bool:
    """pyjit's own compiler (registered as "pyjit"): its failures fall back with a log line."""
    from .. import backends

    try:
        return backend is backends.lookup("pyjit")
    except Exception:  # noqa: BLE001 - registry unavailable: treat as pyjit's own
        return True


def frame_values(func: types.FunctionType, arg_names: list[str], args: tuple[Any, ...]) -> FrameValues:
    closure = {}
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        try:
            closure[name] = cell.cell_contents
        except ValueError:
            pass
    return FrameValues(dict(zip(arg_names, args)), func.__globals__, closure)


def _log_recompile(func: types.FunctionType, args: tuple[Any, ...], state: CodeState) -> None:
    tracing = events.enabled()
    if not _recompile_log.isEnabledFor(20) and not tracing:
        return
    code = func.__code__
    fv = frame_values(func, state.frames[-1].arg_names, args)
    reasons = []
    failures = []
    for i, frame in enumerate(reversed(state.frames)):
        failed = frame.guards.first_failure(fv)
        reasons.append(f"  entry {i}: {failed[1] if failed else 'no guard failed (evicted?)'}")
        failures.append({"entry": i, "guard": frame.guards.guards[failed[0]].describe() if failed else None,
                         "reason": failed[1] if failed else "no guard failed (evicted?)"})
    if tracing:
        events.emit("recompile", function=code.co_name, file=code.co_filename, line=code.co_firstlineno,
                    entries=len(state.frames), failures=failures)
    _recompile_log.info("recompiling %s (%s:%d), guard failures:\n%s", code.co_name, code.co_filename,
                        code.co_firstlineno, "\n".join(reasons))


def _on_limit(code: types.CodeType) -> None:
    _recompile_log.warning("%s (%s:%d) reached the cache entry limit (%d, pyjit.config.entry_limit); "
                           "new variants run eagerly", code.co_name, code.co_filename, code.co_firstlineno,
                           config.entry_limit)


def ensure_installed() -> None:
    """C core settings pyjit relies on (entry limit, limit callback); cheap, called per jit()."""
    if _C is None:
        return
    _C.set_entry_limit(config.entry_limit)
    _C.set_limit_callback(_on_limit)
    _profiler.install(_C)  # guard-lookup ranges in torch.profiler traces
    from . import coexist

    coexist.install()
