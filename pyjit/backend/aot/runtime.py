"""Running a partitioned graph: one ``torch.autograd.Function`` per compiled graph.

``forward`` runs the compiled forward graph, writes the new values of mutated inputs into the
real inputs, saves the values the partition chose and returns the user outputs (outputs that
do not require grad are marked non-differentiable). ``backward`` compiles the backward graph on
its first call (so inference-only use never pays for it), feeds it the saved values and the
tangents (made contiguous, as traced) and returns the grads, ``None`` where eager gives
``None``. Double backward (``create_graph=True`` through a compiled graph) raises an error that
names the graph and says what to do. Outputs aliasing an input are rebuilt outside the
``Function`` as ``as_strided`` views of the real input, so they alias and differentiate as in
eager.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ...logs import get_logger
from .joint import AliasedOutput, JointGraph, fetch_attributes
from .partition import Partitioned

log = get_logger("fallbacks")
Compiler = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


class AOTState:
    """Everything a compiled training graph needs at run time (one per compiled graph)."""

    def __init__(self, label: str, joint: JointGraph, part: Partitioned, fw: Callable[..., Any],
                 bw_compiler: Compiler) -> None:
        self.label = label
        self.joint = joint
        self.part = part
        self.fw = fw
        self.bw: Callable[..., Any] | None = None
        self.bw_compiler = bw_compiler
        self.lock = threading.Lock()
        self.tangent_outputs = joint.tangent_outputs
        self.non_diff = [i for i, r in enumerate(joint.fw_requires_grad) if not r]
        self.mutated_saved = [j for j, p in enumerate(part.saved_primals) if p in joint.mutated_inputs]

    def backward_fn(self, example: list[torch.Tensor]) -> Callable[..., Any]:
        """The compiled backward, compiled on first use (the aten graph as is if that fails)."""
        if self.bw is None:
            with self.lock:
                if self.bw is None:
                    bw_gm = self.part.bw_gm
                    try:
                        with torch.no_grad():
                            self.bw = self.bw_compiler(bw_gm, example)
                    except Exception as e:
                        from ...config import config
                        if config.raise_on_internal_error:
                            raise
                        log.warning("compiling the backward of %s failed (%s: %s); running it as captured",
                                    self.label, type(e).__name__, e)
                        self.bw = bw_gm.forward
        return self.bw

    def run_backward(self, args: list[torch.Tensor]) -> Sequence[torch.Tensor]:
        """The compiled backward on ``args``; if it raises, the aten graph as captured (logged)."""
        bw = self.backward_fn(args)
        try:
            return bw(*args)
        except Exception as e:
            from ...config import config
            if config.raise_on_internal_error or bw == self.part.bw_gm.forward:
                raise
            log.warning("the compiled backward of %s raised %s: %s; running it as captured from now on",
                        self.label, type(e).__name__, e)
            self.bw = self.part.bw_gm.forward
            return self.bw(*args)


class CompiledFunction(torch.autograd.Function):
    """Compiled forward + lazily compiled backward of one joint graph."""

    @staticmethod
    def forward(ctx: Any, state: AOTState, *primals: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        joint = state.joint
        outs = state.fw(*primals)
        n_fw = joint.fw_outputs
        n_mut = len(joint.mutated_inputs)
        saved = list(outs[n_fw + n_mut:])
        for j in state.mutated_saved:  # the backward needs the value from before the mutation
            saved[j] = saved[j].clone()
        for index, value in zip(joint.mutated_inputs, outs[n_fw:n_fw + n_mut]):
            primals[index].copy_(value)
        ctx.state = state
        ctx.save_for_backward(*saved)
        user = tuple(outs[:n_fw])
        if state.non_diff:
            ctx.mark_non_differentiable(*[user[i] for i in state.non_diff])
        return user

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        state: AOTState = ctx.state
        if torch.is_grad_enabled():
            raise RuntimeError(
                f"pyjit: double backward (create_graph=True, or torch.autograd.grad of a grad) through the "
                f"compiled graph {state.label} is not supported. Run this code without pyjit "
                f"(pyjit.jit(..., backend='eager') or torch.compiler.disable) or compute the higher-order "
                f"gradient outside the compiled function.")
        saved = list(ctx.saved_tensors)
        tangents = [grads[i].contiguous() for i in state.tangent_outputs]  # grads are materialized
        args = saved + tangents
        previous = _set_callback(None)
        try:
            present = list(state.run_backward(args))
        finally:
            _set_callback(previous)
        it = iter(present)
        return (None, *[next(it) if has else None for has in state.joint.has_grad])


# The compiled graphs (and Triton's launcher, compiling a kernel on its first launch) must not be
# converted by pyjit's frame hook when they run inside a jitted frame or ``loss.backward()``.
from ...backends import _set_callback  # noqa: E402 - one loader of the C setter (no-op without _C)


def make_runtime(state: AOTState, gm: torch.nn.Module, attr_names: Sequence[str],
                 fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The callable that replaces the captured graph: inputs in, user output tree out."""
    joint = state.joint
    requires_grad = joint.primal_requires_grad
    user_outputs = joint.user_outputs
    out_spec = joint.out_spec

    def compiled_fn(*args: Any) -> Any:
        primals = [*args, *fetch_attributes(gm, attr_names)] if attr_names else list(args)
        grad = torch.is_grad_enabled()
        if len(primals) != len(requires_grad):
            return fallback(*args)
        for p, r in zip(primals, requires_grad):
            # The joint graph was traced for this requires_grad pattern; another runs as captured.
            if not isinstance(p, torch.Tensor) or (grad and bool(p.requires_grad) != r):
                return fallback(*args)
        previous = _set_callback(None)
        try:
            outs = CompiledFunction.apply(state, *primals)
        finally:
            _set_callback(previous)
        leaves = [outs[u] if isinstance(u, int) else _view_of(primals[u.input_index], u) for u in user_outputs]
        return pytree.tree_unflatten(leaves, out_spec)

    compiled_fn.pyjit_state = state  # type: ignore[attr-defined]
    return compiled_fn


def _view_of(base: torch.Tensor, alias: AliasedOutput) -> torch.Tensor:
    if not alias.requires_grad:
        base = base.detach()
    return base.as_strided(alias.size, alias.stride, base.storage_offset() + alias.offset_delta)
