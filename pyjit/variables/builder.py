"""The builder: turns a real Python value reached through a source into a tracker, installing
the guard that makes the trace valid for that value (once, at the moment the value is read).

| value                                   | tracker                     | guard                      |
|-----------------------------------------|-----------------------------|----------------------------|
| torch.Tensor / nn.Parameter             | TensorVariable (graph input)| TENSOR_MATCH (+aliasing)   |
| None                                    | ConstantVariable            | ID_MATCH None              |
| bool/int/float/str/dtype/device/Size... | ConstantVariable            | EQUALS_MATCH (type + value)|
| list / tuple                            | List/TupleVariable          | TYPE_MATCH + LEN_MATCH     |
| dict                                    | DictVariable                | DICT_KEYS                  |
| namedtuple                              | NamedTupleVariable          | TYPE_MATCH + LEN_MATCH     |
| nn.Module                               | NNModuleVariable            | ID_MATCH + TYPE_MATCH      |
| function / builtin / class / module     | *FunctionVariable etc.      | ID_MATCH                   |
| functools.partial                       | PartialVariable             | TYPE_MATCH, func/args/keywords wrapped whole |
| other objects                           | UserDefinedObjectVariable   | TYPE_MATCH                 |

Values without a source (library globals, results of constant folding) get no guard.
"""
from __future__ import annotations

import collections
import functools
import sys
import types
from typing import TYPE_CHECKING, Any

import torch

from ..guards.guards import GuardKind, dict_keys_expected
from ..guards.source import AttrSource, ItemSource, Source
from ..identity import exact_isinstance as _isa
from ..identity import is_one_of, static_attr
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .builtins import BuiltinVariable
from .constant import ConstantVariable, _is_typing_object, is_constant_value
from .dicts import DictVariable, check_dict_key
from .functions import PartialVariable, UserFunctionVariable, UserMethodVariable
from .lists import ListVariable, NamedTupleVariable, TupleVariable
from .misc import PythonModuleVariable
from .nn_module import NNModuleVariable
from .torch_fns import TorchFunctionVariable, is_torch_library_function
from .user_defined import UserDefinedClassVariable, UserDefinedObjectVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator


_TORCH_CALLABLE_CLASSES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.Size, torch.device,
                           torch.dtype, torch.finfo, torch.iinfo, torch.autocast, torch.amp.autocast,
                           torch.inference_mode)


# Unbound methods implemented in C carry ``__objclass__``; testing the type first avoids probing
# arbitrary user objects with getattr (which would run their ``__getattr__``).
_C_DESCRIPTOR_TYPES = (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType,
                       types.GetSetDescriptorType, types.MemberDescriptorType)


