"""The variable-tracker protocol: symbolic stand-ins for Python values during tracing.

A tracker knows the value it stands for (as a Python constant, a graph node with a fake
example, a container of trackers, ...) and, when the value came from outside the traced code,
its :class:`pyjit.guards.source.Source`. Guards are *not* stored on trackers: the builder and
the operations install them into the trace's guard set at the moment an assumption is made.

Protocol (defaults raise a structured graph break):
``python_type``, ``as_python_constant``, ``var_getattr``, ``call_function``, ``call_method``,
``unpack`` (iteration), ``truth`` (``if v:``), ``reconstruct`` (expression in replacement code).
"""
from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING, Any

from ..guards.source import Source
from ..trace.graph_breaks import unsupported

if TYPE_CHECKING:
    from ..trace.translator import Translator
    from ..trace.output_graph import OutputCodegen


# Types whose instances are always true (no __bool__ or __len__ of their own).
_ALWAYS_TRUE = frozenset({types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
                          types.MethodDescriptorType, types.WrapperDescriptorType, functools.partial})


class VariableTracker:
    __slots__ = ("source",)

    def __init__(self, source: Source | None = None) -> None:
        self.source = source

    # -- what the value is ---------------------------------------------------------------
    def python_type(self) -> type:
        unsupported("unsupported_object", f"type of {self}")

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        unsupported("unsupported_object", f"{self} is not a Python constant here")

    # -- operations ----------------------------------------------------------------------
    def var_getattr(self, tx: "Translator", name: str) -> "VariableTracker":
        unsupported("unsupported_attr", f"{self}.{name}")

    def call_function(self, tx: "Translator", args: list["VariableTracker"], kwargs: dict[str, "VariableTracker"]) -> "VariableTracker":
        unsupported("unsupported_call", f"calling {self}")

    def call_method(self, tx: "Translator", name: str, args: list["VariableTracker"], kwargs: dict[str, "VariableTracker"]) -> "VariableTracker":
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack(self, tx: "Translator") -> list["VariableTracker"]:
        unsupported("unsupported_object", f"iterating over {self}")

    def truth(self, tx: "Translator") -> bool:
        try:
            ptype = self.python_type()
        except Exception:  # noqa: BLE001 - a tracker that cannot tell its type
            ptype = None
        if ptype is not None and ptype in _ALWAYS_TRUE:
            return True  # functions, methods and classes define no __bool__/__len__
        unsupported("unsupported_object", f"truth value of {self}")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.source is not None:
            return self.source.expr()
        unsupported("unsupported_return", f"{self}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __str__(self) -> str:
        """How graph-break messages name this value: in the user's words (``repr`` is for us)."""
        return describe(self)


class KnownValueVariable(VariableTracker):
    """One known Python object held as ``value`` (a constant, a class, a module): itself a
    Python constant; subclasses say how attribute reads and calls on it are traced."""

    __slots__ = ("value",)

    def __init__(self, value: Any, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value


class KnownCallableVariable(VariableTracker):
    """One known Python callable (a builtin, an ``operator``/``math`` function, a torch
    function): itself a Python constant; subclasses say how calling it is traced."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any, source: Source | None = None) -> None:
        super().__init__(source)
        self.fn = fn

    def python_type(self) -> type:
        return type(self.fn)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.fn


class BoundMethodVariable(VariableTracker):
    """``obj.name`` for a tracker whose methods are implemented by ``call_method`` (containers, constants)."""

    __slots__ = ("obj", "name")

    def __init__(self, obj: VariableTracker, name: str) -> None:
        super().__init__(None)
        self.obj = obj
        self.name = name

    def call_function(self, tx: "Translator", args: list["VariableTracker"], kwargs: dict[str, "VariableTracker"]) -> "VariableTracker":
        return self.obj.call_method(tx, self.name, args, kwargs)

    def reconstruct(self, cg: "OutputCodegen") -> str:  # graph breaks: the method, bound again
        return f"{cg.ref(getattr, 'getattr')}({self.obj.reconstruct(cg)}, {cg.constant(self.name)})"

    def __repr__(self) -> str:
        return f"BoundMethodVariable({self.obj!r}.{self.name})"


def method_or_unsupported(obj: VariableTracker, name: str) -> VariableTracker:
    """The bound method ``obj.name`` when the value's type has such a method."""
    try:
        ptype = obj.python_type()
    except Exception:
        ptype = None
    if ptype is not None and callable(getattr(ptype, name, None)):
        return BoundMethodVariable(obj, name)
    unsupported("unsupported_attr", f"{obj}.{name}")


class NullVariable(VariableTracker):
    """The NULL CPython pushes before a callable (3.11/3.12) or after it (3.13)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL"


NULL = NullVariable()


def describe(v: VariableTracker) -> str:
    """``v`` in a user's words: ``a tensor``, ``a Tag object``, ``function helper``, ``3``."""
    import types as _types

    try:
        if v.is_python_constant():
            value = v.as_python_constant()
            if isinstance(value, (_types.FunctionType, _types.BuiltinFunctionType)):
                return f"function {getattr(value, '__qualname__', value)}"
            if isinstance(value, type):
                return f"class {value.__qualname__}"
            if isinstance(value, _types.ModuleType):
                return f"module {value.__name__}"
            text = repr(value)
            return text if len(text) <= 60 else text[:57] + "..."
    except Exception:  # noqa: BLE001 - describing must never fail
        pass
    name = type(v).__name__
    if name == "TensorVariable":
        return "a tensor"
    try:
        t = v.python_type()
    except Exception:  # noqa: BLE001
        t = None
    if t is not None:
        if t is _types.MethodType or t is _types.FunctionType:
            return "a function"
        return f"a {t.__qualname__} object"
    words = name.removesuffix("Variable")
    return "a " + "".join(" " + c.lower() if c.isupper() else c for c in words).strip() + " value"
