"""User-defined classes and instances: attribute reads and method calls (stores: ``objects.py``).

An instance reached through a source is guarded by type; each attribute read is wrapped by the
builder with an ``AttrSource`` (and so guarded as it is used). Methods defined in Python are
inlined with the instance bound as ``self``; properties run their getter symbolically. Members
found on the class are guarded where they are found (``pyjit/variables/class_members.py``).
Dataclass instances and other plain objects work the same way.
"""
from __future__ import annotations

import collections
import types
from typing import TYPE_CHECKING, Any

from ..errors import Unsupported
from ..guards.source import AttrSource, Source
from ..identity import instance_dict
from ..trace.graph_breaks import unsupported
from .base import KnownValueVariable, VariableTracker
from .class_members import MISSING as _MISSING
from .class_members import call_type_method, class_member, guard_not_shadowed, guard_type_lacks
from .class_members import lookup_class_attr as _class_attr
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator

# Immutable builtin bases, and the C slot that copies an instance's builtin value as an exact
# instance of the base without running Python code of the subclass.
_IMMUTABLE_BASES: dict[type, Any] = {str: str.__str__, int: int.__index__, float: float.__float__,
                                     bytes: bytes.__bytes__, complex: complex.__complex__}


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
            if _torch_metaclass_property(self.value, name):
                # ``dist.group.WORLD``: a property of a torch class's metaclass, read as it is
                # now (the value is guarded through ``src`` by whatever tracker wraps it).
                return wrap(tx, getattr(self.value, name), src)
            unsupported("exception", f"AttributeError: type object {self.value.__name__!r} has no attribute {name!r}")
        member = class_member(tx, self, name, attr, on_instance=False)
        if member is not None:
            return member
        from .builtins import BuiltinVariable
        from .misc import BuiltinMethodVariable

        if BuiltinMethodVariable.can_handle(attr) and attr.__objclass__ is not object \
                and not BuiltinVariable.has_handler(attr):
            # ``MyDict.__setitem__(obj, k, v)``: a C method inherited from a builtin base, run on
            # the object's builtin part; the class keeps it (a Python override would win).
            if src is not None:
                from ..guards.guards import GuardKind

                tx.output.guards.add(GuardKind.ID_MATCH, src, attr)
            return BuiltinMethodVariable(attr)
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

        import weakref

        if cls is weakref.ref:  # pyjit/variables/weakrefs.py
            from .weakrefs import make_weakref

            return make_weakref(tx, args, kwargs)
        from .numpy_scalars import construct_numpy_scalar, is_numpy_scalar_type

        if is_numpy_scalar_type(cls):  # np.float32(2.0): a constant
            folded = construct_numpy_scalar(tx, cls, args, kwargs)
            if folded is not None:
                return folded
        if cls is collections.defaultdict:  # pyjit/variables/defaultdicts.py
            from .defaultdicts import make_defaultdict

            return make_defaultdict(tx, args, kwargs)
        if cls is functools.partial:
            from .functions import PartialVariable

            return PartialVariable(args[0], list(args[1:]), dict(kwargs))
        if BuiltinVariable.can_handle(cls):
            return BuiltinVariable(cls).call_function(tx, args, kwargs)
        from .misc import ExceptionVariable

        if ExceptionVariable.can_construct(cls) and not kwargs:
            return ExceptionVariable(cls, list(args))
        from .objects import construct  # a new object of a user class (pyjit/variables/objects.py)
        return construct(tx, self, args, kwargs)

    def reconstruct(self, cg: Any) -> str:
        if self.source is not None:
            return self.source.expr()
        return cg.ref(self.value, self.value.__name__)

    def __repr__(self) -> str:
        return f"UserDefinedClassVariable({self.value.__name__})"


def _torch_metaclass_property(cls: type, name: str) -> bool:
    meta = type(cls)
    mod = getattr(meta, "__module__", "") or ""
    return meta is not type and mod.startswith("torch.") and isinstance(_class_attr(meta, name), property)