def wrap(tx: "Translator", value: Any, source: Source | None) -> VariableTracker:
    guards = tx.output.guards
    if _isa(value, torch.Tensor):
        if source is None:
            unsupported("unsupported_object", "a tensor that pyjit cannot reach from the frame (no source)")
        return tx.output.add_input(value, source)
    if value is None:
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, None)
        return ConstantVariable(None, source)
    if type(value) in (int, float) and source is not None and tx.output.dynamic is not None \
            and tx.output.dynamic.scalar_is_dynamic(source.name(), value):
        # An int/float that changed between calls: a symbolic graph input (trace/dynamic.py).
        return tx.output.add_scalar_input(value, source)
    if is_constant_value(value):
        if source is not None:
            if _isa(value, tuple) and type(value) is tuple:
                guards.add(GuardKind.TYPE_MATCH, source, tuple)
                guards.add(GuardKind.EQUALS_MATCH, source, value)
            else:
                guards.add(GuardKind.EQUALS_MATCH, source, value)
        return ConstantVariable(value, source)
    t = type(value)
    side_effects = tx.output.side_effects
    if t is list or t is dict or t is collections.OrderedDict or t is collections.defaultdict:
        # side-effect replay: the same mutable object reached twice is one tracker (aliasing)
        known = side_effects.known(tx, value, source)
        if known is not None:
            return known
    if t in (list, tuple):
        if source is not None:
            guards.add(GuardKind.TYPE_MATCH, source, t)
            guards.add(GuardKind.LEN_MATCH, source, len(value))
        items = [wrap(tx, v, ItemSource(source, i) if source is not None else None) for i, v in enumerate(value)]
        if t is list:
            return side_effects.remember(value, ListVariable(items, source))
        return TupleVariable(items, source)
    if issubclass(t, tuple) and _has_class_attr(t, "_fields"):
        if source is not None:
            guards.add(GuardKind.TYPE_MATCH, source, t)
        items = [wrap(tx, v, ItemSource(source, i) if source is not None else None) for i, v in enumerate(value)]
        return NamedTupleVariable(items, t, source)
    if t is collections.defaultdict:
        from .defaultdicts import wrap_defaultdict  # its default_factory is tracked too

        return wrap_defaultdict(tx, value, source)
    if t is dict and source is not None and any(_isa(k, torch.Tensor) for k in dict.keys(value)):
        return _tensor_keyed_dict(tx, value, source)
    if t is dict or t is collections.OrderedDict:
        if source is not None:
            guards.add(GuardKind.TYPE_MATCH, source, t)
            guards.add(GuardKind.DICT_KEYS, source, *dict_keys_expected(value))  # OrderedDict: both orders
        for k in value:
            check_dict_key(k)  # constants or identity keys (classes, typing forms): variables/dicts.py
        items = {k: wrap(tx, v, ItemSource(source, k) if source is not None else None) for k, v in value.items()}
        return side_effects.remember(value, DictVariable(items, source, dict_type=t))
    from ..api import DisabledFunction, JitFunction

    if _isa(value, DisabledFunction) or _is_torch_compiler_marker(value):
        # pyjit.disable(fn) / pyjit.graph_break, and torch's own spellings of them
        # (a function torch.compiler.disable wrapped, torch's graph_break): calling one is a graph break.
        from .misc import DisabledCallVariable

        return DisabledCallVariable(value, source)
    from .optimizer import special_tracker

    special = special_tracker(tx, value, source)  # torch.optim, profiler ranges (variables/optimizer.py)
    if special is not None:
        return special
    from .context_state import special_state_tracker

    state = special_state_tracker(tx, value, source)  # ContextVar, threading.Lock (variables/context_state.py)
    if state is not None:
        return state
    if _isa(value, JitFunction):
        # A jitted function called from traced code: trace what it wraps (one graph).
        return wrap(tx, value._fn, AttrSource(source, "_fn") if source is not None else None)
    if _isa(value, torch.nn.Module):
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
            # the same object can change class (``m.__class__ = Other``): methods, forward and
            # isinstance answers all follow the type.
            guards.add(GuardKind.TYPE_MATCH, source, t)
        return NNModuleVariable(value, source)
    if _isa(value, types.ModuleType):
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
        return PythonModuleVariable(value, source)
    if _isa(value, functools.partial):
        if source is not None:
            guards.add(GuardKind.TYPE_MATCH, source, functools.partial)
        func = wrap(tx, value.func, AttrSource(source, "func") if source else None)
        # args/keywords wrapped whole: their length and keys are guarded, not only the values
        # (``keywords`` is a mutable dict; ``__setstate__`` can replace all three).
        args_var = wrap(tx, value.args, AttrSource(source, "args") if source else None)
        kw_var = wrap(tx, value.keywords, AttrSource(source, "keywords") if source else None)
        args = ([ConstantVariable(a) for a in args_var.value] if isinstance(args_var, ConstantVariable)
                else list(args_var.items))  # type: ignore[attr-defined]
        kwargs = dict(kw_var.items)  # type: ignore[attr-defined]
        return PartialVariable(func, args, kwargs, source)
    if _isa(value, (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)):
        # A grad-mode context object (e.g. captured by @torch.no_grad()'s wrapper): no guard
        # needed beyond the identity of the function that holds it.
        from .torch_fns import GradModeVariable

        mode = _isa(value, torch.enable_grad) or (_isa(value, torch.set_grad_enabled) and bool(value.mode))
        return GradModeVariable(mode)
    if _isa(value, types.MethodType) and _isa(value.__self__, (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)):
        return wrap(tx, value.__self__, None).var_getattr(tx, value.__func__.__name__)
    if _isa(value, types.MethodType):
        obj = wrap(tx, value.__self__, AttrSource(source, "__self__") if source else None)
        fn = value.__func__
        if isinstance(fn, types.FunctionType):
            if source is not None:
                guards.add(GuardKind.ID_MATCH, AttrSource(source, "__func__"), fn)
            return UserMethodVariable(fn, obj, source)
        # Another callable bound as a method (an lru_cache wrapper on a class): keep the binding.
        return PartialVariable(wrap(tx, fn, AttrSource(source, "__func__") if source else None), [obj], {})
    if type(value) in _C_DESCRIPTOR_TYPES and is_one_of(value.__objclass__, (torch.Tensor, torch._C.TensorBase)):
        # an unbound Tensor method (torch.Tensor.add): a graph call like torch.add
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
        return TorchFunctionVariable(value, source)
    if callable(value) and not _isa(value, type) and is_torch_library_function(value):
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
        return TorchFunctionVariable(value, source)
    if _isa(value, types.FunctionType):
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
        if BuiltinVariable.has_handler(value):  # a Python function answered natively (inspect.signature)
            return BuiltinVariable(value, source)
        return UserFunctionVariable(value, source)
    if _isa(value, functools._lru_cache_wrapper) and _isa(getattr(value, "__wrapped__", None), types.FunctionType):
        from .functions import CachedFunctionVariable

        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
            guards.add(GuardKind.ID_MATCH, AttrSource(source, "__wrapped__"), value.__wrapped__)
        return CachedFunctionVariable(value, source)
    if _is_typing_constant(value):
        # typing.Sequence, Optional[int], int | None: immutable objects used as isinstance
        # targets and annotations; pinned by identity.
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
        return ConstantVariable(value, source)
    if BuiltinVariable.can_handle(value):
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
        return BuiltinVariable(value, source)
    if _isa(value, type):
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
        if is_one_of(value, _TORCH_CALLABLE_CLASSES):
            return TorchFunctionVariable(value, source)
        return UserDefinedClassVariable(value, source)
    if _isa(value, types.BuiltinMethodType) and type(static_attr(value, "__self__")) in (list, dict) \
            and source is not None:
        # ``xs.append`` of a list or dict (a bound method live at a graph break): the container
        # tracked through ``__self__`` (mutations recorded on it, aliasing with other reads of
        # it kept) and the method bound again; an identity guard would fail on every call.
        from .base import BoundMethodVariable

        guards.add(GuardKind.TYPE_MATCH, source, type(value))
        guards.add(GuardKind.EQUALS_MATCH, AttrSource(source, "__name__"), value.__name__)
        return BoundMethodVariable(wrap(tx, value.__self__, AttrSource(source, "__self__")), value.__name__)
    if _isa(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        if _isa(static_attr(value, "__self__"), torch.Tensor):
            return _bound_tensor_method(tx, value, source)
        if source is not None:
            guards.add(GuardKind.ID_MATCH, source, value)
        return BuiltinVariable(value, source)
    known = side_effects.known(tx, value, source)
    if known is not None:
        return known
    if "torch.distributed" in sys.modules:
        from .distributed import ProcessGroupVariable, is_process_group

        if is_process_group(value):
            if source is not None:
                guards.add(GuardKind.ID_MATCH, source, value)
            return ProcessGroupVariable(value, source)
    if source is not None:
        guards.add(GuardKind.TYPE_MATCH, source, t)
    return side_effects.remember(value, UserDefinedObjectVariable(value, source))


def _has_class_attr(cls: type, name: str) -> bool:
    """``hasattr(cls, name)`` from the MRO's dicts (a metaclass ``__getattr__`` never runs)."""
    return any(name in klass.__dict__ for klass in cls.__mro__)


def _bound_tensor_method(tx: "Translator", value: Any, source: Source | None) -> VariableTracker:
    """``fn = x.add`` read from a global, a closure or an argument: the method of the tensor
    ``fn.__self__`` (a graph input), called like ``x.add(...)``. A fresh bound method object
    is made at every attribute read, so the guards pin its type and name, not its identity."""
    from .torch_fns import TensorMethodVariable

    if source is None:
        unsupported("unsupported_object", "a bound tensor method pyjit cannot reach from the frame")
    name = value.__name__
    if getattr(torch.Tensor, name, None) is None:
        unsupported("unsupported_object", f"a bound tensor method {name!r} that torch.Tensor does not define")
    tx.output.guards.add(GuardKind.TYPE_MATCH, source, type(value))
    tx.output.guards.add(GuardKind.EQUALS_MATCH, AttrSource(source, "__name__"), name)
    tensor = wrap(tx, value.__self__, AttrSource(source, "__self__"))
    return TensorMethodVariable(tensor, name)


def _is_typing_constant(value: Any) -> bool:
    return _is_typing_object(value)


def wrap_constant_result(tx: "Translator", value: Any) -> VariableTracker:
    """Wrap the result of constant folding (no source, no guard)."""
    if is_constant_value(value):
        return ConstantVariable(value)
    if _isa(value, list):
        return ListVariable([wrap_constant_result(tx, v) for v in value])
    if _isa(value, tuple) and _has_class_attr(type(value), "_fields"):
        return NamedTupleVariable([wrap_constant_result(tx, v) for v in value], type(value))
    if _isa(value, tuple):
        return TupleVariable([wrap_constant_result(tx, v) for v in value])
    if _isa(value, dict):
        return DictVariable({k: wrap_constant_result(tx, v) for k, v in value.items()})
    if _isa(value, (set, frozenset)):
        from .dicts import SetVariable

        return SetVariable(list(value))
    if _isa(value, (map, zip, enumerate, filter, reversed)) or type(value).__name__.endswith("iterator"):
        from .lists import ListIteratorVariable

        return ListIteratorVariable([wrap_constant_result(tx, v) for v in value])
    if _isa(value, torch.Tensor):
        unsupported("unsupported_object", "constant folding produced a tensor")
    return wrap(tx, value, None)


def _is_torch_compiler_marker(value: Any) -> bool:
    """torch's own ``graph_break`` function, or a function wrapped by ``torch.compiler.disable``
    (recognised by name and marker attribute; torch's compiler is never imported here)."""
    if not _isa(value, types.FunctionType):
        return False  # (never probe attributes of arbitrary objects: __getattr__ would run)
    if value.__dict__.get("_torchdynamo_disable", False) is True:
        original = value.__dict__.get("_torchdynamo_orig_callable")
        if isinstance(original, types.FunctionType):
            from ..frame.policy import _disabled_codes

            _disabled_codes.add(original.__code__)  # its frame is never compiled as a callee
        return True
    module = value.__module__ or ""
    return value.__name__ == "graph_break" and module.startswith("torch.")


def _tensor_keyed_dict(tx: "Translator", value: dict[Any, Any], source: Source) -> VariableTracker:
    """A dict read from outside the trace whose keys include tensors (``{p: lr for p in
    model.parameters()}``): each key and value is read by position (``DictEntriesSource``), a
    tensor key pinned by identity (a dict finds it by identity) and a constant key by equality,
    with the length guarded; lookups then compare keys by identity (``identity_keys.py``)."""
    from ..guards.source import DictEntriesSource
    from .identity_keys import identity_key

    guards = tx.output.guards
    guards.add(GuardKind.TYPE_MATCH, source, dict)
    guards.add(GuardKind.LEN_MATCH, source, len(value))
    keys, values = DictEntriesSource(source, "keys"), DictEntriesSource(source, "values")
    items: dict[Any, VariableTracker] = {}
    for i, (k, v) in enumerate(dict.items(value)):
        key_source = ItemSource(keys, i)
        if _isa(k, torch.Tensor):
            guards.add(GuardKind.ID_MATCH, key_source, k)
            key: Any = identity_key(tx, wrap(tx, k, key_source))
        elif is_constant_value(k):
            guards.add(GuardKind.EQUALS_MATCH, key_source, k)
            key = k
        else:
            unsupported("unsupported_object", f"dict with tensor keys and a {type(k).__name__} key")
        items[key] = wrap(tx, v, ItemSource(values, i))
    return tx.output.side_effects.remember(value, DictVariable(items, source, dict_type=dict))
