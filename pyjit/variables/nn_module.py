"""``torch.nn.Module`` instances: attribute reads, submodule calls inlined through ``forward``,
parameters and buffers as graph inputs (so in-place optimizer updates are seen on every call).

A module reached through a source is guarded by identity and type (``__class__`` can be
assigned on a live object). Its parameters/buffers/children are
reached through ``ModuleDictSource`` (``L['self'].fc.weight``, read from ``_parameters`` by the
replacement code); plain attributes (``self.scale``, ``self.training``) are wrapped by the builder,
which guards them by value. Methods, properties, ``forward`` and ``__call__`` found on the class are
guarded where they are found (``pyjit/variables/class_members.py``).
"""
from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

import torch

from ..guards.source import AttrSource, ModuleDictSource, Source
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .class_members import MISSING as _MISSING
from .class_members import (class_member, class_source, guard_identity, guard_not_shadowed, member_source,
                            shared_class_source)
from .class_members import lookup_class_attr as _lookup_class_attr
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator


def _only_forward_hooks(m: torch.nn.Module) -> bool:
    """Only module-level forward (pre-)hooks: no backward hooks, no global hooks of any kind."""
    from torch.nn.modules import module as _mod

    if getattr(m, "_backward_hooks", None) or getattr(m, "_backward_pre_hooks", None):
        return False
    return not any(getattr(_mod, name, None) for name in _GLOBAL_HOOK_DICTS)


def _has_hooks(m: torch.nn.Module) -> bool:
    if m._forward_hooks or m._forward_pre_hooks or getattr(m, "_backward_hooks", None) or getattr(m, "_backward_pre_hooks", None):
        return True
    from torch.nn.modules import module as _mod

    return bool(_mod._global_forward_hooks or _mod._global_forward_pre_hooks or _mod._global_backward_hooks
                or getattr(_mod, "_global_backward_pre_hooks", None))


