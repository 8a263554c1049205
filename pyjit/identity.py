"""Looking values up in pyjit's own tables without running the user's code.

The tracer classifies whatever it meets: objects half-built inside their ``__init__``, proxies,
objects whose ``__hash__``/``__eq__``/``__getattr__``/``__bool__``/``__len__`` raise or have
effects. A plain ``value in table`` or ``table.get(value)`` calls the value's ``__hash__`` and
``__eq__``; ``isinstance`` may read a ``__class__`` property; ``getattr`` runs
``__getattribute__``/``__getattr__`` and properties. Eager Python makes none of those calls, so
pyjit must not either. This module holds the tools that never call into the value:

- :class:`IdentityDict` / :class:`IdentitySet`: tables keyed by ``id`` (:func:`identity_key`)
  that keep their keys alive (so an id is never reused while it is in the table);
- :func:`is_one_of`: ``value in options`` by identity;
- :func:`exact_isinstance`: ``isinstance`` on ``type(value)`` (never ``value.__class__``);
- :func:`static_attr`: an attribute read that runs no Python code of the value's class;
- :func:`instance_dict`: the instance ``__dict__`` without the class's attribute hooks.
"""
from __future__ import annotations

import types
from typing import Any, Generic, Iterable, Iterator, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Any = object()


def identity_key(value: Any) -> Any:
    """What identity means for a table key: ``id(value)``; except a classmethod of a C type
    (``itertools.chain.from_iterable``, ``dict.fromkeys``), a new bound object on every access,
    which stands for its (class, name). Computing it runs no code of the value's."""
    if type(value) is types.BuiltinMethodType:
        owner = value.__self__  # a C getset: no user code
        if type(owner) is type:
            return (id(owner), value.__name__)
    return id(value)


class IdentityDict(Generic[K, V]):
    """A mapping keyed by object identity (:func:`identity_key`); holds each key so its id
    stays unique while stored."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[K, V]] = ()) -> None:
        self._items: dict[Any, tuple[K, V]] = {}
        for k, v in items:
            self[k] = v

    def __setitem__(self, key: K, value: V) -> None:
        self._items[identity_key(key)] = (key, value)

    def __getitem__(self, key: K) -> V:
        hit = self._items.get(identity_key(key))
        if hit is None:
            raise KeyError(f"<{type(key).__name__} object at {id(key):#x}>")  # never repr() a user object
        return hit[1]

    def get(self, key: Any, default: Any = None) -> Any:
        hit = self._items.get(identity_key(key))
        return default if hit is None else hit[1]

    def __contains__(self, key: Any) -> bool:
        return identity_key(key) in self._items

    def __delitem__(self, key: K) -> None:
        del self._items[identity_key(key)]

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        hit = self._items.pop(identity_key(key), None)
        if hit is None:
            if default is _MISSING:
                raise KeyError(f"<{type(key).__name__} object at {id(key):#x}>")
            return default
        return hit[1]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        return (k for k, _ in list(self._items.values()))

    def keys(self) -> list[K]:
        return [k for k, _ in self._items.values()]

    def values(self) -> list[V]:
        return [v for _, v in self._items.values()]

    def items(self) -> list[tuple[K, V]]:
        return list(self._items.values())

    def clear(self) -> None:
        self._items.clear()


class IdentitySet(Generic[K]):
    """A set by object identity (keeps its members alive)."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[K] = ()) -> None:
        self._items: dict[Any, K] = {identity_key(k): k for k in items}

    def add(self, item: K) -> None:
        self._items[identity_key(item)] = item

    def discard(self, item: K) -> None:
        self._items.pop(identity_key(item), None)

    def __contains__(self, item: Any) -> bool:
        return identity_key(item) in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._items.values()))

    def clear(self) -> None:
        self._items.clear()


def is_one_of(value: Any, options: Iterable[Any]) -> bool:
    """``value in options`` by identity only (``in`` on a tuple falls back to ``==``)."""
    return any(value is o for o in options)


def exact_isinstance(value: Any, classes: type | tuple[type, ...]) -> bool:
    """``isinstance`` decided by ``type(value)``: a ``__class__`` property (proxies, mocks) is
    not consulted and cannot run."""
    return issubclass(type(value), classes)


# Types whose attribute lookup is C code that never calls back into Python: reading
# ``__module__``/``__name__``/``__qualname__``/``__self__`` of one runs nothing of the user's.
_PLAIN_ATTR_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                     types.WrapperDescriptorType, types.ClassMethodDescriptorType, types.MethodWrapperType,
                     types.ModuleType)


def static_attr(value: Any, name: str, default: Any = None) -> Any:
    """``getattr(value, name, default)`` where that runs no Python code: on functions, builtins,
    modules and plain classes directly; on anything else only what sits in the instance
    ``__dict__`` or as a plain (non-descriptor) class attribute. Properties, ``__getattr__`` and
    ``__getattribute__`` overrides give ``default``."""
    t = type(value)
    if t in _PLAIN_ATTR_TYPES or t is type:
        try:
            return getattr(value, name, default)
        except Exception:  # noqa: BLE001 - e.g. a module's __getattr__ (PEP 562) raising
            return default
    try:
        d = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        d = None
    if type(d) is dict and name in d:
        return d[name]
    for klass in t.__mro__:
        attr = klass.__dict__.get(name, _MISSING)
        if attr is not _MISSING:
            if hasattr(type(attr), "__get__"):
                return default  # a descriptor (property, function, slot): reading it runs code or binds
            return attr
    return default


def instance_dict(value: Any) -> dict[str, Any] | None:
    """The instance ``__dict__`` as ``object.__getattribute__`` finds it (never the class's
    ``__getattribute__``/``__getattr__``: a ``__slots__`` object has none, and asking it for one
    must not run its ``__getattr__``); None when there is no plain dict."""
    try:
        d = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return None
    return d if type(d) is dict else None
