"""The cheap look a frame gets before it is traced: can it reach a tensor at all?

:func:`reaches_tensors` inspects what a frame can read without calling anything: its argument
slots, its closure cells, and the module globals named in its ``co_names``. It answers True
when any of them is (or holds, a few levels down in lists, tuples, dicts, sets and objects'
``__dict__``) a tensor, an ``nn.Module``, a torch module or function, or a tensor/module
class. A frame that reaches none of those does no tensor work of its own: tracing it would
record no graph, so it is not traced and runs natively. Its callees are their own frames under
the hook and get their own look, so a plain-Python frame that calls a tensor function still has
that function compiled.

The answer is remembered per code object as a *plain mark* in the C core
(``_C.set_plain(code, types)``): the exact types of the arguments of the plain calls seen so
far. A later call whose every argument has one of those types runs natively with no callback
(a few pointer compares in C); any other call (a tensor argument, a new type) gets the full
look again. A tensor type never enters the mark, so a function called with ints today and
with tensors tomorrow is compiled tomorrow. What the mark cannot see: a container or object
argument of a marked type that holds tensors on a later call, or a global rebound to a tensor
after the mark was set; such calls run natively (eager results, no graph) until
``pyjit.reset()``.

Reading never calls user code: no ``__getattr__``, ``__iter__``, ``__len__``, ``__class__``
or ``__instancecheck__`` of user classes runs (types are read with ``type()``) (container contents are read through the built-in
types' own slots, objects through their instance ``__dict__``).
"""
from __future__ import annotations

import sys
import types
from typing import Any

# Exact types that never hold a tensor (their values are leaves).
_LEAF_TYPES: frozenset[type] = frozenset({
    int, float, bool, str, bytes, complex, type(None), range, slice, type(Ellipsis), type(NotImplemented),
    types.BuiltinFunctionType, types.CodeType,
})
_SCAN_ITEMS = 32   # items of one container looked at
_SCAN_DEPTH = 3    # nesting levels looked into
_PLAIN_TYPES_MAX = 16  # types one plain mark holds; further types keep calling back

# type -> 0 leaf (no tensor), 1 tensor-like, 2 look inside; filled lazily
_verdicts: dict[type, int] = {}


def _torch() -> Any:
    return sys.modules.get("torch")


def _type_verdict(tp: type, torch: Any) -> int:
    hit = _verdicts.get(tp)
    if hit is not None:
        return hit
    if tp in _LEAF_TYPES:
        verdict = 0
    elif issubclass(tp, (torch.Tensor, torch.nn.Module)):
        verdict = 1
    else:
        verdict = 2
    _verdicts[tp] = verdict
    return verdict


def _is_torch_name(module_name: Any) -> bool:
    return isinstance(module_name, str) and (module_name == "torch" or module_name.startswith("torch."))


def _reaches(value: Any, torch: Any, depth: int) -> bool:
    tp = type(value)
    verdict = _type_verdict(tp, torch)
    if verdict != 2:
        return verdict == 1
    if issubclass(tp, types.ModuleType):
        return _is_torch_name(value.__name__)
    if issubclass(tp, type):
        return issubclass(value, (torch.Tensor, torch.nn.Module)) or _is_torch_name(type.__getattribute__(value, "__module__"))
    if issubclass(tp, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        if tp is types.MethodType:
            return depth > 0 and _reaches(value.__self__, torch, depth - 1)
        return _is_torch_name(getattr(value, "__module__", None))
    if tp.__module__ is not None and _is_torch_name(tp.__module__):
        return True  # torch objects: dtypes, devices, torch.Size, op overloads, ...
    if depth <= 0:
        return False
    if tp is types.CellType:  # a resume function receives some cell variables as cells
        try:
            return _reaches(value.cell_contents, torch, depth - 1)
        except ValueError:
            return False
    if issubclass(tp, (list, tuple)):
        seq = list.__iter__(value) if issubclass(tp, list) else tuple.__iter__(value)
        for i, item in enumerate(seq):
            if i >= _SCAN_ITEMS:
                return False
            if _reaches(item, torch, depth - 1):
                return True
        return False
    if issubclass(tp, dict):
        return _any_value(value, torch, depth)
    if issubclass(tp, (set, frozenset)):
        return False  # set items are hashable: tensors hash by id but are rare there
    try:
        attrs = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return False  # slots-only objects: not looked into
    if type(attrs) is not dict:
        return False
    return _any_value(attrs, torch, depth)


def _any_value(mapping: dict[Any, Any], torch: Any, depth: int) -> bool:
    for i, item in enumerate(dict.values(mapping)):
        if i >= _SCAN_ITEMS:
            return False
        if _reaches(item, torch, depth - 1):
            return True
    return False


def reaches_tensors(func: types.FunctionType, args: tuple[Any, ...]) -> bool:
    """Whether the frame of ``func`` called with argument slots ``args`` can reach tensor work
    (module docstring). A heuristic on what can be seen cheaply: the first items of each
    container, a few levels deep; what it misses runs natively, with eager results."""
    torch = _torch()
    if torch is None:
        return False  # no tensor can exist before torch is imported
    for value in args:
        if _reaches(value, torch, _SCAN_DEPTH):
            return True
    for cell in func.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:
            continue
        if _reaches(contents, torch, _SCAN_DEPTH):
            return True
    f_globals = func.__globals__
    for name in func.__code__.co_names:
        value = f_globals.get(name, _MISSING) if type(f_globals) is dict else _MISSING
        if value is not _MISSING and _reaches(value, torch, 1):
            return True
    return False


_MISSING = object()


def plain_types(existing: tuple[type, ...] | None, args: tuple[Any, ...]) -> tuple[type, ...] | None:
    """The plain mark after a plain call with ``args``: ``existing`` plus the arguments' exact
    types; None when it would hold more than ``_PLAIN_TYPES_MAX`` types (keep the old one)."""
    seen = list(existing or ())
    for value in args:
        tp = type(value)
        if tp not in seen:
            seen.append(tp)
    if len(seen) > _PLAIN_TYPES_MAX:
        return None
    return tuple(seen)
