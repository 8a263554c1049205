"""Trackers of immutable Python constants: None, bool, int, float, complex, str, bytes,
torch.dtype/device/Size, slice, range, Ellipsis, numpy number scalars, and tuples of those that are known constants.

Operations on constants are folded at trace time (the inputs they came from are guarded by
value), so they never reach the graph.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..trace.graph_breaks import unsupported
from .base import KnownValueVariable, VariableTracker

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator

_LITERAL_TYPES = (type(None), bool, int, float, complex, str, bytes)


def is_constant_value(value: Any) -> bool:
    """Values safe to treat as constants (immutable; guarded by equality when read from a source)."""
    # Decided on type(value) only: isinstance would read a __class__ property of the value.
    t = type(value)
    if t in _LITERAL_TYPES or value is Ellipsis or value is NotImplemented:
        return True
    if issubclass(t, _LITERAL_TYPES) and not _own_equality(t):
        return True  # e.g. IntEnum, a str subclass adding methods: compared and hashed as the base
    if t is slice or t is range:
        return True
    if t.__module__ == "torch" and t.__name__ in ("dtype", "device", "Size", "layout", "memory_format"):
        return True
    if t is tuple or t is frozenset:  # immutable, and compared item by item as builtins
        return all(is_constant_value(v) for v in value)
    import enum

    if issubclass(t, enum.Enum):
        return True
    from .numpy_scalars import is_numpy_scalar

    return is_numpy_scalar(value)


def _own_equality(t: type) -> bool:
    """A subclass of a literal type that defines ``__eq__``/``__hash__`` in Python: guarding it by
    equality, or folding on it, would run that code where eager does not."""
    import types

    for name in ("__eq__", "__hash__", "__ne__"):
        for klass in t.__mro__:
            if name in klass.__dict__:
                if isinstance(klass.__dict__[name], types.FunctionType):
                    return True
                break
    return False


def _is_typing_object(value: Any) -> bool:
    """A ``typing`` object (special form, alias) or ``int | None``: immutable, pinned by identity."""
    import types

    t = type(value)  # never value.__class__: a GenericAlias forwards attribute reads to its origin
    return t.__module__ == "typing" or t is types.UnionType or t is types.GenericAlias


def _materialized(v: VariableTracker) -> VariableTracker:
    from .lists import ListIteratorVariable

    if isinstance(v, ListIteratorVariable):
        rest = v.items[v.index:]
        if all(i.is_python_constant() for i in rest):
            v.index = len(v.items)  # consumed, as the call would
            return ConstantVariable([i.as_python_constant() for i in rest])
    return v


class ConstantVariable(KnownValueVariable):
    __slots__ = ()

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unsupported("exception", f"{type(self.value).__name__} has no attribute {name!r}")
        if isinstance(attr, type) or _is_typing_object(attr):
            # ``Optional[int].__origin__`` is ``typing.Union``, ``list[int].__origin__`` is ``list``:
            # objects, not bound methods (a special form is callable); tracked as such.
            from .builder import wrap_constant_result

            return wrap_constant_result(tx, attr)
        if callable(attr) and not is_constant_value(attr):
            from .builtins import ConstantMethodVariable

            return ConstantMethodVariable(self, name)
        return ConstantVariable(attr)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .builder import wrap_constant_result

        # "-".join(str(i) for i in ...): an iterator/list of constants is passed as a list of them
        args = [_materialized(a) for a in args]
        if all(a.is_python_constant() for a in args) and all(v.is_python_constant() for v in kwargs.values()):
            try:
                result = getattr(self.value, name)(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
            except Exception as e:
                unsupported("exception", f"{type(self.value).__name__}.{name}(...) raised {type(e).__name__}: {e}")
            return wrap_constant_result(tx, result)
        # e.g. `2 * x` where the tensor is an argument reaches here only through binary ops
        if isinstance(self.value, tuple) and name in ("__getitem__", "index", "count"):
            from .lists import TupleVariable

            return TupleVariable([ConstantVariable(v) for v in self.value]).call_method(tx, name, args, kwargs)
        unsupported("builtin_arguments", f"{type(self.value).__name__}.{name} with non-constant arguments")

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        try:
            return [ConstantVariable(v) for v in self.value]
        except TypeError:
            unsupported("exception", f"{type(self.value).__name__} is not iterable")

    def truth(self, tx: "Translator") -> bool:
        return bool(self.value)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return cg.constant(self.value)

    def __repr__(self) -> str:
        return f"ConstantVariable({self.value!r})"
