"""``torch.*`` / ``torch.nn.functional.*`` functions and ``Tensor`` methods as graph calls,
plus the grad-mode context managers (``torch.no_grad()``, ``enable_grad()``, ``set_grad_enabled``).

Calls are recorded as ``call_function`` nodes on the original callable (readable graphs, and the
backend sees what the user wrote). A few functions are answered at trace time instead, each with
the guard that makes that sound (``torch.is_grad_enabled()`` is guarded by the global-state guard).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..guards.guards import GuardKind
from ..identity import static_attr
from ..trace.graph_breaks import unsupported
from .base import KnownCallableVariable, VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator

_TORCH_PREFIXES = ("torch.", "torch")


def is_torch_library_function(fn: Any) -> bool:
    mod = static_attr(fn, "__module__") or ""
    if type(mod) is not str:
        return False
    if mod == "torch" or mod.startswith("torch."):
        # Module subclasses' forward methods (nn.Linear.forward...) are inlined, not called;
        # so are functions decorated with @torch.no_grad() & co (torch.utils._contextlib), and
        # torch.optim's Python update functions (they take lists of tensors: variables/optimizer.py).
        return not mod.startswith(("torch.nn.modules", "torch.utils._contextlib", "torch.optim"))
    return False


def _is_distributed(fn: Any) -> bool:
    mod = static_attr(fn, "__module__")
    return type(mod) is str and mod.startswith("torch.distributed") and torch.distributed.is_available()


# Functions whose result depends only on global state guarded below, or on constant args.
_FOLD_ON_CONSTANTS = {
    torch.is_tensor: lambda v: False,
}
_EFFECTFUL = {
    torch.manual_seed: "torch.manual_seed",
    torch.set_default_dtype: "torch.set_default_dtype",
    torch.set_grad_enabled: None,  # handled as a context manager/function below
}


class TorchFunctionVariable(KnownCallableVariable):
    """A ``torch.*`` / ``torch.nn.functional.*`` function: calling it records a graph node."""

    __slots__ = ()

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        fn = self.fn
        if _is_distributed(fn):
            from .distributed import call_distributed  # collectives as functional ops; the rest breaks

            return call_distributed(tx, fn, args, kwargs)
        if fn in (torch.no_grad, torch.enable_grad):
            return GradModeVariable(fn is torch.enable_grad)
        if fn in _AUTOCAST_CLASSES or fn is torch.inference_mode:
            return StateContextVariable.create(fn, [a.as_python_constant() for a in args],
                                               {k: v.as_python_constant() for k, v in kwargs.items()})
        if fn is torch.set_grad_enabled:
            mode = args[0].as_python_constant()
            gm = GradModeVariable(bool(mode))
            gm.apply(tx)  # also usable as a plain function call
            return gm
        answer = _compile_state_answer(fn)
        if answer is not None:
            return ConstantVariable(answer)
        if fn is torch.is_grad_enabled:
            return ConstantVariable(torch.is_grad_enabled())
        if fn is torch.get_default_dtype:
            return ConstantVariable(torch.get_default_dtype())
        if fn is torch.is_tensor or fn is torch.is_floating_point and not _has_tensor(args):
            from .tensor import TensorVariable

            if fn is torch.is_tensor:
                return ConstantVariable(isinstance(args[0], TensorVariable))
        if fn in (torch.is_floating_point, torch.is_complex, torch.numel) and _has_tensor(args):
            answer = fn(args[0].example)  # type: ignore[attr-defined]
            if isinstance(answer, torch.SymInt):  # numel of a tensor with symbolic sizes
                return tx.output.call(tx, "call_method", "numel", [args[0]], {})
            return ConstantVariable(answer)
        if fn in (torch.Size, torch.device, torch.dtype, torch.finfo, torch.iinfo, torch.broadcast_shapes) or fn in _FOLD_ON_CONSTANTS:
            from .builtins import fold

            return fold(tx, fn, args, kwargs)
        if fn in _EFFECTFUL or getattr(fn, "__name__", "").startswith("_set_"):
            unsupported("side_effect", f"{getattr(fn, '__name__', fn)}() changes global state")
        if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
            unsupported("object_construction", f"constructing {fn.__name__} inside the traced code")
        if getattr(fn, "__name__", "").startswith("_foreach_"):
            from .foreach import call_foreach  # multi-tensor ops as the per-tensor ops eager runs

            result = call_foreach(tx, fn, args, kwargs)
            if result is not None:
                return result
        return tx.output.call(tx, "call_function", fn, args, kwargs)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .builder import wrap

        return wrap(tx, getattr(self.fn, name), None)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return cg.ref(self.fn, getattr(self.fn, "__name__", "torch_fn"))

    def __repr__(self) -> str:
        return f"TorchFunctionVariable({getattr(self.fn, '__qualname__', self.fn)})"


# "Am I being compiled?" queries that library code uses to pick a traceable path (transformers'
# CompileableContextVar, cache implementations...): while pyjit traces, the code *is* being
# compiled, exactly as under torch.compile; exporting, scripting and FX tracing are not happening.
# Recognised by name among torch's own functions (its compiler's aliases of these live in
# internal modules pyjit never imports).
_COMPILING_TRUE_NAMES = frozenset({"is_compiling", "is_dynamo_compiling"})
_COMPILING_FALSE = frozenset({("torch.compiler", "is_exporting"), ("torch.jit", "is_scripting"),
                              ("torch._jit_internal", "is_scripting"), ("torch.jit", "is_tracing"),
                              ("torch.jit._trace", "is_tracing"), ("torch.fx._symbolic_trace", "is_fx_tracing"),
                              ("torch.fx._symbolic_trace", "is_fx_symbolic_tracing")})


def _compile_state_answer(fn: Any) -> bool | None:
    key = (getattr(fn, "__module__", None), getattr(fn, "__name__", None))
    if key[1] in _COMPILING_TRUE_NAMES and isinstance(key[0], str) and key[0].startswith("torch"):
        return True
    if key in _COMPILING_FALSE:
        return False
    return None


def _has_tensor(args: list[VariableTracker]) -> bool:
    from .tensor import TensorVariable

    return any(isinstance(a, TensorVariable) for a in args)


class TensorMethodVariable(VariableTracker):
    """``x.add`` before it is called."""

    __slots__ = ("tensor", "name")

    def __init__(self, tensor: VariableTracker, name: str) -> None:
        super().__init__(None)
        self.tensor = tensor
        self.name = name

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return self.tensor.call_method(tx, self.name, args, kwargs)

    def reconstruct(self, cg: "OutputCodegen") -> str:  # graph breaks: the method, bound again
        return f"{cg.ref(getattr, 'getattr')}({self.tensor.reconstruct(cg)}, {cg.constant(self.name)})"


class GradModeVariable(VariableTracker):
    """``torch.no_grad()`` / ``torch.enable_grad()`` / ``torch.set_grad_enabled(b)`` as a context.

    Entering records ``torch._C._set_grad_enabled(mode)`` in the graph (so the compiled graph
    reproduces the mode change) and flips the real grad mode while tracing (so fake results get
    the right ``requires_grad``); exiting restores the previous mode the same way.
    """

    __slots__ = ("mode", "prev")

    def __init__(self, mode: bool) -> None:
        super().__init__(None)
        self.mode = mode
        self.prev: bool | None = None

    def python_type(self) -> type:
        return torch.no_grad if not self.mode else torch.enable_grad

    def reconstruct(self, cg: "OutputCodegen") -> str:  # a fresh context of the same mode
        return f"{cg.ref(torch.enable_grad if self.mode else torch.no_grad, 'grad_mode')}()"

    def apply(self, tx: "Translator") -> None:
        self.prev = torch.is_grad_enabled()
        _set_grad(tx, self.mode)

    def enter(self, tx: "Translator") -> VariableTracker:
        if self.prev is None:  # torch.set_grad_enabled(b) already switched when it was called
            self.apply(tx)
        return ConstantVariable(None)

    def exit(self, tx: "Translator") -> VariableTracker:
        assert self.prev is not None
        _set_grad(tx, self.prev)
        return ConstantVariable(None)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        # @torch.no_grad() used as a decorator inside the trace
        unsupported("context_manager", "torch.no_grad() as a decorator inside traced code")

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name == "clone":  # torch's decorator support makes a fresh context per call
            return _CloneCtx(self)
        if name == "__enter__":
            return _BoundCtx(self, True)
        if name == "__exit__":
            return _BoundCtx(self, False)
        unsupported("unsupported_attr", f"grad-mode context .{name}")


class _CloneCtx(VariableTracker):
    __slots__ = ("ctx",)

    def __init__(self, ctx: GradModeVariable) -> None:
        super().__init__(None)
        self.ctx = ctx

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return GradModeVariable(self.ctx.mode)


class _BoundCtx(VariableTracker):
    __slots__ = ("ctx", "is_enter")

    def __init__(self, ctx: GradModeVariable, is_enter: bool) -> None:
        super().__init__(None)
        self.ctx = ctx
        self.is_enter = is_enter

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return self.ctx.enter(tx) if self.is_enter else self.ctx.exit(tx)


def _set_grad(tx: "Translator", mode: bool) -> None:
    if torch.is_grad_enabled() == mode:
        return
    node = tx.output.graph.call_function(torch._C._set_grad_enabled, (mode,))
    node.meta["stack_trace"] = tx.stack_trace()
    node.meta["example_value"] = None
    torch._C._set_grad_enabled(mode)


_AUTOCAST_CLASSES = tuple({torch.autocast, torch.amp.autocast})


class StateContextVariable(VariableTracker):
    """``torch.autocast(...)`` / ``torch.inference_mode(...)`` as a ``with`` context.

    Entering records ``_enter_autocast(*args)`` / ``_enter_inference_mode(mode)`` (which return the
    live context object) and exiting records ``_exit_*(ctx)``, so the compiled graph switches the
    state itself; meanwhile the real state is switched during tracing so fake results get the
    dtypes/flags eager would produce.
    """

    __slots__ = ("enter_fn", "exit_fn", "enter_args", "factory", "real", "node")

    def __init__(self, enter_fn: Any, exit_fn: Any, enter_args: tuple[Any, ...], factory: Any) -> None:
        super().__init__(None)
        self.enter_fn = enter_fn
        self.exit_fn = exit_fn
        self.enter_args = enter_args
        self.factory = factory
        self.real: Any = None
        self.node: Any = None

    @staticmethod
    def create(cls: Any, args: list[Any], kwargs: dict[str, Any]) -> "StateContextVariable":
        from torch.amp import autocast_mode
        from torch.autograd import grad_mode

        if cls is torch.inference_mode:
            mode = bool(args[0]) if args else bool(kwargs.get("mode", True))
            return StateContextVariable(grad_mode._enter_inference_mode, grad_mode._exit_inference_mode, (mode,),
                                        lambda: torch.inference_mode(mode))
        names = ("device_type", "dtype", "enabled", "cache_enabled")
        values = dict(zip(names, args))
        values.update(kwargs)
        full = (values["device_type"], values.get("dtype"), values.get("enabled", True), values.get("cache_enabled"))
        return StateContextVariable(autocast_mode._enter_autocast, autocast_mode._exit_autocast, full,
                                    lambda: torch.amp.autocast(*full))

    def enter(self, tx: "Translator") -> VariableTracker:
        self.real = self.factory()
        self.real.__enter__()
        tx.output.entered_contexts.append(self.real)
        self.node = tx.output.graph.call_function(self.enter_fn, self.enter_args)
        self.node.meta["stack_trace"] = tx.stack_trace()
        self.node.meta["example_value"] = None
        return ConstantVariable(None)

    def exit(self, tx: "Translator") -> VariableTracker:
        tx.output.entered_contexts.remove(self.real)
        self.real.__exit__(None, None, None)
        node = tx.output.graph.call_function(self.exit_fn, (self.node,))
        node.meta["stack_trace"] = tx.stack_trace()
        node.meta["example_value"] = None
        return ConstantVariable(None)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        """A fresh, not yet entered context of the same settings (a graph break before its
        ``with`` passes it to the resume function, which enters it natively)."""
        if self.real is not None:
            unsupported("unsupported_return", "an autocast/inference-mode context that is already entered")
        return f"{cg.ref(self.factory, 'context_factory')}()"

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name == "__enter__":
            return _BoundCtx(self, True)  # type: ignore[arg-type]
        if name == "__exit__":
            return _BoundCtx(self, False)  # type: ignore[arg-type]
        unsupported("unsupported_attr", f"context .{name}")


def install_global_state_guards(tx: "Translator") -> None:
    """Results depend on grad mode, the default dtype, autocast and whether fp32 matmuls may use
    TF32 (compiled matmul templates bake it in; eager reads it per call): guard all four."""
    g = tx.output.guards
    g.add(GuardKind.GLOBAL_STATE, None, torch.is_grad_enabled(), extra=torch.is_grad_enabled)
    g.add(GuardKind.GLOBAL_STATE, None, torch.get_default_dtype(), extra=torch.get_default_dtype)
    if _matmul_tf32 is not None:
        g.add(GuardKind.GLOBAL_STATE, None, _matmul_tf32(), extra=_matmul_tf32)
    state = autocast_state()
    if state or _any_autocast is None:
        g.add(GuardKind.GLOBAL_STATE, None, state, extra=autocast_state)
    else:  # traced outside autocast: the C builtin answers for every call made outside it too
        g.add(GuardKind.GLOBAL_STATE, None, False, extra=_any_autocast)


_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None)
# ``torch.backends.cuda.matmul.allow_tf32`` (also set by ``torch.set_float32_matmul_precision``).
_matmul_tf32 = getattr(torch._C, "_get_cublas_allow_tf32", None)
_AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_state() -> tuple[tuple[str, torch.dtype], ...]:
    """The autocast regions in force: (device type, dtype) of each device type whose autocast is
    on; empty when none is (one C call). A graph traced under bf16 autocast must not run under
    fp16 autocast, nor under autocast for another device type."""
    if _any_autocast is not None and not _any_autocast():
        return ()
    return tuple((d, torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES if torch.is_autocast_enabled(d))

