"""Training through pyjit's compiler: joint graph, partition, autograd runtime (AOTAutograd design).

``aot_compile(gm, example_inputs, fw_compiler, bw_compiler, decompositions, partition)`` traces
the joint forward/backward aten graph (``joint.py``), splits it (``partition.py``: min-cut with
``networkx`` or the save-what-backward-uses reference), compiles the forward now with
``fw_compiler`` and the backward on its first use with ``bw_compiler`` (both receive aten
graphs and example inputs, torch.compile's backend protocol), and returns a callable running
them behind one ``torch.autograd.Function`` (``runtime.py``). ``compile_training`` is the
entry pyjit's own backend uses for graphs that need autograd (grad enabled and an input
requiring grad); it falls back to the captured graph, logged, on anything unsupported.
``compile_training_dynamic`` is the entry for such graphs with symbolic sizes (``symbolic.py``;
static graphs per input size where that is refused).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.fx

from ...config import config
from ...errors import BackendError
from ...logs import get_logger
from .joint import JointGraph, fetch_attributes, module_state, trace_joint
from .partition import PartitionReport, partition_joint
from ..autocast import call_without_autocast
from ...runtime import conv_warmup
from .runtime import INPUTS_GUARDED, MODULES_TRAINING, AOTState, CompiledFunction, _inputs_guarded, layout_of, make_runtime

__all__ = ["aot_compile", "compile_training", "compile_training_dynamic", "compile_training_per_size",
           "JointGraph", "PartitionReport", "CompiledFunction"]

log = get_logger("fallbacks")
Compiler = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


def _label(gm: torch.fx.GraphModule) -> str:
    where = ""
    for n in gm.graph.nodes:
        trace = n.meta.get("stack_trace")
        if trace:
            lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().startswith("File ")]
            user = [ln for ln in lines if "/torch/" not in ln and "/pyjit/" not in ln]
            where = f" from {(user or lines)[-1]}" if lines else ""
            break
    return f"{type(gm).__name__} ({len(gm.graph.nodes)} nodes{where})"


def aot_compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], fw_compiler: Compiler,
                bw_compiler: Compiler | None = None, *,
                decompositions: dict[Any, Callable[..., Any]] | None = None,
                partition: str = "min_cut", defer_saving: bool = False) -> Callable[..., Any]:
    """Compile ``gm`` for training; raises ``NotImplementedError`` for unsupported graphs.

    ``defer_saving``: until the first backward, run a forward that saves nothing (runtime.py).
    """
    if decompositions is None:
        from .decompositions import training_decomposition_table
        decompositions = training_decomposition_table()
    attr_names = module_state(gm)
    inputs = [*example_inputs, *fetch_attributes(gm, attr_names)]
    joint = trace_joint(gm, attr_names, inputs, decompositions)
    part = partition_joint(joint, partition)
    # cuDNN builds the backward's convolution plans while the forward compiles and runs (the
    # forward's own, queued when it compiles, go before them: its first call comes first).
    conv_warmup.request_graph(part.bw_gm)
    label = _label(gm)
    examples = [_detach(t) for t in inputs]
    if not attr_names and _inputs_guarded(gm):
        # The forward graphs take exactly the primals, which the caller's guards pin (layouts,
        # dtypes, devices; the Function's forward runs without grad): compile_fx then skips its
        # per-call input check. A deferred-saving replay feeds them saved primals, which autograd
        # refuses if they were changed in place since (resize_ and set_ included).
        for fw_gm in (part.fw_gm, part.inference_gm):
            if fw_gm is not None:
                fw_gm.meta[INPUTS_GUARDED] = True
    # The partitioned graphs are aten graphs traced below autocast: compiled (their re-trace
    # included) and run with the caller's autocast off (backend/autocast.py).
    with torch.no_grad():
        if part.inference_gm is not None and not joint.mutated_inputs and defer_saving \
                and not gm.meta.get(MODULES_TRAINING):
            # Deferred saving (runtime.py): the saving forward is compiled at the first backward.
            inference_fw = call_without_autocast(fw_compiler, part.inference_gm, examples)
            state = AOTState(label, joint, part, None, bw_compiler or fw_compiler, fw_compiler, inference_fw)
        else:
            state = AOTState(label, joint, part, call_without_autocast(fw_compiler, part.fw_gm, examples),
                             bw_compiler or fw_compiler)
    if gm.meta.get("pyjit_range_name"):  # the frame's graph name, set by the frontend
        state.range_name = f"{gm.meta['pyjit_range_name']} backward"
    state.tensor_primals = not attr_names and _inputs_guarded(gm) and all(isinstance(t, torch.Tensor) for t in inputs)
    if not attr_names and _inputs_guarded(gm):
        state.guarded_layouts = [layout_of(t) for t in inputs]
    return make_runtime(state, gm, attr_names, gm.forward)


def _detach(t: Any) -> Any:
    return t.detach() if isinstance(t, torch.Tensor) else t


def compile_training(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """pyjit's backend for a graph that needs autograd: forward and backward through compile_fx."""
    from ..compile_fx import _data_dependent_errors, _run_as_captured, compile_fx
    try:
        return aot_compile(gm, example_inputs, compile_fx, compile_fx, partition="min_cut",
                           defer_saving=config.aot_defer_saving)
    except NotImplementedError as e:
        return _run_as_captured(gm, f"training graph not compiled: {e}")
    except _data_dependent_errors() as e:
        return _run_as_captured(gm, f"data-dependent output shape ({type(e).__name__}: {e})")
    except Exception as e:  # a backend bug must never break the user's program
        if config.raise_on_internal_error:
            raise BackendError(f"pyjit training backend failed on graph {_label(gm)}: {e}") from e
        return _run_as_captured(gm, f"training backend error: {type(e).__name__}: {e}")


