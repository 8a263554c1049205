"""Builtins, ``operator.*`` and ``math.*`` over trackers, and the shared arithmetic helpers.

Pure functions on constants are folded (the inputs they came from are guarded by value).
Arithmetic and comparisons involving a tensor are recorded as ``operator.*`` graph calls.
``print`` and other effects are graph breaks.
"""
from __future__ import annotations

import sys

import operator
from typing import TYPE_CHECKING, Any, Callable

from ..errors import Unsupported
from ..identity import IdentityDict, IdentitySet, is_one_of, static_attr
from ..trace.graph_breaks import unsupported
from .base import KnownCallableVariable, VariableTracker
from .captured_scalar import captured_binary, captured_unary
from .constant import ConstantVariable
from .lists import BaseListVariable, ListIteratorVariable, ListVariable, TupleVariable
from .numpy_scalars import as_torch_operand
from .symbolic import SymNodeVariable, contains_symbolic, symbolic_binary, symbolic_call

if TYPE_CHECKING:
    from ..guards.source import Source
    from ..trace.translator import Translator

Handler = Callable[["Translator", list[VariableTracker], dict[str, VariableTracker]], VariableTracker]
# Keyed by identity: the values looked up are whatever the traced code calls, and hashing or
# comparing a user object would run its __hash__/__eq__ (eager never does).
_HANDLERS: IdentityDict[Any, Handler] = IdentityDict()

# Modules whose functions are pure on constants (folded at trace time).
_PURE_MODULES = frozenset({"math", "_operator", "operator", "cmath"})
_PURE_BUILTINS = IdentitySet({
    abs, all, any, bin, bool, chr, divmod, float, format, hash, hex, int, len, max, min, oct, ord, pow,
    repr, round, sorted, str, sum, tuple, list, isinstance, issubclass, callable, complex, frozenset, set,
    slice, range, bytes, sys.intern,
})


def _is_tensor(v: VariableTracker) -> bool:
    from .tensor import TensorVariable

    return isinstance(v, TensorVariable)


def all_constant(args: list[VariableTracker], kwargs: dict[str, VariableTracker] | None = None) -> bool:
    return all(a.is_python_constant() for a in args) and all(v.is_python_constant() for v in (kwargs or {}).values())


