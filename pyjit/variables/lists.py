"""Trackers of sequences: lists, tuples, named tuples, and iterators over trackers.

Lists created inside the traced code are mutable trackers. Mutating a list that came from outside
(has a source) changes the tracker's items and records the list in the trace's side effects: the
replay gives the caller's list object the final items (pyjit/trace/side_effects.py). Iterators (``iter``, ``enumerate``, ``zip``, ``map``, ``reversed``)
are materialised eagerly into a list of trackers plus a position, which is how loops over
constant-length iterables unroll.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..trace.graph_breaks import python_errors_are_the_programs, unsupported
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator


def _const_args(args: list[VariableTracker]) -> list[Any]:
    return [a.as_python_constant() for a in args]


class BaseListVariable(VariableTracker):
    __slots__ = ("items",)

    def __init__(self, items: list[VariableTracker], source: Any = None) -> None:
        super().__init__(source)
        self.items = list(items)

    def is_python_constant(self) -> bool:
        return all(i.is_python_constant() for i in self.items)

    def as_python_constant(self) -> Any:
        return self.python_type()(i.as_python_constant() for i in self.items)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .base import method_or_unsupported

        return method_or_unsupported(self, name)

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        return list(self.items)

    def truth(self, tx: "Translator") -> bool:
        return len(self.items) > 0

    def new(self, items: list[VariableTracker]) -> "BaseListVariable":
        return type(self)(items)

    def getitem(self, tx: "Translator", key: VariableTracker) -> VariableTracker:
        k = key.as_python_constant()
        if isinstance(k, slice):
            return self.new(self.items[k])
        try:
            return self.items[k]
        except (IndexError, TypeError) as e:
            unsupported("exception", f"{type(e).__name__}: {self.python_type().__name__} index {k!r}: {e}")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__contains__":
            from .builtins import contains

            return contains(tx, self, args[0])
        if name == "index" and len(args) == 1:
            from .builtins import identical_or_equal

            for i, item in enumerate(self.items):
                if identical_or_equal(tx, item, args[0]):
                    return ConstantVariable(i)
            unsupported("exception", "value not in sequence")
        if name == "count" and len(args) == 1:
            from .builtins import identical_or_equal

            return ConstantVariable(sum(1 for i in self.items if identical_or_equal(tx, i, args[0])))
        unsupported("untracked_method", f"{self.python_type().__name__}.{name}")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.source is not None:
            # Read from the frame (mutations are replayed on it): the same object.
            return self.source.expr()
        if isinstance(self, ListVariable):
            shared = cg.output.side_effects.shared_container_token(cg, self)
            if shared is not None:  # also held by a replayed store or a built object: one object
                return shared
        parts = [i.reconstruct(cg) for i in self.items]
        if isinstance(self, ListVariable):
            return cg.built_once(self, self._build(cg, parts), "list")  # one object for every holder
        return self._build(cg, parts)

    def _build(self, cg: "OutputCodegen", parts: list[str]) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.items!r})"


class TupleVariable(BaseListVariable):
    __slots__ = ()

    def python_type(self) -> type:
        return tuple

    def _build(self, cg: "OutputCodegen", parts: list[str]) -> str:
        return "(" + "".join(p + ", " for p in parts) + ")"


class SizeVariable(TupleVariable):
    """A ``torch.Size`` with symbolic entries (``x.shape`` of a dynamic tensor)."""

    __slots__ = ()

    def python_type(self) -> type:
        import torch

        return torch.Size

    def as_python_constant(self) -> Any:
        import torch

        return torch.Size(i.as_python_constant() for i in self.items)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name == "numel" and not args:
            from .builtins import binary_op
            import operator

            result: VariableTracker = ConstantVariable(1)
            for item in self.items:
                result = binary_op(tx, operator.mul, result, item)
            return result
        return super().call_method(tx, name, args, kwargs)

    def _build(self, cg: "OutputCodegen", parts: list[str]) -> str:
        import torch

        return f"{cg.ref(torch.Size, 'Size')}(({''.join(p + ', ' for p in parts)}))"


class ListVariable(BaseListVariable):
    __slots__ = ()

    def python_type(self) -> type:
        return list

    def _build(self, cg: "OutputCodegen", parts: list[str]) -> str:
        return "[" + ", ".join(parts) + "]"

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        mutating = {"append", "extend", "insert", "pop", "reverse", "clear", "__setitem__", "__delitem__", "sort", "remove"}
        if name in mutating and self.source is not None:
            if name == "sort" and not self.is_python_constant():
                return super().call_method(tx, name, args, kwargs)  # not modelled: nothing recorded
            # A list from outside: the replay gives the caller's list these items afterwards.
            tx.output.side_effects.mutate_container(tx, self)
        with python_errors_are_the_programs():
            return self._call_list_method(tx, name, args, kwargs)

    def _call_list_method(self, tx: "Translator", name: str, args: list[VariableTracker],
                          kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name == "append":
            self.items.append(args[0])
        elif name == "extend":
            self.items.extend(args[0].unpack(tx))
        elif name == "insert":
            self.items.insert(args[0].as_python_constant(), args[1])
        elif name == "pop":
            idx = args[0].as_python_constant() if args else -1
            return self.items.pop(idx)
        elif name == "reverse":
            self.items.reverse()
        elif name == "clear":
            self.items.clear()
        elif name == "copy":
            return ListVariable(self.items)
        elif name == "__setitem__":
            k = args[0].as_python_constant()
            if isinstance(k, slice):
                self.items[k] = args[1].unpack(tx)
            else:
                self.items[k] = args[1]
        elif name == "__delitem__":
            del self.items[args[0].as_python_constant()]
        elif name == "sort" and self.is_python_constant():
            vals = sorted(self.as_python_constant(), **{k: v.as_python_constant() for k, v in kwargs.items()})
            self.items[:] = [ConstantVariable(v) for v in vals]
        elif name == "remove":
            from .builtins import identical_or_equal

            for i, item in enumerate(self.items):
                if identical_or_equal(tx, item, args[0]):
                    del self.items[i]
                    break
            else:
                unsupported("exception", "list.remove(x): x not in list")
        else:
            return super().call_method(tx, name, args, kwargs)
        return ConstantVariable(None)


class NamedTupleVariable(TupleVariable):
    """A namedtuple instance (or torch.return_types structseq); fields read by name."""

    __slots__ = ("tuple_cls",)

    def __init__(self, items: list[VariableTracker], tuple_cls: type, source: Any = None) -> None:
        super().__init__(items, source)
        self.tuple_cls = tuple_cls

    def python_type(self) -> type:
        return self.tuple_cls

    def new(self, items: list[VariableTracker]) -> BaseListVariable:
        return TupleVariable(items)

    def as_python_constant(self) -> Any:
        vals = [i.as_python_constant() for i in self.items]
        if hasattr(self.tuple_cls, "_make"):
            return self.tuple_cls._make(vals)
        return self.tuple_cls(vals)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        # namedtuples have _fields; structseqs (torch.return_types.max ...) list their visible
        # fields, in order, in __match_args__.
        fields = getattr(self.tuple_cls, "_fields", None) or getattr(self.tuple_cls, "__match_args__", ())
        if name in fields:
            return self.items[fields.index(name)]
        from .base import method_or_unsupported

        return method_or_unsupported(self, name)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        fields = _namedtuple_fields(self.tuple_cls, name)
        if fields is not None and name == "_replace" and not args:
            unknown = sorted(set(kwargs) - set(fields))
            if unknown:
                unsupported("exception", f"ValueError: Got unexpected field names: {unknown!r}")
            items = [kwargs.get(f, item) for f, item in zip(fields, self.items)]
            return NamedTupleVariable(items, self.tuple_cls)
        if fields is not None and name == "_asdict" and not args and not kwargs:
            from .dicts import DictVariable

            return DictVariable(dict(zip(fields, self.items)))
        fn = _own_method(self.tuple_cls, name)
        if fn is not None:  # a Python method of the class (a subclass's own, or namedtuple's)
            from .class_members import class_source, guard_identity, member_source
            from .functions import UserMethodVariable

            src = guard_identity(tx, member_source(tx, self.tuple_cls, class_source(self.source), name, fn), fn)
            return UserMethodVariable(fn, self, fn_source=src).call_function(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def _build(self, cg: "OutputCodegen", parts: list[str]) -> str:
        cls = cg.ref(self.tuple_cls, self.tuple_cls.__name__)
        if hasattr(self.tuple_cls, "_make"):
            return f"{cls}({', '.join(parts)})"
        return f"{cls}(({''.join(p + ', ' for p in parts)}))"


def _namedtuple_fields(cls: type, method: str) -> "tuple[str, ...] | None":
    """The fields of a ``collections.namedtuple`` class whose ``method`` is still the one
    namedtuple generated (a class overriding it gets its own code inlined instead)."""
    import collections

    fields = cls.__dict__.get("_fields")
    fn = None
    for klass in cls.__mro__:
        if method in klass.__dict__:
            fn = klass.__dict__[method]
            break
    code = getattr(fn, "__code__", None)
    if not isinstance(fields, tuple) or code is None or code.co_filename != collections.__file__:
        return None
    return fields


def _own_method(cls: type, name: str) -> Any:
    """A plain Python function ``name`` defined by ``cls`` or a base other than ``tuple``."""
    import types

    for klass in cls.__mro__:
        if klass is tuple or klass is object:
            return None
        fn = klass.__dict__.get(name)
        if fn is not None:
            return fn if isinstance(fn, types.FunctionType) else None
    return None


class ListIteratorVariable(VariableTracker):
    """An iterator over a materialised list of trackers (iter/enumerate/zip/map/reversed...)."""

    __slots__ = ("items", "index")

    def __init__(self, items: list[VariableTracker]) -> None:
        super().__init__(None)
        self.items = list(items)
        self.index = 0

    def python_type(self) -> type:
        return type(iter([]))

    def next_item(self) -> VariableTracker | None:
        if self.index >= len(self.items):
            return None
        item = self.items[self.index]
        self.index += 1
        return item

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .base import method_or_unsupported

        return method_or_unsupported(self, name)

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        rest = self.items[self.index:]
        self.index = len(self.items)
        return rest

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name == "__next__":
            item = self.next_item()
            if item is None:
                unsupported("exception", "StopIteration")
            return item
        if name == "__iter__":
            return self
        unsupported("untracked_method", f"iterator.{name}")

    def truth(self, tx: "Translator") -> bool:
        return True
