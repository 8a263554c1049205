"""Attribute stores, and objects created by the traced code.

:func:`store_attribute` is ``obj.name = value`` / ``setattr`` / ``del obj.name`` for every
tracker: a Python ``__setattr__`` or property setter of the class is inlined; otherwise the
generic store is applied to the symbolic state and, for an object that came from outside (a user
object, an ``nn.Module``), recorded for replay (:mod:`pyjit.trace.side_effects`).

:class:`ObjectVariable` is an instance of a user class constructed inside the trace
(``Cls(...)``: ``__init__`` runs symbolically, ``super().__init__`` and dataclass-generated
``__init__``/``__post_init__`` included). It holds its ``__dict__`` and ``__slots__`` members
as trackers and, for a
``dict``/``OrderedDict`` subclass such as transformers' ``ModelOutput``, its items as a dict
tracker. ``value`` is a blank instance of the class made at trace time, used only for class
lookups (type, MRO, descriptors); it never escapes. When the object escapes (returned, stored into
an outside object, live at a graph break) the replay rebuilds it: ``cls.__new__(cls)``, then its
``__dict__``, slots and items (``set_object_state``), so what the caller gets equals what eager
built. A class without an instance ``__dict__`` (``__slots__`` only) refuses a store to any other
name with the AttributeError Python raises, which a ``try`` in the traced code can catch.
Class members are read through the class's source (guarded like ``Cls.name``).

``nn.Module`` subclasses: a user class runs its ``__init__`` (and torch's ``Module.__init__``)
symbolically as an :class:`ObjectVariable` whose stores follow ``Module.__setattr__``'s routing
(submodules into ``_modules``, buffers kept in ``_buffers``; creating parameters is a break); a
parameter-free ``torch.nn`` class from constants is built for real (:class:`NewModuleVariable`)
and built again by the replay when it escapes.
"""
from __future__ import annotations

import collections
import types
from typing import TYPE_CHECKING, Any

import torch

from ..guards.guards import GuardKind
from ..guards.source import AttrSource, Source
from ..identity import is_one_of, static_attr
from ..trace.graph_breaks import unsupported
from ..trace.side_effects import DELETED, object_token
from .base import VariableTracker
from .class_members import MISSING, lookup_class_attr
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator

# __new__ implementations that make a blank instance and ignore the constructor's arguments.
_PLAIN_NEW = (object.__new__, dict.__new__, list.__new__)
# __init__ implementations of builtin bases that the trace models.
_PLAIN_INIT = (object.__init__, dict.__init__, collections.OrderedDict.__init__, list.__init__)
_GENERIC_SETATTR = (object.__setattr__, torch.nn.Module.__setattr__)
_DICT_BASES = (dict, collections.OrderedDict)
# Builtin bases whose storage an ObjectVariable models (its ``items``).
_STORAGE_BASES = (*_DICT_BASES, list)


def _is_python_function(fn: Any) -> bool:
    return isinstance(fn, types.FunctionType)


# -- attribute stores ------------------------------------------------------------------------
def store_attribute(tx: "Translator", obj: VariableTracker, name: str, value: Any, *, generic: bool = False) -> None:
    """``obj.name = value`` (``value`` is DELETED for ``del obj.name``). ``generic``: the store of
    ``object.__setattr__`` (skips a Python ``__setattr__`` of the class)."""
    from .nn_module import NNModuleVariable
    from .user_defined import UserDefinedObjectVariable

    if isinstance(obj, ObjectVariable):
        obj.store_attr(tx, name, value, generic=generic)
        return
    from .misc import PythonModuleVariable

    if isinstance(obj, PythonModuleVariable):
        obj.store_attr(tx, name, value)
        return
    if not isinstance(obj, (UserDefinedObjectVariable, NNModuleVariable)):
        what = "deleting" if value is DELETED else "assigning"
        unsupported("side_effect", f"{what} the attribute {name!r} of a {_type_name(obj)}")
    cls = type(obj.value)
    if _run_python_setattr(tx, obj, cls, name, value, generic):
        return
    if isinstance(obj, NNModuleVariable):
        params = obj.value.__dict__.get("_parameters", {})
        if name in params:
            unsupported("side_effect", f"assigning the parameter {name!r} of a {cls.__name__} inside the traced code")
    # The replay performs the store the trace modelled: Module's (buffers stay buffers) or object's.
    base = torch.nn.Module if isinstance(obj, NNModuleVariable) and not generic else object
    tx.output.side_effects.store_attr(tx, obj, name, value, base)


