"""Runs one differential program eagerly and under ``pyjit.jit`` and names the first difference.

Used by ``test_differential.py`` (which fails on any difference) and by
``python -m bench --suite differential`` (which counts them by category, never fails).

Program ``seed`` comes from ``diff_pyonly.py`` (plain Python, no tensors) when
``seed % PYONLY_EVERY == PYONLY_EVERY - 1``, else from ``diff_programs.py``. Its module file is
loaded twice (one copy for eager, one for pyjit), so both sides start from identical globals,
classes, closure cells and inputs (``make_inputs(call)``). The function is called ``CALLS`` times;
after each call these are compared, in this order, and the first that differs names the kind:

``exception``    the exception raised (type and message; ``NEW_ERROR`` when only pyjit raised)
``stdout``       everything printed
``result``       the returned values (tensors: dtype, shape, value)
``requires_grad`` requires_grad, is_leaf and grad_fn presence of returned and mutated tensors
``aliasing``     which returned tensors *are* an input tensor, which are views of one (same
                 storage and a ``_base``), which returned items are an argument object
``args``         the state of every argument afterwards (lists, dicts, objects, tensors)
``globals``      the module's ``G_*`` globals
``class_attrs``  the class attributes of every class the program defines (counters)
``cells``        closure cells: the program's ``peek()`` and every module-level closure (``TICK``)

User objects are compared by their ``__dict__``/``__slots__``/dataclass fields. ``PYJIT_INTERNAL``
is pyjit raising one of its own errors (``pyjit.PyjitError``, or anything with
``raise_on_internal_error``) or logging "pyjit failed to compile" while the results still match.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import logging
import math
import traceback
import types
from pathlib import Path
from typing import Any, Callable

import torch

import pyjit

from .diff_programs import generate_program
from .diff_pyonly import generate_pyonly_program

CALLS = 3
PYONLY_EVERY = 6
KINDS = ("exception", "stdout", "result", "requires_grad", "aliasing", "args", "globals", "class_attrs", "cells")
WRONG, NEW_ERROR, PYJIT_INTERNAL = "WRONG", "NEW_ERROR", "PYJIT_INTERNAL"


def source_of(seed: int) -> str:
    if seed % PYONLY_EVERY == PYONLY_EVERY - 1:
        return generate_pyonly_program(seed)
    return generate_program(seed)


def write_program(seed: int, directory: Path) -> Path:
    path = directory / f"pyjit_diff_{seed}.py"
    if not path.exists():
        path.write_text(source_of(seed))
    return path


def load(path: Path, tag: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"{path.stem}_{tag}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- snapshots --------------------------------------------------------------------------------------

@dataclasses.dataclass
class TensorSnap:
    value: torch.Tensor
    requires_grad: bool
    is_leaf: bool
    has_grad_fn: bool


@dataclasses.dataclass
class ObjectSnap:
    type_name: str
    attrs: dict[str, Any]


_MISSING = object()


def snapshot(value: Any, depth: int = 0) -> Any:
    """Plain data for comparison: tensors copied with their autograd state, user objects as attributes."""
    if depth > 6:
        return "<deep>"
    if isinstance(value, torch.Tensor):
        return TensorSnap(value.detach().clone(), value.requires_grad, value.is_leaf, value.grad_fn is not None)
    if isinstance(value, list):
        return [snapshot(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(snapshot(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int, float, bool, tuple)) else f"<{type(k).__name__}>": snapshot(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, types.FunctionType):
        return f"<function {value.__name__}>"
    cls = type(value)
    if cls.__module__.startswith("pyjit_diff_"):
        attrs: dict[str, Any] = {}
        for name in getattr(value, "__dict__", {}):
            attrs[name] = snapshot(value.__dict__[name], depth + 1)
        for klass in cls.__mro__:
            for name in getattr(klass, "__slots__", ()):
                v = getattr(value, name, _MISSING)
                attrs[name] = "<unset>" if v is _MISSING else snapshot(v, depth + 1)
        return ObjectSnap(cls.__name__, attrs)
    return repr(value)


def class_attrs(module: types.ModuleType) -> dict[str, Any]:
    """Plain class attributes (counters, dataclass defaults) of every class the program defines."""
    out: dict[str, Any] = {}
    for name, cls in vars(module).items():
        if isinstance(cls, type) and cls.__module__ == module.__name__:
            for attr, v in vars(cls).items():
                if not attr.startswith("__") and isinstance(v, (int, float, str, bool, type(None))):
                    out[f"{name}.{attr}"] = v
    return out


def module_cells(module: types.ModuleType, peek: Callable[[], Any]) -> dict[str, Any]:
    cells = {f"peek.{k}": v for k, v in peek().items()}
    for name, fn in vars(module).items():
        if isinstance(fn, types.FunctionType) and fn.__closure__ and fn.__module__ == module.__name__:
            for var, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                with contextlib.suppress(ValueError):
                    cells[f"{name}.{var}"] = snapshot(cell.cell_contents)
    return cells


def _leaves(value: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _leaves(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    return out


def aliasing(args: tuple[Any, ...], result: Any) -> list[dict[str, Any]]:
    """Per returned tensor: the input tensor it is, the input tensor whose storage it shares, whether
    it is a view (has a ``_base``), the earlier output it is; per returned top-level item: the
    argument object it is (indices into the inputs' tensors / the arguments, -1 for none)."""
    inputs = _leaves(list(args), [])
    by_id = {id(t): i for i, t in enumerate(inputs)}
    ptrs = {t.untyped_storage().data_ptr(): i for i, t in reversed(list(enumerate(inputs))) if t.numel()}
    out: list[dict[str, Any]] = []
    leaves = _leaves(result, [])
    for j, t in enumerate(leaves):
        out.append({"output_tensor": j, "is_input": by_id.get(id(t), -1),
                    "shares_storage_with_input": ptrs.get(t.untyped_storage().data_ptr(), -1) if t.numel() else -1,
                    "is_view": t._base is not None, "is_output": next((i for i in range(j) if leaves[i] is t), -1)})
    items = result if isinstance(result, (tuple, list)) else (result,)
    for j, item in enumerate(items):
        out.append({"output_item": j, "is_argument": next((i for i, a in enumerate(args) if a is item), -1)})
    return out


# -- one side ---------------------------------------------------------------------------------------

class _FailureLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "failed to compile" in msg:
            self.lines.append(msg.strip().splitlines()[0][:300] + " | " + msg.strip().splitlines()[-1][:200])


def run_side(module: types.ModuleType, fn: Callable[..., Any], peek: Callable[[], Any], call: int) -> dict[str, Any]:
    """One call of ``fn`` on fresh inputs; everything the caller can observe afterwards."""
    args = module.make_inputs(call)
    out = io.StringIO()
    outcome: dict[str, Any] = {}
    with contextlib.redirect_stdout(out):
        try:
            result = fn(*args)
            outcome["result"] = snapshot(result)
            outcome["aliasing"] = aliasing(args, result)
        except pyjit.PyjitError as e:
            outcome["internal"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            outcome["traceback"] = traceback.format_exc(limit=-6)
        except Exception as e:  # noqa: BLE001 - the program's own exceptions are compared
            outcome["raised"] = (type(e).__name__, str(e))
            outcome["traceback"] = traceback.format_exc(limit=-4)
    outcome["stdout"] = out.getvalue()
    outcome["args"] = snapshot(args)
    outcome["globals"] = snapshot({k: v for k, v in vars(module).items() if k.startswith("G_")})
    outcome["class_attrs"] = class_attrs(module)
    outcome["cells"] = module_cells(module, peek)
    return outcome


# -- comparison -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Difference:
    category: str  # WRONG, NEW_ERROR or PYJIT_INTERNAL
    kind: str      # one of KINDS (or "internal")
    seed: int
    call: int
    line: str      # the first differing thing, one line
    detail: str = ""

    @property
    def label(self) -> str:
        return f"{self.category}/{self.kind}" if self.category == WRONG else self.category

    def describe(self) -> str:
        return f"seed {self.seed}, call {self.call}: {self.label}: {self.line}" + (f"\n{self.detail}" if self.detail else "")


class _Diff(Exception):
    def __init__(self, autograd: bool, msg: str):
        super().__init__(msg)
        self.autograd = autograd


def _cmp(expected: Any, actual: Any, path: str, rtol: float, atol: float) -> None:
    if isinstance(expected, TensorSnap):
        if not isinstance(actual, TensorSnap):
            raise _Diff(False, f"{path}: a Tensor in eager, {type(actual).__name__} under pyjit")
        e, a = expected.value, actual.value
        if e.dtype != a.dtype or e.shape != a.shape:
            raise _Diff(False, f"{path}: {a.dtype}{tuple(a.shape)} != eager {e.dtype}{tuple(e.shape)}")
        for attr in ("requires_grad", "is_leaf", "has_grad_fn"):
            if getattr(expected, attr) != getattr(actual, attr):
                raise _Diff(True, f"{path}: {attr} {getattr(actual, attr)} != eager {getattr(expected, attr)}")
        if not torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
            raise _Diff(False, f"{path}: values differ: pyjit {a.flatten()[:6].tolist()} eager {e.flatten()[:6].tolist()}")
        return
    if type(actual) is not type(expected):
        raise _Diff(False, f"{path}: type {type(actual).__name__} != eager {type(expected).__name__}: {actual!r:.120}")
    if isinstance(expected, ObjectSnap):
        if expected.type_name != actual.type_name:
            raise _Diff(False, f"{path}: a {actual.type_name} != eager {expected.type_name}")
        _cmp(expected.attrs, actual.attrs, f"{path}<{expected.type_name}>", rtol, atol)
    elif isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            raise _Diff(False, f"{path}: length {len(actual)} != eager {len(expected)}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            _cmp(e, a, f"{path}[{i}]", rtol, atol)
    elif isinstance(expected, dict):
        if list(actual) != list(expected):
            raise _Diff(False, f"{path}: keys {list(actual)} != eager {list(expected)}")
        for k in expected:
            _cmp(expected[k], actual[k], f"{path}[{k!r}]", rtol, atol)
    elif isinstance(expected, float):
        if not (math.isclose(actual, expected, rel_tol=rtol, abs_tol=atol) or (math.isnan(actual) and math.isnan(expected))):
            raise _Diff(False, f"{path}: {actual!r} != eager {expected!r}")
    elif actual != expected:
        raise _Diff(False, f"{path}: {actual!r:.150} != eager {expected!r:.150}")


def first_difference(expected: dict[str, Any], actual: dict[str, Any], rtol: float, atol: float) -> tuple[str, str] | None:
    """(kind, line) of the first difference between two outcomes of one call, in ``KINDS`` order."""
    if expected.get("raised") != actual.get("raised"):
        return "exception", f"pyjit raised {actual.get('raised')}, eager {expected.get('raised')}"
    if expected["stdout"] != actual["stdout"]:
        e, a = expected["stdout"].splitlines(), actual["stdout"].splitlines()
        i = next((i for i, (x, y) in enumerate(zip(e, a)) if x != y), min(len(e), len(a)))
        return "stdout", f"line {i}: pyjit {a[i] if i < len(a) else '<end>'!r:.120} eager {e[i] if i < len(e) else '<end>'!r:.120}"
    found: dict[str, str] = {}
    autograd: str | None = None
    for key in ("result", "aliasing", "args", "globals", "class_attrs", "cells"):
        if key not in expected:
            continue
        try:
            _cmp(expected[key], actual.get(key), key, rtol, atol)
        except _Diff as d:
            if d.autograd and autograd is None:
                autograd = str(d)
            else:
                found.setdefault(key, str(d))
    for kind in KINDS[2:]:
        if kind == "requires_grad" and autograd:
            return kind, autograd
        if kind in found:
            return kind, found[kind]
    return None


def compare_program(seed: int, directory: Path, backend: Any, *, rtol: float = 1e-6, atol: float = 1e-6,
                    calls: int = CALLS) -> Difference | None:
    """Run program ``seed`` eagerly and jitted; the first difference, or None when they agree."""
    return compare_path(write_program(seed, directory), seed, backend, rtol=rtol, atol=atol, calls=calls)


def compare_path(path: Path, seed: int, backend: Any, *, rtol: float = 1e-6, atol: float = 1e-6,
                 calls: int = CALLS) -> Difference | None:
    """``compare_program`` for a program file (``seed`` only labels the difference)."""
    eager_mod, jit_mod = load(path, "eager"), load(path, "jit")
    eager_fn, eager_peek = eager_mod.build()
    fn, jit_peek = jit_mod.build()
    jitted = pyjit.jit(fn, backend=backend)
    failures = _FailureLog()
    root = logging.getLogger("pyjit")
    root.addHandler(failures)
    internal: Difference | None = None
    try:
        for call in range(calls):
            expected = run_side(eager_mod, eager_fn, eager_peek, call)
            actual = run_side(jit_mod, jitted, jit_peek, call)
            if "internal" in actual:
                return Difference(PYJIT_INTERNAL, "internal", seed, call, actual["internal"], actual["traceback"])
            found = first_difference(expected, actual, rtol, atol)
            if found is not None:
                kind, line = found
                category = NEW_ERROR if kind == "exception" and "raised" not in expected else WRONG
                detail = (f"{path}\npyjit traceback:\n{actual.get('traceback', '-')}\n"
                          f"eager traceback:\n{expected.get('traceback', '-')}")
                if kind == "stdout":
                    detail = f"{path}\n--- eager:\n{expected['stdout']}--- pyjit:\n{actual['stdout']}"
                return Difference(category, kind, seed, call, line, detail)
            if failures.lines and internal is None:
                internal = Difference(PYJIT_INTERNAL, "internal", seed, call, failures.lines[0], str(path))
    finally:
        root.removeHandler(failures)
    return internal
