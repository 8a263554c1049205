"""The pure-Python cache of a jit target, used only when ``pyjit._C`` is not built.

Binds the call's arguments to the frame's flat slots with a generated binder (same signature
and defaults as the function), checks each entry's generated Python guard function, and runs
the replacement code as a function of the original's globals and closure.
"""
from __future__ import annotations

import types
from typing import Any

from ..trace.pycodegen import flat_arg_names, make_function
from . import policy, stance

# Keyed by id(code) (see policy._targets); the CodeState in policy keeps the code objects alive.
_entries: dict[int, list[tuple[Any, Any]]] = {}
_binders: dict[types.CodeType, Any] = {}
_skipped: set[int] = set()


def reset() -> None:
    _entries.clear()
    _skipped.clear()


def _binder(func: types.FunctionType) -> Any:
    b = _binders.get(func.__code__)
    if b is None:
        code = func.__code__
        names = flat_arg_names(code)
        n = code.co_argcount
        k = code.co_kwonlyargcount
        params = list(names[:n])
        if code.co_posonlyargcount:
            params.insert(code.co_posonlyargcount, "/")
        rest = names[n + k:]
        idx = 0
        if code.co_flags & 0x04:
            params.append("*" + rest[idx])
            idx += 1
        elif k:
            params.append("*")
        params.extend(names[n:n + k])
        if code.co_flags & 0x08:
            params.append("**" + rest[idx])
        src = f"def __bind({', '.join(params)}):\n    return ({''.join(x + ', ' for x in names)})\n"
        ns: dict[str, Any] = {}
        exec(compile(src, f"<pyjit binder for {code.co_name}>", "exec"), ns)
        b = ns["__bind"]
        b.__defaults__ = func.__defaults__
        b.__kwdefaults__ = func.__kwdefaults__
        _binders[func.__code__] = b
    return b


def bind_flat(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[types.FunctionType, tuple[Any, ...]]:
    """The Python function a call of ``target`` runs, and the frame's flat argument slots."""
    import functools

    while True:
        if isinstance(target, types.MethodType):
            args = (target.__self__, *args)
            target = target.__func__
        elif isinstance(target, functools.partial):
            args = (*target.args, *args)
            kwargs = {**target.keywords, **kwargs}
            target = target.func
        elif not isinstance(target, types.FunctionType) and isinstance(getattr(type(target), "__call__", None), types.FunctionType):
            args = (target, *args)
            target = type(target).__call__
        else:
            break
    return target, _binder(target)(*args, **kwargs)


def call_python(jf: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    func = jf._func
    if isinstance(jf._fn, types.FunctionType) or jf._fn is func:
        flat = _binder(func)(*args, **kwargs)
    else:
        _, flat = bind_flat(jf._fn, args, kwargs)
    code = func.__code__
    if id(code) in _skipped or stance.forced_eager():
        return jf._fn(*args, **kwargs)
    entries = _entries.setdefault(id(code), [])
    for check, fn in entries:
        if _passes(check, flat):
            return fn(*flat)
    from ..config import config
    from ..guards.guards import compile_python

    if len(entries) >= config.entry_limit:
        return jf._fn(*args, **kwargs)
    if stance.miss_action(func, flat, jf._state.frames) == "eager":
        return jf._fn(*args, **kwargs)
    frame = policy.compile_for(func, flat, jf._state)
    if frame is None:
        _skipped.add(id(code))
        return jf._fn(*args, **kwargs)
    check = compile_python(frame.guards, code, func)
    fn = make_function(frame.code, func)
    entries.insert(0, (check, fn))
    return fn(*flat)


def _passes(check: Any, flat: tuple[Any, ...]) -> bool:
    """A guard whose path no longer resolves (``del Cls.attr``...) is a miss, as in the C tree."""
    try:
        return bool(check(*flat))
    except Exception:
        return False
