"""Python's operator protocols on instances of user classes: ``a + b``, ``a += b``, ``-a``,
``a < b``, ``x in obj`` and iteration by ``__next__``, each inlined as CPython calls it.

Binary operators follow ``binary_op1`` / ``binary_iop1`` of CPython's ``abstract.c``:

- an in-place operator first tries ``type(a).__iop__``;
- then ``type(a).__op__`` and ``type(b).__rop__``; the reflected method goes first when
  ``type(b)`` is a proper subclass of ``type(a)`` that overrides it;
- a method that returns ``NotImplemented`` passes the turn on; when none is left, the operator
  raises ``TypeError`` (an ``exception`` break, so eager raises it).

Only Python methods are inlined. The other operand is a tensor, a constant or a container: its
own operator gives ``NotImplemented`` for an instance of a user class that is not a tensor (a
tensor's ``__add__`` does so for any argument that is neither a tensor nor a number, unless that
argument takes part in ``__torch_function__``, which stays a break), so only the user class's
reflected method can answer. Rich comparisons work the same way with the swapped operator
(``a < b`` reflects to ``b > a``), and ``==``/``!=`` fall back to identity as Python does.

Each method the trace inlines is guarded by identity on its class (``call_type_method``); a
method the trace found *absent* on a class with a source is guarded absent (``HASATTR``).
"""
from __future__ import annotations

import operator
import types
from typing import TYPE_CHECKING, Any, Callable

from ..errors import Unsupported
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .class_members import MISSING, lookup_class_attr
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator

_BINARY_NAMES: dict[Callable[[Any, Any], Any], str] = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "truediv",
    operator.floordiv: "floordiv", operator.mod: "mod", operator.pow: "pow", operator.matmul: "matmul",
    operator.and_: "and", operator.or_: "or", operator.xor: "xor", operator.lshift: "lshift",
    operator.rshift: "rshift",
}
_INPLACE: dict[Callable[[Any, Any], Any], Callable[[Any, Any], Any]] = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
    operator.ipow: operator.pow, operator.imatmul: operator.matmul, operator.iand: operator.and_,
    operator.ior: operator.or_, operator.ixor: operator.xor, operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
}
_COMPARE: dict[Callable[[Any, Any], Any], tuple[str, str]] = {
    operator.lt: ("__lt__", "__gt__"), operator.le: ("__le__", "__ge__"), operator.gt: ("__gt__", "__lt__"),
    operator.ge: ("__ge__", "__le__"), operator.eq: ("__eq__", "__eq__"), operator.ne: ("__ne__", "__ne__"),
}
_UNARY: dict[Callable[[Any], Any], str] = {
    operator.neg: "__neg__", operator.pos: "__pos__", operator.invert: "__invert__", operator.abs: "__abs__",
}


def is_user_object(v: VariableTracker) -> bool:
    """An instance of a user class: read from the frame, or built by the trace."""
    from .objects import ObjectVariable
    from .user_defined import UserDefinedObjectVariable

    return isinstance(v, (ObjectVariable, UserDefinedObjectVariable))


def _cls(v: VariableTracker) -> type | None:
    try:
        return v.python_type()
    except Exception:  # noqa: BLE001 - a tracker without a known type takes no part
        return None


def _python_method(v: VariableTracker, name: str) -> types.FunctionType | None:
    """``type(v).name`` when ``v`` is a user object whose class defines it in Python."""
    if not is_user_object(v):
        return None
    fn = lookup_class_attr(_cls(v), name)  # type: ignore[arg-type]
    return fn if isinstance(fn, types.FunctionType) else None


def _guard_lacks(tx: "Translator", v: VariableTracker, name: str) -> None:
    from .class_members import guard_type_lacks

    if is_user_object(v) and v.source is not None:
        guard_type_lacks(tx, v, (name,))


def _opaque_operand(v: VariableTracker, name: str) -> bool:
    """``v``'s own operator could answer for a user object (a C method other than object's, or a
    tensor argument taking part in ``__torch_function__``): pyjit cannot tell it gives
    NotImplemented."""
    if is_user_object(v):
        fn = lookup_class_attr(_cls(v), name)  # type: ignore[arg-type]
        return fn is not MISSING and not isinstance(fn, types.FunctionType) and fn is not getattr(object, name, MISSING)
    return False


