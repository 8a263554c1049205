"""Functions of the standard library answered over trackers (registered into the builtin
handler table of :mod:`pyjit.variables.builtins`): ``functools.reduce``, ``inspect.signature``,
``sorted``/``min``/``max`` with ``key=``,
``vars``, and the finite ``itertools`` combinators. Each traces the callbacks it is given
(so they may do tensor work) instead of running them natively. ``copy.copy``/``copy.deepcopy``
live in :mod:`pyjit.variables.copying`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..trace.graph_breaks import unsupported
from .base import KnownCallableVariable, VariableTracker
from .builtins import _HANDLERS, _NO, Handler, _iter_items, _register
from .constant import ConstantVariable
from .lists import BaseListVariable, ListIteratorVariable, ListVariable, TupleVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator


import functools  # noqa: E402


@_register(functools.reduce)
def _reduce(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``functools.reduce`` with each step traced (the function may do tensor work)."""
    fn, items = args[0], _iter_items(tx, args[1])
    if len(args) > 2:
        acc = args[2]
    elif items:
        acc, items = items[0], items[1:]
    else:
        unsupported("exception", "TypeError: reduce() of empty iterable with no initial value")
    for item in items:
        acc = tx.call(fn, [acc, item], {})
    return acc


# -- inspect.signature --------------------------------------------------------------------------
import inspect  # noqa: E402