def fold(tx: "Translator", fn: Callable[..., Any], args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """Call ``fn`` on the constants the trackers stand for; wrap the result."""
    from .builder import wrap_constant_result

    try:
        result = fn(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
    except Exception as e:
        unsupported("exception", f"{getattr(fn, '__name__', fn)}(...) raised {type(e).__name__}: {e}")
    return wrap_constant_result(tx, result)


# -- arithmetic ---------------------------------------------------------------------------------

_INPLACE_TO_BINARY = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
    operator.ipow: operator.pow, operator.imatmul: operator.matmul, operator.iand: operator.and_,
    operator.ior: operator.or_, operator.ixor: operator.xor, operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
}


def binary_op(tx: "Translator", op: Callable[[Any, Any], Any], a: VariableTracker, b: VariableTracker) -> VariableTracker:
    by_method = _user_protocol(tx, "user_binary_op", op, a, b)  # a user class's __add__/__radd__...
    if by_method is not None:
        return by_method
    captured = captured_binary(tx, op, a, b)  # tensor.item() kept in the graph
    if captured is not None:
        return captured
    if _is_tensor(a) or _is_tensor(b):
        if op in _INPLACE_TO_BINARY and not _is_tensor(a):
            op = _INPLACE_TO_BINARY[op]
        return tx.output.call(tx, "call_function", op, [as_torch_operand(a), as_torch_operand(b)], {})
    symbolic = symbolic_binary(tx, op, a, b)  # a size or a symbolic scalar: recorded, not folded
    if symbolic is not None:
        return symbolic
    if isinstance(a, ListVariable) and op in (operator.iadd, operator.imul):
        # in place, like list.__iadd__/__imul__ (never folded on a copy): the side-effect replay
        # records it when the list came from outside
        if op is operator.iadd:
            a.call_method(tx, "extend", [b], {})
        else:
            repeated = ListVariable(a.items * b.as_python_constant())
            a.call_method(tx, "__setitem__", [ConstantVariable(slice(None)), repeated], {})
        return a
    base = _INPLACE_TO_BINARY.get(op, op)
    symbolic_items = contains_symbolic(a) or contains_symbolic(b)
    if a.is_python_constant() and b.is_python_constant() and not symbolic_items:
        return fold(tx, op, [a, b], {})
    if symbolic_items:  # ``(-1,) + x.shape[1:]``: the literal tuple as items, the sizes kept
        a, b = _as_sequence(a), _as_sequence(b)
    if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable) and base is operator.add:
        if op is operator.iadd and isinstance(a, ListVariable):
            a.call_method(tx, "extend", [b], {})
            return a
        if type(a) is type(b) or (isinstance(a, TupleVariable) and isinstance(b, TupleVariable)):
            # tuple + torch.Size is a tuple, torch.Size + tuple a torch.Size (Python's rule: the left type)
            return a.new(a.items + b.items)
        unsupported("exception", "can only concatenate same sequence types")
    if a.is_python_constant() and b.is_python_constant():
        return fold(tx, op, [a, b], {})  # e.g. a size times a tuple: specialised
    if isinstance(a, ListVariable) and op is operator.iadd:
        a.call_method(tx, "extend", [b], {})
        return a
    if isinstance(a, BaseListVariable) and base is operator.mul and b.is_python_constant():
        return a.new(a.items * b.as_python_constant())
    if isinstance(b, BaseListVariable) and base is operator.mul and a.is_python_constant():
        return b.new(b.items * a.as_python_constant())
    from .dicts import DictVariable

    if isinstance(a, DictVariable) and isinstance(b, DictVariable) and base is operator.or_:
        return DictVariable({**a.items, **b.items})
    unsupported("builtin_arguments", f"{getattr(op, '__name__', op)} on {a} and {b}")


def _user_protocol(tx: "Translator", name: str, *args: Any) -> VariableTracker | None:
    """The operator protocol of a user class (pyjit/variables/user_ops.py) when an operand is an
    instance of one; None otherwise."""
    from . import user_ops

    if not any(user_ops.is_user_object(v) for v in args if isinstance(v, VariableTracker)):
        return None
    return getattr(user_ops, name)(tx, *args)


def _as_sequence(value: VariableTracker) -> VariableTracker:
    """A literal tuple/list constant as a tuple/list of constants (other values unchanged)."""
    if isinstance(value, ConstantVariable) and type(value.value) in (tuple, list):
        items = [ConstantVariable(v) for v in value.value]
        return TupleVariable(items) if type(value.value) is tuple else ListVariable(items)
    return value


def unary_op(tx: "Translator", op: Callable[[Any], Any], a: VariableTracker) -> VariableTracker:
    by_method = _user_protocol(tx, "user_unary_op", op, a)
    if by_method is not None:
        return by_method
    captured = captured_unary(tx, op, a)
    if captured is not None:
        return captured
    if _is_tensor(a):
        return tx.output.call(tx, "call_function", op, [a], {})
    if op is operator.not_:
        return ConstantVariable(not a.truth(tx))
    if isinstance(a, SymNodeVariable) and op in (operator.neg, operator.pos, operator.abs):
        return symbolic_call(tx, op, [a])
    if a.is_python_constant():
        return fold(tx, op, [a], {})
    unsupported("builtin_arguments", f"{op.__name__} on {a}")


def identical(tx: "Translator", a: VariableTracker, b: VariableTracker) -> bool:
    """``a is b`` over trackers (only where the answer is certain)."""
    from .tensor import TensorVariable

    if a is b:
        return True
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
            return a.example is b.example
        return False
    va, vb = _object_of(a), _object_of(b)
    if va is not _NO and vb is not _NO:
        _guard_identity_relation(tx, a, b, va is vb)
        return va is vb
    if a.python_type() is not b.python_type():
        return False
    unsupported("builtin_arguments", f"`is` between {a} and {b}")


_NO = object()


