"""The builtin part of an instance of a user ``list``/``tuple`` subclass read from the frame.

``obj[i]``, ``len(obj)``, ``for v in obj``, ``obj.append(v)`` and ``list.append(obj, v)``
(C methods inherited from the builtin base) act on the object's storage, whatever Python methods
the class adds on top. The tracer answers them on a list or tuple tracker over the same object
(one per object per trace, see ``UserDefinedObjectVariable.builtin_base_view``), whose items are
read with ``obj[i]`` and guarded (the length too). A mutation through it is recorded for the
object itself and replayed with list's own slice assignment
(:func:`pyjit.trace.side_effects.replace_list`).

Where the class defines its own Python ``__getitem__``, reading an item in a guard or in the
generated code would run it: such objects break instead.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..guards.guards import GuardKind
from ..guards.source import ItemSource
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .class_members import lookup_class_attr
from .lists import ListVariable, TupleVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator


def sequence_view(tx: "Translator", obj: VariableTracker, base: type) -> VariableTracker:
    from .builder import wrap

    value = obj.value  # type: ignore[attr-defined]
    cls = type(value)
    if lookup_class_attr(cls, "__getitem__") is not base.__getitem__:
        unsupported("unsupported_object", f"the items of a {cls.__name__} (its own __getitem__)")
    if obj.source is not None:
        tx.output.guards.add(GuardKind.LEN_MATCH, obj.source, len(value))
    items = [wrap(tx, v, ItemSource(obj.source, i) if obj.source is not None else None)
             for i, v in enumerate(base.__iter__(value))]
    if base is list:
        return ListVariable(items, obj.source)
    return TupleVariable(items, obj.source)