def _call(tx: "Translator", v: VariableTracker, name: str, args: list[VariableTracker]) -> VariableTracker | None:
    """Inline ``type(v).name(v, *args)``; None when it returned NotImplemented."""
    result = v.call_method(tx, name, args, {})
    if result.is_python_constant() and result.as_python_constant() is NotImplemented:
        return None
    return result


def _has_torch_function(v: VariableTracker) -> bool:
    cls = _cls(v)
    return cls is not None and lookup_class_attr(cls, "__torch_function__") is not MISSING


def user_binary_op(tx: "Translator", op: Callable[[Any, Any], Any], a: VariableTracker,
                   b: VariableTracker) -> VariableTracker | None:
    """``a <op> b`` where either operand is a user object; None when neither class defines the
    operator in Python (the caller's generic path decides then)."""
    base = _INPLACE.get(op, op)
    short = _BINARY_NAMES.get(base)
    if short is None:
        return None
    fwd, rev = f"__{short}__", f"__r{short}__"
    if any(_has_torch_function(v) for v in (a, b) if is_user_object(v)):
        return None  # torch dispatches such objects itself
    candidates: list[tuple[VariableTracker, str, VariableTracker]] = []
    if op is not base:
        candidates.append((a, f"__i{short}__", b))
    ca, cb = _cls(a), _cls(b)
    a_fwd = (a, fwd, b)
    b_rev = (b, rev, a) if ca is not cb else None
    if b_rev is not None and ca is not None and cb is not None and issubclass(cb, ca) \
            and _python_method(b, rev) is not None and lookup_class_attr(cb, rev) is not lookup_class_attr(ca, rev):
        candidates += [b_rev, a_fwd]
    else:
        candidates += [a_fwd] + ([b_rev] if b_rev is not None else [])
    if not any(_python_method(v, name) is not None for v, name, _ in candidates):
        return None
    for v, name, other in candidates:
        if _python_method(v, name) is None:
            if _opaque_operand(v, name):
                unsupported("c_function", f"{name} of {v} is implemented in C")
            _guard_lacks(tx, v, name)
            continue
        result = _call(tx, v, name, [other])
        if result is not None:
            return result
    unsupported("exception", f"TypeError: unsupported operand type(s) for {short}: "
                             f"{_name(ca)!r} and {_name(cb)!r}")


def user_compare(tx: "Translator", op: Callable[[Any, Any], Any], a: VariableTracker,
                 b: VariableTracker) -> VariableTracker | None:
    """A rich comparison with a user object on either side, as ``do_richcompare``: the reflected
    method first for a proper subclass on the right, NotImplemented passes the turn; None when
    no Python method takes part (identity for ``==``/``!=`` is then the caller's)."""
    if op not in _COMPARE:
        return None
    fwd, rev = _COMPARE[op]
    if any(_has_torch_function(v) for v in (a, b) if is_user_object(v)):
        return None
    ca, cb = _cls(a), _cls(b)
    candidates = [(a, fwd, b), (b, rev, a)]
    if ca is not cb and ca is not None and cb is not None and issubclass(cb, ca) and _python_method(b, rev) is not None:
        candidates.reverse()
    if op is operator.ne:
        # object.__ne__ inverts __eq__ (unless __eq__ gives NotImplemented)
        candidates = [(v, "__eq__!", o) if _python_method(v, "__ne__") is None and _python_method(v, "__eq__") is not None
                      and lookup_class_attr(_cls(v), "__ne__") is object.__ne__ else (v, n, o)  # type: ignore[arg-type]
                      for v, n, o in candidates]
    if not any(_python_method(v, n.rstrip("!")) is not None for v, n, _ in candidates):
        return None
    for v, name, other in candidates:
        negate = name.endswith("!")
        name = name.rstrip("!")
        if _python_method(v, name) is None:
            if _opaque_operand(v, name):
                unsupported("c_function", f"{name} of {v} is implemented in C")
            continue
        result = _call(tx, v, name, [other])
        if result is not None:
            return ConstantVariable(not result.truth(tx)) if negate else result
    if op in (operator.eq, operator.ne):
        from .builtins import identical

        same = identical(tx, a, b)
        return ConstantVariable(same if op is operator.eq else not same)
    unsupported("exception", f"TypeError: {op.__name__} not supported between instances of "
                             f"{_name(ca)!r} and {_name(cb)!r}")


def user_unary_op(tx: "Translator", op: Callable[[Any], Any], a: VariableTracker) -> VariableTracker | None:
    name = _UNARY.get(op)
    if name is None or _python_method(a, name) is None:
        return None
    return a.call_method(tx, name, [], {})


