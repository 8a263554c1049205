"""Trackers of dicts (and sets) with constant keys and tracker values.

Keys are Python constants (``is_constant_value``) or identity keys (``is_identity_key``: classes,
``typing`` special forms, functions, modules: dispatch tables such as huggingface_hub's
``{Union: ..., Literal: ..., list: ...}``). A dict read from the frame gets a DICT_KEYS guard
(key order matters for iteration); its values are wrapped with ``ItemSource`` so each one guards
itself. Dicts built inside the trace are
mutable; mutating a dict that came from outside is recorded and replayed on the caller's dict
after the graph (pyjit/trace/side_effects.py).
"""
from __future__ import annotations

import collections
import types
import typing
from typing import TYPE_CHECKING, Any

from ..trace.graph_breaks import python_errors_are_the_programs, unsupported
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import ListVariable, TupleVariable

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator


# Objects whose hash and equality are known to run no user code and to depend only on the
# object's identity (or, for builtin functions, on identity of their bound self and C entry).
_IDENTITY_KEY_TYPES = (type, typing._SpecialForm, types.FunctionType, types.ModuleType, types.BuiltinFunctionType)


def is_identity_key(value: Any) -> bool:
    """``value`` may key a traced dict although it is no constant: a class, a ``typing`` special
    form (``Union``, ``Literal``), a function or a module whose type keeps ``object``'s identity
    ``__eq__``/``__hash__`` (builtin functions: their own, which compare identities only).

    Such a key hashes and compares without running user code and means "this very object", so
    the tracer can look it up at trace time: a lookup key read from a source is pinned by the
    ID_MATCH guard ``builder.wrap`` gives classes, typing objects, functions and modules, and a
    dict's DICT_KEYS guard (list equality, i.e. identity for these keys) pins the keys it holds. Objects with a custom ``__eq__``/``__hash__`` (a metaclass defining
    them, generic aliases comparing their arguments) are refused: their answer is user code."""
    if not isinstance(value, _IDENTITY_KEY_TYPES):
        return False
    t = type(value)
    if isinstance(value, types.BuiltinFunctionType):
        return t is types.BuiltinFunctionType
    return t.__eq__ is object.__eq__ and t.__hash__ is object.__hash__


def check_dict_key(k: Any) -> None:
    """Refuse (graph break) a key of a dict read from outside the trace that the tracker cannot hold."""
    from .constant import is_constant_value

    if not (is_constant_value(k) or is_identity_key(k)):
        unsupported("unsupported_object", f"dict with a non-constant key {type(k).__name__}")


def key_variable(tx: "Translator", k: Any) -> VariableTracker:
    """The tracker of key ``k`` of a tracked dict (``keys()``, ``items()``, iteration)."""
    from .constant import is_constant_value

    if is_constant_value(k):
        return ConstantVariable(k)
    from .identity_keys import key_tracker

    tracked = key_tracker(tx, k)  # a tensor or an object built by the trace
    if tracked is not None:
        return tracked
    from .builder import wrap

    # No source: the key object is pinned by the dict's DICT_KEYS guard (or was put there by the trace).
    return wrap(tx, k, None)


def dict_key(tx: "Translator", k: VariableTracker) -> Any:
    """The key a traced dict holds for the tracker ``k``."""
    return _key(tx, k)


def _key(tx: "Translator", k: VariableTracker) -> Any:
    if k.is_python_constant():
        return k.as_python_constant()
    from .identity_keys import identity_key

    return identity_key(tx, k)  # tensors, modules, plain objects: keyed by identity


def _is_fresh_varkw(tx: "Translator", source: Any) -> bool:
    """``source`` is the ``**kwargs`` parameter of the root frame being traced."""
    from ..guards.source import LocalSource

    if not isinstance(source, LocalSource):
        return False
    root = tx
    while root.parent is not None:
        root = root.parent
    code = root.code
    from ..trace.breaks import is_resume_code

    # A resume function receives the live dict from its caller: not fresh.
    if not code.co_flags & 0x08 or is_resume_code(code):  # CO_VARKEYWORDS
        return False
    pos = code.co_argcount + code.co_kwonlyargcount + (1 if code.co_flags & 0x04 else 0)
    return code.co_varnames[pos] == source.local_name


