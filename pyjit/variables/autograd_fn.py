"""``MyFunction.apply(*args)`` of a custom ``torch.autograd.Function``.

**No gradient needed** (grad mode off, or no tensor argument requires grad; both fixed by the
trace's guards: the global grad-mode guard and every input's TENSOR_MATCH, which includes
``requires_grad``): ``apply`` is exactly its ``forward``, which is inlined with a context object
(``ctx``) that records attribute stores and takes ``save_for_backward``/``mark_*`` as no-ops
(nothing will call ``backward``).

**Gradient needed**: the call is one opaque ``call_function`` node whose target calls the real
``cls.apply`` (:func:`apply_target`), so the captured graph run as is records the user's
``backward`` with autograd: correct by construction. Its output metadata comes from running
``apply`` on the trace's fake tensors under the trace's grad mode (``requires_grad`` as eager).
pyjit's training backend traces through the node: ``make_fx`` over the real ``apply`` records
the user's ``forward``, and ``torch.autograd.grad`` its ``backward``
(``pyjit/backend/aot/custom_function.py``). The compiled graph no longer runs the Python of
``forward``/``backward``, so what that Python decided at trace time is guarded or refused:

- guarded: the class (identity at its source), its ``forward``/``backward``/``setup_context``
  (identity and ``__code__``), and every global they and the user functions they call read
  (modules, classes and functions by identity, constants by value);
- refused (a graph break naming the function; the call then runs natively): ``forward`` or
  ``backward`` not plain Python staticmethods, no ``backward``, ``jvp``/``save_for_forward``
  (forward-mode AD), ``vmap``/``generate_vmap_rule``, ``mark_dirty`` or a forward that modifies
  an input in place, outputs that are not tensors or that alias an input or each other,
  arguments other than tensors and Python constants, keyword arguments, globals that are not
  modules/classes/functions/constants, free variables (closures), and code that stores to a
  global, a nonlocal, an attribute of anything but ``ctx`` or an item of anything but a local.

``once_differentiable`` backwards and ``setup_context``-style Functions are supported (the real
``apply`` handles both; double backward through a compiled graph raises pyjit's own error).
Reads of module attributes (``cfg.FLAG`` with ``cfg`` a module) are not guarded: documented.
"""
from __future__ import annotations

import dis
import types
import weakref
from typing import TYPE_CHECKING, Any, Callable, NoReturn

import torch

from ..guards.guards import GuardKind
from ..guards.source import AttrSource, FuncAttrSource, ItemSource, Source
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .class_members import _is_library, class_member, guard_identity, lookup_class_attr, shared_class_source
from .constant import ConstantVariable, is_constant_value

if TYPE_CHECKING:
    from ..trace.translator import Translator

# ctx methods that only prepare the backward pass
_BACKWARD_ONLY = frozenset({"save_for_backward", "save_for_forward", "mark_non_differentiable", "mark_dirty",
                            "set_materialize_grads"})


def is_function_apply(fn: Any) -> bool:
    # by name first: this module is also used where torch is a stub (the torch-free self-checks)
    if getattr(fn, "__module__", None) != "torch.autograd.function" or getattr(fn, "__name__", None) != "apply":
        return False
    return fn is torch.autograd.Function.apply.__func__  # type: ignore[attr-defined]