def user_contains(tx: "Translator", container: VariableTracker, item: VariableTracker) -> VariableTracker | None:
    """``item in obj``: ``__contains__`` (result made a bool), else iteration comparing each item
    by identity then ``==`` as ``PySequence_Contains`` does; None when neither is in Python."""
    if _python_method(container, "__contains__") is not None:
        return ConstantVariable(container.call_method(tx, "__contains__", [item], {}).truth(tx))
    if lookup_class_attr(_cls(container), "__contains__") is not MISSING:  # type: ignore[arg-type]
        return None
    if _python_method(container, "__iter__") is None and _python_method(container, "__getitem__") is None:
        return None
    from .builtins import compare_op, identical

    for x in container.unpack(tx):
        if _same_or_equal(tx, x, item, identical, compare_op):
            return ConstantVariable(True)
    return ConstantVariable(False)


def _same_or_equal(tx: "Translator", x: VariableTracker, item: VariableTracker, identical: Any, compare_op: Any) -> bool:
    try:
        if identical(tx, x, item):
            return True
    except Unsupported:
        pass
    return compare_op(tx, operator.eq, x, item).truth(tx)


def iterate_by_next(tx: "Translator", it: VariableTracker) -> list[VariableTracker]:
    """The items of an iterator whose class defines ``__next__`` in Python: ``__next__`` traced
    until it raises StopIteration (materialised, like every iterator the tracer follows)."""
    from .misc import raised_exception_type

    items: list[VariableTracker] = []
    while True:
        if len(items) > 10_000:
            unsupported("loop_limit", f"iterating over a {_name(_cls(it))} by __next__")
        try:
            items.append(it.call_method(tx, "__next__", [], {}))
        except Unsupported as e:
            if raised_exception_type(e) == "StopIteration":
                return items
            raise


def user_next(tx: "Translator", it: VariableTracker, default: VariableTracker | None) -> VariableTracker:
    """``next(it)`` / ``next(it, default)`` on a user iterator: its Python ``__next__``."""
    from .misc import raised_exception_type

    if _python_method(it, "__next__") is None:
        unsupported("untracked_method", f"next() on {it}")
    if default is None:
        return it.call_method(tx, "__next__", [], {})
    try:
        return it.call_method(tx, "__next__", [], {})
    except Unsupported as e:
        if raised_exception_type(e) == "StopIteration":
            return default
        raise


def user_reversed(tx: "Translator", obj: VariableTracker) -> list[VariableTracker] | None:
    """The items of ``reversed(obj)`` for a user object, as ``reversed`` finds them: the class's
    ``__reversed__``, else the sequence protocol (``obj[len(obj) - 1]`` down to ``obj[0]``), else
    TypeError; None when ``obj`` is no user object or its class answers in C."""
    if not is_user_object(obj):
        return None
    cls = _cls(obj)
    rev = lookup_class_attr(cls, "__reversed__")  # type: ignore[arg-type]
    if isinstance(rev, types.FunctionType):
        return unpack_iterator(tx, obj.call_method(tx, "__reversed__", [], {}))
    if rev is not MISSING:
        if rev is None:
            unsupported("exception", f"TypeError: {_name(cls)!r} object is not reversible")
        return None
    _guard_lacks(tx, obj, "__reversed__")
    if _python_method(obj, "__len__") is None or _python_method(obj, "__getitem__") is None:
        if lookup_class_attr(cls, "__len__") is MISSING or lookup_class_attr(cls, "__getitem__") is MISSING:  # type: ignore[arg-type]
            unsupported("exception", f"TypeError: {_name(cls)!r} object is not reversible")
        return None
    n = obj.call_method(tx, "__len__", [], {}).as_python_constant()
    return [obj.call_method(tx, "__getitem__", [ConstantVariable(i)], {}) for i in range(n - 1, -1, -1)]


def unpack_iterator(tx: "Translator", it: VariableTracker) -> list[VariableTracker]:
    """The items of what ``__iter__`` returned: a user iterator goes by its Python ``__next__``
    (it often returns itself, which must not be iterated again through ``__iter__``)."""
    if _python_method(it, "__next__") is not None:
        return iterate_by_next(tx, it)
    return it.unpack(tx)


def _name(cls: type | None) -> str:
    return cls.__name__ if cls is not None else "object"
