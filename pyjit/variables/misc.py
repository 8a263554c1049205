"""Small trackers that fit no family: Python modules (``torch``, ``math``, ``F``; ``mod.name = v`` on
a user module is a replayed store into its globals), ``super()``, and
functions pyjit must not trace (``pyjit.disable``d functions, ``pyjit.graph_break``)."""
from __future__ import annotations

import collections
import sys
import types
from typing import TYPE_CHECKING, Any

from ..guards.source import AttrSource, ItemSource
from ..logs import get_logger
from ..trace.graph_breaks import unsupported
from .base import KnownValueVariable, VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator


class PythonModuleVariable(KnownValueVariable):
    """A module object; attribute reads are wrapped (library modules without guards)."""

    __slots__ = ()

    def python_type(self) -> type:
        return types.ModuleType

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .builder import wrap

        stored = tx.output.side_effects.pending_global(tx, name, self.value.__dict__)  # set earlier in the trace
        if stored is not None:
            return stored
        try:
            value = getattr(self.value, name)
        except AttributeError:
            unsupported("exception", f"AttributeError: module {self.value.__name__!r} has no attribute {name!r}")
        mod_name = self.value.__name__
        library = mod_name == "torch" or mod_name.startswith("torch.") or mod_name in ("math", "operator", "functools", "builtins")
        # Attributes of library modules are taken as constants (no guard); user modules are guarded.
        src = None if library or self.source is None else AttrSource(self.source, name)
        return wrap(tx, value, src)

    def store_attr(self, tx: "Translator", name: str, value: Any) -> None:
        """``module.name = value`` (``del``: DELETED) on a user module reached from the frame: a
        store into its globals, replayed like a ``global`` store (pyjit/trace/side_effects.py)."""
        from ..trace.side_effects import DELETED

        mod_name = self.value.__name__
        if self.source is None or mod_name == "torch" or mod_name.startswith("torch.") \
                or not isinstance(getattr(self.value, "__dict__", None), dict):
            unsupported("side_effect", f"assigning the attribute {name!r} of the module {mod_name}")
        if value is DELETED and tx.output.side_effects.pending_global(tx, name, self.value.__dict__) is None \
                and name not in self.value.__dict__:
            unsupported("exception", f"AttributeError: module {mod_name!r} has no attribute {name!r}")
        tx.output.side_effects.store_global(tx, name, value, self.value.__dict__)

    def __repr__(self) -> str:
        return f"PythonModuleVariable({self.value.__name__})"


class SuperVariable(VariableTracker):
    """``super(cls, obj)``: attribute lookup continues after ``cls`` in ``type(obj).__mro__``."""

    __slots__ = ("cls", "obj")

    def __init__(self, cls: type, obj: VariableTracker) -> None:
        super().__init__(None)
        self.cls = cls
        self.obj = obj

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .builder import wrap
        from .functions import UserMethodVariable

        from .class_members import class_source, guard_identity, member_source

        mro = self.obj.python_type().__mro__
        start = mro.index(self.cls) + 1 if self.cls in mro else 0
        for i, klass in enumerate(mro[start:], start):
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                # ``type(obj).__mro__[i].name``: the class is fixed by the guard on obj's type,
                # the function found on it is guarded here (it can be patched on the class).
                cls_src = class_source(self.obj.source)
                klass_src = ItemSource(AttrSource(cls_src, "__mro__"), i) if cls_src is not None else None
                if isinstance(attr, types.FunctionType):
                    src = guard_identity(tx, member_source(tx, klass, klass_src, name, attr), attr)
                    return UserMethodVariable(attr, self.obj, fn_source=src)
                if isinstance(attr, staticmethod):
                    fn = attr.__func__
                    return wrap(tx, fn, member_source(tx, klass, klass_src, name, fn)
                                if isinstance(fn, types.FunctionType) else None)
                if isinstance(attr, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType)):
                    from .builtins import BuiltinVariable
                    from .functions import PartialVariable

                    if BuiltinVariable.can_handle(attr):  # e.g. object.__getattribute__: bound to obj
                        return PartialVariable(BuiltinVariable(attr), [self.obj], {})
                    if BuiltinMethodVariable.can_handle(attr):  # e.g. dict.get of a dict subclass
                        return PartialVariable(BuiltinMethodVariable(attr), [self.obj], {})
                    unsupported("c_function", f"super().{name} implemented in C")
                return wrap(tx, attr, None)
        unsupported("exception", f"AttributeError: 'super' object has no attribute {name!r}")



