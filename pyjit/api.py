"""pyjit's public entry points: ``jit``, ``reset``, ``enable``/``disable``.

``jit(fn)`` returns a :class:`JitFunction`: calling it installs pyjit's frame callback for the
duration of the call, so the C hook sees ``fn``'s frame, checks its cached entries (guards in C)
and runs the cached replacement code, or calls back into Python on a miss to compile a new
entry. For an ``nn.Module`` instance, ``jit`` returns a module of a derived class whose
``forward`` is compiled and which *shares the original's state* (same ``__dict__``: parameters,
buffers, submodules, ``training``), so ``state_dict()``, ``train()``/``eval()`` and attribute
access behave exactly like the original.

Without the C extension (not built), :class:`JitFunction` keeps its own cache of
(guard checker, replacement function) pairs in Python: same semantics, slower guards.
"""
from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Callable, Sequence

from .frame import policy
from .frame.policy import JitOptions, _C

# Calls of pyjit's wrappers enter C directly (``_C.ScopedCall``'s ``tp_call``): no Python frame
# of pyjit runs between the caller and the wrapped function, so another frame hook in front of
# pyjit's (Dynamo, inside a torch.compile'd function) never sees pyjit's entry code, and the C
# side puts pyjit's hook on top for the call. Without the C extension: plain objects.
_ScopedBase: type = _C.ScopedCall if _C is not None else object