def _guard_identity_relation(tx: "Translator", a: VariableTracker, b: VariableTracker, same: bool) -> None:
    """``a is b`` answered from the objects themselves: when either is guarded only by type
    (user objects), guard the answer itself (``SAME_OBJECT`` / ``DISTINCT``); identity-guarded
    values (modules, functions, classes, None) already fix it."""
    from .user_defined import UserDefinedObjectVariable

    if a.source is None or b.source is None or a.source == b.source:
        return
    if not (isinstance(a, UserDefinedObjectVariable) or isinstance(b, UserDefinedObjectVariable)):
        return
    from ..guards.guards import GuardKind

    if same:
        tx.output.guards.add(GuardKind.SAME_OBJECT, a.source, extra=b.source)
    else:
        tx.output.guards.add(GuardKind.DISTINCT, None, extra=(a.source, b.source))


def _object_of(v: VariableTracker) -> Any:
    if isinstance(v, ConstantVariable):
        return v.value
    obj = getattr(v, "value", _NO)
    if obj is not _NO:
        return obj
    fn = getattr(v, "fn", _NO)
    if fn is not _NO and type(v).__name__ in ("UserFunctionVariable", "BuiltinVariable", "TorchFunctionVariable"):
        return fn
    return _NO


def identical_or_equal(tx: "Translator", a: VariableTracker, b: VariableTracker) -> bool:
    if a.is_python_constant() and b.is_python_constant():
        x, y = a.as_python_constant(), b.as_python_constant()
        return x is y or bool(x == y)  # identity first, as list.index/`in`/remove do: no __eq__ call then
    return identical(tx, a, b)


def compare_op(tx: "Translator", op: Callable[[Any, Any], Any], a: VariableTracker, b: VariableTracker) -> VariableTracker:
    by_method = _user_protocol(tx, "user_compare", op, a, b)
    if by_method is not None:
        return by_method
    captured = captured_binary(tx, op, a, b)
    if captured is not None:
        return captured
    if _is_tensor(a) or _is_tensor(b):
        if op in (operator.eq, operator.ne) and (isinstance(a, ConstantVariable) and a.value is None or isinstance(b, ConstantVariable) and b.value is None):
            return ConstantVariable(op is operator.ne)
        return tx.output.call(tx, "call_function", op, [as_torch_operand(a), as_torch_operand(b)], {})
    symbolic = symbolic_binary(tx, op, a, b)
    if symbolic is not None:
        return symbolic
    if a.is_python_constant() and b.is_python_constant():
        return fold(tx, op, [a, b], {})
    if op in (operator.eq, operator.ne):
        if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable):
            same = len(a.items) == len(b.items) and all(
                compare_op(tx, operator.eq, x, y).truth(tx) for x, y in zip(a.items, b.items)
            )
            return ConstantVariable(same if op is operator.eq else not same)
        from .objects import compare_objects  # objects built by the trace: their __eq__/__ne__

        by_method = compare_objects(tx, op, a, b)
        if by_method is not None:
            return by_method
        if not (_compares_by_identity(a) and _compares_by_identity(b)):
            # A class with its own __eq__/__ne__: identity would be a silent wrong answer.
            unsupported("builtin_arguments", f"comparison {op.__name__} of {a} and {b} (a class with its own __eq__)")
        same = identical(tx, a, b)
        return ConstantVariable(same if op is operator.eq else not same)
    unsupported("builtin_arguments", f"comparison {op.__name__} of {a} and {b}")


def _compares_by_identity(v: VariableTracker) -> bool:
    """``==`` on this value is object identity (its type keeps object's __eq__ and __ne__)."""
    try:
        t = v.python_type()
    except Exception:  # noqa: BLE001 - unknown type: not provably identity
        return False
    return getattr(t, "__eq__", None) is object.__eq__ and getattr(t, "__ne__", None) is object.__ne__


