"""``weakref.ref(obj)`` built by the traced code (torch's ``RemovableHandle`` keeps one to the
hooks dict it was registered in).

A :class:`WeakRefVariable` stands for the new reference; it reconstructs as
``weakref.ref(<obj>)`` in the replacement code, so the caller gets a real weak reference to the
very object eager would have referenced, which dies when that object dies (CPython even hands
back the same reference object eager would have got: a callback-free ``ref`` is shared).

Only referents whose identity survives the graph are accepted: an object read from the frame (a
source, reconstructed as itself) or an object built by the trace whose replay rebuilds it once
(:class:`~pyjit.variables.objects.ObjectVariable`). A referent whose type has no weak-reference
slot raises ``TypeError`` eagerly, and is refused here the same way (an ``exception`` break, so
eager raises). Dereferencing (``ref()``) breaks: whether the referent is still alive at that
point depends on references the trace does not count. Callbacks and subclasses of ``ref`` break.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from ..trace.graph_breaks import unsupported
from .base import VariableTracker

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator


def make_weakref(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``weakref.ref(*args, **kwargs)`` in the traced code."""
    from .objects import ObjectVariable

    if kwargs or len(args) != 1:
        if len(args) == 2 and not kwargs and args[1].is_python_constant() and args[1].as_python_constant() is None:
            pass  # weakref.ref(obj, None): no callback
        else:
            unsupported("weak_reference", "weakref.ref with a callback")
    referent = args[0]
    if not (referent.source is not None or isinstance(referent, ObjectVariable)):
        unsupported("weak_reference", f"weakref.ref to {referent}, which pyjit cannot rebuild as the same object")
    t = referent.python_type()
    if not t.__weakrefoffset__:
        unsupported("exception", f"TypeError: cannot create weak reference to {t.__name__!r} object")
    return WeakRefVariable(referent)


class WeakRefVariable(VariableTracker):
    """A ``weakref.ref`` created by the trace (see module docstring)."""

    __slots__ = ("referent",)

    def __init__(self, referent: VariableTracker) -> None:
        super().__init__(None)
        self.referent = referent

    def python_type(self) -> type:
        return weakref.ReferenceType

    def truth(self, tx: "Translator") -> bool:
        return True  # ``ref`` defines no __bool__ / __len__

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        unsupported("weak_reference", "dereferencing a weakref.ref (its referent's lifetime is not traced)")

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        unsupported("unsupported_attr", f"weakref.ref.{name}")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return f"{cg.ref(weakref.ref, 'weakref_ref')}({self.referent.reconstruct(cg)})"

    def __repr__(self) -> str:
        return f"WeakRefVariable({self.referent!r})"
