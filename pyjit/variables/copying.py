"""``copy.copy`` and ``copy.deepcopy`` over trackers (registered into the builtin handler table).

The copy is modelled, not performed: the result is a new tracker the trace can read and mutate
(a list, a dict, or an :class:`~pyjit.variables.objects.ObjectVariable` for an instance of a
user class), and the side-effect replay rebuilds it like any other object the trace created when
it escapes the frame (returned, stored into an outside object, live at a graph break).

What follows CPython's ``copy`` module step by step, on trackers:

- atomic values (constants, functions, classes, symbolic ints) are their own copy;
- lists, dicts and tuples: ``deepcopy`` copies the items (a tuple whose items all copy to
  themselves is returned as is), ``copy`` shares them; a memo keyed by tracker identity keeps
  aliasing (one list reached twice is copied once) and cycles, as CPython's memo does by ``id``;
- an instance of a user class: ``getattr(x, '__deepcopy__')`` / ``__copy__`` is looked up as
  Python does (the instance's ``__getattribute__``, a ``HASATTR`` guard) and, when it is a Python
  function, traced (its ``memo`` argument is a tracker that only ``copy.deepcopy(y, memo)`` may
  use); otherwise the default reduce protocol for protocol 4 is modelled: a blank
  ``cls.__new__(cls)`` whose ``__dict__`` is updated with the (deep-copied) instance ``__dict__``,
  or a Python ``__setstate__`` traced with it. The trace relies on the class keeping that
  protocol, so ``__reduce_ex__``/``__reduce__``/``__getstate__`` are guarded to be ``object``'s,
  ``__getnewargs(_ex)__`` and ``__setstate__`` to be absent (or the traced function), and the
  class to be absent from ``copyreg.dispatch_table``. Reading the instance ``__dict__`` guards
  its keys and every value (the copy holds them all).

Out of scope, a structured graph break naming the reason: tensors and modules (their copies own
storage and parameters), ``__deepcopy__``/``__copy__`` implemented in C, custom reduce or state
protocols, ``__slots__``, subclasses of builtin types other than ``object``, a memo passed by
the user, and using the memo given to a traced ``__deepcopy__`` other than to pass it on.
"""
from __future__ import annotations

import collections
import copy
import copyreg
import types
from typing import TYPE_CHECKING, Any

from ..guards.guards import GuardKind
from ..guards.source import AttrSource, ModuleGlobalSource, Source
from ..identity import is_one_of
from ..trace.graph_breaks import unsupported
from .base import KnownCallableVariable, VariableTracker
from .attribute_builtins import has_attr
from .builtins import _register
from .class_members import MISSING, lookup_class_attr
from .constant import ConstantVariable
from .lists import ListVariable, NamedTupleVariable, TupleVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator

# Members of ``object`` the default reduce protocol goes through (guarded to stay these).
_OBJECT_PROTOCOL = ("__reduce_ex__", "__reduce__", "__getstate__")
# Members whose presence would change the default protocol (guarded absent unless traced).
_ABSENT_PROTOCOL = ("__getnewargs_ex__", "__getnewargs__")
_PLAIN_NEW = (object.__new__,)


class DeepcopyMemoVariable(VariableTracker):
    """The ``memo`` a traced ``__deepcopy__`` receives: the copy's own memo, keyed by tracker
    identity. It can only be passed on to ``copy.deepcopy(y, memo)``; reading or writing it
    (``memo[id(self)] = ...``) is a break, since its keys are the ids of real objects."""

    __slots__ = ("memo",)

    def __init__(self, memo: dict[int, VariableTracker]) -> None:
        super().__init__(None)
        self.memo = memo

    def python_type(self) -> type:
        return dict

    def _refuse(self, what: str) -> Any:
        unsupported("copy_unsupported", f"using the memo of copy.deepcopy() directly ({what}); only passing it "
                    "on to copy.deepcopy(value, memo) is traced")

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        return self._refuse(f"memo.{name}")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return self._refuse(f"memo.{name}()")

    def truth(self, tx: "Translator") -> bool:
        return self._refuse("its truth value")

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        return self._refuse("iterating over it")

    def __repr__(self) -> str:
        return "DeepcopyMemoVariable()"