class DictVariable(VariableTracker):
    __slots__ = ("items", "dict_type")

    def __init__(self, items: dict[Any, VariableTracker], source: Any = None, dict_type: type = dict) -> None:
        super().__init__(source)
        self.items = dict(items)
        self.dict_type = dict_type

    def python_type(self) -> type:
        return self.dict_type

    def is_python_constant(self) -> bool:
        return all(v.is_python_constant() for v in self.items.values())

    def as_python_constant(self) -> Any:
        return self.dict_type((k, v.as_python_constant()) for k, v in self.items.items())

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .base import method_or_unsupported

        return method_or_unsupported(self, name)

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        return [key_variable(tx, k) for k in self.items]

    def truth(self, tx: "Translator") -> bool:
        return len(self.items) > 0

    def _check_mutable(self, tx: "Translator") -> None:
        if self.source is not None and _is_fresh_varkw(tx, self.source):
            # The frame's own ``**kwargs`` dict: CPython builds a new one for every call, so
            # mutating it is invisible outside; from here on it is a dict of the trace (its keys
            # stay guarded, its values keep their own sources).
            self.source = None
        if self.source is not None:
            # side-effect replay (pyjit/trace/side_effects.py): the caller's dict gets these items
            tx.output.side_effects.mutate_container(tx, self)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        items = self.items
        if name == "__getitem__":
            k = _key(tx, args[0])
            if k not in items:
                unsupported("exception", f"KeyError: {k!r}")
            return items[k]
        if name == "get":
            k = _key(tx, args[0])
            default = args[1] if len(args) > 1 else ConstantVariable(None)
            return items.get(k, default)
        if name == "__contains__":
            return ConstantVariable(_key(tx, args[0]) in items)
        if name == "__len__":
            return ConstantVariable(len(items))
        if name == "keys":
            return ListVariable([key_variable(tx, k) for k in items])
        if name == "values":
            return ListVariable(list(items.values()))
        if name == "items":
            return ListVariable([TupleVariable([key_variable(tx, k), v]) for k, v in items.items()])
        if name == "copy":
            return DictVariable(items, dict_type=self.dict_type)
        if name == "move_to_end" and issubclass(self.dict_type, collections.OrderedDict):
            self._check_mutable(tx)
            k = _key(tx, args[0])
            last = (args[1] if len(args) > 1 else kwargs.get("last", ConstantVariable(True))).as_python_constant()
            if k not in items:
                unsupported("exception", f"KeyError: {k!r}")
            value = items.pop(k)
            if last:
                items[k] = value
            else:  # in place: other trackers may share this dict
                rest = dict(items)
                items.clear()
                items[k] = value
                items.update(rest)
            return ConstantVariable(None)
        if name in ("__setitem__", "update", "pop", "setdefault", "__delitem__", "clear", "popitem"):
            self._check_mutable(tx)
            if name == "__setitem__":
                items[_key(tx, args[0])] = args[1]
            elif name == "update":
                for a in args:
                    if isinstance(a, DictVariable):
                        items.update(a.items)
                    else:
                        for pair in a.unpack(tx):
                            kv = pair.unpack(tx)
                            items[_key(tx, kv[0])] = kv[1]
                for k, v in kwargs.items():
                    items[k] = v
            elif name == "pop":
                k = _key(tx, args[0])
                if k in items:
                    return items.pop(k)
                if len(args) > 1:
                    return args[1]
                unsupported("exception", f"KeyError: {k!r}")
            elif name == "setdefault":
                k = _key(tx, args[0])
                if k not in items:
                    items[k] = args[1] if len(args) > 1 else ConstantVariable(None)
                return items[k]
            elif name == "__delitem__":
                with python_errors_are_the_programs():
                    del items[_key(tx, args[0])]
            elif name == "clear":
                items.clear()
            else:
                unsupported("untracked_method", f"dict.{name}")
            return ConstantVariable(None)
        unsupported("untracked_method", f"dict.{name}")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.source is not None:
            return self.source.expr()  # read from the frame (mutations are replayed on it): the same object
        shared = cg.output.side_effects.shared_container_token(cg, self)  # side-effect replay
        if shared is not None:  # also held by a replayed store or a built object: one object
            return shared
        from .identity_keys import key_text

        body = ", ".join(f"{key_text(cg, k)}: {v.reconstruct(cg)}" for k, v in self.items.items())
        text = "{" + body + "}" if self.dict_type is dict else f"{cg.ref(self.dict_type, self.dict_type.__name__)}({{{body}}})"
        return cg.built_once(self, text, "dict")  # one object for every holder

    def __repr__(self) -> str:
        return f"DictVariable({self.items!r})"


class SetVariable(VariableTracker):
    """A set built in the trace (``{1, 2}``, ``set(...)``) of constants and identity keys
    (functions, modules, tensors: ``pyjit/variables/identity_keys.py``)."""

    __slots__ = ("values",)

    def __init__(self, values: list[Any]) -> None:
        super().__init__(None)
        self.values: list[Any] = []
        for v in values:
            if v not in self.values:
                self.values.append(v)

    @staticmethod
    def member(tx: "Translator", v: VariableTracker) -> Any:
        """What the set holds for the tracker ``v`` (as a dict key)."""
        return _key(tx, v)

    def python_type(self) -> type:
        return set

    def is_python_constant(self) -> bool:
        from .identity_keys import TrackerKey

        return not any(isinstance(v, TrackerKey) for v in self.values)

    def as_python_constant(self) -> Any:
        return set(self.values)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .base import method_or_unsupported

        return method_or_unsupported(self, name)

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        return [key_variable(tx, v) for v in self.values]

    def truth(self, tx: "Translator") -> bool:
        return bool(self.values)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name == "add":
            v = _key(tx, args[0])
            if v not in self.values:
                self.values.append(v)
            return ConstantVariable(None)
        if name == "__contains__":
            return ConstantVariable(_key(tx, args[0]) in self.values)
        if name == "__len__":
            return ConstantVariable(len(self.values))
        if not self.is_python_constant():
            unsupported("untracked_method", f"set.{name} on a set holding tensors or objects built by the trace")
        result = getattr(set(self.values), name)(*[a.as_python_constant() for a in args])
        from .builder import wrap_constant_result

        return wrap_constant_result(tx, result)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        # a new set on every call (a set constant in the code would be one object shared by all)
        from .identity_keys import key_text

        return f"{cg.ref(set, 'set')}(({''.join(key_text(cg, v) + ', ' for v in self.values)}))"