def contains(tx: "Translator", container: VariableTracker, item: VariableTracker) -> VariableTracker:
    from .dicts import DictVariable, SetVariable

    if isinstance(container, DictVariable):
        return container.call_method(tx, "__contains__", [item], {})
    if isinstance(container, SetVariable):
        return ConstantVariable(SetVariable.member(tx, item) in container.values)
    if isinstance(container, BaseListVariable):
        return ConstantVariable(any(identical_or_equal(tx, x, item) for x in container.items))
    if container.is_python_constant() and item.is_python_constant():
        return fold(tx, operator.contains, [container, item], {})
    by_method = _user_protocol(tx, "user_contains", container, item)  # __contains__, or iteration
    if by_method is not None:
        return by_method
    from .user_defined import UserDefinedObjectVariable

    if isinstance(container, UserDefinedObjectVariable):  # a builtin base's __contains__
        return ConstantVariable(container.call_method(tx, "__contains__", [item], {}).truth(tx))
    if _is_tensor(container):
        unsupported("data_dependent", "`in` on a tensor")
    unsupported("builtin_arguments", f"`in` on {container}")


def subscript(tx: "Translator", obj: VariableTracker, key: VariableTracker) -> VariableTracker:
    cls = getattr(obj, "fn", None)
    if is_one_of(cls, (list, tuple, dict, set, frozenset, type)) and key.is_python_constant():
        # ``list[Tensor]`` (typing.cast in torch.optim's foreach paths): a types.GenericAlias.
        return ConstantVariable(cls[key.as_python_constant()])
    return obj.call_method(tx, "__getitem__", [key], {})


# -- the builtin tracker ------------------------------------------------------------------------


class BuiltinVariable(KnownCallableVariable):
    """A builtin function, ``operator.*`` or ``math.*`` function."""

    __slots__ = ()

    @staticmethod
    def can_handle(fn: Any) -> bool:
        if fn in _HANDLERS or fn in _PURE_BUILTINS:
            return True
        return static_attr(fn, "__module__") in _PURE_MODULES

    @staticmethod
    def has_handler(fn: Any) -> bool:
        """A dedicated handler exists (checked before inlining Python functions)."""
        return fn in _HANDLERS

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        handler = _HANDLERS.get(self.fn)
        if handler is not None:
            return handler(tx, args, kwargs)
        if all_constant(args, kwargs) and _is_pure(self.fn):
            return fold(tx, self.fn, args, kwargs)
        if not _is_pure(self.fn):
            # time.time(), random.random(), os.getpid(): folding would freeze one answer into
            # the compiled code. Running it natively needs a graph break.
            unsupported("c_function", f"{_describe(self.fn)} (a C function whose result or effect "
                                            f"pyjit cannot reproduce inside a graph)")
        if getattr(self.fn, "__module__", None) == "math" and any(_is_tensor(a) for a in args):
            unsupported("data_dependent", f"math.{self.fn.__name__} on a tensor")
        unsupported("builtin_arguments", f"{getattr(self.fn, '__name__', self.fn)} with non-constant arguments")

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.fn, name))
        if isinstance(self.fn, type):  # dict.get, object.__getattribute__, str.join ...
            from .misc import _STORAGE_ORDERED, BuiltinMethodVariable

            attr = getattr(self.fn, name, None)
            if self.fn is dict and name in _STORAGE_ORDERED and BuiltinMethodVariable.can_handle(attr):
                return BuiltinMethodVariable(attr)  # runs on the object: an OrderedDict breaks there
            if BuiltinVariable.can_handle(attr) or (callable(attr) and _is_pure(attr)):  # dict.fromkeys
                return BuiltinVariable(attr)
            if BuiltinMethodVariable.can_handle(attr):
                return BuiltinMethodVariable(attr)
        unsupported("unsupported_attr", f"{self.fn}.{name}")

    def reconstruct(self, cg: Any) -> str:
        return cg.ref(self.fn, getattr(self.fn, "__name__", "builtin"))

    def __repr__(self) -> str:
        return f"BuiltinVariable({getattr(self.fn, '__name__', self.fn)})"


def _is_pure(fn: Any) -> bool:
    """Folding ``fn`` on constants at trace time gives the answer every later call would."""
    if BuiltinVariable.can_handle(fn):
        return True
    owner = static_attr(fn, "__self__")
    # Alternative constructors and static helpers of builtin types (dict.fromkeys, int.from_bytes,
    # str.maketrans) and methods of constants.
    return (type(owner) is type and owner.__module__ == "builtins") or (
        owner is not None and not isinstance(owner, type) and _constant_owner(owner))