class UserDefinedObjectVariable(VariableTracker):
    """An instance of a user class; attributes are read through sources, never written."""

    __slots__ = ("value", "dict_view")

    def __init__(self, value: Any, source: Source | None) -> None:
        super().__init__(source)
        self.value = value
        self.dict_view: VariableTracker | None = None  # builtin_base_view, made on first use

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        """``obj.name`` as Python does it: ``type(obj).__getattribute__`` (inlined when the class
        defines one in Python), then ``__getattr__`` (inlined) when that raises AttributeError."""
        cls = type(self.value)
        getattribute = _class_attr(cls, "__getattribute__")
        if isinstance(getattribute, types.FunctionType):
            # A Python __getattribute__ (configs mapping aliases): run it symbolically; its
            # ``super().__getattribute__(k)`` / ``object.__getattribute__(self, k)`` come back to
            # generic_getattr below. Its identity is guarded by call_type_method.
            return self._with_getattr_fallback(
                tx, name, lambda: call_type_method(tx, self, "__getattribute__", getattribute, [ConstantVariable(name)], {}))
        return self._with_getattr_fallback(tx, name, lambda: self.generic_getattr(tx, name))

    def _with_getattr_fallback(self, tx: "Translator", name: str, lookup: Any) -> VariableTracker:
        cls = type(self.value)
        getattr_fn = _class_attr(cls, "__getattr__")
        if not isinstance(getattr_fn, types.FunctionType):
            return lookup()
        try:
            return lookup()
        except Unsupported as e:
            if not _is_attribute_error(e):
                raise
        # The trace relies on the lookup having failed: that was guarded where it was decided
        # (the HASATTR guard of generic_getattr).
        return call_type_method(tx, self, "__getattr__", getattr_fn, [ConstantVariable(name)], {})

    def generic_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        """``object.__getattribute__(obj, name)``: data descriptors, instance ``__dict__``, class."""
        from .builder import wrap

        obj = self.value
        cls = type(obj)
        cls_attr = _class_attr(cls, name)
        if isinstance(cls_attr, property):  # a data descriptor: wins over the instance __dict__
            member = class_member(tx, self, name, cls_attr)
            assert member is not None
            return member
        d = instance_dict(obj)
        data_descriptor = hasattr(type(cls_attr), "__set__") or hasattr(type(cls_attr), "__delete__")
        if d is not None and name in d and not data_descriptor:
            # Guarded through getattr(obj, name): the same lookup Python does at run time (for a
            # class with its own __getattribute__, that one is inlined, guarded, and resolves
            # ``name`` to itself, so the guard reads the same value).
            return wrap(tx, d[name], AttrSource(self.source, name) if self.source is not None else None)
        member = class_member(tx, self, name, cls_attr)
        if member is not None:
            return member
        from .misc import BuiltinMethodVariable

        if BuiltinMethodVariable.can_handle(cls_attr) and cls_attr.__objclass__ is not object:
            # A C method inherited from a builtin base (dict.get on a dict subclass), bound to obj.
            from .functions import PartialVariable

            guard_not_shadowed(tx, self, name)
            return PartialVariable(BuiltinMethodVariable(cls_attr), [self], {})
        if cls_attr is _MISSING and name not in ("__dict__", "__class__"):
            if self.source is not None and d is not None:
                # The attribute is absent: guard that it stays absent (no class attribute either:
                # the class is fixed by the type guard).
                from ..guards.guards import GuardKind

                tx.output.guards.add(GuardKind.DICT_CONTAINS, AttrSource(self.source, "__dict__"), False, extra=name)
            if d is not None:
                unsupported("exception", f"AttributeError: {cls.__name__!r} object has no attribute {name!r}")
        try:  # (never hasattr(obj, name): that would run the class's __getattr__ for real)
            value = object.__getattribute__(obj, name)
        except AttributeError:
            if self.source is not None:  # an unset __slots__ member: it must stay unset
                from ..guards.guards import GuardKind

                tx.output.guards.add(GuardKind.HASATTR, self.source, False, extra=name)
            unsupported("exception", f"AttributeError: {cls.__name__!r} object has no attribute {name!r}")
        return wrap(tx, value, AttrSource(self.source, name) if self.source is not None else None)

    def builtin_base_view(self, tx: "Translator", base: type) -> VariableTracker:
        """The builtin part of an instance of a user subclass of ``dict`` (for ``dict.get(obj, k)``,
        ``super().__getitem__(k)``, ``super().__setitem__(k, v)``): a dict tracker over the same
        object's storage, keys guarded, made once per trace (mutations through one call are seen by
        the next; pyjit/variables/dict_subclass.py)."""
        from .builder import wrap
        from .dict_subclass import DictViewVariable, PlainDictItemSource
        from .dicts import check_dict_key

        obj = self.value
        cls = type(obj)
        if base is object:
            return self
        if self.dict_view is not None:
            return self.dict_view
        if base in (list, tuple) and issubclass(cls, base):
            from .sequence_subclass import sequence_view

            self.dict_view = sequence_view(tx, self, base)
            return self.dict_view
        exact = _IMMUTABLE_BASES.get(base)
        if exact is not None and issubclass(cls, base):
            # The builtin value of an instance of a str/int/float/... subclass never changes: its
            # C methods (``torch.__version__.split``) act on an exact copy, made by the base's own
            # C slot (never the subclass's Python ``__str__``/``__eq__``), the object pinned by
            # identity.
            if self.source is not None:
                from ..guards.guards import GuardKind

                tx.output.guards.add(GuardKind.ID_MATCH, self.source, obj)
            self.dict_view = ConstantVariable(exact(obj))
            return self.dict_view
        if not issubclass(cls, dict):
            unsupported("untracked_method", f"builtin {base.__name__} methods on a {cls.__name__} instance")
        if issubclass(cls, collections.OrderedDict) and list(collections.OrderedDict.keys(obj)) != list(dict.keys(obj)):
            # move_to_end reorders OrderedDict's own list, not the storage the keys guard reads
            unsupported("unsupported_object", f"a {cls.__name__} reordered by move_to_end")
        from ..guards.guards import GuardKind
        from ..guards.source import ItemSource

        if self.source is not None:
            tx.output.guards.add(GuardKind.DICT_KEYS, self.source, tuple(dict.keys(obj)))
        # A Python __getitem__ of the class must not run to read the storage (in the guards nor in
        # the generated code): its values are read with dict.__getitem__ instead of obj[k].
        item_source = ItemSource if _class_attr(cls, "__getitem__") is dict.__getitem__ else PlainDictItemSource
        items = {}
        for k, v in dict.items(obj):
            check_dict_key(k)
            items[k] = wrap(tx, v, item_source(self.source, k) if self.source is not None else None)
        # The same object: reconstructs as its source; a mutation through it is a side effect.
        self.dict_view = DictViewVariable(items, self.source, dict_type=cls)
        return self.dict_view

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        call = _class_attr(type(self.value), "__call__")
        if isinstance(call, types.FunctionType):
            return call_type_method(tx, self, "__call__", call, args, kwargs)
        unsupported("c_function", f"calling a {type(self.value).__name__} instance")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .misc import BuiltinMethodVariable

        dunder = _class_attr(type(self.value), name)
        if name.startswith("__") and name.endswith("__"):
            # Operators and protocols (``in``, ``len``, ``[]``) look the method up on the type only.
            if isinstance(dunder, types.FunctionType):
                return call_type_method(tx, self, name, dunder, args, kwargs)
            if BuiltinMethodVariable.can_handle(dunder) and dunder.__objclass__ is not object:
                return BuiltinMethodVariable(dunder).call_function(tx, [self, *args], kwargs)
            if dunder is _MISSING:
                unsupported("exception", f"TypeError: {type(self.value).__name__!r} object does not support {name}")
        return super().call_method(tx, name, args, kwargs)

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        """``for x in obj``: the class's ``__iter__`` (inlined), or a builtin base's iteration."""
        from .misc import BuiltinMethodVariable

        if type(self.value) in _DICT_VIEW_TYPES and self.source is None:
            # A dict view produced by a native call (``inspect.signature(f).parameters.keys()``):
            # iterating it runs no user code; its items are unguarded like the call's result.
            from .builder import wrap_constant_result

            return [wrap_constant_result(tx, v) for v in self.value]
        it = _class_attr(type(self.value), "__iter__")
        if iterates_by_index(type(self.value)):
            return iterate_by_index(tx, self)
        if isinstance(it, types.FunctionType):
            from .user_ops import unpack_iterator

            return unpack_iterator(tx, call_type_method(tx, self, "__iter__", it, [], {}))
        if BuiltinMethodVariable.can_handle(it) and it.__objclass__ is not object:
            return self.builtin_base_view(tx, it.__objclass__).unpack(tx)
        unsupported("unsupported_object", f"iterating over a {type(self.value).__name__} instance")

    def truth(self, tx: "Translator") -> bool:
        cls = type(self.value)
        if _class_attr(cls, "__bool__") is _MISSING and _class_attr(cls, "__len__") is _MISSING:
            guard_type_lacks(tx, self, ("__bool__", "__len__"))  # adding either later changes the answer
            return True
        for hook in ("__bool__", "__len__"):  # Python's order; each found one is guarded by identity
            fn = _class_attr(cls, hook)
            if isinstance(fn, types.FunctionType):
                if hook == "__len__":
                    guard_type_lacks(tx, self, ("__bool__",))
                return bool(call_type_method(tx, self, hook, fn, [], {}).as_python_constant())
            if fn is not _MISSING:
                break
        unsupported("introspection", f"truth value of a {cls.__name__} (custom __bool__/__len__)")

    def __repr__(self) -> str:
        return f"UserDefinedObjectVariable({type(self.value).__name__})"


