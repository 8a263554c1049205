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

import functools
import types
from typing import Any, Callable

from .config import config
from .frame import policy
from .frame.policy import JitOptions, _C


class JitFunction:
    """A function whose frames are compiled by pyjit (see module docstring)."""

    def __init__(self, fn: Callable[..., Any], options: JitOptions) -> None:
        self._fn = fn
        self._options = options
        func = _target_function(fn)
        if not isinstance(func, types.FunctionType):
            raise TypeError(f"pyjit.jit expects a Python function, method or nn.Module, got {type(fn).__name__}")
        if func.__code__.co_flags & (0x20 | 0x80 | 0x200):
            raise TypeError(f"pyjit.jit does not support generators/coroutines ({func.__qualname__})")
        self._func = func
        self._state = policy.register_target(func.__code__, options)
        functools.update_wrapper(self, func)
        policy.ensure_installed()
        if _C is not None:
            self._set_cb = _C.set_callback
            self._cb = policy.callback

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _C is None:
            return self._call_python(args, kwargs)
        prev = self._set_cb(self._cb)
        try:
            return self._fn(*args, **kwargs)
        finally:
            self._set_cb(prev)

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

    def jit_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return jf(self, *args, **kwargs)

    jit_forward.__wrapped__ = forward  # type: ignore[attr-defined]
    jit_forward.__doc__ = forward.__doc__
    new_cls = type(cls.__name__, (cls,), {
        "forward": jit_forward,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "_pyjit_original_class": cls,
        "_pyjit_forward": jf,
    })
    new = object.__new__(new_cls)
    # Share the original's state: parameters, buffers, submodules and flags are the same objects.
    object.__setattr__(new, "__dict__", module.__dict__)
    return new


def jit(fn: Any = None, *, backend: Any = "pyjit", fullgraph: bool = False, dynamic: bool | None = None) -> Any:
    """Compile ``fn`` (function, method or nn.Module instance) on its first call; see README."""
    from . import backends

    options = JitOptions(backends.lookup(backend), fullgraph, dynamic)
    if fn is None:
        return lambda f: jit(f, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
    if isinstance(fn, JitFunction):
        fn = fn._fn
    mod = type(fn).__module__ or ""
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


def enable(*, backend: Any = "pyjit", fullgraph: bool = False) -> None:
    """Compile every new frame of this thread (torch, the stdlib and pyjit itself are skipped)."""
    from . import backends

    if _C is None:
        raise RuntimeError("pyjit.enable() needs the C extension: run `python setup.py build_ext --inplace`")
    policy.ensure_installed()
    policy._global_options.append(JitOptions(backends.lookup(backend), fullgraph))
    _C.set_callback(policy.callback)


def disable() -> None:
    """Stop compiling new frames on this thread (compiled entries stay cached)."""
    if _C is None:
        return
    _C.set_callback(None)
    if policy._global_options:
        policy._global_options.pop()


_ = config
