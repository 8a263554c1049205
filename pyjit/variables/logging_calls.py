"""Logging inside traced code, kept as a side effect instead of a graph break.

A call of a standard ``logging.Logger`` method (``debug``/``info``/``warning``/``error``/
``critical``/``log``, no ``exc_info``/``stack_info``/``stacklevel``) on a logger the frame reaches through a source is not traced (``Logger.findCaller`` calls
``sys._getframe``, a graph break): it is recorded as a deferred call that the side-effect replay
(pyjit/trace/side_effects.py) runs natively after the graph, once per call of the compiled code,
with the same arguments. The logger's level, filters, handlers and ``disabled`` flag are then
consulted at run time, as in eager, so nothing about them is guarded.

An ``lru_cache`` wrapper whose traced body records nothing but such deferred calls and returns
None (transformers' ``logger.warning_once``) is deferred as a whole: the cache decides at run
time whether it logs, as in eager (inlining the wrapped function would log on every call).

What differs from eager: the record's caller (``funcName``/``lineno``) is the compiled frame's,
and the call runs after the graph's tensor work, in order with the frame's other replayed
effects. Arguments must be Python constants or objects read from the frame (f-strings of
constants are constants); anything else (a tensor, an object built by the trace) keeps the old
behaviour: the logging code is traced and breaks the graph.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator

# The methods whose only effect is emitting a record (they return None). Not ``exception``,
# nor the ``exc_info``/``stack_info``/``stacklevel`` keywords: they read the exception being
# handled and the call stack, which differ after the graph.
_LOGGER_METHODS = frozenset(
    logging.Logger.__dict__[name] for name in ("debug", "info", "warning", "warn", "error", "critical", "fatal", "log")
)
_REPLAYABLE_KWARGS = frozenset({"extra"})


def _replayable(v: VariableTracker) -> bool:
    """The replay can rebuild ``v`` as the same value: a constant or an object read from the frame."""
    from .tensor import TensorVariable

    if isinstance(v, ConstantVariable):
        return True
    return v.source is not None and not isinstance(v, TensorVariable)


def _defer(tx: "Translator", fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from .dicts import DictVariable
    from .lists import TupleVariable

    tx.output.side_effects.defer_call(fn, TupleVariable(list(args)), DictVariable(dict(kwargs)))
    return ConstantVariable(None)


def deferred_logger_call(tx: "Translator", fn: Any, obj: VariableTracker, args: list[VariableTracker],
                         kwargs: dict[str, VariableTracker]) -> VariableTracker | None:
    """``obj.<fn>(*args, **kwargs)`` recorded as a deferred call when ``fn`` is a standard
    ``Logger`` method and everything is replayable; None to trace it as before."""
    if fn not in _LOGGER_METHODS or not isinstance(getattr(obj, "value", None), logging.Logger):
        return None
    if not set(kwargs) <= _REPLAYABLE_KWARGS or not all(_replayable(v) for v in (obj, *args, *kwargs.values())):
        return None
    return _defer(tx, fn, [obj, *args], kwargs)


def call_cached(tx: "Translator", wrapper: Any, inline: Any, args: list[VariableTracker],
                kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """Call an ``lru_cache`` wrapper: ``inline()`` traces the wrapped function; when that only
    logged (deferred calls) and returned None, the wrapper call itself is deferred instead."""
    se = tx.output.side_effects
    mark = se.deferred_mark()
    result = inline()
    logged = se.deferred_mark()[1] > mark[1]
    if logged and isinstance(result, ConstantVariable) and result.value is None \
            and all(_replayable(v) for v in (*args, *kwargs.values())) and se.drop_deferred_since(mark):
        return _defer(tx, wrapper, args, kwargs)
    return result