def compile_training_dynamic(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                             symbolic: Sequence[Any]) -> Callable[..., Any]:
    """A graph with symbolic sizes that needs autograd: one symbolic training graph for every
    size (``symbolic.py``); when that is refused, static training graphs per size (logged)."""
    from ..compile_fx import _data_dependent_errors, _graph_label
    from ..aliasing import symbolic_output_alias
    from .symbolic import compile_training_symbolic
    try:
        alias = symbolic_output_alias(gm)
        if alias is not None:
            raise NotImplementedError(alias)
        return compile_training_symbolic(gm, example_inputs, symbolic)
    except (NotImplementedError, *_data_dependent_errors()) as e:
        reason = f"{type(e).__name__}: {e}" if not isinstance(e, NotImplementedError) else str(e)
    except Exception as e:  # a backend bug must never break the user's program
        if config.raise_on_internal_error:
            raise BackendError(f"pyjit symbolic training backend failed on graph {_label(gm)}: {e}") from e
        reason = f"backend error: {type(e).__name__}: {e}"
    log.info("graph %s: no symbolic training graph (%s); compiling per input size", _graph_label(gm),
             reason.splitlines()[0] if reason else "")
    return compile_training_per_size(gm, example_inputs)


def compile_training_per_size(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """A graph with symbolic sizes that needs autograd: one static training graph per distinct
    input layout (and value of each symbolic number input), compiled on first sight, at most
    ``config.aot_static_sizes_max``; calls beyond that run the graph as captured (logged once).

    The fallback of ``compile_training_dynamic`` when the symbolic training graph is refused:
    a dynamic frame entry that trains keeps pyjit's kernels for the sizes it sees again instead
    of running every size as captured.
    """
    from ..compile_fx import _graph_label

    compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}
    scalar_positions = [i for i, v in enumerate(example_inputs) if not isinstance(v, torch.Tensor)]
    warned = False

    def key_of(args: Sequence[Any]) -> tuple[Any, ...]:
        return tuple((tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad) if isinstance(a, torch.Tensor)
                     else (type(a), a) for a in args)

    def run(*args: Any) -> Any:
        nonlocal warned
        key = key_of(args)
        fn = compiled.get(key)
        if fn is None:
            if len(compiled) >= config.aot_static_sizes_max:
                if not warned:
                    warned = True
                    log.info("graph %s: symbolic sizes in a graph that needs autograd; %d static training "
                             "graphs compiled (config.aot_static_sizes_max), further sizes run as captured",
                             _graph_label(gm), len(compiled))
                return gm.forward(*args)
            static_gm = _bind_scalars(gm, {i: args[i] for i in scalar_positions})
            tensors = [a for i, a in enumerate(args) if i not in scalar_positions]
            _propagate_static_values(static_gm, tensors)
            inner = compile_training(static_gm, tensors)
            fn = compiled[key] = (lambda *a, _inner=inner: _inner(*[x for i, x in enumerate(a)
                                                                    if i not in scalar_positions]))
        return fn(*args)

    log.info("graph %s: symbolic sizes in a graph that needs autograd: compiled per input size", _graph_label(gm))
    return run