def _constant_owner(owner: Any) -> bool:
    from .constant import is_constant_value

    return is_constant_value(owner)


def _describe(fn: Any) -> str:
    mod = static_attr(fn, "__module__")
    name = static_attr(fn, "__qualname__") or static_attr(fn, "__name__") or f"<{type(fn).__name__} object>"
    return f"{mod.lstrip('_')}.{name}()" if mod and mod != "builtins" else f"{name}()"


class ConstantMethodVariable(VariableTracker):
    """A bound method of a constant (``"{}".format``, ``(1, 2).index``)."""

    __slots__ = ("obj", "name")

    def __init__(self, obj: VariableTracker, name: str) -> None:
        super().__init__(None)
        self.obj = obj
        self.name = name

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)

    def reconstruct(self, cg: Any) -> str:  # graph breaks: the method, bound again
        return f"{cg.ref(getattr, 'getattr')}({self.obj.reconstruct(cg)}, {cg.constant(self.name)})"


def _register(*fns: Any) -> Callable[[Handler], Handler]:
    def deco(h: Handler) -> Handler:
        for f in fns:
            _HANDLERS[f] = h
        return h

    return deco


def _binop_handler(op: Callable[[Any, Any], Any]) -> Handler:
    return lambda tx, args, kwargs: binary_op(tx, op, args[0], args[1])


for _op in (operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
            operator.pow, operator.matmul, operator.and_, operator.or_, operator.xor, operator.lshift,
            operator.rshift, *_INPLACE_TO_BINARY):
    _HANDLERS[_op] = _binop_handler(_op)
for _op in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne):
    _HANDLERS[_op] = (lambda op: lambda tx, args, kwargs: compare_op(tx, op, args[0], args[1]))(_op)
for _op in (operator.neg, operator.pos, operator.invert, operator.not_, operator.abs):
    _HANDLERS[_op] = (lambda op: lambda tx, args, kwargs: unary_op(tx, op, args[0]))(_op)