# Builtin types whose C methods pyjit answers on trackers (the type's own tracker, or the
# builtin-base view of an instance of a user subclass, see UserDefinedObjectVariable).
_BUILTIN_BASES = (dict, collections.OrderedDict, list, tuple, set, frozenset, str, int, float, bool, object)


# dict methods whose result follows the storage order (iteration, copies, popitem, repr).
_STORAGE_ORDERED = frozenset({"keys", "values", "items", "__iter__", "__reversed__", "popitem", "copy", "__repr__",
                              "__str__"})


class BuiltinMethodVariable(VariableTracker):
    """An unbound C method of a builtin type (``dict.get``, ``list.append``, ``str.join``) found on
    a class or through ``super()``: ``dict.get(obj, k)`` runs as ``obj.get(k)`` on the object's
    builtin part (the instance of a dict subclass is viewed as the dict it is)."""

    __slots__ = ("descr",)

    def __init__(self, descr: Any) -> None:
        super().__init__(None)
        self.descr = descr

    @staticmethod
    def can_handle(descr: Any) -> bool:
        return isinstance(descr, (types.MethodDescriptorType, types.WrapperDescriptorType)) \
            and getattr(descr, "__objclass__", None) in _BUILTIN_BASES

    def python_type(self) -> type:
        return type(self.descr)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if not args:
            unsupported("exception", f"TypeError: {self.descr.__qualname__} needs an argument")
        obj, rest = args[0], list(args[1:])
        base = self.descr.__objclass__
        try:
            ptype = obj.python_type()
        except Exception:
            ptype = None
        if ptype is None or not issubclass(ptype, base):
            unsupported("untracked_method", f"{self.descr.__qualname__} on {obj}")
        if base is dict and issubclass(ptype, collections.OrderedDict) and self.descr.__name__ in _STORAGE_ORDERED:
            # dict's own methods walk an OrderedDict's storage, whose order differs from its
            # iteration order after move_to_end; the tracer models only the latter.
            unsupported("untracked_method", f"{self.descr.__qualname__} on an OrderedDict reads its storage order, "
                        "which pyjit does not model; call the OrderedDict's own method instead")
        view = getattr(obj, "builtin_base_view", None)
        target = view(tx, base) if view is not None else obj
        if self.descr.__name__ == "__init__" and base in (dict, collections.OrderedDict, list):
            # ``super().__init__(...)`` of a dict/list subclass: dict.__init__ updates, list.__init__
            # replaces the contents
            if base is list:
                target.call_method(tx, "clear", [], {})
                if rest:
                    target.call_method(tx, "extend", rest[:1], {})
            elif rest or kwargs:
                target.call_method(tx, "update", rest, kwargs)
            return ConstantVariable(None)
        return target.call_method(tx, self.descr.__name__, rest, kwargs)

    def __repr__(self) -> str:
        return f"BuiltinMethodVariable({self.descr.__qualname__})"


class ExceptionVariable(VariableTracker):
    """An exception object built by the traced code (``IndexError("...")``) before ``raise``:
    raising it stops the trace with its type and message, so callers that model Python's
    ``except`` (attribute fallbacks, the sequence iteration protocol) can tell which one it was."""

    __slots__ = ("cls", "args")

    def __init__(self, cls: type, args: list[VariableTracker]) -> None:
        super().__init__(None)
        self.cls = cls
        self.args = args

    @staticmethod
    def can_construct(cls: type) -> bool:
        """Exceptions whose construction runs no Python code (builtin ones and plain subclasses)."""
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            return False
        for name in ("__new__", "__init__"):
            for klass in cls.__mro__:
                if name in klass.__dict__:
                    if isinstance(klass.__dict__[name], (types.FunctionType, staticmethod, classmethod)):
                        return False
                    break
        return True

    def python_type(self) -> type:
        return self.cls

    def is_python_constant(self) -> bool:
        # Its construction runs no Python code (can_construct): with constant arguments the
        # real exception object is equivalent (str(e), e.args, isinstance...).
        return all(a.is_python_constant() for a in self.args)

    def as_python_constant(self) -> Any:
        if not self.is_python_constant():
            return super().as_python_constant()
        return self.cls(*[a.as_python_constant() for a in self.args])

    def raise_text(self) -> str:
        """``IndexError: list index out of range``, as Python prints it."""
        parts = [repr(a.as_python_constant()) if a.is_python_constant() else "..." for a in self.args]
        msg = self.args[0].as_python_constant() if len(self.args) == 1 and self.args[0].is_python_constant() else ", ".join(parts)
        return f"{self.cls.__name__}: {msg}" if self.args else self.cls.__name__

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .lists import TupleVariable

        if name == "args":
            return TupleVariable(list(self.args))
        unsupported("unsupported_attr", f"attribute {name} of an exception object")

    def __repr__(self) -> str:
        return f"ExceptionVariable({self.cls.__name__})"


