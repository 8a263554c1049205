"""User-defined classes and instances (read-only attribute access in this issue).

An instance reached through a source is guarded by type; each attribute read is wrapped by the
builder with an ``AttrSource`` (and so guarded as it is used). Methods defined in Python are
inlined with the instance bound as ``self``; properties run their getter symbolically. Members
found on the class are guarded where they are found (``pyjit/variables/class_members.py``).
Dataclass instances and other plain objects work the same way.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from ..guards.source import AttrSource, Source
from ..trace.graph_breaks import unsupported
from .base import KnownValueVariable, VariableTracker
from .class_members import MISSING as _MISSING
from .class_members import call_type_method, class_member, guard_type_lacks
from .class_members import lookup_class_attr as _class_attr
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator


class UserDefinedClassVariable(KnownValueVariable):
    """A class object (guarded by identity): ``isinstance`` targets, namedtuple/dataclass constructors."""

    __slots__ = ()

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .builder import wrap

        attr = _class_attr(self.value, name)
        src = AttrSource(self.source, name) if self.source is not None else None
        if attr is _MISSING:
            if name in ("__name__", "__qualname__", "__module__"):
                return wrap(tx, getattr(self.value, name), src)
            unsupported("exception", f"AttributeError: type object {self.value.__name__!r} has no attribute {name!r}")
        member = class_member(tx, self, name, attr, on_instance=False)
        if member is not None:
            return member
        return wrap(tx, getattr(self.value, name), src)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        cls = self.value
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            from .lists import NamedTupleVariable

            fields = cls._fields  # type: ignore[attr-defined]
            defaults = getattr(cls, "_field_defaults", {})
            items = list(args)
            for f in fields[len(args):]:
                if f in kwargs:
                    items.append(kwargs[f])
                elif f in defaults:
                    items.append(ConstantVariable(defaults[f]))
                else:
                    unsupported("exception", f"TypeError: missing field {f!r} of {cls.__name__}")
            return NamedTupleVariable(items, cls)
        from .builtins import BuiltinVariable

        import functools

        if cls is functools.partial:
            from .functions import PartialVariable

            return PartialVariable(args[0], list(args[1:]), dict(kwargs))
        if BuiltinVariable.can_handle(cls):
            return BuiltinVariable(cls).call_function(tx, args, kwargs)
        unsupported("unsupported_call", f"constructing {cls.__name__} inside the traced code")

    def reconstruct(self, cg: Any) -> str:
        if self.source is not None:
            return self.source.expr()
        return cg.ref(self.value, self.value.__name__)

    def __repr__(self) -> str:
        return f"UserDefinedClassVariable({self.value.__name__})"


class UserDefinedObjectVariable(VariableTracker):
    """An instance of a user class; attributes are read through sources, never written."""

    __slots__ = ("value",)

    def __init__(self, value: Any, source: Source | None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .builder import wrap

        obj = self.value
        cls = type(obj)
        if isinstance(_class_attr(cls, "__getattribute__"), types.FunctionType):
            # The lookup below models object.__getattribute__; a Python one could answer anything.
            unsupported("unsupported_attr", f"{cls.__name__} defines __getattribute__ (reading .{name})")
        cls_attr = _class_attr(cls, name)
        if isinstance(cls_attr, property):  # a data descriptor: wins over the instance __dict__
            member = class_member(tx, self, name, cls_attr)
            assert member is not None
            return member
        d = getattr(obj, "__dict__", None)
        data_descriptor = hasattr(type(cls_attr), "__set__") or hasattr(type(cls_attr), "__delete__")
        if isinstance(d, dict) and name in d and not data_descriptor:
            # Guarded through getattr(obj, name): the same lookup Python does at run time.
            return wrap(tx, d[name], AttrSource(self.source, name) if self.source is not None else None)
        member = class_member(tx, self, name, cls_attr)
        if member is not None:
            return member
        try:
            value = getattr(obj, name)
        except AttributeError:
            unsupported("exception", f"AttributeError: {type(obj).__name__!r} object has no attribute {name!r}")
        return wrap(tx, value, AttrSource(self.source, name) if self.source is not None else None)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        call = _class_attr(type(self.value), "__call__")
        if isinstance(call, types.FunctionType):
            return call_type_method(tx, self, "__call__", call, args, kwargs)
        unsupported("unsupported_call", f"calling a {type(self.value).__name__} instance")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        dunder = _class_attr(type(self.value), name)
        if name.startswith("__") and isinstance(dunder, types.FunctionType):
            return call_type_method(tx, self, name, dunder, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def truth(self, tx: "Translator") -> bool:
        cls = type(self.value)
        if _class_attr(cls, "__bool__") is _MISSING and _class_attr(cls, "__len__") is _MISSING:
            guard_type_lacks(tx, self, ("__bool__", "__len__"))  # adding either later changes the answer
            return True
        unsupported("unsupported_call", f"truth value of a {cls.__name__} (custom __bool__/__len__)")

    def __repr__(self) -> str:
        return f"UserDefinedObjectVariable({type(self.value).__name__})"