@_register(operator.getitem)
def _getitem(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return subscript(tx, args[0], args[1])


@_register(operator.contains)
def _contains(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return contains(tx, args[0], args[1])


@_register(operator.is_, operator.is_not)
def _is(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    raise AssertionError("handled by IS_OP")


@_register(operator.truth, bool)
def _bool(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    if not args:
        return ConstantVariable(False)
    return ConstantVariable(args[0].truth(tx))


@_register(len)
def _len(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return args[0].call_method(tx, "__len__", [], {})


@_register(abs)
def _abs(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return unary_op(tx, operator.abs, args[0])


@_register(isinstance)
def _isinstance(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    obj, cls = args
    classes = cls.as_python_constant()
    from .tensor import TensorVariable

    if isinstance(obj, TensorVariable):
        # Legacy tensor types (torch.FloatTensor, torch.cuda.HalfTensor...) match on the dtype
        # and device (guarded by the tensor-match guard), not on the Python class: ask the fake
        # example, whose metadata is the real tensor's.
        import torch

        legacy = type(torch.FloatTensor)  # torch.tensortype
        flat = classes if isinstance(classes, tuple) else (classes,)
        if any(isinstance(c, legacy) for c in flat):
            return ConstantVariable(any(isinstance(obj.example, c) if isinstance(c, legacy)
                                        else issubclass(obj.python_type(), c) for c in flat))
    return ConstantVariable(issubclass(obj.python_type(), classes))


@_register(issubclass)
def _issubclass(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return ConstantVariable(issubclass(args[0].as_python_constant(), args[1].as_python_constant()))


@_register(type)
def _type(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from .builder import wrap

    if len(args) != 1:
        unsupported("object_construction", "type() with 3 arguments (class creation)")
    return wrap(tx, args[0].python_type(), class_source_of(args[0]))


def class_source_of(obj: VariableTracker) -> "Source | None":
    """Where ``type(obj)`` of a user class is read from, so that its class attributes are read
    (and guarded) through a source like ``Cls.name``: a class attribute the program changes
    between calls (``type(self).count += 1``) is then not baked into the trace as a constant."""
    from ..guards.source import AttrSource
    from .objects import ObjectVariable, _is_library_class

    if isinstance(obj, ObjectVariable):
        return obj.cls_source
    try:
        cls = obj.python_type()
    except Unsupported:
        return None
    if obj.source is None or _is_library_class(cls):
        return None
    return AttrSource(obj.source, "__class__")


@_register(callable)
def _callable(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    if args[0].is_python_constant():
        return ConstantVariable(callable(args[0].as_python_constant()))
    return ConstantVariable(callable(getattr(args[0], "value", None)) or type(args[0]).__name__.endswith("FunctionVariable"))


@_register(print)
def _print(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    unsupported("print", "print()")


@_register(id)
def _id(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from .identity_keys import object_id

    return object_id(tx, args[0])


@_register(range)
def _range(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return fold(tx, range, args, kwargs)


def _iter_items(tx: "Translator", v: VariableTracker) -> list[VariableTracker]:
    return v.unpack(tx)


@_register(iter)
def _iter(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    if isinstance(args[0], ListIteratorVariable):
        return args[0]
    return ListIteratorVariable(_iter_items(tx, args[0]))


@_register(next)
def _next(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    it = args[0]
    if not isinstance(it, ListIteratorVariable):
        from .user_ops import user_next

        return user_next(tx, it, args[1] if len(args) > 1 else None)
    item = it.next_item()
    if item is None:
        if len(args) > 1:
            return args[1]
        unsupported("exception", "StopIteration from next()")
    return item


@_register(enumerate)
def _enumerate(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    start = args[1].as_python_constant() if len(args) > 1 else kwargs["start"].as_python_constant() if "start" in kwargs else 0
    items = _iter_items(tx, args[0])
    return ListIteratorVariable([TupleVariable([ConstantVariable(start + i), v]) for i, v in enumerate(items)])


@_register(zip)
def _zip(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    lists = [_iter_items(tx, a) for a in args]
    if kwargs.get("strict") is not None and kwargs["strict"].as_python_constant() and len({len(x) for x in lists}) > 1:
        unsupported("exception", "zip(strict=True) lengths differ")
    return ListIteratorVariable([TupleVariable(list(t)) for t in zip(*lists)])


@_register(reversed)
def _reversed(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from .user_ops import user_reversed

    by_protocol = user_reversed(tx, args[0])  # a user class's __reversed__ / sequence protocol
    if by_protocol is not None:
        return ListIteratorVariable(by_protocol)
    return ListIteratorVariable(list(reversed(_iter_items(tx, args[0]))))


@_register(map)
def _map(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    fn = args[0]
    lists = [_iter_items(tx, a) for a in args[1:]]
    return ListIteratorVariable([tx.call(fn, list(t), {}) for t in zip(*lists)])


@_register(filter)
def _filter(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    fn = args[0]
    items = _iter_items(tx, args[1])
    if isinstance(fn, ConstantVariable) and fn.value is None:
        return ListIteratorVariable([i for i in items if i.truth(tx)])
    return ListIteratorVariable([i for i in items if tx.call(fn, [i], {}).truth(tx)])


@_register(list)
def _list(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return ListVariable(_iter_items(tx, args[0]) if args else [])


@_register(tuple)
def _tuple(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    if args and isinstance(args[0], ConstantVariable):
        return fold(tx, tuple, args, kwargs)
    return TupleVariable(_iter_items(tx, args[0]) if args else [])


@_register(dict)
def _dict(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from .dicts import DictVariable

    d = DictVariable({})
    if args:
        d.call_method(tx, "update", [args[0]], {})
    d.items.update(kwargs)
    return d


@_register(set, frozenset)
def _set(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from .dicts import SetVariable

    return SetVariable([SetVariable.member(tx, i) for i in _iter_items(tx, args[0])] if args else [])


@_register(sorted)
def _sorted(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    items = _iter_items(tx, args[0])
    if all(i.is_python_constant() for i in items) and all_constant([], kwargs):
        return ListVariable([ConstantVariable(v) for v in sorted([i.as_python_constant() for i in items], **{k: v.as_python_constant() for k, v in kwargs.items()})])
    unsupported("builtin_arguments", "sorted() of non-constants")


@_register(all, any)
def _all_any(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    raise AssertionError  # replaced below


def _all(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return ConstantVariable(all(i.truth(tx) for i in _iter_items(tx, args[0])))


def _any(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return ConstantVariable(any(i.truth(tx) for i in _iter_items(tx, args[0])))


_HANDLERS[all] = _all
_HANDLERS[any] = _any


@_register(sum)
def _sum(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    items = _iter_items(tx, args[0])
    start = args[1] if len(args) > 1 else kwargs.get("start")
    if all(i.is_python_constant() for i in items) and (start is None or start.is_python_constant()):
        vals = [i.as_python_constant() for i in items]
        return ConstantVariable(sum(vals, start.as_python_constant()) if start is not None else sum(vals))
    acc: VariableTracker | None = start
    for i in items:
        if acc is None:
            # Python starts from 0: `0 + t` (it also promotes bool tensors to int64).
            acc = binary_op(tx, operator.add, ConstantVariable(0), i)
        else:
            acc = binary_op(tx, operator.add, acc, i)
    return acc if acc is not None else ConstantVariable(0)


def _minmax(fn: Callable[..., Any]) -> Handler:
    def handler(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        items = _iter_items(tx, args[0]) if len(args) == 1 else args
        symbolic = any(isinstance(i, SymNodeVariable) for i in items)
        if symbolic and not kwargs and len(items) > 1 and all(
                isinstance(i, SymNodeVariable) or (i.is_python_constant() and type(i.as_python_constant()) in (int, float))
                for i in items):
            # min/max of sizes stay symbolic (torch.sym_min/sym_max add no guard), so
            # ``x[:min(n, 4)]`` does not specialise n.
            import torch

            sym_fn = torch.sym_min if fn is min else torch.sym_max
            acc = items[0]
            for i in items[1:]:
                acc = symbolic_call(tx, sym_fn, [acc, i])
            return acc
        if all(i.is_python_constant() for i in items) and all_constant([], kwargs):
            return fold(tx, fn, [ListVariable(items)], kwargs)
        if any(_is_tensor(i) for i in items):
            # Python's max/min compare with `>`: that needs the tensor's truth value.
            unsupported("data_dependent", f"{fn.__name__}() comparing tensors")
        unsupported("builtin_arguments", f"{fn.__name__}() of non-constants")

    return handler


_HANDLERS[min] = _minmax(min)
_HANDLERS[max] = _minmax(max)


def _numeric(fn: Callable[..., Any]) -> Handler:
    def handler(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if args and _is_tensor(args[0]):
            unsupported("data_dependent", f"{fn.__name__}(tensor)")
        return fold(tx, fn, args, kwargs)

    return handler


for _fn in (int, float, complex, str, round, repr, format, hash):
    _HANDLERS[_fn] = _numeric(_fn)


@_register(slice)
def _slice(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    return fold(tx, slice, args, kwargs)


@_register(super)
def _super(tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from .misc import SuperVariable

    if args:
        return SuperVariable(args[0].as_python_constant(), args[1])
    # zero-argument super(): the __class__ cell and the first argument of the current frame
    cell = tx.cells.get("__class__")
    if cell is None or not tx.code.co_varnames:
        unsupported("introspection", "super() outside a method")
    cls = cell.get(tx, "__class__").as_python_constant()
    first = tx.code.co_varnames[0]
    obj = tx.locals.get(first)
    if obj is None and first in tx.cells:
        obj = tx.cells[first].get(tx, first)
    if obj is None:
        unsupported("introspection", "super() without self")
    return SuperVariable(cls, obj)


from . import stdlib  # noqa: E402,F401  (registers the standard-library handlers)
from . import copying  # noqa: E402,F401  (copy.copy / copy.deepcopy)
from . import defaultdicts  # noqa: E402,F401  (collections' C helpers)
from . import attribute_builtins  # noqa: E402,F401  (getattr/hasattr/setattr/delattr)
