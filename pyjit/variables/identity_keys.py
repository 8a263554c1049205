"""Dict keys and set members that hash by identity: tensors, parameters, ``nn.Module``\\ s and
instances of user classes that keep ``object``'s ``__hash__``/``__eq__``
(``{p: i for i, p in enumerate(model.parameters())}``, ``d[self.weight]``, ``{m.l1}``), and
``id()`` of such objects.

CPython's dict compares a key's hash, then its identity, and calls ``__eq__`` only for two
different objects of equal hash. For these objects the hash is ``id(obj)`` (``Tensor.__hash__``
is ``id``; ``object.__hash__`` derives from the address), so two live objects never reach
``__eq__`` (a tensor's would be elementwise): a lookup *is* an identity test, and the tracer
answers it without running the key's own ``__hash__``/``__eq__``. A type that overrides either
one is refused (its answer is user code).

What the tracer stores as the key:

- an object whose identity the trace has pinned (a module read through a source, ID_MATCH; a user
  object read through a source gets that guard here, since a TYPE_MATCH alone would let another
  instance of the same class take the place of the key): the object itself;
- a tensor, or an object built by the trace: a :class:`TrackerKey`, equal only to the key of the
  same value (a tensor's fake example is one object per tensor of the trace, as ``is`` uses).

When a dict or set holding such keys escapes, each key is rebuilt like any other value
(:func:`key_text`). ``id(obj)`` is a constant for an object whose identity is pinned the same way.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch

from ..guards.guards import GuardKind
from ..trace.graph_breaks import unsupported
from .base import VariableTracker

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator


class TrackerKey:
    """A dict key standing for the value of a tracker, equal exactly when it is the same value."""

    __slots__ = ("var", "ident")

    def __init__(self, var: VariableTracker, ident: Any) -> None:
        self.var = var
        self.ident = ident

    def __hash__(self) -> int:
        return id(self.ident)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrackerKey) and other.ident is self.ident

    def __repr__(self) -> str:
        return f"<key {self.var}>"


def _hashes_by_identity(cls: type) -> bool:
    if issubclass(cls, torch.Tensor):
        return cls.__hash__ is torch.Tensor.__hash__
    return getattr(cls, "__hash__", None) is object.__hash__ and getattr(cls, "__eq__", None) is object.__eq__


def _pinned_object(tx: "Translator", var: VariableTracker) -> Any:
    """The real object ``var`` stands for, with its identity guarded; None when there is none."""
    from .nn_module import NNModuleVariable
    from .user_defined import UserDefinedObjectVariable

    if isinstance(var, NNModuleVariable) and var.source is not None:
        return var.value  # wrapped with ID_MATCH by the builder
    if isinstance(var, UserDefinedObjectVariable) and var.source is not None:
        tx.output.guards.add(GuardKind.ID_MATCH, var.source, var.value)
        return var.value
    return None


def identity_key(tx: "Translator", var: VariableTracker) -> Any:
    """The key under which a traced dict or set holds ``var`` (not a Python constant), or an
    ``unsupported_object`` break when its hash would be user code or is unknown."""
    from .objects import ObjectVariable
    from .tensor import TensorVariable

    try:
        cls = var.python_type()
    except Exception:  # noqa: BLE001
        cls = None
    if cls is None or not _hashes_by_identity(cls):
        unsupported("unsupported_object", f"dict key {var} is not a Python constant")
    if isinstance(var, TensorVariable):
        return TrackerKey(var, var.example)
    obj = _pinned_object(tx, var)
    if obj is not None:
        return obj
    if isinstance(var, ObjectVariable) and not var.is_module():
        return TrackerKey(var, var)
    unsupported("unsupported_object", f"dict key {var} is not a Python constant")


def key_tracker(tx: "Translator", k: Any) -> VariableTracker | None:
    """The tracker of a key made by :func:`identity_key` (None for other keys)."""
    if isinstance(k, TrackerKey):
        return k.var
    return None


def key_text(cg: "OutputCodegen", k: Any) -> str:
    """The key rebuilt in replacement code."""
    if isinstance(k, TrackerKey):
        return k.var.reconstruct(cg)
    return cg.constant(k)


def object_id(tx: "Translator", var: VariableTracker) -> VariableTracker:
    """``id(obj)``: a constant where the trace pins the object's identity (a module, function or
    class read from the frame; a user object read from the frame gets an ID_MATCH guard)."""
    from .base import KnownValueVariable
    from .constant import ConstantVariable

    obj = _pinned_object(tx, var)
    if obj is None and isinstance(var, KnownValueVariable) and var.source is not None:
        obj = var.value  # classes, functions, modules: the builder pins them by identity
    if obj is None:
        fn = getattr(var, "fn", None)
        if isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)) and var.source is not None:
            obj = fn
    if obj is None:
        unsupported("introspection", f"id() of {var} (its identity is not fixed by a guard)")
    return ConstantVariable(id(obj))