class JitFunction(_ScopedBase):  # type: ignore[misc, valid-type]
    """A function whose frames are compiled by pyjit (see module docstring)."""

    def __init__(self, fn: Callable[..., Any], options: JitOptions) -> None:
        self._options = options
        func = _target_function(fn)
        if not isinstance(func, types.FunctionType):
            raise TypeError(f"pyjit.jit expects a Python function, method, callable object or nn.Module, "
                            f"got {type(fn).__name__}")
        # Generators and coroutines are left alone (their frames are never compiled).
        self._passthrough = bool(func.__code__.co_flags & (0x20 | 0x80 | 0x200))
        existing = policy.lookup_target(func.__code__)
        if existing is not None and not existing.options.same_as(options) and isinstance(fn, (types.FunctionType, types.MethodType)):
            # The same function jitted again with other options (another backend): give this
            # wrapper its own copy of the code object, so each keeps its own cache entries.
            clone = types.FunctionType(func.__code__.replace(), func.__globals__, func.__name__, func.__defaults__,
                                       func.__closure__)
            clone.__kwdefaults__ = func.__kwdefaults__
            clone.__qualname__ = func.__qualname__
            clone.__dict__.update(func.__dict__)
            fn = types.MethodType(clone, fn.__self__) if isinstance(fn, types.MethodType) else clone
            func = clone
        self._fn = fn
        self._func = func
        self._state = policy.register_target(func.__code__, options)
        functools.update_wrapper(self, func)
        policy.ensure_installed()
        if _C is not None:
            # A call sets this thread's callback for its duration (C: ScopedCall.__call__);
            # generators and coroutines are called as they are (scoped_callback unset).
            self._cb = functools.partial(policy.callback, self._state)
            self.scoped_fn = fn
            if not self._passthrough:
                self.scoped_callback = self._cb
        elif _ScopedBase is not object:
            self.scoped_fn = self._python_call  # the C base exists but _C is switched off (tests)

    def _python_call(self, *args: Any, **kwargs: Any) -> Any:
        if self._passthrough:
            return self._fn(*args, **kwargs)
        return self._call_python(args, kwargs)

    if _ScopedBase is object:
        __call__ = _python_call

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # @pyjit.jit on a method inside a class body: bind like a function would.
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def __repr__(self) -> str:
        return f"<pyjit.jit of {self._func.__qualname__}>"

    # -- pure-Python runtime (no C extension) --------------------------------------------------
    def _call_python(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from .frame.python_runtime import call_python

        return call_python(self, args, kwargs)


def _target_function(fn: Any) -> Any:
    """The Python function whose frames calling ``fn`` runs (through methods and partials)."""
    while True:
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
        elif isinstance(fn, functools.partial):
            fn = fn.func
        elif not isinstance(fn, (types.FunctionType, type)) and isinstance(getattr(type(fn), "__call__", None), types.FunctionType):
            fn = type(fn).__call__  # a callable object: its __call__ frame (self bound by the call)
        else:
            return fn


def _jit_module(module: Any, options: JitOptions) -> Any:
    import torch

    assert isinstance(module, torch.nn.Module)
    cls = type(module)
    forward = cls.forward
    if "forward" in module.__dict__:
        raise TypeError(f"pyjit.jit: {cls.__name__} instance has its own `forward` attribute; jit that function instead")
    if not isinstance(forward, types.FunctionType):
        raise TypeError(f"pyjit.jit: {cls.__name__}.forward is not a Python function")
    jf = JitFunction(forward, options)
    # `forward` is the JitFunction itself (bound to the module by JitFunction.__get__): calling
    # the module's forward enters C directly, with no Python frame of pyjit in between.
    new_cls = type(cls.__name__, (cls,), {
        "forward": jf,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "_pyjit_original_class": cls,
        "_pyjit_forward": jf,
        "__reduce_ex__": _reduce_jitted_module,
    })
    new: torch.nn.Module = object.__new__(new_cls)
    # Share the original's state: parameters, buffers, submodules and flags are the same objects.
    object.__setattr__(new, "__dict__", module.__dict__)
    return new


def _reduce_jitted_module(self: Any, protocol: int) -> tuple[Any, ...]:
    """Pickling / ``copy.deepcopy`` of a jitted module: the original class's module (same
    state) is pickled, and loading jits it again with the same options when its backend is a
    registered name (``pyjit.backends.list()``); with any other backend object the
    original, un-jitted module is restored (a backend callable need not be picklable)."""
    from . import backends

    plain = object.__new__(type(self)._pyjit_original_class)
    object.__setattr__(plain, "__dict__", self.__dict__)
    options = type(self)._pyjit_forward._options
    name = next((n for n, b in backends._REGISTRY.items() if b is options.backend), None)
    if name is None:
        return (_identity, (plain,))
    return (_jit_again, (plain, name, options.fullgraph, options.dynamic))


def _identity(value: Any) -> Any:
    return value


def _jit_again(module: Any, backend: str, fullgraph: bool, dynamic: bool | None) -> Any:
    return jit(module, backend=backend, fullgraph=fullgraph, dynamic=dynamic)


def jit(fn: Any = None, *, backend: Any = "pyjit", fullgraph: bool = False, dynamic: bool | None = None,
        mode: str | None = None) -> Any:
    """Compile ``fn`` (function, method or nn.Module instance) on its first call; see README.

    ``mode="reduce-overhead"`` replays each compiled graph from a CUDA graph where it can
    (``pyjit.runtime.cudagraphs``); ``None``/``"default"`` do not."""
    from . import backends

    if dynamic not in (None, True, False):
        raise TypeError(f"pyjit.jit(dynamic=...) takes None (automatic), True or False, not {dynamic!r}")
    options = JitOptions(backends.for_mode(backend, mode, dynamic), fullgraph, dynamic)
    if fn is None:
        return lambda f: jit(f, backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode)
    if isinstance(fn, JitFunction):
        fn = fn._fn
    if not isinstance(fn, (types.FunctionType, types.MethodType)) and _is_nn_module(fn):
        return _jit_module(fn, options)
    return JitFunction(fn, options)


def _is_nn_module(obj: Any) -> bool:
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def reset() -> None:
    """Forget every compiled entry, skip mark and recompile count (jit wrappers stay usable)."""
    policy.reset()
    from .frame import python_runtime

    python_runtime.reset()


class EnableHandle:
    """What :func:`enable` returns: ``with pyjit.enable(): ...`` restores the previous state on
    exit (even on exception); ``handle.restore()`` does the same without a ``with``."""

    def __init__(self, previous_callback: Any, options: JitOptions) -> None:
        self._previous = previous_callback
        self._options = options
        self._restored = False

    def restore(self) -> None:
        if self._restored:
            return
        self._restored = True
        _C.set_callback(self._previous)
        stack = policy.enable_stack()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self._options:
                del stack[i]
                break

    def __enter__(self) -> "EnableHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def enable(*, backend: Any = "pyjit", fullgraph: bool = False, dynamic: bool | None = None,
           mode: str | None = None) -> EnableHandle:
    """Compile every new frame of this thread (torch, the stdlib and pyjit itself are skipped).

    Returns a handle; used as a context manager (``with pyjit.enable(): ...``) it restores the
    previous state when the block ends. ``mode`` as for :func:`jit`."""
    from . import backends

    if _C is None:
        raise RuntimeError("pyjit.enable() needs the C extension: run `python setup.py build_ext --inplace`")
    policy.ensure_installed()
    options = JitOptions(backends.for_mode(backend, mode, dynamic), fullgraph, dynamic)
    policy.enable_stack().append(options)
    previous = _C.set_callback(functools.partial(policy.callback, None))
    return EnableHandle(previous, options)