@_register(inspect.signature)
def _signature(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``inspect.signature(fn)`` of a known Python callable: computed now (it depends only on the
    function's code, defaults and wrappers, guarded where the callable was read and below) and
    held as an immutable constant when every default is one."""
    from .constant import is_constant_value

    if len(args) != 1 or kwargs:
        unsupported("builtin_arguments", "inspect.signature() with options")
    real = _real_callable(tx, args[0])
    try:
        sig = inspect.signature(real)
    except (TypeError, ValueError) as e:
        unsupported("exception", f"inspect.signature() raised {type(e).__name__}: {e}")
    if not all(p.default is inspect.Parameter.empty or is_constant_value(p.default) for p in sig.parameters.values()):
        unsupported("builtin_arguments", "inspect.signature() of a function with non-constant defaults")
    return ConstantVariable(sig)


def _real_callable(tx: "Translator", v: VariableTracker) -> Any:
    """The Python callable a function tracker stands for, with the guards that fix its signature
    (the code object and defaults; the function itself was guarded where it was read)."""
    import types

    from .functions import UserFunctionVariable, UserMethodVariable

    if isinstance(v, UserMethodVariable):
        obj = getattr(v.obj, "value", _NO)
        if obj is _NO:
            unsupported("introspection", "inspect.signature() of a method of an object built in the trace")
        _guard_signature(tx, v.fn, v.fn_source)
        return types.MethodType(v.fn, obj)
    if isinstance(v, UserFunctionVariable):
        _guard_signature(tx, v.fn, v.source)
        return v.fn
    if isinstance(v, KnownCallableVariable) or v.is_python_constant():
        return v.as_python_constant()
    unsupported("introspection", f"inspect.signature() of {v}")


def _guard_signature(tx: "Translator", fn: Any, source: Any) -> None:
    from ..guards.guards import GuardKind
    from ..guards.source import FuncAttrSource
    from .functions import _wrap_defaults, _wrap_kwdefaults

    if source is None or getattr(fn, "__wrapped__", None) is not None or "__signature__" in getattr(fn, "__dict__", {}):
        if source is not None:
            unsupported("introspection", "inspect.signature() of a wrapped function")
        return
    tx.output.guards.add(GuardKind.ID_MATCH, FuncAttrSource(source, "__code__"), fn.__code__)
    _wrap_defaults(tx, fn.__defaults__, source, "__defaults__")
    _wrap_kwdefaults(tx, fn.__kwdefaults__, source)


# -- itertools over trackers ---------------------------------------------------------------------
# The finite combinators are applied to the lists of trackers themselves (itertools works on any
# objects), so they also combine tensors; the elements come back as trackers again.

def _itertools_handler(fn: Callable[..., Any]) -> Handler:
    def handler(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        real_args: list[Any] = []
        for a in args:
            if isinstance(a, (BaseListVariable, ListIteratorVariable)) or (
                    a.is_python_constant() and isinstance(a.as_python_constant(), (range, tuple, list, str))):
                real_args.append(a.unpack(tx))
            elif a.is_python_constant():
                real_args.append(a.as_python_constant())
            else:
                real_args.append(a.unpack(tx))
        real_kwargs = {k: v for k, v in kwargs.items()}
        if fn is itertools.zip_longest and "fillvalue" not in real_kwargs:
            real_kwargs["fillvalue"] = ConstantVariable(None)
        try:
            items = list(fn(*real_args, **real_kwargs))
        except Exception as e:
            unsupported("exception", f"itertools.{fn.__name__}: {type(e).__name__}: {e}")
        return ListIteratorVariable([_as_tracker(i) for i in items])

    return handler


def _as_tracker(item: Any) -> VariableTracker:
    if isinstance(item, VariableTracker):
        return item
    if isinstance(item, tuple):
        return TupleVariable([_as_tracker(i) for i in item])
    return ConstantVariable(item)


import itertools  # noqa: E402

for _fn in (itertools.product, itertools.chain, itertools.combinations, itertools.combinations_with_replacement,
            itertools.permutations, itertools.zip_longest, itertools.islice, getattr(itertools, "pairwise", None)):
    if _fn is not None:
        _HANDLERS[_fn] = _itertools_handler(_fn)
_HANDLERS[itertools.chain.from_iterable] = lambda tx, args, kwargs: _HANDLERS[itertools.chain](  # type: ignore[index]
    tx, args[0].unpack(tx), {})


# -- sorted / min / max with key= ----------------------------------------------------------------


def _keys(tx: "Translator", items: list[VariableTracker], key: VariableTracker | None) -> list[Any]:
    """The sort keys, each a Python constant (``key`` traced per item)."""
    out = []
    for item in items:
        k = tx.call(key, [item], {}) if key is not None and not (key.is_python_constant() and key.as_python_constant() is None) else item
        if not k.is_python_constant():
            unsupported("builtin_arguments", "sorting or comparing values that are not Python constants")
        out.append(k.as_python_constant())
    return out


def _sorted_by_key(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    items = _iter_items(tx, args[0])
    keys = _keys(tx, items, kwargs.get("key"))
    reverse = bool(kwargs["reverse"].as_python_constant()) if "reverse" in kwargs else False
    try:
        order = sorted(range(len(items)), key=lambda i: keys[i], reverse=reverse)  # stable, like sorted()
    except TypeError as e:
        unsupported("exception", f"TypeError: {e}")
    return ListVariable([items[i] for i in order])


def _minmax_by_key(fn: Callable[..., Any]) -> Handler:
    def handler(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        items = _iter_items(tx, args[0]) if len(args) == 1 else list(args)
        if not items:
            if "default" in kwargs:
                return kwargs["default"]
            unsupported("exception", f"ValueError: {fn.__name__}() arg is an empty sequence")
        keys = _keys(tx, items, kwargs.get("key"))
        try:
            best = fn(range(len(items)), key=lambda i: keys[i])  # first of equal keys, like Python
        except TypeError as e:
            unsupported("exception", f"TypeError: {e}")
        return items[best]

    return handler


def _with_key_fallback(plain: Handler, by_key: Handler) -> Handler:
    """The existing handler for constants; the key-aware one for everything else."""
    def handler(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if "key" in kwargs:
            items = _iter_items(tx, args[0]) if len(args) == 1 else list(args)
            return by_key(tx, [ListVariable(items)], kwargs)
        return plain(tx, args, kwargs)  # constants folded; tensors compared: a data-dependent break

    return handler


def _is_tensor(v: VariableTracker) -> bool:
    from .tensor import TensorVariable

    return isinstance(v, TensorVariable)


_HANDLERS[sorted] = _with_key_fallback(_HANDLERS[sorted], _sorted_by_key)
_HANDLERS[min] = _with_key_fallback(_HANDLERS[min], _minmax_by_key(min))
_HANDLERS[max] = _with_key_fallback(_HANDLERS[max], _minmax_by_key(max))


@_register(vars)
def _vars(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    if len(args) != 1:
        unsupported("introspection", "vars() without an argument")
    return args[0].var_getattr(tx, "__dict__")