import collections.abc as _abc  # noqa: E402

_od: "collections.OrderedDict[int, int]" = collections.OrderedDict()
_DICT_VIEW_TYPES = frozenset({type({}.keys()), type({}.values()), type({}.items()),
                              type(_od.keys()), type(_od.values()), type(_od.items())})

_SEQUENCE_ITER = _abc.Sequence.__iter__


def iterates_by_index(cls: type) -> bool:
    """``for x in obj`` follows Python's sequence protocol: ``collections.abc.Sequence.__iter__``,
    or no ``__iter__`` but a Python ``__getitem__``."""
    it = _class_attr(cls, "__iter__")
    return it is _SEQUENCE_ITER or (it is _MISSING and isinstance(_class_attr(cls, "__getitem__"), types.FunctionType))


def iterate_by_index(tx: "Translator", obj: VariableTracker) -> list[VariableTracker]:
    """The items of that protocol: ``obj[0], obj[1], ...`` (each ``__getitem__`` traced) until
    one raises IndexError, as Python's iterator does (so no ``try``/``except`` is traced)."""
    from .misc import raised_exception_type

    items: list[VariableTracker] = []
    while True:
        if len(items) > 10_000:
            unsupported("loop_limit", f"iterating over a {obj.python_type().__name__} by index")
        try:
            items.append(obj.call_method(tx, "__getitem__", [ConstantVariable(len(items))], {}))
        except Unsupported as e:
            if raised_exception_type(e) == "IndexError":
                return items
            raise


def _is_attribute_error(e: Unsupported) -> bool:
    """The structured break stands for an AttributeError raised by the traced lookup."""
    from .misc import raised_exception_type

    return raised_exception_type(e) == "AttributeError"