def _propagate_static_values(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> None:
    """Replace the symbolic traced values of ``gm`` (a per-size copy) by fake values of these
    static inputs, computed in the current grad mode: eager's relation of each output to the
    inputs (a view, ``detach``'s shared memory that is no view, requires_grad) is read from them
    (``aliasing.output_aliases``), and symbolic ones give none. If the propagation fails the
    symbolic values stay, and outputs aliasing an input are taken for views, as before."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if not _runs_only_torch(gm):
        return  # a custom autograd.Function's forward is user code: never run it an extra time
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    values: dict[torch.fx.Node, Any] = {}

    class _Propagate(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            values[n] = result
            return result

    grad = torch.is_grad_enabled()
    try:
        fakes = [mode.from_tensor(t, static_shapes=True) for t in inputs]
        with mode:
            _Propagate(gm).run(*fakes)
    except Exception as e:  # noqa: BLE001 - an optimisation of fidelity; the compile goes on
        log.info("graph %s: static values not propagated for a per-size training graph (%s: %s)",
                 _label(gm), type(e).__name__, e)
        return
    finally:
        torch.set_grad_enabled(grad)
    for n, value in values.items():
        if n.op != "output":
            n.meta["example_value"] = value


_SAFE_MODULES = ("builtins", "_operator", "operator", "math")
# Calls that enter or leave an autocast or inference-mode region (a graph that breaks inside
# one ends with an unmatched enter): running them would change the caller's state. Grad-mode
# changes run (the outputs' requires_grad depends on them) and the mode is restored after.
_STATE_CALLS = ("_enter_autocast", "_exit_autocast", "_enter_inference_mode", "_exit_inference_mode")


def _runs_only_torch(gm: torch.fx.GraphModule) -> bool:
    """Every call of ``gm`` is an aten/prims op, a torch function, a tensor method or a Python
    builtin, and none enters or leaves autocast or inference mode: running it on fake tensors
    runs no user code and (grad mode restored after) leaves the thread's state as it was."""
    for n in gm.graph.nodes:
        if n.op == "call_module":
            return False
        if n.op != "call_function":
            continue
        target = n.target
        if getattr(target, "__name__", "") in _STATE_CALLS:
            return False
        if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            if target.namespace not in ("aten", "prims"):
                return False
            continue
        module = getattr(target, "__module__", None) or ""
        if module in _SAFE_MODULES or (module.startswith("torch") and not module.startswith("torch.autograd")):
            continue
        return False
    return True


def _bind_scalars(gm: torch.fx.GraphModule, values: dict[int, Any]) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose scalar placeholders (by input position) are the given constants."""
    from ..compile_fx import copy_graph

    graph = copy_graph(gm.graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i, value in values.items():
        node = placeholders[i]
        for user in list(node.users):
            user.args = torch.fx.map_arg(user.args, lambda a, _n=node, _v=value: _v if a is _n else a)
            user.kwargs = torch.fx.map_arg(user.kwargs, lambda a, _n=node, _v=value: _v if a is _n else a)
        graph.erase_node(node)
    out = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    out.recompile()
    return out