def _name(deep: bool) -> str:
    return "copy.deepcopy()" if deep else "copy.copy()"


def _is_atomic(v: VariableTracker) -> bool:
    """Values CPython's copy returns unchanged (immutable constants, functions, classes)."""
    from .functions import NestedFunctionVariable, UserFunctionVariable
    from .symbolic import SymNodeVariable
    from .user_defined import UserDefinedClassVariable

    if isinstance(v, NamedTupleVariable):
        return False
    if isinstance(v, ConstantVariable):
        return True  # immutable; constant tuples hold only immutable constants
    if isinstance(v, SymNodeVariable):
        return True  # an int/float
    return isinstance(v, (KnownCallableVariable, UserFunctionVariable, NestedFunctionVariable, UserDefinedClassVariable))


def deep_copy(tx: "Translator", v: VariableTracker, memo: dict[int, VariableTracker]) -> VariableTracker:
    """``copy.deepcopy(v, memo)`` on trackers (see module docstring)."""
    from .dicts import DictVariable, SetVariable

    hit = memo.get(id(v))
    if hit is not None:
        return hit
    if _is_atomic(v):
        return v
    if type(v) is ListVariable:
        y = ListVariable([])
        memo[id(v)] = y
        y.items = [deep_copy(tx, i, memo) for i in v.items]
        return y
    if type(v) is TupleVariable:
        items = [deep_copy(tx, i, memo) for i in v.items]
        hit = memo.get(id(v))  # a cycle through the tuple already copied it
        if hit is not None:
            return hit
        return v if all(a is b for a, b in zip(items, v.items)) else TupleVariable(items)
    if isinstance(v, NamedTupleVariable):
        # the reduce protocol: cls(*deepcopy(tuple(v))) (a new tuple even of constants)
        return type(v)([deep_copy(tx, i, memo) for i in v.items], v.tuple_cls)
    if type(v) is DictVariable and v.dict_type in (dict, collections.OrderedDict):
        from .constant import is_constant_value
        from .dicts import is_identity_key

        if not all(is_constant_value(k) or is_identity_key(k) for k in v.items):  # deepcopy would copy them
            unsupported("copy_unsupported", "copy.deepcopy of a dict keyed by tensors, modules or objects")
        y = DictVariable({}, dict_type=v.dict_type)
        memo[id(v)] = y
        for k, i in v.items.items():  # keys are immutable constants (or classes): their own copy
            y.items[k] = deep_copy(tx, i, memo)
        return y
    if type(v) is SetVariable:
        from .constant import is_constant_value
        from .dicts import is_identity_key

        if not all(is_constant_value(m) or is_identity_key(m) for m in v.values):  # deepcopy would copy them
            unsupported("copy_unsupported", "copy.deepcopy of a set holding tensors or objects built by the trace")
        return SetVariable(list(v.values))  # type: ignore[attr-defined]
    return _copy_object(tx, v, memo, deep=True)


def shallow_copy(tx: "Translator", v: VariableTracker) -> VariableTracker:
    """``copy.copy(v)`` on trackers: a new container sharing the items, or a new object."""
    from .dicts import DictVariable, SetVariable

    if _is_atomic(v) or type(v) is TupleVariable:
        return v
    if isinstance(v, NamedTupleVariable):
        return type(v)(list(v.items), v.tuple_cls)
    if type(v) is ListVariable:
        return ListVariable(list(v.items))
    if type(v) is DictVariable and v.dict_type in (dict, collections.OrderedDict):
        return DictVariable(dict(v.items), dict_type=v.dict_type)
    if type(v) is SetVariable:
        return SetVariable(list(v.values))  # type: ignore[attr-defined]
    return _copy_object(tx, v, None, deep=False)