def call_apply(tx: "Translator", cls_var: VariableTracker, args: list[VariableTracker],
               kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``cls.apply(*args, **kwargs)`` (see module docstring)."""
    from .tensor import TensorVariable

    cls = cls_var.as_python_constant()
    if torch.is_grad_enabled() and any(isinstance(a, TensorVariable) and a.example.requires_grad
                                       for a in [*args, *kwargs.values()]):
        return _apply_with_grad(tx, cls_var, cls, args, kwargs)
    forward = lookup_class_attr(cls, "forward")
    if not isinstance(forward, staticmethod) or not isinstance(forward.__func__, types.FunctionType):
        unsupported("c_function", f"{cls.__name__}.forward is not a Python staticmethod")
    fwd = class_member(tx, cls_var, "forward", forward, on_instance=False)  # guarded where found
    assert fwd is not None
    if _defines(cls, "setup_context"):
        return fwd.call_function(tx, args, kwargs)  # forward(*args); setup_context only feeds backward
    return fwd.call_function(tx, [_make_ctx(tx), *args], kwargs)


# -- gradient needed: one opaque node calling the real apply ---------------------------------------

_targets: "weakref.WeakKeyDictionary[type, Callable[..., Any]]" = weakref.WeakKeyDictionary()


def apply_target(cls: type) -> Callable[..., Any]:
    """The graph target of ``cls.apply`` (one per class). Not ``cls.apply`` itself: FX prints a
    target by its ``__module__``/``__name__``, which for ``apply`` are torch's
    (``torch.autograd.function.apply``, not importable), and the graph cache would take it for a
    torch function. ``pyjit_autograd_function`` (a weak reference to the class) is how the
    backend recognises the node."""
    fn = _targets.get(cls)
    if fn is None:
        ref = weakref.ref(cls)

        def apply(*args: Any) -> Any:
            return ref().apply(*args)  # type: ignore[union-attr]

        apply.__name__ = apply.__qualname__ = f"{cls.__name__}_apply"
        apply.__module__ = __name__
        apply.pyjit_autograd_function = ref  # type: ignore[attr-defined]
        _targets[cls] = fn = apply
    return fn


def _refuse(cls: type, why: str) -> NoReturn:
    unsupported("builtin_arguments", f"{cls.__name__}.apply with gradients needed: {why}")


def _defines(cls: type, name: str) -> bool:
    """``cls`` overrides ``torch.autograd.Function``'s ``name``."""
    return lookup_class_attr(cls, name) is not lookup_class_attr(torch.autograd.Function, name)


def _once_differentiable_code() -> types.CodeType:
    from torch.autograd.function import once_differentiable

    return once_differentiable(lambda ctx: None).__code__


def _class_refusal(cls: type) -> str | None:
    """Why the Function cannot be compiled with its backward, from its class alone (or None)."""
    for name in ("forward", "backward"):
        attr = lookup_class_attr(cls, name)
        if not isinstance(attr, staticmethod) or not isinstance(attr.__func__, types.FunctionType):
            return f"its {name} is not a Python staticmethod"
    if not _defines(cls, "backward"):
        return "it defines no backward"
    if _defines(cls, "setup_context"):
        attr = lookup_class_attr(cls, "setup_context")
        if not isinstance(attr, staticmethod) or not isinstance(attr.__func__, types.FunctionType):
            return "its setup_context is not a Python staticmethod"
    if _defines(cls, "jvp"):
        return "it defines jvp (forward-mode AD is not compiled)"
    if _defines(cls, "vmap") or getattr(cls, "generate_vmap_rule", False):
        return "it defines a vmap rule"
    if lookup_class_attr(cls, "apply") is not lookup_class_attr(torch.autograd.Function, "apply"):
        return "it overrides apply"
    return None


def _apply_with_grad(tx: "Translator", cls_var: VariableTracker, cls: type, args: list[VariableTracker],
                     kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from .tensor import TensorVariable

    if kwargs:
        _refuse(cls, "keyword arguments")
    why = _class_refusal(cls)
    if why is not None:
        _refuse(cls, why)
    cls_src = cls_var.source
    if cls_src is None:
        _refuse(cls, "the class is not reached through a guardable source")
    for a in args:
        if not isinstance(a, TensorVariable) and not (a.is_python_constant()
                                                      and is_constant_value(a.as_python_constant())):
            _refuse(cls, f"an argument ({a}) is neither a tensor nor a Python constant")
    # Collect every check before installing any guard: a refusal restarts the trace anyway.
    checker = _CodeChecker(cls)
    checked: list[tuple[str, types.FunctionType, Source | None]] = []
    for name in ("forward", "setup_context", "backward"):
        if name == "setup_context" and not _defines(cls, name):
            continue
        fn = lookup_class_attr(cls, name).__func__
        src: Source | None = shared_class_source(tx, cls, cls_src, name)
        checked.append((name, fn, src))
        body, body_src = fn, src
        if fn.__code__ is _once_differentiable_code() and isinstance(getattr(fn, "__wrapped__", None),
                                                                     types.FunctionType):
            body, body_src = fn.__wrapped__, AttrSource(src, "__wrapped__") if src is not None else None
            checked.append((name, body, body_src))
        ctx_name = None if (name == "forward" and _defines(cls, "setup_context")) else _first_param(body)
        checker.check_function(body, body_src, ctx_name)
    if checker.refusal is not None:
        _refuse(cls, checker.refusal)

    guard_identity(tx, cls_src, cls)
    for _, fn, src in checked:
        if src is not None:
            guard_identity(tx, src, fn)
            tx.output.guards.add(GuardKind.ID_MATCH, FuncAttrSource(src, "__code__"), fn.__code__)
    for kind, src, value in checker.guards:
        tx.output.guards.add(kind, src, value)
    return _record_call(tx, cls, args)


def _record_call(tx: "Translator", cls: type, args: list[VariableTracker]) -> VariableTracker:
    """The opaque node; its metadata from the real apply on fake tensors (requires_grad as eager)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    output = tx.output
    target = apply_target(cls)
    fake_args = [output.to_fake(a) for a in args]
    fake_inputs = [t for t in fake_args if isinstance(t, torch.Tensor)]
    versions = [t._version for t in fake_inputs]
    result = output._run_fake("call_function", target, fake_args, {})
    outs = [result] if isinstance(result, torch.Tensor) else result
    if not (isinstance(result, torch.Tensor) or type(result) is tuple) \
            or not all(isinstance(o, torch.Tensor) for o in outs):
        _refuse(cls, f"its forward returns a {type(result).__name__} that is not a tensor or a tuple of tensors")
    if any(t._version != v for t, v in zip(fake_inputs, versions)):
        _refuse(cls, "its forward modifies an input in place")
    storages = [StorageWeakRef(t.untyped_storage()) for t in fake_inputs]
    seen: list[Any] = []
    for o in outs:
        ref = StorageWeakRef(o.untyped_storage())
        if ref in storages:
            _refuse(cls, "an output aliases an input (a view or the input itself)")
        if ref in seen:
            _refuse(cls, "two outputs share storage")
        seen.append(ref)
    node = output.graph.create_node("call_function", target, tuple(output.to_fx(a) for a in args), {})
    node.meta["stack_trace"] = tx.stack_trace()
    node.meta["example_value"] = result
    output.call_count += 1
    return output.wrap_result(tx, node, result, args)


def _first_param(fn: types.FunctionType) -> str | None:
    code = fn.__code__
    return code.co_varnames[0] if code.co_argcount else None


_LOAD_FAST = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW",
              "LOAD_FAST_BORROW_LOAD_FAST_BORROW")
_FORWARD_AD_CTX = frozenset({"mark_dirty", "save_for_forward"})


class _CodeChecker:
    """Bytecode checks (and the guards they need) for the Python that the compiled graph will no
    longer run: conservative, see the module docstring."""

    _MAX_DEPTH = 4

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.refusal: str | None = None
        self.guards: list[tuple[GuardKind, Source, Any]] = []
        self._seen: set[types.CodeType] = set()

    def fail(self, why: str) -> None:
        if self.refusal is None:
            self.refusal = why

    def check_function(self, fn: types.FunctionType, src: Source | None, ctx_name: str | None, depth: int = 0) -> None:
        code = fn.__code__
        if code in self._seen or self.refusal is not None:
            return
        self._seen.add(code)
        where = fn.__qualname__
        if any(v != "__class__" for v in code.co_freevars):
            self.fail(f"{where} reads the free variables {list(code.co_freevars)} (a closure)")
            return
        for name in self._check_code(code, ctx_name, where, ()):
            self._check_global(fn, src, name, where, depth)

    def _check_code(self, code: types.CodeType, ctx_name: str | None, where: str, parent_cells: tuple[str, ...]
                    ) -> list[str]:
        """Refusals for stores in ``code`` (and nested code); the global names it loads."""
        if _FORWARD_AD_CTX & set(code.co_names):
            self.fail(f"{where} uses ctx.{sorted(_FORWARD_AD_CTX & set(code.co_names))[0]}")
        insts = list(dis.get_instructions(code))
        loaded: list[str] = []
        for i, ins in enumerate(insts):
            op = ins.opname
            if op in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                self.fail(f"{where} assigns the global {ins.argval!r}")
            elif op in ("STORE_DEREF", "DELETE_DEREF") and ins.argval not in code.co_cellvars \
                    and ins.argval not in parent_cells:
                self.fail(f"{where} assigns the nonlocal {ins.argval!r}")
            elif op in ("STORE_ATTR", "DELETE_ATTR"):
                prev = insts[i - 1] if i else None
                obj = None
                if prev is not None and prev.opname in _LOAD_FAST:
                    obj = prev.argval[-1] if isinstance(prev.argval, tuple) else prev.argval
                if ctx_name is None or obj != ctx_name:
                    self.fail(f"{where} sets the attribute .{ins.argval} of an object other than ctx")
            elif op in ("STORE_SUBSCR", "DELETE_SUBSCR", "STORE_SLICE", "DELETE_SLICE"):
                container = _subscript_container(insts, i)
                if container is None or container.opname not in _LOAD_FAST:
                    self.fail(f"{where} assigns an item of an object other than a local variable")
            elif op in ("LOAD_GLOBAL", "LOAD_NAME"):
                loaded.append(ins.argval)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):  # comprehensions, lambdas, nested functions
                loaded += self._check_code(const, None, where, parent_cells + code.co_cellvars)
        return loaded

    def _check_global(self, fn: types.FunctionType, src: Source | None, name: str, where: str, depth: int) -> None:
        if name not in fn.__globals__:
            return  # a builtin (or a NameError at run time, as in eager)
        value = fn.__globals__[name]
        g_src = ItemSource(AttrSource(src, "__globals__"), name) if src is not None else None
        if isinstance(value, types.FunctionType) and not _is_library(value):
            if depth >= self._MAX_DEPTH:
                self.fail(f"{where} calls functions nested too deep to check ({value.__qualname__})")
                return
            self.check_function(value, g_src, None, depth + 1)
            if g_src is not None:
                self.guards.append((GuardKind.ID_MATCH, g_src, value))
                self.guards.append((GuardKind.ID_MATCH, FuncAttrSource(g_src, "__code__"), value.__code__))
            return
        if isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                              torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
            kind = GuardKind.ID_MATCH
        elif value is None:
            kind = GuardKind.ID_MATCH
        elif is_constant_value(value):
            kind = GuardKind.EQUALS_MATCH
        else:
            self.fail(f"{where} reads the global {name!r} (a {type(value).__name__}), which pyjit cannot guard")
            return
        if g_src is not None:
            self.guards.append((kind, g_src, value))


def _subscript_container(insts: list[dis.Instruction], i: int) -> dis.Instruction | None:
    """The last instruction of the container expression of the store/delete at ``i``: walk back
    over the index (or slice bounds) expression, which pushed ``above`` values on top of the
    container; None where a jump target makes that unreliable."""
    above = 2 if insts[i].opname in ("STORE_SLICE", "DELETE_SLICE") else 1
    depth = 0
    for j in range(i - 1, 0, -1):
        if insts[j].is_jump_target:
            return None
        depth += _effect(insts[j])
        if depth == above:
            return insts[j - 1]
        if depth > above:
            return None
    return None


def _effect(ins: dis.Instruction) -> int:
    try:
        return dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
    except (ValueError, TypeError):
        return 99  # unknown: makes the caller give up


# -- no gradient: forward inlined with a ctx stub ----------------------------------------------------

def _make_ctx(tx: "Translator") -> VariableTracker:
    from .objects import ObjectVariable

    class CtxVariable(ObjectVariable):
        """The ``ctx`` of a forward whose backward never runs."""

        def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
            if name in _BACKWARD_ONLY:
                return _NoOp(name)
            if name == "needs_input_grad":
                unsupported("unsupported_attr", "ctx.needs_input_grad in a custom autograd.Function")
            return super().var_getattr(tx, name)

    return CtxVariable(torch.autograd.function.FunctionCtx, None)


class _NoOp(VariableTracker):
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__(None)
        self.name = name

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return ConstantVariable(None)

    def __repr__(self) -> str:
        return f"ctx.{self.name}"

