"""Running a partitioned graph: one ``torch.autograd.Function`` per compiled graph.

``forward`` runs the compiled forward graph, writes the new values of mutated inputs that do not
require grad into the real inputs, saves the values the partition chose and returns the computed
outputs, then the new values that require grad (outputs that do not require grad are marked
non-differentiable; an output the compiled code returns as an input's buffer is copied, as
eager's is fresh). Outside the Function, those new values are copied into their inputs under the
caller's grad mode (so an input updated by ``x += lin(x)`` gets a grad_fn, as in eager), and
views of computed outputs (``lin(x)[:, :4]``) are taken, so that autograd allows in-place ops on
them. ``backward`` compiles the backward graph on its first call (so inference-only use never
pays for it), feeds it the saved values and the tangents (made contiguous, as traced) and
returns the grads, ``None`` where eager gives ``None``. Double backward (``create_graph=True``
through a compiled graph) raises an error that names the graph and says what to do. Outputs
aliasing an input are rebuilt outside the ``Function`` from the real input as eager relates them
(``backend/aliasing.py``), so they alias and differentiate as in eager.

Deferred saving (``config.aot_defer_saving``): until a backward has run through a graph, its
forward is the partition's ``inference_gm`` (no saved values: the same kernels as under
``no_grad``) and saves only the graph's inputs. A backward of such a call first replays the
training forward on those inputs to get the saved values (compiled then, on first use), then
runs the backward, and switches the graph to the saving forward for every later call. So
grad-enabled inference never writes activations, and a training loop pays one extra forward on
its first step. Graphs whose forward cannot be replayed (random ops, mutated inputs) always save.
An input modified in place between the forward and such a backward makes autograd raise its
usual "modified by an inplace operation" error (the inputs are saved tensors): never a wrong
gradient. An input whose layout changed without a version bump (``p.data = q``, other strides)
is replayed through the captured graph: the compiled forward of a graph whose inputs the
frontend's guards pin reads them without a per-call check.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ...logs import get_logger
from ..aliasing import OutputAlias, rebuild_alias
from .joint import IntermediateView, JointGraph, fetch_attributes
from .partition import Partitioned
from ..autocast import call_without_autocast

log = get_logger("fallbacks")
_hint_log = get_logger("perf_hints")
Compiler = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


class AOTState:
    """Everything a compiled training graph needs at run time (one per compiled graph)."""

    def __init__(self, label: str, joint: JointGraph, part: Partitioned, fw: Callable[..., Any] | None,
                 bw_compiler: Compiler, fw_compiler: Compiler | None = None,
                 inference_fw: Callable[..., Any] | None = None,
                 sizes_of: Callable[[Sequence[torch.Tensor]], list[Any]] | None = None) -> None:
        """``fw`` is the compiled saving forward, or None to compile it with ``fw_compiler`` on
        first use; ``inference_fw`` (deferred saving) runs until the first backward.
        ``sizes_of(primals)``: the values of ``part.saved_sizes`` for a call (symbolic graphs)."""
        self.label = label
        # The backward's torch.profiler range (pyjit/report/profiler.py), named after the frame
        # by the frontend when it knows it.
        # A graph label quotes its source file; torch's Chrome trace export would not escape it.
        self.range_name = f"pyjit: {label} backward".replace('"', "'")
        self.joint = joint
        self.part = part
        self.fw = fw
        self.fw_compiler = fw_compiler
        self.inference_fw = inference_fw
        self.bw: Callable[..., Any] | None = None
        self.bw_compiler = bw_compiler
        self.lock = threading.Lock()
        # Mutated inputs whose new value requires grad: returned by the Function after the user
        # outputs, written into the inputs outside it (make_runtime) so that autograd records it.
        self.diff_mutations = [j for j, r in enumerate(joint.mutation_requires_grad) if r]
        n_fw = joint.fw_outputs
        # The Function's output each tangent belongs to (the joint graph counts all mutations).
        self.tangent_outputs = [i if i < n_fw else n_fw + self.diff_mutations.index(i - n_fw)
                                for i in joint.tangent_outputs]
        self.non_diff = [i for i, r in enumerate(joint.fw_requires_grad) if not r]
        self.mutated_saved = [j for j, p in enumerate(part.saved_primals) if p in joint.mutated_inputs]
        self.sizes_of = sizes_of
        self.copied_outputs: list[int] | None = None  # see fresh()
        # How the new values of mutated inputs are written back (see write_back): None until the
        # first call decides; then groups of positions written by one _foreach_copy_ each.
        self.write_groups: list[list[int]] | None = None
        # The strides each saved tensor had when the joint graph was traced: the backward graph's
        # views were recorded for them (see keep_traced_strides).
        self.saved_strides = traced_strides(part.bw_gm, part.num_saved)
        self.any_saved_layout = any(st is not None for st in self.saved_strides)
        self.layout_hint_logged = False
        # The saved values the saving forward returns in another layout than traced, found on
        # its first call. Kept only where the forward's inputs are pinned by the caller's guards
        # (guarded_layouts): its outputs' layouts are then the same on every call, and later
        # calls look at these values only, not at every saved value.
        self.restride: list[int] | None = None
        # Every primal is a tensor on every call (the caller's guards pin their types): the
        # forward saves them without sorting out numbers per call (set by aot_compile).
        self.tensor_primals = False
        # The layouts the caller's guards pin (shape, strides, dtype, device per primal) when the
        # forward graphs skip their per-call input check (INPUTS_GUARDED; set by aot_compile).
        self.guarded_layouts: list[tuple[Any, ...]] | None = None
        if part.saved_sizes and sizes_of is None:
            raise ValueError("a partition that saves sizes needs sizes_of")

    def write_back(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """``dst.copy_(src)`` for each pair: on CUDA one launch per input (a training step of a
        ResNet-50 writes back ~160 batch-norm statistics), so pairs of one dtype and device go
        through one ``torch._foreach_copy_``. Decided on the first call, which pairs may: the
        fused copy does not order its writes, so only when no value shares memory with a
        written input (the compiled graph returns the same buffers every call, and the frame's
        guards keep its inputs apart)."""
        if self.write_groups is None:
            self.write_groups = _write_groups(pairs)
        if not self.write_groups:
            for dst, src in pairs:
                dst.copy_(src)
            return
        for group in self.write_groups:
            if len(group) == 1:
                dst, src = pairs[group[0]]
                dst.copy_(src)
            else:
                torch._foreach_copy_([pairs[i][0] for i in group], [pairs[i][1] for i in group])

    def fresh(self, outs: tuple[torch.Tensor, ...], primals: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        """The computed outputs, each a new tensor: a compiled forward may return an input's
        buffer for a value eager computes fresh (``torch.cat([x])``). Which outputs do is
        decided on the first call (the compiled code returns the same buffers every call)."""
        if self.copied_outputs is None:
            keys = {_storage_key(p) for p in primals if isinstance(p, torch.Tensor) and p.layout == torch.strided}
            self.copied_outputs = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor)
                                   and o.layout == torch.strided and _storage_key(o) in keys]
        if not self.copied_outputs:
            return outs
        fixed = list(outs)
        for i in self.copied_outputs:
            fixed[i] = fixed[i].clone()
        return tuple(fixed)

    def saving_fw(self, example: Sequence[torch.Tensor]) -> Callable[..., Any]:
        """The forward that saves for the backward (compiled on first use under deferred saving)."""
        if self.fw is None:
            with self.lock:
                if self.fw is None:
                    assert self.fw_compiler is not None
                    with torch.no_grad():
                        self.fw = self.fw_compiler(self.part.fw_gm, [t.detach() if isinstance(t, torch.Tensor) else t
                                                                     for t in example])
        return self.fw

    def replay_saved(self, primals: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The saved values of a deferred-saving call: the saving forward replayed on its inputs."""
        self.inference_fw = None  # a backward came: later calls save in their forward
        self.copied_outputs = None  # decided again on the saving forward's first call
        if self.guarded_layouts is not None and [layout_of(p) for p in primals] != self.guarded_layouts:
            # A primal's metadata changed since its forward without a version bump (``p.data = q``
            # with other strides): the saving forward, compiled for the guarded layouts without a
            # per-call check, must not read it (nor be compiled for it). The captured graph, with
            # views as reshapes, reads any strides; other sizes fail there as in eager.
            with torch.no_grad():
                outs = views_as_reshapes(self.part.fw_gm).forward(*primals)
            saved = list(outs[self.joint.num_fw_outputs:])
            keep_traced_strides(saved, self.saved_strides)
            return saved
        with torch.no_grad():
            outs = self.saving_fw(primals)(*primals)
        saved = list(outs[self.joint.num_fw_outputs:])
        keep_traced_strides(saved, self.saved_strides)
        return saved

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
                        self.bw = self.captured_backward()
        return self.bw

    def captured_backward(self) -> Callable[..., Any]:
        """The backward graph run by aten, with views that tolerate any input strides."""
        if getattr(self, "_captured_bw", None) is None:
            self._captured_bw = views_as_reshapes(self.part.bw_gm).forward
        return self._captured_bw

    def run_backward(self, args: list[torch.Tensor]) -> Sequence[torch.Tensor]:
        """The compiled backward on ``args``; if it raises, the aten graph as captured (logged)."""
        bw = self.backward_fn(args)
        try:
            return bw(*args)
        except Exception as e:
            from ...config import config
            if config.raise_on_internal_error or bw is getattr(self, "_captured_bw", None):
                raise
            log.warning("the compiled backward of %s raised %s: %s; running it as captured from now on",
                        self.label, type(e).__name__, e)
            self.bw = self.captured_backward()
            return self.bw(*args)


