"""User-defined classes and instances (read-only attribute access in this issue).

An instance reached through a source is guarded by type; each attribute read is wrapped by the
builder with an ``AttrSource`` (and so guarded as it is used). Methods defined in Python are
inlined with the instance bound as ``self``; properties run their getter symbolically.
Dataclass instances and other plain objects work the same way.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from ..guards.source import AttrSource, Source
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator

_MISSING = object()


def _class_attr(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


class UserDefinedClassVariable(VariableTracker):
    """A class object (guarded by identity): ``isinstance`` targets, namedtuple/dataclass constructors."""

    __slots__ = ("value",)

    def __init__(self, value: type, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .builder import wrap

        attr = _class_attr(self.value, name)
        if attr is _MISSING:
            if name in ("__name__", "__qualname__", "__module__"):
                return ConstantVariable(getattr(self.value, name))
            unsupported("exception", f"AttributeError: type object {self.value.__name__!r} has no attribute {name!r}")
        if isinstance(attr, staticmethod):
            return wrap(tx, attr.__func__, None)
        if isinstance(attr, classmethod):
            from .functions import UserMethodVariable

            return UserMethodVariable(attr.__func__, self)
        return wrap(tx, getattr(self.value, name), AttrSource(self.source, name) if self.source is not None else None)

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
        cls_attr = _class_attr(type(obj), name)
        if isinstance(cls_attr, property):
            from .functions import UserFunctionVariable

            if isinstance(cls_attr.fget, types.FunctionType):
                from .functions import class_function_source

                src = class_function_source(self.source, name, cls_attr.fget)
                fget_src = AttrSource(src, "fget") if src is not None else None
                return UserFunctionVariable(cls_attr.fget, fget_src).call_function(tx, [self], {})
            unsupported("unsupported_attr", f"property {name} implemented in C")
        d = getattr(obj, "__dict__", None)
        if d is not None and name in d:
            return wrap(tx, d[name], AttrSource(self.source, name) if self.source is not None else None)
        if isinstance(cls_attr, types.FunctionType):
            from .functions import UserMethodVariable, class_function_source

            return UserMethodVariable(cls_attr, self, fn_source=class_function_source(self.source, name, cls_attr))
        if isinstance(cls_attr, staticmethod):
            return wrap(tx, cls_attr.__func__, None)
        if isinstance(cls_attr, classmethod):
            from .functions import UserMethodVariable

            return UserMethodVariable(cls_attr.__func__, wrap(tx, type(obj), None))
        try:
            value = getattr(obj, name)
        except AttributeError:
            unsupported("exception", f"AttributeError: {type(obj).__name__!r} object has no attribute {name!r}")
        return wrap(tx, value, AttrSource(self.source, name) if self.source is not None else None)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        call = _class_attr(type(self.value), "__call__")
        if isinstance(call, types.FunctionType):
            from .functions import UserMethodVariable

            from .functions import class_function_source

            src = class_function_source(self.source, "__call__", call)
            return UserMethodVariable(call, self, fn_source=src).call_function(tx, args, kwargs)
        unsupported("unsupported_call", f"calling a {type(self.value).__name__} instance")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        dunder = _class_attr(type(self.value), name)
        if name.startswith("__") and isinstance(dunder, types.FunctionType):
            from .functions import UserMethodVariable

            from .functions import class_function_source

            src = class_function_source(self.source, name, dunder)
            return UserMethodVariable(dunder, self, fn_source=src).call_function(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def truth(self, tx: "Translator") -> bool:
        cls = type(self.value)
        if _class_attr(cls, "__bool__") is _MISSING and _class_attr(cls, "__len__") is _MISSING:
            return True
        unsupported("unsupported_call", f"truth value of a {cls.__name__} (custom __bool__/__len__)")

    def __repr__(self) -> str:
        return f"UserDefinedObjectVariable({type(self.value).__name__})"
