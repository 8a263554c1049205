"""Guarded lookups of members found on an object's class: methods, static and class methods,
properties, and the dunder methods Python itself looks up on the type.

The trace relies on *which* function ``obj.name`` resolves to, so each lookup installs, at the
moment it is made, the guards that keep it true:

- the identity of the function at its class source (``L['obj'].__class__.name is fn``;
  ``...name.__func__`` for classmethods; the property object itself for properties, which pins
  its ``fget``): a method patched on the class after compiling fails this guard;
- for non-data descriptors (plain functions, staticmethod, classmethod), that the instance
  ``__dict__`` does not shadow the name (``('name' in L['obj'].__dict__) == False``): Python
  looks in the instance dict before those. Properties are data descriptors and win over the
  instance dict, so they need no such guard; neither do dunders Python looks up on the type.

Library code (torch, the stdlib) found on a class gets no source and no guard, like every other
library value (see docs/guards.md): pyjit assumes library classes are not patched at run time.

The function found as ``C.name`` is the same for every instance of ``C`` (each instance's type is
guarded), so the first source that reached it is shared by all later lookups in the trace: its
identity, ``__code__``, defaults and globals are guarded once, not once per instance (a model
with 24 blocks of one class gets one ``forward`` guard, not 24).
"""
from __future__ import annotations

import types
import weakref
from typing import TYPE_CHECKING, Any

from ..guards.guards import GuardKind
from ..guards.source import AttrSource, Source
from ..identity import instance_dict
from ..trace.graph_breaks import unsupported
from .base import VariableTracker

if TYPE_CHECKING:
    from ..trace.translator import Translator

MISSING: Any = object()


def lookup_class_attr(cls: type, name: str) -> Any:
    """``name`` as found in ``cls.__mro__`` (the raw descriptor, not bound), or MISSING."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return MISSING


def _is_library(fn: Any) -> bool:
    from ..frame.policy import is_library_code

    code = getattr(fn, "__code__", None)
    return code is None or is_library_code(code)


def class_source(obj_source: Source | None) -> Source | None:
    """``L['obj'].__class__``: where the class of a tracked object is read from."""
    return AttrSource(obj_source, "__class__") if obj_source is not None else None


# Per trace (keyed by its guard set): (id(class), name) -> the first source that reached it.
_shared: "weakref.WeakKeyDictionary[Any, dict[tuple[int, str], Source]]" = weakref.WeakKeyDictionary()


def member_source(tx: "Translator", cls: type, cls_source: Source | None, name: str, fn: Any) -> Source | None:
    """``<cls>.name`` for a user function found on ``cls`` (None for library code or no source);
    the first such source of the trace for (cls, name) (see module docstring)."""
    if _is_library(fn):
        return None
    return shared_class_source(tx, cls, cls_source, name)


def shared_class_source(tx: "Translator", cls: type, cls_source: Source | None, name: str) -> Source | None:
    """``<cls>.name``, the first such source of the trace for (cls, name)."""
    if cls_source is None:
        return None
    memo = _shared.setdefault(tx.output.guards, {})
    return memo.setdefault((id(cls), name), AttrSource(cls_source, name))


def guard_identity(tx: "Translator", source: Source | None, value: Any) -> Source | None:
    """Guard ``source is value`` (ID_MATCH) and return the source."""
    if source is not None:
        tx.output.guards.add(GuardKind.ID_MATCH, source, value)
    return source


def guard_not_shadowed(tx: "Translator", obj: VariableTracker, name: str) -> None:
    """The trace used the class's ``name``: guard that the instance ``__dict__`` still lacks it."""
    value = getattr(obj, "value", None)
    if obj.source is None or instance_dict(value) is None:
        return  # no instance dict (``__slots__``): nothing can shadow the class attribute
    tx.output.guards.add(GuardKind.DICT_CONTAINS, AttrSource(obj.source, "__dict__"), False, extra=name)


def class_member(tx: "Translator", obj: VariableTracker, name: str, attr: Any,
                 *, on_instance: bool = True) -> VariableTracker | None:
    """The tracker for ``obj.name`` where ``attr`` is what the class defines, or None when
    ``attr`` is a plain value (read it with ``getattr`` through an ``AttrSource`` instead).

    ``obj`` is the instance (``on_instance``) or, for ``Cls.name``, the class tracker itself.
    """
    from .builder import wrap
    from .functions import UserFunctionVariable, UserMethodVariable

    value = getattr(obj, "value", None)
    cls_src = class_source(obj.source) if on_instance else obj.source
    cls = type(value) if on_instance else value
    if isinstance(attr, property):
        if not on_instance:
            return None  # Cls.prop is the property object itself
        fget = attr.fget
        if not isinstance(fget, types.FunctionType):
            unsupported("unsupported_attr", f"property {name} implemented in C")
        # The property object is immutable, so its identity pins fget; guarding it (rather than
        # ``.fget``) also keeps the check well-defined when the name is rebound to a plain value.
        base = guard_identity(tx, member_source(tx, cls, cls_src, name, fget), attr)
        src = AttrSource(base, "fget") if base is not None else None
        return UserFunctionVariable(fget, src).call_function(tx, [obj], {})
    if isinstance(attr, types.FunctionType):
        if not on_instance:
            return None  # Cls.fn: a plain function, wrapped (and ID-guarded) by the caller
        guard_not_shadowed(tx, obj, name)
        src = guard_identity(tx, member_source(tx, cls, cls_src, name, attr), attr)
        return UserMethodVariable(attr, obj, fn_source=src)
    if isinstance(attr, staticmethod):
        if on_instance:
            guard_not_shadowed(tx, obj, name)
        fn = attr.__func__
        # getattr(cls, name) of a staticmethod is the function itself: wrap guards its identity.
        return wrap(tx, fn, member_source(tx, cls, cls_src, name, fn) if isinstance(fn, types.FunctionType) else None)
    if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
        if on_instance:
            guard_not_shadowed(tx, obj, name)
        fn = attr.__func__
        base = member_source(tx, cls, cls_src, name, fn)
        src = guard_identity(tx, AttrSource(base, "__func__") if base is not None else None, fn)
        cls_var = wrap(tx, type(value), cls_src) if on_instance else obj
        return UserMethodVariable(fn, cls_var, fn_source=src)
    return None


def call_type_method(tx: "Translator", obj: VariableTracker, name: str, fn: types.FunctionType,
                     args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """Inline ``type(obj).name(obj, *args)`` (``__call__``, operators): looked up on the type only,
    so only the function's identity is guarded."""
    from .functions import UserMethodVariable

    cls = type(getattr(obj, "value", None))
    src = guard_identity(tx, member_source(tx, cls, class_source(obj.source), name, fn), fn)
    return UserMethodVariable(fn, obj, fn_source=src).call_function(tx, args, kwargs)


def guard_type_lacks(tx: "Translator", obj: VariableTracker, names: tuple[str, ...]) -> None:
    """The trace assumed ``type(obj)`` defines none of ``names`` (e.g. ``__bool__``/``__len__``)."""
    src = class_source(obj.source)
    if src is None:
        return
    cls = type(getattr(obj, "value", None))
    for n in names:
        tx.output.guards.add(GuardKind.HASATTR, src, hasattr(cls, n), extra=n)
