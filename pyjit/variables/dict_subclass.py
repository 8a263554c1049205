"""The builtin part of an instance of a user ``dict``/``OrderedDict`` subclass.

``super().__getitem__(k)``, ``dict.get(obj, k)``, ``super().__setitem__(k, v)``, ``obj.items()``
(inherited C methods) act on the dict storage of the object, whatever Python ``__getitem__`` /
``__setitem__`` the class defines on top (transformers' ``ClassInstantier``, whose
``__getitem__`` instantiates the class it finds with ``super().__getitem__``; ``ModelOutput``,
whose ``__setitem__`` calls ``super().__setitem__``). The tracer answers those calls on a
:class:`DictViewVariable`: a dict tracker over the same object, one per object per trace (so a
mutation made through one call is seen by the next and replayed once, on the object itself).

The view's values are read from the outside object. Where the class keeps dict's own
``__getitem__``, ``obj[k]`` reads them (an ``ItemSource``). Where it defines its own, ``obj[k]``
would run that Python code (in a guard: instantiating a module on every call), so the values
get a :class:`PlainDictItemSource`: ``dict.__getitem__(obj, k)``, the storage itself. The C
guard tree has no accessor for that; its checks are attached to the object's node as Python
predicates that read the item first (:class:`_DerivedNode`), so every guard kind a value
can get (type, identity, constant, tensor, keys, length, attributes and items below it) still
runs, on exactly the value the trace read.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import operator
from typing import TYPE_CHECKING, Any, Callable

from ..guards.source import AttrSource, Source
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .dicts import DictVariable

if TYPE_CHECKING:
    from ..trace.pycodegen import PyCodegen
    from ..trace.translator import Translator


_MISSING = object()  # what a derived read yields when the storage no longer has the value


def plain_dict_item(d: Any, key: Any) -> Any:
    """``dict.__getitem__(d, key)``: the stored value, never a subclass's Python ``__getitem__``."""
    return dict.__getitem__(d, key)


def _read_item(d: Any, key: Any) -> Any:
    if not isinstance(d, dict):
        return _MISSING
    return dict.get(d, key, _MISSING)


@dataclasses.dataclass(frozen=True)
class PlainDictItemSource(Source):
    """The value stored under ``key`` in the dict storage of ``base`` (a dict subclass instance)."""

    base: Source
    key: Any  # a constant with a faithful repr, or an identity key (as DictVariable keys)

    def name(self) -> str:
        return f"dict.__getitem__({self.base.name()}, {self.key!r})"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.call_const(plain_dict_item, [lambda: self.base.reconstruct(codegen), lambda: codegen.load_const(self.key)])

    def get(self, frame: Any) -> Any:
        return plain_dict_item(self.base.get(frame), self.key)

    def tree_node(self, tree: Any) -> Any:
        return _DerivedNode(self.base.tree_node(tree), functools.partial(_read_item, key=self.key))

    def root(self) -> Source:
        return self.base.root()


