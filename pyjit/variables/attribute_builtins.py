"""``getattr``/``hasattr``/``setattr``/``delattr`` and ``object.__getattribute__``/``__setattr__``
over trackers (registered into the builtin handler table of :mod:`pyjit.variables.builtins`).

A ``hasattr`` probe is answered by a real lookup only where that runs no user code (no Python
``__getattr__``/``__getattribute__``, not a property); otherwise the lookup is traced and only an
``AttributeError`` means "missing". Stores go through :func:`pyjit.variables.objects.store_attribute`
(recorded for the side-effect replay).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Unsupported
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .builtins import _NO, _register
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator


def _missing_attr(e: Unsupported) -> bool:
    """The traced lookup raised AttributeError (so ``hasattr`` is False). Any other exception
    (a KeyError inside a ``__getattr__``) propagates, as from ``hasattr``; a lookup pyjit cannot
    trace is a break, never a guessed answer."""
    from .misc import raised_exception_type

    if e.graph_break.kind != "exception":
        return False
    exc_type = getattr(e, "exc_type", None)
    if isinstance(exc_type, type):
        return issubclass(exc_type, AttributeError)
    return raised_exception_type(e) == "AttributeError"


@_register(getattr)
def _getattr(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    name = args[1].as_python_constant()
    try:  # side-effect replay: assigned (or deleted) earlier in the trace
        stored = tx.output.side_effects.pending_attr(args[0], name)
    except Unsupported:
        if len(args) == 3:
            return args[2]
        raise
    if stored is not None:
        return stored
    if len(args) == 3:
        if not has_attr(tx, args[0], name):
            return args[2]
    return args[0].var_getattr(tx, name)


@_register(object.__getattribute__)
def _object_getattribute(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``object.__getattribute__(obj, name)`` (also ``super().__getattribute__(name)``): the
    generic lookup, skipping a Python ``__getattribute__`` of the object's class."""
    obj, name = args[0], args[1].as_python_constant()
    generic = getattr(obj, "generic_getattr", None)
    if generic is not None:
        return generic(tx, name)
    return obj.var_getattr(tx, name)


def _plain_lookup(cls: type, name: str) -> bool:
    """``hasattr(obj, name)`` on an instance of ``cls`` runs no Python code: the class defines
    no Python ``__getattr__``/``__getattribute__`` and ``name`` is no Python-level descriptor
    (a property getter)."""
    import types

    from .class_members import MISSING, lookup_class_attr

    for hook in ("__getattr__", "__getattribute__"):
        if isinstance(lookup_class_attr(cls, hook), types.FunctionType):
            return False
    attr = lookup_class_attr(cls, name)
    return attr is MISSING or not hasattr(type(attr), "__get__") or type(attr).__module__ == "builtins" \
        and not isinstance(attr, property)


@_register(hasattr)
def _hasattr(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return ConstantVariable(has_attr(tx, args[0], args[1].as_python_constant()))


def has_attr(tx: "Translator", obj: VariableTracker, name: str) -> bool:
    from .tensor import TensorVariable

    if isinstance(obj, TensorVariable):
        return hasattr(obj.example, name)
    if obj.is_python_constant():
        return hasattr(obj.as_python_constant(), name)
    from ..errors import Unsupported as _Unsupported

    from .objects import ObjectVariable

    try:  # side-effect replay: assigned (or deleted) earlier in the trace
        if tx.output.side_effects.pending_attr(obj, name) is not None:
            return True
    except _Unsupported:
        return False
    real = getattr(obj, "value", _NO) if not isinstance(obj, ObjectVariable) else _NO
    if real is not _NO and _plain_lookup(type(real), name):
        from ..guards.guards import GuardKind

        result = hasattr(real, name)
        # The answer depends on the object's current attributes: guard it (attributes can be
        # added and deleted between calls without changing the object's identity or type).
        if obj.source is not None:
            tx.output.guards.add(GuardKind.HASATTR, obj.source, result, extra=name)
        return result
    try:
        obj.var_getattr(tx, name)
        return True
    except Unsupported as e:
        if _missing_attr(e):
            return False
        raise


@_register(setattr, delattr)
def _setattr(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return _store_attribute(tx, args, kwargs, generic=False)


@_register(object.__setattr__, object.__delattr__)
def _object_setattr(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    # object.__setattr__ (also super().__setattr__ reaching it) skips a Python __setattr__
    return _store_attribute(tx, args, kwargs, generic=True)


def _store_attribute(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker],
                     *, generic: bool) -> VariableTracker:
    from ..trace.side_effects import DELETED
    from .objects import store_attribute

    if kwargs or len(args) not in (2, 3):
        unsupported("exception", "TypeError: setattr()/delattr() takes 3/2 positional arguments")
    value = DELETED if len(args) == 2 else args[2]
    store_attribute(tx, args[0], args[1].as_python_constant(), value, generic=generic)
    return ConstantVariable(None)