class NNModuleVariable(VariableTracker):
    __slots__ = ("value",)

    def __init__(self, value: torch.nn.Module, source: Source | None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def _child_source(self, dict_name: str, key: str) -> Source | None:
        return ModuleDictSource(self.source, dict_name, key) if self.source is not None else None

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .builder import wrap

        m = self.value
        d = m.__dict__
        if name == "__class__":
            return wrap(tx, type(m), class_source(self.source))
        # Python's order: data descriptors of the class (properties), the instance __dict__, other
        # class attributes; only then Module.__getattr__ (parameters, buffers, children).
        cls_attr = _lookup_class_attr(type(m), name)
        if isinstance(cls_attr, property):
            member = class_member(tx, self, name, cls_attr)
            assert member is not None
            return member
        if name in d:
            return wrap(tx, d[name], AttrSource(self.source, name) if self.source is not None else None)
        if cls_attr is _MISSING:
            for dict_name in ("_parameters", "_buffers", "_modules"):
                if dict_name in d and name in d[dict_name]:
                    return wrap(tx, d[dict_name][name], self._child_source(dict_name, name))
        if (name in _TRACKED_METHODS or (isinstance(m, torch.nn.ModuleDict) and name in ("keys", "values", "items"))) \
                and not _user_overrides(type(m), name):
            from .base import BoundMethodVariable

            guard_not_shadowed(tx, self, name)
            return BoundMethodVariable(self, name)
        if cls_attr is _MISSING:
            unsupported("exception", f"AttributeError: {type(m).__name__} has no attribute {name!r}")
        member = class_member(tx, self, name, cls_attr)
        if member is not None:
            return member
        # class-level constants (e.g. __constants__, a default stored on the class)
        return wrap(tx, getattr(m, name), AttrSource(self.source, name) if self.source is not None else None)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        m = self.value
        if "torch.distributed" in sys.modules:
            from ..distributed.fsdp import break_reason

            fsdp = break_reason(m)
            if fsdp is not None:
                unsupported("distributed", fsdp)
        if m.__dict__.get("training") is True:  # the instance attribute, no user code
            tx.output.module_in_training = True
        if _uninitialised_lazy(m):
            _initialize_lazy(tx, m, args, kwargs)
            if self.source is not None:
                # The type guard was taken when the module was read, before this call switched
                # its class: later calls meet the final class, which the rest was traced with.
                from ..guards.guards import GuardKind

                try:
                    tx.output.guards.replace_expected(GuardKind.TYPE_MATCH, self.source, type(m))
                except KeyError:
                    pass
        if _has_hooks(m):
            if not _only_forward_hooks(m) or self.source is None \
                    or _lookup_class_attr(type(m), "__call__") is not _MODULE_CALL:
                unsupported("hooks", f"{type(m).__name__} has hooks (backward or global hooks, or a hooked "
                                     f"module pyjit cannot guard)")
            return self._call_with_forward_hooks(tx, args, kwargs)
        call = _lookup_class_attr(type(m), "__call__")
        if call is not _MODULE_CALL:
            if not isinstance(call, types.FunctionType):
                unsupported("c_function", f"{type(m).__name__}.__call__ is not a Python function")
            from .class_members import call_type_method

            return call_type_method(tx, self, "__call__", call, args, kwargs)
        if self.source is not None and not _is_library_class(type(m)):
            # Module.__call__ runs forward: a user class could still get its own __call__ later.
            guard_identity(tx, shared_class_source(tx, type(m), class_source(self.source), "__call__"), _MODULE_CALL)
        forward = _lookup_class_attr(type(m), "forward")
        if "forward" in m.__dict__:
            unsupported("introspection", f"{type(m).__name__} instance has its own forward attribute")
        if not isinstance(forward, types.FunctionType):
            unsupported("c_function", f"{type(m).__name__}.forward is not a Python function")
        _guard_no_hooks(tx, self)
        return self._inline_forward(tx, forward, args, kwargs)

    def _inline_forward(self, tx: "Translator", forward: types.FunctionType, args: list[VariableTracker],
                        kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .functions import UserFunctionVariable

        m = self.value
        guard_not_shadowed(tx, self, "forward")  # `model.act.forward = ...` after compiling
        src = guard_identity(tx, member_source(tx, type(m), class_source(self.source), "forward", forward), forward)
        return UserFunctionVariable(forward, src).call_function(tx, [self, *args], kwargs)

    def _call_with_forward_hooks(self, tx: "Translator", args: list[VariableTracker],
                                 kwargs: dict[str, VariableTracker]) -> VariableTracker:
        """``Module.__call__`` with forward pre-hooks and forward hooks, in ``_call_impl``'s order:
        each pre-hook may replace the positional args (or, registered ``with_kwargs``, args and
        kwargs), then forward, then each hook may replace the result. The hook dicts' keys are
        guarded (a hook added or removed retraces) and each hook by identity; the hooks
        themselves are traced like any user function (their side effects are replayed)."""
        from ..guards.guards import GuardKind
        from .builder import wrap
        from .dicts import DictVariable
        from .lists import TupleVariable

        m = self.value
        assert self.source is not None
        forward = _lookup_class_attr(type(m), "forward")
        if "forward" in m.__dict__ or not isinstance(forward, types.FunctionType):
            unsupported("c_function", f"{type(m).__name__}.forward is not a plain Python method")
        guards = tx.output.guards
        from torch.nn.modules import module as _mod

        from ..guards.source import ModuleGlobalSource
        for name in ("_backward_hooks", "_backward_pre_hooks"):
            if name in m.__dict__:
                guards.add(GuardKind.LEN_MATCH, AttrSource(self.source, name), 0)
        for name in _GLOBAL_HOOK_DICTS:
            if hasattr(_mod, name):
                guards.add(GuardKind.LEN_MATCH, ModuleGlobalSource(_mod.__name__, name), 0)

        def hooks(name: str) -> DictVariable:
            var = wrap(tx, getattr(m, name), AttrSource(self.source, name))
            if not isinstance(var, DictVariable):
                unsupported("hooks", f"{type(m).__name__}.{name} is not a plain dict")
            return var

        def is_none(v: VariableTracker) -> bool:
            return v.is_python_constant() and v.as_python_constant() is None

        # Only forward, and only without forward hooks after it, returns the call's result: a
        # break inside a pre-hook must not resume there as if it were (translator.call_instruction).
        direct = tx.direct_call_pending and not m.__dict__.get("_forward_hooks")
        tx.direct_call_pending = False
        pre, pre_kw = hooks("_forward_pre_hooks"), hooks("_forward_pre_hooks_with_kwargs")
        args, kwargs = list(args), dict(kwargs)
        for hook_id, hook in pre.items.items():
            if hook_id in pre_kw.items:
                res = hook.call_function(tx, [self, TupleVariable(list(args)), DictVariable(dict(kwargs))], {})
                if not is_none(res):
                    if not isinstance(res, TupleVariable) or len(res.items) != 2 \
                            or not isinstance(res.items[1], DictVariable):
                        unsupported("hooks", "a forward pre-hook with kwargs returned something other than "
                                             "(args, kwargs)")
                    args = list(res.items[0].unpack(tx))
                    kwargs = {str(k): v for k, v in res.items[1].items.items()}
            else:
                res = hook.call_function(tx, [self, TupleVariable(list(args))], {})
                if not is_none(res):
                    args = list(res.items) if isinstance(res, TupleVariable) else [res]
        tx.direct_call_pending = direct
        out = self._inline_forward(tx, forward, args, kwargs)
        tx.direct_call_pending = False
        post, post_kw = hooks("_forward_hooks"), hooks("_forward_hooks_with_kwargs")
        for hook_id, hook in post.items.items():
            if hook_id in post_kw.items:
                res = hook.call_function(tx, [self, TupleVariable(list(args)), DictVariable(dict(kwargs)), out], {})
            else:
                res = hook.call_function(tx, [self, TupleVariable(list(args)), out], {})
            if not is_none(res):
                out = res
        return out

    def _guard_keys(self, tx: "Translator", dict_name: str) -> None:
        """The trace used which entries ``_modules``/``_parameters``/``_buffers`` has (a length, an
        iteration, an index): guard the key list (``layers.append(...)`` after compiling)."""
        from ..guards.guards import GuardKind, dict_keys_expected

        if self.source is None:
            return
        d = getattr(self.value, dict_name)
        src = AttrSource(self.source, dict_name)
        # no TYPE_MATCH: ModuleList.__delitem__ swaps the dict for an OrderedDict, same keys
        tx.output.guards.add(GuardKind.DICT_KEYS, src, *dict_keys_expected(d))

    def _container_dict(self) -> str | None:
        """The dict a torch container's len/iteration/indexing follow (None for other modules)."""
        m = self.value
        if isinstance(m, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)):
            return "_modules"
        if isinstance(m, (torch.nn.ParameterList, torch.nn.ParameterDict)):
            return "_parameters"
        return None

    def _len(self, tx: "Translator") -> int:
        m = self.value
        dict_name = self._container_dict()
        if dict_name is None or _user_overrides(type(m), "__len__"):
            unsupported("introspection", f"len() of a {type(m).__name__} (its own __len__)")
        self._guard_keys(tx, dict_name)
        return len(m)  # type: ignore[arg-type]

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        m = self.value
        if name == "__len__" and hasattr(m, "__len__"):
            return ConstantVariable(self._len(tx))
        if name == "__getitem__" and isinstance(m, (torch.nn.Sequential, torch.nn.ModuleList)):
            key = args[0].as_python_constant()
            self._guard_keys(tx, "_modules")  # which child index `key` names
            keys = list(m._modules.keys())
            if isinstance(key, slice):
                # m[a:b] builds a new container of the same children: tracked as their list
                return ModuleSliceVariable([self.var_getattr(tx, k) for k in keys[key]], self, key)
            return self.var_getattr(tx, keys[key])
        if name == "__getitem__" and isinstance(m, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
            return self.var_getattr(tx, args[0].as_python_constant())
        if name == "__getitem__" and isinstance(m, torch.nn.ParameterList):
            self._guard_keys(tx, "_parameters")
            return self.var_getattr(tx, str(range(len(m))[args[0].as_python_constant()]))
        if isinstance(m, torch.nn.ModuleDict) and name in ("keys", "values", "items"):
            from .lists import ListVariable, TupleVariable

            self._guard_keys(tx, "_modules")
            keys = list(m._modules.keys())
            if name == "keys":
                return ListVariable([ConstantVariable(k) for k in keys])
            vals = [self.var_getattr(tx, k) for k in keys]
            if name == "values":
                return ListVariable(vals)
            return ListVariable([TupleVariable([ConstantVariable(k), v]) for k, v in zip(keys, vals)])
        if name in ("parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children", "modules") \
                or (name == "named_modules" and not args and not kwargs):
            from .lists import ListIteratorVariable

            # These are generators: ``next(m.parameters())`` (the ``dtype``/``device`` properties
            # of model libraries) works on them, indexing does not.
            return ListIteratorVariable(self._enumerate(tx, name, args, kwargs).items)
        if name == "__contains__" and isinstance(m, torch.nn.ModuleDict):
            self._guard_keys(tx, "_modules")
            return ConstantVariable(args[0].as_python_constant() in m._modules)
        return super().call_method(tx, name, args, kwargs)

    def _enumerate(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .lists import ListVariable, TupleVariable

        m = self.value
        out: list[VariableTracker] = []
        if name in ("children", "named_children"):
            self._guard_keys(tx, "_modules")
            for k in m._modules:
                v = self.var_getattr(tx, k)
                out.append(TupleVariable([ConstantVariable(k), v]) if name.startswith("named") else v)
            return ListVariable(out)
        if name in ("parameters", "named_parameters", "buffers", "named_buffers"):
            dict_name = "_parameters" if "param" in name else "_buffers"
            recurse = kwargs["recurse"].as_python_constant() if "recurse" in kwargs else True
            members: set[int] = set()  # a tensor held twice (tied weights) is listed once, as in torch
            for prefix, sub, sub_var in self._walk(tx, recurse):
                sub_var._guard_keys(tx, dict_name)
                for k, member in getattr(sub, dict_name).items():
                    v = sub_var.var_getattr(tx, k)  # a None entry is guarded to stay None
                    if isinstance(v, ConstantVariable) and v.value is None:
                        continue
                    if id(member) in members:
                        continue
                    members.add(id(member))
                    out.append(TupleVariable([ConstantVariable(prefix + k), v]) if name.startswith("named") else v)
            return ListVariable(out)
        if name == "modules":
            return ListVariable([sv for _, _, sv in self._walk(tx, True)])
        if name == "named_modules" and not args and not kwargs:
            return ListVariable([TupleVariable([ConstantVariable(p[:-1]), sv]) for p, _, sv in self._walk(tx, True)])
        unsupported("untracked_method", f"Module.{name}")

    def _walk(self, tx: "Translator", recurse: bool) -> list[tuple[str, torch.nn.Module, "NNModuleVariable"]]:
        """The modules ``named_modules()`` yields, in its order (depth first, each module
        before its children, a module reached twice only the first time), with prefixes
        ending in a dot ("" for this module)."""
        result = [("", self.value, self)]
        if not recurse:
            return result
        seen = {id(self.value)}

        def visit(prefix: str, mod: torch.nn.Module, var: "NNModuleVariable") -> None:
            var._guard_keys(tx, "_modules")
            for k, child in mod._modules.items():
                if child is None or id(child) in seen:
                    continue
                seen.add(id(child))
                cv = var.var_getattr(tx, k)
                assert isinstance(cv, NNModuleVariable)
                result.append((prefix + k + ".", child, cv))
                visit(prefix + k + ".", child, cv)

        visit("", self.value, self)
        return result

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        m = self.value
        dict_name = self._container_dict()
        if dict_name is not None and not _user_overrides(type(m), "__iter__"):
            self._guard_keys(tx, dict_name)
        if isinstance(m, (torch.nn.Sequential, torch.nn.ModuleList)):
            return [self.var_getattr(tx, k) for k in m._modules]
        if isinstance(m, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k in m._modules]
        if isinstance(m, torch.nn.ParameterList):
            return [self.var_getattr(tx, k) for k in m._parameters]
        unsupported("unsupported_object", f"iterating over {type(m).__name__}")

    def truth(self, tx: "Translator") -> bool:
        if _user_overrides(type(self.value), "__bool__"):
            unsupported("introspection", f"truth value of a {type(self.value).__name__} (its own __bool__)")
        if hasattr(self.value, "__len__"):
            return self._len(tx) > 0
        return True

    def __repr__(self) -> str:
        return f"NNModuleVariable({type(self.value).__name__})"


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOK_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                      "_global_backward_pre_hooks")


def _uninitialised_lazy(m: torch.nn.Module) -> bool:
    """A lazy module (``nn.LazyLinear``...) before its first call. Every lazy module class comes
    from ``torch.nn.modules.lazy``; when it was never imported, no such module exists."""
    lazy = sys.modules.get("torch.nn.modules.lazy")
    mixin = getattr(lazy, "LazyModuleMixin", None)
    return mixin is not None and isinstance(m, mixin) and bool(m.has_uninitialized_params())


def _initialize_lazy(tx: "Translator", m: torch.nn.Module, args: list[VariableTracker],
                     kwargs: dict[str, VariableTracker]) -> None:
    """The first call of a lazy module (``nn.LazyLinear``...): its pre-hook
    (``_infer_parameters``) is run for real, as eager's first call runs it, with the fake
    example inputs (only their shapes are read): the parameters are materialised and
    initialised, the hook removed and the class switched (``LazyLinear`` -> ``Linear``). The
    trace then calls the initialised module."""
    from .tensor import TensorVariable

    def example(v: VariableTracker) -> Any:
        if isinstance(v, TensorVariable):
            return v.example
        if v.is_python_constant():
            return v.as_python_constant()
        unsupported("object_construction", f"initialising lazy {type(m).__name__} with a {v} argument")

    fake_args = tuple(example(a) for a in args)
    fake_kwargs = {k: example(v) for k, v in kwargs.items()}
    if any(isinstance(s, torch.SymInt) for a in fake_args if isinstance(a, torch.Tensor) for s in a.shape):
        unsupported("object_construction", f"initialising lazy {type(m).__name__} from a dynamic-shape input")
    with torch.no_grad():
        if fake_kwargs:
            m._infer_parameters(m, fake_args, fake_kwargs)  # type: ignore[operator]
        else:
            m._infer_parameters(m, fake_args)  # type: ignore[operator]


def _guard_no_hooks(tx: "Translator", var: "NNModuleVariable") -> None:
    """The call was inlined because the module had no hooks: guard that it still has none
    (hooks added to a submodule after compiling must not be skipped silently)."""
    from torch.nn.modules import module as _mod

    from ..guards.guards import GuardKind
    from ..guards.source import ModuleGlobalSource

    guards = tx.output.guards
    if var.source is not None:
        for name in _HOOK_DICTS:
            if name in var.value.__dict__:
                guards.add(GuardKind.LEN_MATCH, AttrSource(var.source, name), 0)
    for name in _GLOBAL_HOOK_DICTS:
        if hasattr(_mod, name):
            guards.add(GuardKind.LEN_MATCH, ModuleGlobalSource(_mod.__name__, name), 0)


_MODULE_CALL = torch.nn.Module.__call__


def _user_overrides(cls: type, name: str) -> bool:
    """A class outside torch redefines a Module method that call_method answers itself."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return not _is_library_class(klass)
    return False


def _is_library_class(cls: type) -> bool:
    mod = getattr(cls, "__module__", "") or ""
    return mod == "torch" or mod.startswith("torch.")


# Module methods answered by NNModuleVariable.call_method instead of inlining torch's generators.
_TRACKED_METHODS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers", "children",
                              "named_children", "modules", "named_modules"})



from .lists import ListVariable  # noqa: E402


class ModuleSliceVariable(ListVariable):
    """``seq[a:b]`` of a ``Sequential``/``ModuleList``: the children it holds, in order. Python
    builds a new container of the same type, so that is its type; iteration, ``len`` and indexing
    read the children; calling a sliced ``Sequential`` runs them in turn."""

    __slots__ = ("container", "key")

    def __init__(self, items: list[VariableTracker], container: NNModuleVariable, key: slice) -> None:
        super().__init__(items)
        self.container = container
        self.key = key

    def python_type(self) -> type:
        return type(self.container.value)

    def new(self, items: list[VariableTracker]) -> ListVariable:
        return ListVariable(items)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name in ("append", "extend", "insert", "pop", "__setitem__", "__delitem__", "remove", "clear", "reverse", "sort"):
            unsupported("side_effect", "modifying a slice of a ModuleList/Sequential")
        return super().call_method(tx, name, args, kwargs)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if not isinstance(self.container.value, torch.nn.Sequential) or kwargs or len(args) != 1:
            unsupported("untracked_method", f"calling a slice of a {type(self.container.value).__name__}")
        out = args[0]
        for child in self.items:
            out = child.call_function(tx, [out], {})
        return out

    def reconstruct(self, cg: "OutputCodegen") -> str:
        import operator

        return f"{cg.ref(operator.getitem, 'getitem')}({self.container.reconstruct(cg)}, {cg.constant(self.key)})"
