"""Test helpers: flat replacement code made from a function's own code, and callbacks.

``flat_code(f)`` reinterprets f's argument slots (positional, keyword-only, *args, **kwargs)
as plain positionals: the frame layout is identical, so the body runs unchanged and must give
the same results as f. The copy is renamed ``<name>__repl`` so tests can see which code ran.
"""
from __future__ import annotations

import inspect
import sys
import types
from typing import Any, Callable

CO_VARARGS = inspect.CO_VARARGS
CO_VARKEYWORDS = inspect.CO_VARKEYWORDS


def nslots(code: types.CodeType) -> int:
    return (code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & CO_VARARGS)
            + bool(code.co_flags & CO_VARKEYWORDS))


def flat_code(fn_or_code: Any, suffix: str = "__repl") -> types.CodeType:
    code = fn_or_code if isinstance(fn_or_code, types.CodeType) else fn_or_code.__code__
    fields: dict[str, Any] = dict(
        co_argcount=nslots(code),
        co_kwonlyargcount=0,
        co_flags=code.co_flags & ~(CO_VARARGS | CO_VARKEYWORDS),
        co_name=code.co_name + suffix,
    )
    if sys.version_info >= (3, 11):
        fields["co_qualname"] = code.co_qualname + suffix
    return code.replace(**fields)


def running_code_name() -> str:
    """Name of the code object of the caller's frame (tells original from replacement)."""
    return sys._getframe(1).f_code.co_name


class Compiler:
    """A callback that 'compiles' the given functions into their flat copies.

    ``guard_factory(func, args)`` may return a GuardTree (default: None = always true).
    Every other frame is marked skip so the callback runs once per code object.
    """

    def __init__(self, *targets: Callable[..., Any], guard_factory: Callable[..., Any] | None = None,
                 skip_others: bool = True):
        self.codes = {t.__code__ for t in targets}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.guard_factory = guard_factory
        self.skip_others = skip_others

    def __call__(self, func: types.FunctionType, args: tuple[Any, ...]):
        from pyjit import _C

        code = func.__code__
        if code not in self.codes:
            if self.skip_others:
                _C.mark_skip(code)
            return None
        self.calls.append((func.__name__, args))
        guard = self.guard_factory(func, args) if self.guard_factory else None
        return (guard, flat_code(code))
