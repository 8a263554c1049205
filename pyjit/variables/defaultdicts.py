"""``collections.defaultdict``: built by the traced code (``defaultdict(list)``,
``defaultdict(int)``, ``defaultdict(lambda: ...)``) or read from the frame.

A :class:`DefaultDictVariable` is a dict tracker that also holds its ``default_factory`` as a
tracker. ``d[k]`` for a missing key does what ``defaultdict.__missing__`` does: calls the factory
(traced: a lambda may do tensor work), stores the result under ``k`` (a mutation, replayed on the
caller's object for a dict read from the frame) and returns it; without a factory it raises
KeyError. ``get``/``in``/``pop`` never call the factory, as in CPython.

A defaultdict read from the frame is guarded like a dict (type and keys) plus the identity of its
factory (``L['d'].default_factory``, wrapped by the builder). One built by the trace is rebuilt on
escape as ``defaultdict(factory, {items})``.
"""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import DictVariable, dict_key

if TYPE_CHECKING:
    from ..guards.source import Source
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator


class DefaultDictVariable(DictVariable):
    """A ``collections.defaultdict`` (see module docstring)."""

    __slots__ = ("factory",)

    def __init__(self, items: dict[Any, VariableTracker], factory: VariableTracker, source: "Source | None" = None) -> None:
        super().__init__(items, source, dict_type=collections.defaultdict)
        self.factory = factory

    def _has_factory(self) -> bool:
        return not (isinstance(self.factory, ConstantVariable) and self.factory.value is None)

    def is_python_constant(self) -> bool:
        return False  # folding would lose the factory

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name == "default_factory":
            return self.factory
        return super().var_getattr(tx, name)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name in ("__getitem__", "__missing__") and len(args) == 1:
            k = dict_key(tx, args[0])
            if name == "__getitem__" and k in self.items:
                return self.items[k]
            if not self._has_factory():
                unsupported("exception", f"KeyError: {k!r}")
            value = self.factory.call_function(tx, [], {})
            super().call_method(tx, "__setitem__", [args[0], value], {})
            return value
        if name == "copy":
            return DefaultDictVariable(self.items, self.factory)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.source is not None:
            return self.source.expr()
        shared = cg.output.side_effects.shared_container_token(cg, self)
        if shared is not None:
            return shared
        plain = DictVariable(self.items)
        return f"{cg.ref(collections.defaultdict, 'defaultdict')}({self.factory.reconstruct(cg)}, {plain.reconstruct(cg)})"

    def __repr__(self) -> str:
        return f"DefaultDictVariable({self.items!r})"


def make_defaultdict(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``collections.defaultdict(factory=None, *args, **kwargs)`` in traced code."""
    factory = args[0] if args else ConstantVariable(None)
    if factory.is_python_constant() and factory.as_python_constant() is not None and not callable(factory.as_python_constant()):
        unsupported("exception", "TypeError: first argument must be callable or None")
    d = DefaultDictVariable({}, factory)
    if len(args) > 1 or kwargs:
        DictVariable.call_method(d, tx, "update", list(args[1:2]), kwargs)
    return d


def wrap_defaultdict(tx: "Translator", value: collections.defaultdict, source: "Source | None") -> VariableTracker:  # type: ignore[type-arg]
    """A defaultdict read from the frame (the builder calls this after its aliasing check)."""
    from ..guards.guards import GuardKind
    from ..guards.source import AttrSource, ItemSource
    from .builder import wrap
    from ..guards.guards import dict_keys_expected
    from .dicts import check_dict_key

    if source is not None:
        tx.output.guards.add(GuardKind.TYPE_MATCH, source, collections.defaultdict)
        tx.output.guards.add(GuardKind.DICT_KEYS, source, *dict_keys_expected(value))
    for k in value:
        check_dict_key(k)
    factory = wrap(tx, value.default_factory, AttrSource(source, "default_factory") if source is not None else None)
    items = {k: wrap(tx, v, ItemSource(source, k) if source is not None else None) for k, v in value.items()}
    return tx.output.side_effects.remember(value, DefaultDictVariable(items, factory, source))


def _count_elements(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``collections._count_elements(mapping, iterable)`` (``Counter.update``'s C helper): for each
    element, ``mapping[elem] = mapping.get(elem, 0) + 1``, through the mapping's own methods."""
    from .builtins import binary_op
    import operator

    if len(args) != 2 or kwargs:
        unsupported("exception", "TypeError: _count_elements expects (mapping, iterable)")
    mapping, iterable = args
    for elem in iterable.unpack(tx):
        count = mapping.call_method(tx, "get", [elem, ConstantVariable(0)], {})
        mapping.call_method(tx, "__setitem__", [elem, binary_op(tx, operator.add, count, ConstantVariable(1))], {})
    return ConstantVariable(None)


def _register_collections_helpers() -> None:
    from .builtins import _register

    helper = getattr(collections, "_count_elements", None)
    if helper is not None:
        _register(helper)(_count_elements)


_register_collections_helpers()