def _copy_object(tx: "Translator", v: VariableTracker, memo: dict[int, VariableTracker] | None, *, deep: bool) -> VariableTracker:
    """An instance of a user class: its ``__deepcopy__``/``__copy__`` traced, or the default
    reduce protocol modelled (see module docstring)."""
    from .nn_module import NNModuleVariable
    from .objects import ObjectVariable
    from .tensor import TensorVariable
    from .user_defined import UserDefinedObjectVariable

    what = _name(deep)
    if isinstance(v, TensorVariable):
        unsupported("copy_unsupported", f"{what} of a tensor inside the traced code (copy it with .clone() "
                    "or move the copy out of the compiled function)")
    if isinstance(v, NNModuleVariable):
        unsupported("copy_unsupported", f"{what} of a module inside the traced code (build the copy outside "
                    "the compiled function)")
    if not isinstance(v, (UserDefinedObjectVariable, ObjectVariable)):
        unsupported("copy_unsupported", f"{what} of {v}")
    cls = v.python_type()
    hook = "__deepcopy__" if deep else "__copy__"
    if has_attr(tx, v, hook):  # getattr(x, hook, None), as copy does (HASATTR-guarded)
        method = v.var_getattr(tx, hook)
        from .functions import UserMethodVariable

        if not isinstance(method, UserMethodVariable):
            unsupported("copy_unsupported", f"{what} of a {cls.__name__}: its {hook} is not a Python function")
        args: list[VariableTracker] = [DeepcopyMemoVariable(memo if memo is not None else {})] if deep else []
        result = method.call_function(tx, args, {})
        if memo is not None:
            # copy.deepcopy keeps the result in the memo (and returns it for the next reference)
            memo[id(v)] = result
        return result
    cls_source = v.cls_source if isinstance(v, ObjectVariable) else (
        AttrSource(v.source, "__class__") if v.source is not None else None)
    _check_default_protocol(tx, cls, cls_source, what)
    state = _instance_dict(tx, v)
    y = ObjectVariable(cls, cls_source)
    tx.output.side_effects.created.append(y)
    if memo is not None:
        memo[id(v)] = y  # before the state is copied: cycles come back to y
    if deep:
        state = {k: deep_copy(tx, s, memo if memo is not None else {}) for k, s in state.items()}
    setstate = lookup_class_attr(cls, "__setstate__")
    if isinstance(setstate, types.FunctionType):
        if not state:  # object.__getstate__ returns None for an empty __dict__: no __setstate__ call
            return y
        from .dicts import DictVariable

        y.call_method(tx, "__setstate__", [DictVariable(state)], {})
        return y
    y.attrs.update(state)  # y.__dict__.update(state): no __setattr__ runs
    return y