class DisabledFunction(_ScopedBase):  # type: ignore[misc, valid-type]
    """``pyjit.disable(fn)``: calls ``fn`` with pyjit switched off for this thread (neither ``fn``
    nor what it calls is compiled); traced code calling it breaks the graph there and runs the
    call natively. ``pyjit.graph_break`` is one of these around a no-op."""

    def __init__(self, fn: Callable[..., Any], *, is_graph_break: bool = False) -> None:
        self._fn = fn
        self.is_graph_break = is_graph_break
        functools.update_wrapper(self, fn)
        func = _target_function(fn)
        if isinstance(func, types.FunctionType):
            policy._disabled_codes.add(func.__code__)
        if _ScopedBase is not object:
            self.scoped_fn = fn
            if _C is not None:
                self.scoped_callback = None  # C: this thread's callback is None for the call

    if _ScopedBase is object:
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return self._fn(*args, **kwargs)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __repr__(self) -> str:
        return f"<pyjit.disable of {getattr(self._fn, '__qualname__', self._fn)!r}>"


def disable(fn: Any = None) -> Any:
    """``pyjit.disable(fn)`` (or ``@pyjit.disable``): a function that is never traced and breaks
    the graph where traced code calls it. ``pyjit.disable()`` with no argument stops compiling
    new frames on this thread (compiled entries stay cached)."""
    if fn is not None:
        if isinstance(fn, JitFunction):
            fn = fn._fn
        return DisabledFunction(fn)
    if _C is None:
        return None
    _C.set_callback(None)
    stack = policy.enable_stack()
    if stack:
        stack.pop()
    return None


def _no_op() -> None:
    """``pyjit.graph_break()`` does nothing when it runs; traced code breaks the graph here."""


graph_break = DisabledFunction(_no_op, is_graph_break=True)
graph_break.__doc__ = "pyjit.graph_break(): end the current graph here (the rest continues in a new one)."


@dataclasses.dataclass
class Explanation:
    """What ``pyjit.explain(fn)(*args)`` saw: every graph compiled while the call ran (the frame,
    its resume functions and compiled callees), the graph breaks in order with file:line, the
    resume functions created, and the guards of the frame's entry."""

    graph_count: int
    graphs: list[Any]
    graph_breaks: list[Any]          # pyjit.errors.GraphBreak, in the order they were met
    guards: list[str]
    call_count: int                  # operations recorded over all graphs
    skipped_reason: str | None = None
    resume_functions: list[str] = dataclasses.field(default_factory=list)
    eager_frames: list[str] = dataclasses.field(default_factory=list)  # frames left to run eagerly
    # Graph inputs with symbolic sizes or values: "L['x']: size (s0, 8)" (dynamic shapes).
    symbolic_inputs: list[str] = dataclasses.field(default_factory=list)

    @property
    def graph_break(self) -> Any:
        """The first graph break (None when the call compiled without one)."""
        return self.graph_breaks[0] if self.graph_breaks else None

    @property
    def break_count(self) -> int:
        return len(self.graph_breaks)

    def __str__(self) -> str:
        lines = [f"graphs: {self.graph_count}, graph calls: {self.call_count}, graph breaks: {self.break_count}"]
        for i, gb in enumerate(self.graph_breaks, 1):
            lines.append(f"graph break {i}:\n" + gb.format())
        if self.resume_functions:
            lines.append("resume functions: " + ", ".join(self.resume_functions))
        if self.eager_frames:
            lines.append("frames running eagerly: " + ", ".join(self.eager_frames))
        if self.skipped_reason:
            lines.append(f"skipped: {self.skipped_reason}")
        if self.symbolic_inputs:
            lines.append("symbolic inputs: " + "; ".join(self.symbolic_inputs))
        for gm in self.graphs:
            lines.append(gm.code.strip())
        if self.guards:
            lines.append("guards:")
            lines.extend(f"  {g}" for g in self.guards)
        return "\n".join(lines)


