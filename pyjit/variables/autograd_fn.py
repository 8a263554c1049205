"""``MyFunction.apply(*args)`` of a custom ``torch.autograd.Function`` where no gradient is needed
(grad mode off, or no tensor argument requires grad; both fixed by the trace's guards: the global
grad-mode guard and every input's TENSOR_MATCH, which includes ``requires_grad``).

Then ``apply`` is exactly its ``forward``: that is inlined with a context object (``ctx``) that
records attribute stores and takes ``save_for_backward``/``mark_*`` as no-ops (nothing will call
``backward``). Where a gradient is needed the custom backward must be kept, which the tracer does
not model yet: that is a graph break naming the function (the call then runs natively).
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch

from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .class_members import class_member, lookup_class_attr
from .constant import ConstantVariable

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
        unsupported("unsupported_call", f"{cls.__name__}.apply with gradients needed (a custom autograd.Function "
                                        f"whose backward pyjit does not trace)")
    forward = lookup_class_attr(cls, "forward")
    if not isinstance(forward, staticmethod) or not isinstance(forward.__func__, types.FunctionType):
        unsupported("unsupported_call", f"{cls.__name__}.forward is not a Python staticmethod")
    fwd = class_member(tx, cls_var, "forward", forward, on_instance=False)  # guarded where found
    assert fwd is not None
    if lookup_class_attr(cls, "setup_context") is not lookup_class_attr(torch.autograd.Function, "setup_context"):
        return fwd.call_function(tx, args, kwargs)  # forward(*args); setup_context only feeds backward
    return fwd.call_function(tx, [_make_ctx(tx), *args], kwargs)


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