class CaughtExceptionVariable(ExceptionVariable):
    """An exception raised by an operation while tracing (a missing dict key, an index out of
    range) and caught by a traced ``except``: its class is known, its arguments are not
    modelled, so reading them (``str(e)``, ``e.args``) stops the trace instead of guessing."""

    __slots__ = ()

    def is_python_constant(self) -> bool:
        return False

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        unsupported("unsupported_attr", f"attribute {name} of a caught {self.cls.__name__}")


def raised_exception_text(v: VariableTracker) -> str | None:
    """What ``raise v`` raises, in Python's words, when pyjit knows it (else None)."""
    if isinstance(v, ExceptionVariable):
        return v.raise_text()
    value = getattr(v, "value", None)
    if issubclass(type(value), type) and issubclass(value, BaseException):  # type(): no __class__ read
        return value.__name__
    return None


def raised_exception_type(e: Any) -> str:
    """The exception type name a structured ``exception`` break stands for ("" when unknown)."""
    gb = e.graph_break
    if gb.kind != "exception":
        return ""
    detail = gb.explanation.split(": ", 1)[-1]  # "<kind explanation>: <detail>"
    head = detail.split(":", 1)[0].strip()
    return head if head.isidentifier() else ""


_fallback_log = get_logger("fallbacks")


# torch.utils.checkpoint's own keyword arguments (the rest go to the checkpointed function).
_CHECKPOINT_KWARGS = frozenset({"use_reentrant", "preserve_rng_state", "determinism_check", "debug", "context_fn"})


def _non_reentrant_checkpoint(value: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
                              ) -> "tuple[VariableTracker, dict[str, VariableTracker]] | None":
    """``checkpoint(fn, *args, use_reentrant=False, ...)``: its values and gradients are those of
    ``fn(*args)`` (recomputation only saves memory). The reentrant form is not: its output needs
    no grad when no input does, whatever ``fn``'s parameters need, so it stays a break."""
    module = sys.modules.get("torch.utils.checkpoint")
    if module is None or value is not getattr(module, "checkpoint", None) or not args:
        return None
    reentrant = kwargs.get("use_reentrant")
    if reentrant is None or not reentrant.is_python_constant() or reentrant.as_python_constant() is not False:
        return None
    context_fn = kwargs.get("context_fn")
    if context_fn is not None and not (context_fn.is_python_constant()
                                       and context_fn.as_python_constant() is getattr(module, "noop_context_fn", None)):
        return None
    return args[0], {k: v for k, v in kwargs.items() if k not in _CHECKPOINT_KWARGS}


class DisabledCallVariable(VariableTracker):
    """A ``pyjit.disable``d function or ``pyjit.graph_break``: calling it is a graph break (the
    call then runs natively, outside any graph)."""

    __slots__ = ("value",)

    def __init__(self, value: Any, source: Any = None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        name = getattr(self.value, "__qualname__", None) or repr(self.value)
        checkpointed = _non_reentrant_checkpoint(self.value, args, kwargs)
        if checkpointed is not None:
            fn, fn_kwargs = checkpointed
            where = tx.location()
            _fallback_log.info("torch.utils.checkpoint at %s:%s traced as a plain call of its function: the graph "
                               "keeps its activations for the backward instead of recomputing them",
                               where.filename, where.lineno)
            return fn.call_function(tx, list(args[1:]), fn_kwargs)
        if getattr(self.value, "is_graph_break", False) or name == "graph_break":
            unsupported("user_break", "pyjit.graph_break()" if hasattr(self.value, "is_graph_break")
                        else "torch's graph_break()")
        unsupported("disabled", f"{name} is wrapped by pyjit.disable / torch.compiler.disable")

    def reconstruct(self, cg: Any) -> str:
        return self.source.expr() if self.source is not None else cg.ref(self.value, "disabled")