def _describe_symbolic(value: Any) -> str:
    """``size (s0, 8)`` for a fake tensor with symbolic sizes, ``s1`` for a symbolic scalar, else ''."""
    import torch

    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return f"{type(value).__name__} {value}"
    if isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in value.shape):
        return f"size ({', '.join(str(s) for s in value.shape)})"
    return ""


def mark_dynamic(t: Any, dim: int | Sequence[int]) -> None:
    """Make dimension(s) ``dim`` of tensor ``t`` symbolic from the first trace that sees ``t``
    (sizes 0 and 1 stay static; ignored under ``dynamic=False``)."""
    _mark(t, dim, "_pyjit_dynamic_dims")


def mark_static(t: Any, dim: int | Sequence[int]) -> None:
    """Keep dimension(s) ``dim`` of tensor ``t`` static (also under ``dynamic=True``)."""
    _mark(t, dim, "_pyjit_static_dims")


def _mark(t: Any, dim: int | Sequence[int], attr: str) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"pyjit.mark_{attr.split('_')[2]}(t, dim) expects a tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not -t.dim() <= d < max(t.dim(), 1):
            raise IndexError(f"dimension {d} out of range for a tensor of {t.dim()} dimensions")
    marked = set(getattr(t, attr, ()))
    marked.update(d % t.dim() for d in dims)
    setattr(t, attr, frozenset(marked))


def explain(fn: Any, *, dynamic: bool | None = None) -> Callable[..., Explanation]:
    """``pyjit.explain(fn)(*args)``: run ``fn(*args)`` once under a fresh ``pyjit.jit`` with a
    recording backend and report what was compiled (its result is discarded; it runs, so its
    prints and side effects happen as in a normal call). ``dynamic`` as for ``pyjit.jit``:
    with ``dynamic=True`` the report lists the symbolic inputs and the shape guards."""

    def run(*args: Any, **kwargs: Any) -> Explanation:
        target = fn._fn if isinstance(fn, JitFunction) else fn
        graphs: list[Any] = []

        def record(gm: Any, example_inputs: Any) -> Any:
            graphs.append(gm)
            return gm.forward

        record.pyjit_dynamic = True  # type: ignore[attr-defined]  # graphs run as captured: any size

        events: list[tuple[str, types.CodeType, Any]] = []
        policy._observers.append(lambda event, code, detail: events.append((event, code, detail)))
        observer = policy._observers[-1]
        try:
            jitted = jit(target, backend=record, dynamic=dynamic)
            jitted(*args, **kwargs)
        finally:
            policy._observers.remove(observer)
        breaks: list[Any] = []
        resumes: list[str] = []
        eager: list[str] = []
        guards: list[str] = []
        skipped = None
        for i, (event, code, detail) in enumerate(events):
            if event == "compiled":
                if detail.graph_break is not None:
                    breaks.append(detail.graph_break)
                resumes.extend(c.co_qualname for c in detail.resume_codes)
                if not guards:
                    guards = [g.describe() for g in detail.guards]
            elif event == "eager":
                breaks.append(detail)
                eager.append(code.co_qualname)
            elif event == "skipped" and i == 0:
                skipped = detail
        calls = sum(1 for gm in graphs for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
        symbolic = [f"{n.meta.get('source', n.name)}: {_describe_symbolic(n.meta.get('example_value'))}"
                    for gm in graphs for n in gm.graph.nodes
                    if n.op == "placeholder" and _describe_symbolic(n.meta.get("example_value"))]
        return Explanation(len(graphs), graphs, breaks, guards, calls, skipped, resumes, eager, symbolic)

    return run
