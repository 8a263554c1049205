"""Custom ``torch.autograd.Function`` calls in training graphs.

Where a gradient is needed, the tracer records ``MyFunction.apply(*args)`` as one opaque
``call_function`` node whose target is a small wrapper calling the real ``apply``
(``pyjit/variables/autograd_fn.py``; the wrapper carries ``pyjit_autograd_function``, a weak
reference to the class). The captured graph run as is therefore calls the real Function, and
autograd records the user's ``backward``. This module gets such graphs through the joint trace
(``joint.py``):

1. **Forward trace** (functionalized). ``torch.func.functionalize`` is a functorch transform,
   and ``Function.apply`` under one refuses Functions without ``setup_context`` (and would not
   keep the custom backward anyway). So each wrapper node is swapped (in a copy of the graph)
   for ``pyjit::autograd_function_apply(key, tensors)``, a functional custom op whose fake
   kernel runs the Function's ``forward`` for its output metadata. The forward graph keeps one
   opaque node per call.
2. **Joint trace.** :class:`FunctionInterpreter` replays the forward graph and runs each such
   node as the real ``cls.apply`` on the proxy tensors: ``make_fx`` records the aten ops of the
   user's ``forward``, and ``torch.autograd.grad`` runs the user's ``backward`` on them,
   recording its aten ops too. The joint graph is plain aten: partitioned and compiled like any
   other. (Checked on torch 2.13: no ``autograd_function_apply`` higher-order op appears; the
   Function's ``ctx`` holds the proxy tensors it saved.)

A failure in either trace of a graph holding such calls (a ``backward`` that cannot run on fake
tensors, a NumPy call, an extension kernel without a fake implementation) becomes
``NotImplementedError`` naming the Functions, so the graph runs as captured (logged on
``fallbacks``), where the real ``apply`` gives eager's gradients.
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any, Iterator

import torch
import torch.fx

_ATTR = "pyjit_autograd_function"  # set by the tracer on its apply wrappers


def function_of(target: Any) -> type | None:
    """The autograd.Function class a captured graph node calls, or None."""
    ref = getattr(target, _ATTR, None)
    return ref() if callable(ref) else None


def autograd_functions(gm: torch.fx.GraphModule) -> list[type]:
    """The custom autograd.Function classes ``gm`` calls (in graph order, each once)."""
    found: list[type] = []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            cls = function_of(n.target)
            if cls is not None and cls not in found:
                found.append(cls)
    return found


@dataclasses.dataclass
class _Call:
    """One recorded call: the class and its arguments with tensors taken out (``None`` slots)."""
    cls: type
    template: tuple[Any, ...]
    tensor_slots: list[int]
    single: bool  # forward returned one tensor (not a tuple)

    def rebuild(self, tensors: list[torch.Tensor]) -> list[Any]:
        args = list(self.template)
        for slot, t in zip(self.tensor_slots, tensors):
            args[slot] = t
        return args


_calls: dict[int, _Call] = {}
_keys = itertools.count()
_lock = threading.Lock()


def _forward_only(call: _Call, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The Function's ``forward`` without autograd (the op's kernels: metadata, never gradients)."""
    from torch.autograd.function import FunctionCtx

    args = call.rebuild(tensors)
    with torch.no_grad():
        if _has_setup_context(call.cls):
            out = call.cls.forward(*args)
        else:
            ctx = FunctionCtx()
            ctx.needs_input_grad = tuple(isinstance(a, torch.Tensor) for a in args)  # type: ignore[attr-defined]
            out = call.cls.forward(ctx, *args)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    # A custom op's outputs may not alias its inputs (the tracer refuses Functions returning
    # views of their inputs; this is belt and braces for the metadata-only kernel).
    return [o.clone() if any(o is t for t in tensors) else o for o in outs]


def _has_setup_context(cls: type) -> bool:
    return getattr(cls, "setup_context", None) is not getattr(torch.autograd.Function, "setup_context", None)


@torch.library.custom_op("pyjit::autograd_function_apply", mutates_args=())
def _apply_op(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return _forward_only(_calls[key], tensors)


@_apply_op.register_fake
def _(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return _forward_only(_calls[key], tensors)


def _no_backward(ctx: Any, grads: Any) -> Any:
    raise NotImplementedError("pyjit::autograd_function_apply is replaced by the real apply before autograd runs")


# An autograd formula (never run) so the forward trace's outputs require grad where an input
# does, as the real apply's would: composite ops downstream choose their kernel by it.
_apply_op.register_autograd(_no_backward, setup_context=lambda ctx, inputs, output: None)
APPLY_OP = torch.ops.pyjit.autograd_function_apply.default


def _call_opaque(key: int, tensors: list[torch.Tensor]) -> Any:
    out = APPLY_OP(key, list(tensors))
    return out[0] if _calls[key].single else tuple(out)


class OpaqueCalls:
    """A copy of a captured graph whose Function calls are ``pyjit::autograd_function_apply``
    nodes, and the registry entries they use (released by ``close``)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        from ..compile_fx import copy_graph

        self.keys: list[int] = []
        graph = copy_graph(gm.graph)
        for n in graph.nodes:
            cls = function_of(n.target) if n.op == "call_function" else None
            if cls is None:
                continue
            if n.kwargs:
                raise NotImplementedError(f"{cls.__name__}.apply called with keyword arguments")
            slots = [i for i, a in enumerate(n.args) if isinstance(a, torch.fx.Node)]
            template = tuple(None if isinstance(a, torch.fx.Node) else a for a in n.args)
            example = n.meta.get("example_value")
            with _lock:
                key = next(_keys)
                _calls[key] = _Call(cls, template, slots, isinstance(example, torch.Tensor))
            self.keys.append(key)
            n.target = _call_opaque
            n.args = (key, [n.args[i] for i in slots])
        self.gm = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)

    def close(self) -> None:
        with _lock:
            for key in self.keys:
                _calls.pop(key, None)


class FunctionInterpreter(torch.fx.Interpreter):
    """Runs a forward aten graph, each ``pyjit::autograd_function_apply`` node as the real
    ``cls.apply`` (so autograd, under ``make_fx``, records the user's backward)."""

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target is APPLY_OP:
            key, tensors = args
            call = _calls[key]
            out = call.cls.apply(*call.rebuild(list(tensors)))
            return [out] if isinstance(out, torch.Tensor) else list(out)
        return super().call_function(target, args, kwargs)


def describe(classes: list[type]) -> str:
    return ", ".join(f"{c.__qualname__}.apply" for c in classes)


def iter_calls() -> Iterator[tuple[int, _Call]]:  # for tests: nothing may stay registered
    with _lock:
        return iter(list(_calls.items()))

