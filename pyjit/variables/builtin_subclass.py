"""Instances of user subclasses of immutable builtins (``int``, ``float``, ``str``, ``bytes``,
``complex``, ``tuple``) constructed by the traced code: ``MyInt(3)``, ``MyTuple((x, y))``.

Such a class keeps its base's ``__new__`` (the value is fixed at construction), so nothing of the
construction is user code when the class defines no ``__new__``/``__init__`` in Python, and no
Python override of a method its base defines (which ``obj + 1``, ``obj[i]`` or ``len(obj)`` would
have to run): then

- a scalar or string subclass built from constants is built for real at trace time, as a
  constant whose reconstruction builds a fresh instance (``MyInt(3)``) on every call, as eager
  does (a shared object would carry attributes set by the caller from one call to the next);
- a tuple subclass is a tuple tracker of its items whose type is the class
  (:class:`TupleSubclassVariable`): indexing, ``len``, iteration, concatenation act on the items,
  Python methods of the class are inlined with the tracker as ``self``, and it is rebuilt as
  ``MyTuple((items...))``.

Anything else (a Python ``__new__``/``__init__``, an override, an attribute store on the new
object) stays an ``object_construction``/``side_effect`` break.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING

from .base import VariableTracker
from .class_members import lookup_class_attr
from .constant import ConstantVariable
from .lists import NamedTupleVariable

if TYPE_CHECKING:
    from ..guards.source import Source
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator

_SCALAR_BASES = (int, float, complex, str, bytes)


def _builtin_base(cls: type) -> type | None:
    for base in cls.__mro__[1:]:
        if base in (*_SCALAR_BASES, tuple):
            return base
    return None


def _plain_subclass(cls: type, base: type) -> bool:
    """No Python ``__new__``/``__init__`` and no Python override of a method of ``base``."""
    if type(cls) is not type:
        return False  # a metaclass may change construction
    for klass in cls.__mro__:
        if klass is base or klass is object:
            break
        for name, attr in vars(klass).items():
            if name in ("__new__", "__init__", "__del__", "__slots__"):
                return False
            fn = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
            if hasattr(base, name) and isinstance(fn, (types.FunctionType, property)):
                return False
    return True


class FreshConstantVariable(ConstantVariable):
    """A constant instance of a user scalar/str subclass built by the trace: rebuilt fresh on
    every call (``cls(base_value)``), never shared between calls."""

    __slots__ = ()

    def reconstruct(self, cg: "OutputCodegen") -> str:
        cls = type(self.value)
        base = _builtin_base(cls)
        return f"{cg.ref(cls, cls.__name__)}({cg.constant(base(self.value))})"  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"FreshConstantVariable({type(self.value).__name__}({self.value!r}))"


class TupleSubclassVariable(NamedTupleVariable):
    """An instance of a user ``tuple`` subclass built by the trace (see module docstring)."""

    __slots__ = ("cls_source",)

    def __init__(self, items: list[VariableTracker], tuple_cls: type, source: "Source | None" = None,
                 cls_source: "Source | None" = None) -> None:
        super().__init__(items, tuple_cls, source)
        self.cls_source = cls_source

    def _method(self, tx: "Translator", name: str, fn: types.FunctionType) -> VariableTracker:
        """``obj.name`` bound to this tuple; the class keeps that function (``Cls.name is fn``)."""
        from .functions import UserMethodVariable

        src = None
        if self.cls_source is not None:
            from ..guards.guards import GuardKind
            from ..guards.source import AttrSource

            src = AttrSource(self.cls_source, name)
            tx.output.guards.add(GuardKind.ID_MATCH, src, fn)
        return UserMethodVariable(fn, self, fn_source=src)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        attr = lookup_class_attr(self.tuple_cls, name)
        if isinstance(attr, types.FunctionType):
            return self._method(tx, name, attr)
        if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
            from .functions import UserFunctionVariable

            return UserFunctionVariable(attr.fget, None).call_function(tx, [self], {})
        if isinstance(attr, (staticmethod, classmethod)):
            from .builder import wrap

            fn = attr.__func__
            if isinstance(attr, staticmethod):
                return wrap(tx, fn, None)
            from .functions import UserMethodVariable

            return UserMethodVariable(fn, wrap(tx, self.tuple_cls, None))
        return super().var_getattr(tx, name)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        attr = lookup_class_attr(self.tuple_cls, name)
        if isinstance(attr, types.FunctionType):
            return self._method(tx, name, attr).call_function(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def __repr__(self) -> str:
        return f"TupleSubclassVariable({self.tuple_cls.__name__})"


def construct_builtin_subclass(tx: "Translator", cls: type, args: list[VariableTracker],
                               kwargs: dict[str, VariableTracker], cls_source: "Source | None" = None) -> VariableTracker | None:
    """``cls(*args)`` for a plain subclass of an immutable builtin; None when it is not one."""
    base = _builtin_base(cls)
    if base is None or not _plain_subclass(cls, base):
        return None
    if base is tuple:
        if kwargs or len(args) > 1:
            return None
        items = args[0].unpack(tx) if args else []
        return TupleSubclassVariable(list(items), cls, cls_source=cls_source)
    if not (all(a.is_python_constant() for a in args) and all(v.is_python_constant() for v in kwargs.values())):
        return None
    from ..trace.graph_breaks import unsupported

    try:
        value = cls(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
    except Exception as e:  # noqa: BLE001 - raised as eager would
        unsupported("exception", f"{type(e).__name__}: {e}")
    return FreshConstantVariable(value)