class CompiledFunction(torch.autograd.Function):
    """Compiled forward + lazily compiled backward of one joint graph."""

    @staticmethod
    def forward(ctx: Any, state: AOTState, *primals: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        # The partitioned graphs were traced below autocast (its casts are nodes in them): the
        # caller's autocast stays off while they run, compiled or as captured (backend/autocast.py).
        return call_without_autocast(_forward, ctx, state, primals)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        return call_without_autocast(_backward, ctx, grads)


def _forward(ctx: Any, state: AOTState, primals: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
    """CompiledFunction.forward, autocast off."""
    joint = state.joint
    ctx.state = state
    # Sizes the backward reads (symbolic graphs), from this call's input sizes.
    ctx.sizes = state.sizes_of(primals) if state.sizes_of is not None else []
    inference_fw = state.inference_fw
    ctx.replay = inference_fw is not None
    if inference_fw is not None:  # deferred saving: the backward replays the forward
        user = state.fresh(tuple(inference_fw(*primals)), primals)
        # Tensors through save_for_backward (autograd checks them for in-place changes);
        # the numbers of a symbolic graph kept as they are.
        if state.tensor_primals:
            ctx.save_for_backward(*primals)
            ctx.numbers = _NO_NUMBERS
        else:
            ctx.save_for_backward(*[p for p in primals if isinstance(p, torch.Tensor)])
            ctx.numbers = {i: p for i, p in enumerate(primals) if not isinstance(p, torch.Tensor)}
        if state.non_diff:
            ctx.mark_non_differentiable(*[user[i] for i in state.non_diff])
        return user
    outs = state.saving_fw(primals)(*primals)
    n_fw = joint.fw_outputs
    n_mut = len(joint.mutated_inputs)
    saved = list(outs[n_fw + n_mut:])
    for j in state.mutated_saved:  # the backward needs the value from before the mutation
        saved[j] = saved[j].clone()
    if state.any_saved_layout and _restride_saved(state, saved):
        if not state.layout_hint_logged:
            state.layout_hint_logged = True
            _hint_log.info("%s: the compiled forward returns saved values in another layout than traced; "
                           "they are copied to the traced layout on every call", state.label)
    new_values = outs[n_fw:n_fw + n_mut]
    # Values without autograd history (running statistics) are written here.
    state.write_back([(primals[index], value) for j, (index, value) in enumerate(zip(joint.mutated_inputs, new_values))
                      if j not in state.diff_mutations])
    ctx.save_for_backward(*saved)
    user = state.fresh(tuple(outs[:n_fw]), primals) + tuple(new_values[j] for j in state.diff_mutations)
    if state.non_diff:
        ctx.mark_non_differentiable(*[user[i] for i in state.non_diff])
    return user


def _backward(ctx: Any, grads: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
    """CompiledFunction.backward, autocast off."""
    state: AOTState = ctx.state
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"pyjit: double backward (create_graph=True, or torch.autograd.grad of a grad) through the "
            f"compiled graph {state.label} is not supported. Run this code without pyjit "
            f"(pyjit.jit(..., backend='eager') or torch.compiler.disable) or compute the higher-order "
            f"gradient outside the compiled function.")
    tangents = [grads[i].contiguous() for i in state.tangent_outputs]  # grads are materialized
    previous = _set_callback(None)
    try:
        saved = state.replay_saved(_with_numbers(ctx.saved_tensors, ctx.numbers)) if ctx.replay \
            else list(ctx.saved_tensors)
        if torch.autograd.profiler._is_profiler_enabled:
            with torch.autograd.profiler.record_function(state.range_name):
                present = list(state.run_backward(saved + ctx.sizes + tangents))
        else:
            present = list(state.run_backward(saved + ctx.sizes + tangents))
    finally:
        _set_callback(previous)
    it = iter(present)
    return (None, *[next(it) if has else None for has in state.joint.has_grad])


def traced_strides(bw_gm: torch.fx.GraphModule, num_saved: int) -> list[tuple[int, ...] | None]:
    """Per saved tensor, the strides it was traced with when they are static and its memory is
    dense without overlap (a layout a fresh tensor can have); None where no layout is required."""
    out: list[tuple[int, ...] | None] = []
    for node in [n for n in bw_gm.graph.nodes if n.op == "placeholder"][:num_saved]:
        val = node.meta.get("val")
        strides = None
        if isinstance(val, torch.Tensor) and val.layout == torch.strided and \
                all(isinstance(v, int) for v in (*val.shape, *val.stride())):
            if torch._prims_common.is_non_overlapping_and_dense_or_false(val):
                strides = tuple(val.stride())
        out.append(strides)
    return out


def keep_traced_strides(saved: list[Any], strides: Sequence[tuple[int, ...] | None],
                        only: Sequence[int] | None = None) -> list[int]:
    """Give the saved tensors (in place in ``saved``) the strides the backward graph was traced
    for; returns the positions copied. A forward compiler may pick another layout for a value (a
    transposed one stored row-major); the backward's ``view`` of it, recorded for the traced
    layout, would then be invalid, or read the wrong elements through a compiled kernel's fixed
    indexing. Copies only where the layout differs; ``only``: look at these positions alone."""
    copied = []
    for i in (range(len(strides)) if only is None else only):
        want = strides[i]
        t = saved[i] if i < len(saved) else None
        if want is None or not isinstance(t, torch.Tensor) or t.stride() == want or t.numel() == 0:
            continue
        if _same_layout_ignoring_unit_dims(t, want):
            continue
        fixed = torch.empty_strided(t.shape, want, dtype=t.dtype, device=t.device)
        fixed.copy_(t)
        saved[i] = fixed
        copied.append(i)
    return copied


def _restride_saved(state: AOTState, saved: list[Any]) -> bool:
    """:func:`keep_traced_strides` for the saving forward's values; True when any was copied."""
    if state.restride is not None:
        return bool(state.restride) and bool(keep_traced_strides(saved, state.saved_strides, state.restride))
    copied = keep_traced_strides(saved, state.saved_strides)
    if state.guarded_layouts is not None:
        state.restride = copied
    return bool(copied)


def _same_layout_ignoring_unit_dims(t: torch.Tensor, want: Sequence[int]) -> bool:
    """Strides of size-1 dimensions do not address memory: layouts equal on the others match."""
    return all(a == b for size, a, b in zip(t.shape, t.stride(), want) if size != 1)


def views_as_reshapes(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of an aten graph whose ``view``/``_unsafe_view`` calls are ``reshape``: the same
    result where the input's strides allow a view, a copy where they do not (the graph is
    functional, so no one writes through the view). For running a graph as captured on inputs
    whose strides may differ from the traced ones (extern kernels' real output layouts)."""
    from ..compile_fx import copy_graph

    graph = copy_graph(gm.graph)
    views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
    for node in graph.nodes:
        if node.op == "call_function" and node.target in views:
            node.target = torch.ops.aten.reshape.default
    out = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    out.recompile()
    return out
_NO_NUMBERS: dict[int, Any] = {}  # read only


def layout_of(t: Any) -> tuple[Any, ...]:
    """What a TENSOR_MATCH guard pins of a tensor's layout: sizes, strides, dtype, device."""
    return (tuple(t.shape), t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else (type(t),)


def _storage_key(t: torch.Tensor) -> Any:
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(t.untyped_storage())


def _with_numbers(tensors: Sequence[torch.Tensor], numbers: dict[int, Any]) -> list[Any]:
    """The primals of a deferred-saving call: its saved tensors with its numbers put back."""
    it = iter(tensors)
    return [numbers[i] if i in numbers else next(it) for i in range(len(tensors) + len(numbers))]


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
    n_fw = joint.fw_outputs
    # Positions whose requires_grad and type are checked per call. The frontend's guards pin
    # every graph input's type and requires_grad, and grad mode (compile_fx.INPUTS_GUARDED):
    # only the module state read off ``gm`` is left to check there.
    n_args = len(requires_grad) - len(attr_names)
    checked = list(range(n_args if _inputs_guarded(gm) else 0, len(requires_grad)))
    # Rebuilding the output structure costs ~2 us through tree_unflatten: when every user
    # output is a computed one, a single leaf or a plain tuple is rebuilt directly.
    plain = all(isinstance(u, int) for u in user_outputs)
    n_out = len(user_outputs)
    probe = pytree.tree_unflatten(list(range(n_out)), out_spec)
    single = plain and n_out == 1 and type(probe) is int and probe == 0
    flat_tuple = plain and type(probe) is tuple and probe == tuple(range(n_out))
    # Every primal a tensor on every call (state.tensor_primals: the caller's guards pin the
    # types) and no setup_context: Function.apply reduces to the steps run inline below.
    tensor_primals = state.tensor_primals and not _setup_context_defined(CompiledFunction)

    def compiled_fn(*args: Any) -> Any:
        primals = (*args, *fetch_attributes(gm, attr_names)) if attr_names else args
        if len(primals) != len(requires_grad):
            return fallback(*args)
        if checked:
            grad = torch.is_grad_enabled()
            for i in checked:
                # The joint graph was traced for this requires_grad pattern; another runs as captured.
                # (Numbers are inputs of symbolic graphs: a varying Python int or float.)
                p = primals[i]
                if not isinstance(p, torch.Tensor):
                    if not isinstance(p, (int, float)) or isinstance(p, bool):
                        return fallback(*args)
                elif grad and bool(p.requires_grad) != requires_grad[i]:
                    return fallback(*args)
        previous = _set_callback(None)
        try:
            if tensor_primals and not _transforms_active():
                # What Function.apply does then, without its Python-level steps (~3 us for 20
                # parameters): dead functorch wrappers unwrapped, then autograd's C apply.
                outs = _c_apply(state, *map(_unwrap_if_dead, primals))
            else:
                outs = CompiledFunction.apply(state, *primals)
        finally:
            _set_callback(previous)
        for pos, j in enumerate(state.diff_mutations):
            # Under the caller's grad mode, as eager's in-place op: the input's new value gets a
            # grad_fn (and autograd's own checks: a view of a leaf that requires grad...).
            primals[joint.mutated_inputs[j]].copy_(outs[n_fw + pos])
        if single:
            return outs[user_outputs[0]]
        if flat_tuple:
            return tuple([outs[u] for u in user_outputs])  # type: ignore[index]
        leaves = [outs[u] if isinstance(u, int) else _rebuild(u, primals, outs) for u in user_outputs]
        return pytree.tree_unflatten(leaves, out_spec)

    compiled_fn.pyjit_state = state  # type: ignore[attr-defined]
    return compiled_fn


# torch.autograd.Function.apply without its Python wrapper, for CompiledFunction: the C apply
# of autograd's function base class, bound to CompiledFunction (what Function.apply's
# ``super().apply`` calls), and the unwrapping of tensors left by an exited functorch transform.
_c_apply = super(torch.autograd.Function, CompiledFunction).apply
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead
_transforms_active = torch._C._are_functorch_transforms_active


def _setup_context_defined(cls: type[torch.autograd.Function]) -> bool:
    from torch.autograd.function import _is_setup_context_defined

    return bool(_is_setup_context_defined(cls.setup_context))


# compile_fx.INPUTS_GUARDED, spelled here: compile_fx imports this package lazily, not the reverse.
INPUTS_GUARDED = "pyjit_inputs_guarded"
# Set by the frontend on a graph traced through a module in training mode: deferred saving is
# for grad-enabled inference, so such a graph compiles its saving forward at once and never a
# forward that saves nothing (one forward compile, not two, on a training loop's first step).
MODULES_TRAINING = "pyjit_modules_training"


def _inputs_guarded(gm: torch.nn.Module) -> bool:
    """Whether the caller's guards pin every input (``INPUTS_GUARDED`` in ``gm.meta``)."""
    meta = getattr(gm, "meta", None)
    return isinstance(meta, dict) and bool(meta.get(INPUTS_GUARDED))


def _rebuild(output: OutputAlias | IntermediateView, primals: Sequence[Any], outs: Sequence[torch.Tensor]
             ) -> torch.Tensor:
    """A user output outside the Function: an alias of an input as eager relates it, or a view
    of a value the Function returned."""
    if isinstance(output, IntermediateView):
        return rebuild_alias(outs[output.output_index], output.view)
    return rebuild_alias(primals[output.input_index], output)  # type: ignore[index]


def _write_groups(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[list[int]]:
    """Positions of ``pairs`` grouped by (dtype, device) for fused write-backs, or [] when the
    pairs must be copied one by one in order (a value sharing memory with a written input)."""
    if len(pairs) < 2 or any(type(t) not in (torch.Tensor, torch.nn.Parameter) for pair in pairs for t in pair):
        return []  # tensor subclasses (DTensor...) keep their own copy_
    written = {dst.untyped_storage().data_ptr() for dst, _ in pairs}
    if len(written) != len(pairs) or any(src.untyped_storage().data_ptr() in written for _, src in pairs):
        return []
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, (dst, src) in enumerate(pairs):
        groups.setdefault((dst.dtype, src.dtype, dst.device), []).append(i)
    return list(groups.values())