def _check_default_protocol(tx: "Translator", cls: type, cls_source: Source | None, what: str) -> None:
    """The class copies through ``object``'s reduce protocol; guard that it keeps doing so."""
    if cls.__dict__.get("__slots__") is not None or any("__slots__" in k.__dict__ for k in cls.__mro__[1:-1]):
        unsupported("copy_unsupported", f"{what} of a {cls.__name__} (__slots__)")
    for base in cls.__mro__[1:]:
        if base is not object and base.__module__ == "builtins":
            unsupported("copy_unsupported", f"{what} of a {cls.__name__}, a subclass of {base.__name__}")
    if cls in copyreg.dispatch_table:
        unsupported("copy_unsupported", f"{what} of a {cls.__name__} (registered with copyreg.pickle)")
    new = lookup_class_attr(cls, "__new__")
    if not is_one_of(new.__func__ if type(new) in (staticmethod, classmethod) else new, _PLAIN_NEW):
        unsupported("copy_unsupported", f"{what} of a {cls.__name__} (its own __new__)")
    if lookup_class_attr(cls, "__del__") is not MISSING:
        unsupported("copy_unsupported", f"{what} of a {cls.__name__} (it defines __del__)")
    for name in _OBJECT_PROTOCOL:
        if lookup_class_attr(cls, name) is not getattr(object, name):
            unsupported("copy_unsupported", f"{what} of a {cls.__name__}: it defines its own {name}")
    for name in _ABSENT_PROTOCOL:
        if lookup_class_attr(cls, name) is not MISSING:
            unsupported("copy_unsupported", f"{what} of a {cls.__name__}: it defines {name}")
    setstate = lookup_class_attr(cls, "__setstate__")
    if setstate is not MISSING and not isinstance(setstate, types.FunctionType):
        unsupported("copy_unsupported", f"{what} of a {cls.__name__}: its __setstate__ is not a Python function")
    guards = tx.output.guards
    guards.add(GuardKind.DICT_CONTAINS, ModuleGlobalSource("copyreg", "dispatch_table"), False, extra=cls)
    if cls_source is None:
        return
    for name in _OBJECT_PROTOCOL:
        guards.add(GuardKind.ID_MATCH, AttrSource(cls_source, name), getattr(object, name))
    for name in _ABSENT_PROTOCOL:
        guards.add(GuardKind.HASATTR, cls_source, False, extra=name)
    if setstate is MISSING:
        guards.add(GuardKind.HASATTR, cls_source, False, extra="__setstate__")
    else:
        guards.add(GuardKind.ID_MATCH, AttrSource(cls_source, "__setstate__"), setstate)


def _instance_dict(tx: "Translator", v: VariableTracker) -> dict[str, VariableTracker]:
    """The instance ``__dict__`` as the trace sees it now (stores made earlier in the trace
    included), name -> tracker."""
    from ..trace.side_effects import DELETED
    from .builder import wrap
    from .objects import ObjectVariable

    if isinstance(v, ObjectVariable):
        return {k: a for k, a in v.attrs.items() if a is not DELETED}
    real = v.value  # type: ignore[attr-defined]
    d = getattr(real, "__dict__", None)
    if not isinstance(d, dict):
        unsupported("copy_unsupported", f"copying a {type(real).__name__} without an instance __dict__")
    src = AttrSource(v.source, "__dict__") if v.source is not None else None
    dict_var = wrap(tx, d, src)  # keys guarded, each value wrapped (and guarded) through its item
    state = dict(dict_var.items)  # type: ignore[attr-defined]
    pending = tx.output.side_effects.pending_attrs(v)
    for k, a in pending.items():
        if a is DELETED:
            state.pop(k, None)
        else:
            state[k] = a
    return state


# -- the handlers ----------------------------------------------------------------------------------
@_register(copy.copy)
def _copy_copy(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    if len(args) != 1 or kwargs:
        unsupported("exception", "TypeError: copy.copy() takes exactly one argument")
    return shallow_copy(tx, args[0])


@_register(copy.deepcopy)
def _copy_deepcopy(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    bound = list(args) + [kwargs[k] for k in ("memo", "_nil") if k in kwargs]
    if not 1 <= len(bound) <= 2 or set(kwargs) - {"memo"}:
        unsupported("copy_unsupported", "copy.deepcopy() with arguments other than (x, memo)")
    memo: dict[int, VariableTracker] = {}
    if len(bound) == 2:
        m = bound[1]
        if isinstance(m, DeepcopyMemoVariable):
            memo = m.memo  # a traced __deepcopy__ passing its memo on
        elif not (isinstance(m, ConstantVariable) and m.value is None):
            unsupported("copy_unsupported", "copy.deepcopy() with a memo dict of the program's own")
    try:
        return deep_copy(tx, args[0], memo)
    except RecursionError:
        unsupported("copy_unsupported", "copy.deepcopy() of a structure too deep to model")