# -- guard checks on a value derived in Python from a real node of the C guard tree --------------
def _compose(read: Callable[[Any], Any], step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def derived(v: Any) -> Any:
        inner = read(v)
        if inner is _MISSING:
            return _MISSING
        try:
            return step(inner)
        except Exception:  # noqa: BLE001 - the C accessor failing makes its checks fail: same here
            return _MISSING

    return derived


def _holds(read: Callable[[Any], Any], pred: Callable[[Any], bool], v: Any) -> bool:
    value = read(v)
    if value is _MISSING:
        return False
    try:
        return bool(pred(value))
    except Exception:  # noqa: BLE001 - a check that cannot run fails (the frame retraces)
        return False


def _dict_keys_are(v: Any, keys: tuple[Any, ...]) -> bool:
    # the storage's keys, as the C check reads them (never a subclass's Python ``keys``)
    return isinstance(v, dict) and tuple(dict.keys(v)) == keys


def _tensor_matches(v: Any, t: type, dtype: Any, device: Any, requires_grad: bool,
                    sizes: tuple[Any, ...], strides: tuple[Any, ...]) -> bool:
    from ..guards.guards import _dims_match

    return (type(v) is t and v.dtype == dtype and v.device == device and v.requires_grad == requires_grad
            and _dims_match(v.size(), sizes) and _dims_match(v.stride(), strides))


class _DerivedNode:
    """Stands for a guard-tree node whose value is ``read(value of base)``: accessors compose
    the read, checks become ``base.check_fn`` predicates with the same failure id."""

    def __init__(self, base: Any, read: Callable[[Any], Any]) -> None:
        self.base = base
        self.read = read

    # accessors (the C tree's semantics: getattr, value[key], len, type)
    def attr(self, name: str) -> "_DerivedNode":
        return _DerivedNode(self.base, _compose(self.read, operator.attrgetter(name)))

    def item(self, key: Any) -> "_DerivedNode":
        return _DerivedNode(self.base, _compose(self.read, operator.itemgetter(key)))

    def len(self) -> "_DerivedNode":
        return _DerivedNode(self.base, _compose(self.read, len))

    def type(self) -> "_DerivedNode":
        return _DerivedNode(self.base, _compose(self.read, type))

    # checks
    def check_fn(self, fn: Callable[[Any], Any], gid: int) -> None:
        self.base.check_fn(functools.partial(_holds, self.read, fn), gid)

    def check_type(self, t: type, gid: int) -> None:
        from ..guards.guards import _type_is

        self.check_fn(functools.partial(_type_is, t=t), gid)

    def check_id(self, obj: Any, gid: int) -> None:
        self.check_fn(functools.partial(operator.is_, obj), gid)

    def check_eq(self, const: Any, gid: int) -> None:
        from ..guards.guards import _same_constant

        self.check_fn(functools.partial(_same_constant, b=const), gid)

    def check_not_none(self, gid: int) -> None:
        self.check_fn(functools.partial(operator.is_not, None), gid)

    def check_contains(self, key: Any, expected: bool, gid: int) -> None:
        from ..guards.guards import _contains_is

        self.check_fn(functools.partial(_contains_is, key=key, expected=bool(expected)), gid)

    def check_len(self, n: int, gid: int) -> None:
        from ..guards.guards import _len_is

        self.check_fn(functools.partial(_len_is, n=n), gid)

    def check_dict_keys(self, keys: tuple[Any, ...], gid: int) -> None:
        self.check_fn(functools.partial(_dict_keys_are, keys=keys), gid)

    def check_tensor(self, t: type, dtype: Any, device: Any, requires_grad: bool, sizes: tuple[Any, ...],
                     strides: tuple[Any, ...], gid: int, bind: Any = None) -> None:
        if bind:
            # Symbolic sizes are bound into the C tree's slots by its own tensor check only: the
            # frame then runs eagerly (logged by the caller), never with unbound symbols.
            raise NotImplementedError("a dynamic-shape tensor guard on a value read through dict.__getitem__")
        self.check_fn(functools.partial(_tensor_matches, t=t, dtype=dtype, device=device, requires_grad=requires_grad,
                                        sizes=sizes, strides=strides), gid)


# OrderedDict C methods that, on an instance of a subclass, go through the type's item methods.
_DISPATCHES: dict[str, tuple[str, ...]] = {"update": ("__setitem__",), "setdefault": ("__getitem__", "__setitem__")}


class DictViewVariable(DictVariable):
    """The dict storage of an instance of a user dict subclass (see module docstring). With a
    source, it reconstructs as the object and its mutations are replayed on it with the base
    type's own methods (``replace_dict``); without one, the object cannot be reached after the
    graph, so mutating it is a break rather than a change that would be lost."""

    __slots__ = ()

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name == "copy":
            # dict.copy/OrderedDict.copy of a subclass instance: a plain dict, or type(obj)() filled
            # through its Python item methods; not what DictVariable.copy models.
            unsupported("untracked_method", f"copy() of a {self.dict_type.__name__} instance")
        needs = _DISPATCHES.get(name) if issubclass(self.dict_type, collections.OrderedDict) else None
        if needs:
            self._guard_base_item_methods(tx, needs)
        return super().call_method(tx, name, args, kwargs)

    def _guard_base_item_methods(self, tx: "Translator", names: tuple[str, ...]) -> None:
        """OrderedDict's C ``update``/``setdefault`` call ``self[k] = v`` / ``self[k]`` through the
        type on a subclass instance: modelled on the storage only while the class keeps the base
        methods (guarded: the class could be patched later)."""
        from ..guards.guards import GuardKind
        from .class_members import class_source
        from .class_members import lookup_class_attr

        src = class_source(self.source)
        for n in names:
            attr = lookup_class_attr(self.dict_type, n)
            if attr is not getattr(collections.OrderedDict, n):
                unsupported("untracked_method", f"OrderedDict methods that call {self.dict_type.__name__}.{n} "
                            "(defined in Python) on its instance")
            if src is not None:
                tx.output.guards.add(GuardKind.ID_MATCH, AttrSource(src, n), attr)

    def _check_mutable(self, tx: "Translator") -> None:
        if self.source is None:
            unsupported("side_effect", f"mutating a {self.dict_type.__name__} that pyjit cannot reach from the frame")
        super()._check_mutable(tx)

    def __repr__(self) -> str:
        return f"DictViewVariable({self.dict_type.__name__}, {self.items!r})"