def _run_python_setattr(tx: "Translator", obj: VariableTracker, cls: type, name: str, value: Any, generic: bool) -> bool:
    """Inline the class's Python ``__setattr__``/``__delattr__`` (unless ``generic``: the store of
    ``object.__setattr__``) or a property setter; True when done. Also guards that the class keeps
    the store the replay relies on."""
    from .functions import UserFunctionVariable

    hook = "__delattr__" if value is DELETED else "__setattr__"
    setattr_fn = lookup_class_attr(cls, hook)
    cls_src = _class_source(obj)
    if not generic:
        if _is_python_function(setattr_fn) and setattr_fn is not torch.nn.Module.__setattr__ \
                and setattr_fn is not torch.nn.Module.__delattr__:
            from .class_members import call_type_method

            args = [ConstantVariable(name)] if value is DELETED else [ConstantVariable(name), value]
            call_type_method(tx, obj, hook, setattr_fn, args, {})
            return True
        if hook == "__setattr__" and not is_one_of(setattr_fn, _GENERIC_SETATTR) or \
                hook == "__delattr__" and not is_one_of(setattr_fn, (object.__delattr__, torch.nn.Module.__delattr__)):
            unsupported("side_effect", f"{cls.__name__}.{hook} is implemented in C")
        if cls_src is not None and not _is_library_class(cls):
            # The trace modelled this store: the class must keep it.
            tx.output.guards.add(GuardKind.ID_MATCH, AttrSource(cls_src, hook), setattr_fn)
    attr = lookup_class_attr(cls, name)
    if isinstance(attr, property):
        fn = attr.fdel if value is DELETED else attr.fset
        if not _is_python_function(fn):
            unsupported("exception", f"AttributeError: property {name!r} of {cls.__name__!r} cannot be set")
        if cls_src is not None:
            tx.output.guards.add(GuardKind.ID_MATCH, AttrSource(cls_src, name), attr)
        args = [obj] if value is DELETED else [obj, value]
        UserFunctionVariable(fn, None).call_function(tx, args, {})
        return True
    if is_slot(cls, attr):
        # A ``__slots__`` member: the generic store goes through its descriptor (the replay's
        # ``object.__setattr__`` too); the class must keep it.
        if cls_src is not None:
            tx.output.guards.add(GuardKind.ID_MATCH, AttrSource(cls_src, name), attr)
        return False
    if attr is not MISSING and (hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")):
        unsupported("side_effect", f"assigning {cls.__name__}.{name}, a {type(attr).__name__} descriptor")
    if not has_instance_dict(cls):
        # No __dict__ (``__slots__`` only): the generic store raises, as Python does.
        what = "has no attribute" if attr is MISSING else "attribute"
        tail = "" if attr is MISSING else " is read-only"
        unsupported("exception", f"AttributeError: {cls.__name__!r} object {what} {name!r}{tail}")
    if attr is MISSING and cls_src is not None and not _is_library_class(cls):
        # A data descriptor added to the class later would take the store over.
        tx.output.guards.add(GuardKind.HASATTR, cls_src, False, extra=name)
    return False


def is_slot(cls: type, attr: Any) -> bool:
    """``attr`` (found on ``cls``) is a ``__slots__`` member of the class."""
    return isinstance(attr, types.MemberDescriptorType) and attr.__objclass__ in cls.__mro__


def has_instance_dict(cls: type) -> bool:
    """Instances of ``cls`` have a ``__dict__`` (some class of the MRO has no ``__slots__``)."""
    return any("__dict__" in klass.__dict__ for klass in cls.__mro__)


def _type_name(obj: VariableTracker) -> str:
    """What the user calls the value (``Tensor``, ``module``), not the tracker class."""
    try:
        return obj.python_type().__name__
    except Exception:
        return "value"


def _class_source(obj: VariableTracker) -> Source | None:
    if isinstance(obj, ObjectVariable):
        return obj.cls_source
    return AttrSource(obj.source, "__class__") if obj.source is not None else None


def _is_library_class(cls: type) -> bool:
    mod = getattr(cls, "__module__", "") or ""
    return mod in ("builtins", "collections") or mod == "torch" or mod.startswith("torch.")


# -- construction ----------------------------------------------------------------------------
def construct(tx: "Translator", cls_var: VariableTracker, args: list[VariableTracker],
              kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``cls(*args, **kwargs)`` for a user class: a new :class:`ObjectVariable` whose
    ``__init__`` runs symbolically."""
    cls: type = cls_var.value  # type: ignore[attr-defined]
    if lookup_class_attr(type(cls), "__call__") is not type.__call__:
        # type.__call__ is what runs __new__ then __init__ below (a metaclass may override it)
        unsupported("object_construction", f"constructing {cls.__name__}, whose metaclass {type(cls).__name__} defines __call__")
    if issubclass(cls, torch.nn.Module) and (cls.__module__ or "").startswith("torch.nn."):
        return _construct_module(tx, cls, args, kwargs)
    from .builtin_subclass import construct_builtin_subclass

    immutable = construct_builtin_subclass(tx, cls, args, kwargs, cls_var.source)  # MyInt(3), MyTuple((x, y))
    if immutable is not None:
        return immutable
    new = lookup_class_attr(cls, "__new__")
    new = new.__func__ if type(new) in (staticmethod, classmethod) else new
    if not is_one_of(new, _PLAIN_NEW):
        unsupported("object_construction", f"constructing {cls.__name__} (its own __new__)")
    if lookup_class_attr(cls, "__del__") is not MISSING:
        # the blank instance made for class lookups would run it when collected
        unsupported("object_construction", f"constructing {cls.__name__} (it defines __del__)")
    for base in cls.__mro__[1:]:
        if base not in (object, dict, collections.OrderedDict, list) and base.__module__ == "builtins":
            unsupported("object_construction", f"constructing {cls.__name__}, a subclass of {base.__name__}")
    obj = ObjectVariable(cls, cls_var.source)
    tx.output.side_effects.created.append(obj)
    init = lookup_class_attr(cls, "__init__")
    if _is_python_function(init):
        obj.call_method(tx, "__init__", args, kwargs)
    elif is_one_of(init, _PLAIN_INIT):
        if init is object.__init__:
            if args or kwargs:
                unsupported("exception", f"TypeError: {cls.__name__}() takes no arguments")
        elif init is list.__init__:
            if kwargs or len(args) > 1:
                unsupported("exception", f"TypeError: {cls.__name__}() takes at most 1 argument")
            if args:
                obj.dict_view().call_method(tx, "extend", args, {})
        else:
            obj.dict_view().call_method(tx, "update", args, kwargs)
    else:
        unsupported("c_function", f"constructing {cls.__name__} (__init__ implemented in C)")
    return obj


def compare_objects(tx: "Translator", op: Any, a: VariableTracker, b: VariableTracker) -> VariableTracker | None:
    """``a == b`` / ``a != b`` where one side is an object built by the trace: its class's Python
    ``__eq__``/``__ne__`` (reflected when the left side has none or returns NotImplemented), as
    Python does; None to fall back to identity (no comparison methods beyond ``object``'s)."""
    import operator

    name, reflected = ("__eq__", "__eq__") if op is operator.eq else ("__ne__", "__ne__")
    for x, y in ((a, b), (b, a)):
        if not isinstance(x, ObjectVariable):
            continue
        fn = lookup_class_attr(x.cls, name)
        if fn is getattr(object, name) and name == "__ne__":
            fn = lookup_class_attr(x.cls, "__eq__")  # object.__ne__ inverts __eq__
            if _is_python_function(fn):
                result = x.call_method(tx, "__eq__", [y], {})
                if not (result.is_python_constant() and result.as_python_constant() is NotImplemented):
                    return ConstantVariable(not result.truth(tx))
                continue
        if _is_python_function(fn):
            result = x.call_method(tx, name, [y], {})
            if not (result.is_python_constant() and result.as_python_constant() is NotImplemented):
                return result
        elif fn is not getattr(object, name):
            unsupported("c_function", f"comparing a {x.cls.__name__} with {name} implemented in C")
    return None


def _construct_module(tx: "Translator", cls: type, args: list[VariableTracker],
                      kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``nn.ReLU()``, ``nn.Dropout(p)`` in ``forward``: a torch.nn module without parameters or
    buffers, from constant arguments, is built for real now (its constructor is torch's and
    deterministic) and, if it escapes, built again by the replay with the same arguments."""

    if not (cls.__module__ or "").startswith("torch.nn."):
        unsupported("object_construction", f"constructing the module {cls.__name__} inside the traced code")
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        unsupported("object_construction", f"constructing {cls.__name__} from values that are not constants")
    const_args = tuple(a.as_python_constant() for a in args)
    const_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
    rng = torch.get_rng_state()  # tracing must not consume random numbers (parameter init)
    try:
        module = cls(*const_args, **const_kwargs)
    except Exception as e:
        unsupported("exception", f"{type(e).__name__} constructing {cls.__name__}: {e}")
    finally:
        torch.set_rng_state(rng)
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        # eager makes new (randomly initialised) tensors on every call
        unsupported("object_construction", f"constructing {cls.__name__}, which has parameters or buffers, inside the traced code")
    var = NewModuleVariable(module, None)
    var.args, var.kwargs = const_args, const_kwargs
    return var


def _new_module_variable_class() -> type:
    from .nn_module import NNModuleVariable

    class NewModuleVariable(NNModuleVariable):
        """A module built by :func:`_construct_module` (no source: its attributes are constants of
        the trace; storing into it is a ``side_effect`` break)."""

        __slots__ = ("args", "kwargs")

        def reconstruct(self, cg: "OutputCodegen") -> str:
            return object_token(cg, self)

        def __repr__(self) -> str:
            return f"NewModuleVariable({type(self.value).__name__})"

    return NewModuleVariable


class ObjectVariable(VariableTracker):
    """An instance of a user class created inside the trace (see module docstring)."""

    __slots__ = ("cls", "cls_source", "value", "attrs", "items")

    def __init__(self, cls: type, cls_source: Source | None) -> None:
        super().__init__(None)
        self.cls = cls
        self.cls_source = cls_source
        self.value = cls.__new__(cls)  # blank, for class lookups only (never escapes)
        self.attrs: dict[str, VariableTracker] = {}
        self.items: Any = None  # DictVariable for dict subclasses (created on first use)

    def python_type(self) -> type:
        return self.cls

    def dict_view(self) -> Any:
        """The builtin storage of a dict or list subclass: a dict or list tracker."""
        from .dicts import DictVariable
        from .lists import ListVariable

        if issubclass(self.cls, list):
            if self.items is None:
                self.items = ListVariable([])
            return self.items
        if not issubclass(self.cls, dict):
            unsupported("untracked_method", f"dict methods on a {self.cls.__name__}")
        if self.items is None:
            # an OrderedDict subclass keeps OrderedDict's methods (move_to_end) on its view
            base = collections.OrderedDict if issubclass(self.cls, collections.OrderedDict) else dict
            self.items = DictVariable({}, None, dict_type=base)
        return self.items

    def builtin_base_view(self, tx: "Translator", base: type) -> VariableTracker:
        if base is object:
            return self
        return self.dict_view()

    # -- attributes -----------------------------------------------------------------------
    def _class_var(self, tx: "Translator") -> VariableTracker:
        from .user_defined import UserDefinedClassVariable

        return UserDefinedClassVariable(self.cls, self.cls_source)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        getattribute = lookup_class_attr(self.cls, "__getattribute__")
        if _is_python_function(getattribute):
            return self._with_getattr_fallback(tx, name, lambda: self.call_method(
                tx, "__getattribute__", [ConstantVariable(name)], {}))
        return self._with_getattr_fallback(tx, name, lambda: self.generic_getattr(tx, name))

    def _with_getattr_fallback(self, tx: "Translator", name: str, lookup: Any) -> VariableTracker:
        from ..errors import Unsupported

        if not _is_python_function(lookup_class_attr(self.cls, "__getattr__")):
            return lookup()
        try:
            return lookup()
        except Unsupported as e:
            gb = e.graph_break
            if not (gb.kind == "exception" and gb.explanation.startswith("AttributeError")):
                raise
        return self.call_method(tx, "__getattr__", [ConstantVariable(name)], {})

    def generic_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        """``object.__getattribute__``: data descriptors, the instance ``__dict__``, the class."""
        from .builder import wrap
        from .functions import UserFunctionVariable, UserMethodVariable

        attr = lookup_class_attr(self.cls, name)
        if name == "__dict__" and not has_instance_dict(self.cls):
            unsupported("exception", f"AttributeError: {self.cls.__name__!r} object has no attribute '__dict__'")
        if is_slot(self.cls, attr):  # a __slots__ member: the value the trace stored, if any
            value = self.attrs.get(name, DELETED)
            if value is DELETED:
                unsupported("exception", f"AttributeError: {self.cls.__name__!r} object has no attribute {name!r}")
            return value
        if name == "__dict__":
            from .dicts import DictVariable

            view = DictVariable({})
            view.items = self.attrs  # the same dict: ``self.__dict__.update(...)`` sets attributes
            return view
        if name == "__class__":
            return self._class_var(tx)
        if isinstance(attr, property):
            src = self._guard_member(tx, name, attr)
            if not _is_python_function(attr.fget):
                unsupported("unsupported_attr", f"property {name} implemented in C")
            return UserFunctionVariable(attr.fget, AttrSource(src, "fget") if src else None).call_function(tx, [self], {})
        if name in self.attrs and not (hasattr(type(attr), "__set__") and attr is not MISSING):
            value = self.attrs[name]
            if value is DELETED:
                unsupported("exception", f"AttributeError: {self.cls.__name__!r} object has no attribute {name!r}")
            return value
        if _is_python_function(attr):
            return UserMethodVariable(attr, self, fn_source=self._guard_member(tx, name, attr))
        if isinstance(attr, classmethod) and _is_python_function(attr.__func__):
            src = None
            if self.cls_source is not None and not _is_library_class(self.cls):
                src = AttrSource(AttrSource(self.cls_source, name), "__func__")
                tx.output.guards.add(GuardKind.ID_MATCH, src, attr.__func__)
            return UserMethodVariable(attr.__func__, self._class_var(tx), fn_source=src)
        if isinstance(attr, staticmethod):
            src = self.cls_source and AttrSource(self.cls_source, name)
            return wrap(tx, attr.__func__, src)
        if attr is MISSING and self.is_module():
            member = self._module_member(name)
            if member is not None:
                return member
        if attr is MISSING:
            unsupported("exception", f"AttributeError: {self.cls.__name__!r} object has no attribute {name!r}")
        if isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType)):
            from .base import BoundMethodVariable

            return BoundMethodVariable(self, name)  # a C method of dict/object: call_method answers
        return wrap(tx, getattr(self.cls, name), AttrSource(self.cls_source, name) if self.cls_source else None)

    def _guard_member(self, tx: "Translator", name: str, attr: Any) -> Source | None:
        """The class member the trace used stays that object (``Cls.name is attr``)."""
        if self.cls_source is None or _is_library_class(self.cls):
            return None
        src = AttrSource(self.cls_source, name)
        raw = getattr(self.cls, name, None)
        tx.output.guards.add(GuardKind.ID_MATCH, src, raw)
        return src

    def store_attr(self, tx: "Translator", name: str, value: Any, *, generic: bool = False) -> None:
        if _run_python_setattr(tx, self, self.cls, name, value, generic):
            return
        if not generic and self.is_module() and self._module_store(name, value):
            return
        if value is DELETED and name not in self.attrs:
            unsupported("exception", f"AttributeError: {name}")
        self.attrs[name] = value

    # -- nn.Module subclasses built by the trace ---------------------------------------------
    def is_module(self) -> bool:
        return issubclass(self.cls, torch.nn.Module)

    def _module_dict(self, name: str) -> Any:
        d = self.attrs.get(name)
        if d is None or not hasattr(d, "items") or not isinstance(d.items, dict):
            unsupported("exception", "AttributeError: cannot assign module attributes before Module.__init__() call")
        return d.items

    def _module_store(self, name: str, value: Any) -> bool:
        """``Module.__setattr__``'s routing (submodules into ``_modules``, tensors into
        ``_buffers`` when the name is a buffer); True when done. Parameters are not modelled."""
        from .nn_module import NNModuleVariable
        from .tensor import TensorVariable

        if value is DELETED:
            for dict_name in ("_parameters", "_buffers", "_modules"):
                d = self._module_dict(dict_name)
                if name in d:
                    del d[name]
                    return True
            return False
        params, buffers, modules = (self._module_dict(n) for n in ("_parameters", "_buffers", "_modules"))
        if name in params or isinstance(value, TensorVariable) and issubclass(value.python_type(), torch.nn.Parameter):
            unsupported("object_construction", f"parameters of a {self.cls.__name__} built inside the traced code")
        if isinstance(value, NNModuleVariable) or isinstance(value, ObjectVariable) and value.is_module():
            self.attrs.pop(name, None)
            buffers.pop(name, None)
            modules[name] = value
            return True
        if name in modules:
            if not (isinstance(value, ConstantVariable) and value.value is None):
                unsupported("exception", f"TypeError: cannot assign a non-module as child module {name!r}")
            modules[name] = value
            return True
        if name in buffers:
            buffers[name] = value
            return True
        return False

    def _module_member(self, name: str) -> VariableTracker | None:
        """``Module.__getattr__``: parameters, buffers and submodules."""
        for dict_name in ("_parameters", "_buffers", "_modules"):
            d = self.attrs.get(dict_name)
            if d is not None and isinstance(getattr(d, "items", None), dict) and name in d.items:
                return d.items[name]
        return None

    # -- calls ----------------------------------------------------------------------------
    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        attr = lookup_class_attr(self.cls, name)
        if name in self.attrs and not name.startswith("__"):
            # an instance attribute shadows a method of the class (dunders are looked up on the type)
            return self.var_getattr(tx, name).call_function(tx, args, kwargs)
        if _is_python_function(attr):
            from .functions import UserMethodVariable

            return UserMethodVariable(attr, self, fn_source=self._guard_member(tx, name, attr)).call_function(tx, args, kwargs)
        if name in ("__setattr__", "__delattr__") and attr in (object.__setattr__, object.__delattr__):
            store_attribute(tx, self, args[0].as_python_constant(), args[1] if name == "__setattr__" else DELETED, generic=True)
            return ConstantVariable(None)
        if name == "__init__" and attr is object.__init__:
            return ConstantVariable(None)
        if issubclass(self.cls, _STORAGE_BASES) and is_one_of(static_attr(attr, "__objclass__"), _STORAGE_BASES):
            view = self.dict_view()
            if name == "__getitem__" and issubclass(self.cls, dict) and len(args) == 1 \
                    and _is_python_function(lookup_class_attr(self.cls, "__missing__")) \
                    and not view.call_method(tx, "__contains__", args, {}).as_python_constant():
                return self.call_method(tx, "__missing__", args, {})  # dict.__getitem__ calls it (Counter)
            return view.call_method(tx, name, args, kwargs)
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if self.is_module() and lookup_class_attr(self.cls, "__call__") is torch.nn.Module.__call__:
            # Module.__call__ of a module built here: no hooks of its own; global ones guarded absent
            from .nn_module import _guard_no_hooks, _has_hooks

            blank_hooks_free = torch.nn.Module()
            if _has_hooks(blank_hooks_free):
                unsupported("hooks", "global module hooks are installed")
            _guard_no_hooks(tx, self)  # type: ignore[arg-type]
            return self.call_method(tx, "forward", args, kwargs)
        if not _is_python_function(lookup_class_attr(self.cls, "__call__")):
            unsupported("exception", f"TypeError: {self.cls.__name__!r} object is not callable")
        return self.call_method(tx, "__call__", args, kwargs)

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        from .user_defined import iterate_by_index, iterates_by_index

        if iterates_by_index(self.cls):  # the sequence protocol (obj[0], obj[1], ... until IndexError)
            return iterate_by_index(tx, self)
        if _is_python_function(lookup_class_attr(self.cls, "__iter__")):
            from .user_ops import unpack_iterator

            return unpack_iterator(tx, self.call_method(tx, "__iter__", [], {}))
        if issubclass(self.cls, _STORAGE_BASES):
            return self.dict_view().unpack(tx)
        # Not an `exception` break: a C-level __iter__ pyjit cannot follow is not a TypeError.
        unsupported("unsupported_object", f"iterating over a {self.cls.__name__} object")

    def truth(self, tx: "Translator") -> bool:
        for hook in ("__bool__", "__len__"):
            fn = lookup_class_attr(self.cls, hook)
            if _is_python_function(fn):
                result = self.call_method(tx, hook, [], {})
                return bool(result.as_python_constant())
        if issubclass(self.cls, _STORAGE_BASES):
            return self.dict_view().truth(tx)
        return True

    # -- replay ---------------------------------------------------------------------------
    def reconstruct(self, cg: "OutputCodegen") -> str:
        return object_token(cg, self)

    def state_texts(self, cg: "OutputCodegen", text: Any) -> list[str]:
        """The ``__dict__`` display and the items display (or None) for ``set_object_state``."""
        attrs = "{" + ", ".join(f"{cg.constant(k)}: {text(v)}" for k, v in self.attrs.items() if v is not DELETED) + "}"
        if self.items is None:
            return [attrs, cg.constant(None) if issubclass(self.cls, dict) is False else "{}"]
        from .identity_keys import key_text

        if issubclass(self.cls, list):
            return [attrs, "[" + ", ".join(text(v) for v in self.items.items) + "]"]
        items = "{" + ", ".join(f"{key_text(cg, k)}: {text(v)}" for k, v in self.items.items.items()) + "}"
        return [attrs, items]

    def __repr__(self) -> str:
        return f"ObjectVariable({self.cls.__name__})"


NewModuleVariable = _new_module_variable_class()
