"""Compilation stances: how this thread treats jitted frames (``pyjit.set_stance``).

A stance is per thread, like ``pyjit.enable()``; each thread starts with ``"default"``:

- ``"default"``: cached entries run; a miss compiles (traces) a new entry;
- ``"force_eager"``: every frame runs natively, as if pyjit were not there: no tracing and no
  cached entry runs (the C core's per-thread *suspended* flag, so even a ``pyjit.jit`` wrapper's
  call, which sets the thread's callback, leaves the hook off);
- ``"eager_on_recompile"``: cached entries run; a miss of a code object that already has
  entries runs that call natively instead of compiling (a code object's first compile still
  happens, and entries recorded by an earlier process are still installed: neither is a
  recompile);
- ``"fail_on_recompile"``: like ``eager_on_recompile``, but the miss raises
  :class:`pyjit.RecompileError` naming the function's file:line and, for each cached entry,
  its first failing guard in source form, expected vs actual.

:func:`set_stance` works as a call (the stance holds until changed; the returned handle's
``restore()`` undoes it), a context manager (restored when the block ends) and a decorator
(the stance holds during each call of the decorated function). The frame layer asks
:func:`miss_action` on each cache miss and :func:`forced_eager` in the pure-Python runtime.
"""
from __future__ import annotations

import functools
import threading
import types
from typing import Any, Callable

from ..errors import RecompileError

STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")


class _State(threading.local):
    stance: str = "default"


_state = _State()


def current() -> str:
    """This thread's stance."""
    return _state.stance


def forced_eager() -> bool:
    return _state.stance == "force_eager"


def _apply(stance: str) -> str:
    """Make ``stance`` this thread's; returns the previous one."""
    previous = _state.stance
    _state.stance = stance
    from .policy import _C

    if _C is not None:
        _C.set_suspended(stance == "force_eager")
    return previous


class StanceHandle:
    """What :func:`set_stance` returns: a context manager, a decorator, and ``restore()``."""

    def __init__(self, stance: str, previous: str) -> None:
        self.stance = stance
        self._previous = previous
        self._restored = False

    def restore(self) -> None:
        """Give this thread back the stance it had before (once)."""
        if not self._restored:
            self._restored = True
            _apply(self._previous)

    def __enter__(self) -> "StanceHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        # As a decorator the stance applies to the calls only, not from decoration on.
        self.restore()
        stance = self.stance

        @functools.wraps(fn)
        def with_stance(*args: Any, **kwargs: Any) -> Any:
            previous = _apply(stance)
            try:
                return fn(*args, **kwargs)
            finally:
                _apply(previous)

        return with_stance

    def __repr__(self) -> str:
        return f"<pyjit stance {self.stance!r}>"


def set_stance(stance: str = "default") -> StanceHandle:
    """Set this thread's stance (see the module docstring for the four stances)."""
    if stance not in STANCES:
        raise ValueError(f"pyjit.set_stance: unknown stance {stance!r}; use one of {', '.join(map(repr, STANCES))}")
    return StanceHandle(stance, _apply(stance))


def miss_action(func: types.FunctionType, args: tuple[Any, ...], frames: list[Any]) -> str:
    """What to do on a cache miss of ``func`` whose code has the cached ``frames``:
    ``"compile"`` or ``"eager"`` (run this call natively); raises :class:`RecompileError`
    under ``fail_on_recompile``."""
    stance = _state.stance
    if stance == "force_eager":
        return "eager"
    if not frames or stance == "default":
        return "compile"
    if stance == "eager_on_recompile":
        return "eager"
    raise RecompileError(recompile_message(func, args, frames))


def recompile_message(func: types.FunctionType, args: tuple[Any, ...], frames: list[Any]) -> str:
    from .policy import frame_values

    code = func.__code__
    lines = [f"pyjit: {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) would be recompiled, "
             f"and the stance is 'fail_on_recompile'. Cached entries and their first failing guard:"]
    for i, frame in enumerate(reversed(frames)):
        try:
            failed = frame.guards.first_failure(frame_values(func, frame.arg_names, args))
        except Exception as e:  # noqa: BLE001 - the message must still be produced
            failed = (-1, f"(could not evaluate the guards: {type(e).__name__}: {e})")
        lines.append(f"  entry {i}: {failed[1] if failed else 'no guard failed (the entry was evicted)'}")
    lines.append("Make the call match a cached entry, or compile it under another stance "
                 "(pyjit.set_stance('default') / 'eager_on_recompile').")
    return "\n".join(lines)
