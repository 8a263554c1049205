"""pyjit's graph compiler entry: ``compile_fx(gm, example_inputs) -> callable``.

Pipeline (inference): FX graph -> aten graph (``make_fx`` on fake tensors, decompositions,
functionalization) -> loop IR (``GraphLowering``) -> ``Scheduler`` (fusion, dead code) ->
Triton kernels (C++ kernels on CPU, ``codegen/cpp.py``) + wrapper module -> on-disk cache (plus a graph-level index, ``graph_cache.py``,
so a warm start skips all of it) -> loaded module -> callable that checks its
inputs still match what it was compiled for, calls ``call(args)`` and rebuilds the output
structure. Graphs that need autograd (grad enabled and an input requiring grad) go through
``aot.compile_training``: joint forward/backward graph, min-cut partition, both halves compiled
by this function, run by one ``torch.autograd.Function`` (inside a DistributedDataParallel
forward, one per DDP gradient bucket: ``pyjit.distributed.ddp``). Graphs that this backend does not
compile run as captured (``gm.forward``), with the reason logged on the ``fallbacks`` channel
and recorded in ``metrics.eager_graphs``: CPU graphs under ``PYJIT_CPU_BACKEND=eager`` or
without a working C++ compiler (``runtime/cpp_build.py``),
non-tensor inputs of a static graph, symbolic-shape graphs that need autograd, mixed devices,
and internal errors (raised instead under ``config.raise_on_internal_error``).

Dynamic shapes: when a placeholder's ``meta['example_value']`` has symbolic sizes (a FakeTensor
of the tracer's ``ShapeEnv``) or is a ``SymInt``/``SymFloat`` (a symbolic scalar input), the
graph is traced to aten on those fake values (``sym_size`` nodes and size arithmetic stay in the
graph), lowered with sympy sizes, and compiled once for every size; the example inputs only
give the symbols' hints (block sizes). Guards the aten trace adds to the ``ShapeEnv`` (the
tracer did not install them) are checked by the module's ``check(args)`` on each call, with the
symbolic layouts; a call that fails it runs as captured.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import time
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ..config import config
from ..errors import BackendError, GraphRefusal
from ..logs import get_logger
from ..runtime import conv_warmup
from ..report import events, progress
from . import graph_cache
from .aliasing import (OutputAlias, OutputFixer, created_grad_leaf, fresh_output_views, output_aliases,
                       symbolic_output_alias)
from .autocast import call_without_autocast
from .input_check import InputCheck
from .metrics import metrics

log = get_logger("fallbacks")
code_log = get_logger("output_code")
time_log = get_logger("compile_times")
cache_log = get_logger("cache")


def compile_fx(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, ddp_split: bool = True) -> Callable[..., Any]:
    """torch.compile's backend protocol: compile ``gm`` for inputs like ``example_inputs``.

    ``ddp_split``: a training graph compiled while a DistributedDataParallel forward runs is
    split at DDP's bucket boundaries (``pyjit.distributed.ddp``); its pieces come back here
    with ``ddp_split=False``."""
    # cuDNN's plans for the convolutions this compile lowers are built meanwhile (conv_warmup.py).
    with conv_warmup.active():
        return _compile_graph(gm, example_inputs, ddp_split)


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], ddp_split: bool) -> Callable[..., Any]:
    symbolic = symbolic_inputs(gm)
    reason = _eager_reason(example_inputs, symbolic is not None)
    if reason is not None:
        return _run_as_captured(gm, reason)
    leaf = created_grad_leaf(gm)
    if leaf is not None:
        return _run_as_captured(gm, f"the graph creates a tensor that requires grad ({leaf.format_node()}); "
                                    "compiled kernels do not make autograd leaves")
    inner = _without_outer_no_grad(gm) if torch.is_grad_enabled() else None
    if inner is not None:
        # ``set_grad_enabled(False) ... set_grad_enabled(True)`` around the whole graph (an
        # optimizer step under its no_grad decorator): nothing in it records autograd, so it
        # is an inference graph run under no_grad, even though its inputs require grad.
        with torch.no_grad():
            compiled = compile_fx(inner, example_inputs)

        def run_without_grad(*args: Any) -> Any:
            with torch.no_grad():
                return compiled(*args)

        return run_without_grad
    if torch.is_grad_enabled() and (any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
                                    or any(p.requires_grad for p in gm.parameters())):
        if symbolic is not None:
            if ddp_split and "torch.nn.parallel.distributed" in sys.modules:
                from ..distributed.ddp import note_not_split
                note_not_split("its sizes are symbolic")
            # A symbolic joint graph; static training graphs per input size if that is refused.
            from .aot import compile_training_dynamic
            return compile_training_dynamic(gm, list(example_inputs), symbolic)
        if ddp_split and "torch.nn.parallel.distributed" in sys.modules:
            from ..distributed.ddp import maybe_split
            split = maybe_split(gm, example_inputs, _compile_ddp_piece)
            if split is not None:
                return split
        # Training (or inference with grad enabled): joint graph, partition, autograd.Function.
        from .aot import compile_training
        return compile_training(gm, list(example_inputs))
    try:
        return _compile(gm, list(example_inputs), symbolic)
    except SymbolicRefusal as e:
        # A documented limit of the symbolic path, not a pyjit bug: run as captured, logged.
        return _run_as_captured(gm, f"symbolic sizes: {e}")
    except GraphRefusal as e:
        return _run_as_captured(gm, str(e))
    except _data_dependent_errors() as e:
        # Not a pyjit bug: output shapes that depend on data (nonzero, masked_select...)
        # cannot be traced with static fake tensors.
        return _run_as_captured(gm, f"data-dependent output shape ({type(e).__name__}: {e})")
    except Exception as e:  # a backend bug must never break the user's program
        if config.raise_on_internal_error:
            raise BackendError(f"pyjit backend failed on graph {_graph_label(gm)}: {e}") from e
        return _run_as_captured(gm, f"backend error: {type(e).__name__}: {e}")


def _compile_ddp_piece(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """One subgraph of a DDP split: compiled like any graph, never split again."""
    return compile_fx(gm, example_inputs, ddp_split=False)


def _data_dependent_errors() -> tuple[type[BaseException], ...]:
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    errors: list[type[BaseException]] = [DataDependentOutputException, DynamicOutputShapeException]
    try:
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
        errors.append(GuardOnDataDependentSymNode)
    except ImportError:  # pragma: no cover - older torch
        pass
    return tuple(errors)


def _graph_label(gm: torch.fx.GraphModule) -> str:
    graph = getattr(gm, "graph", None)
    if graph is None:
        # The warm start's captured graph is rebuilt from its code text (no fx graph): it has
        # a name and a ``forward``, which is all a compiled callable may rely on.
        return str(getattr(gm, "name", type(gm).__name__))
    return f"{type(gm).__name__} with {len(graph.nodes)} nodes"


def _run_as_captured(gm: torch.fx.GraphModule, reason: str) -> Callable[..., Any]:
    metrics.eager_graphs.append(reason)
    log.info("running graph %s as captured: %s", _graph_label(gm), reason)
    return gm.forward


def _without_outer_no_grad(gm: torch.fx.GraphModule) -> torch.fx.GraphModule | None:
    """A copy of ``gm`` without its first and last calls when they are ``set_grad_enabled(False)``
    and ``set_grad_enabled(True)`` and nothing else in it switches grad mode; else None."""
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    grad_fns = (torch._C._set_grad_enabled, torch.set_grad_enabled)
    switches = [n for n in calls if n.target in grad_fns]
    if len(switches) != 2 or calls[0] is not switches[0] or calls[-1] is not switches[1]:
        return None
    if switches[0].args != (False,) or switches[1].args != (True,) or switches[0].kwargs or switches[1].kwargs:
        return None
    if switches[0].users or switches[1].users:
        return None
    copy = torch.fx.GraphModule(gm, copy_graph(gm.graph), class_name=type(gm).__name__)
    for n in list(copy.graph.nodes):
        if n.op == "call_function" and n.target in grad_fns:
            copy.graph.erase_node(n)
    copy.recompile()
    return copy


def copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A node-for-node copy of ``graph`` (meta included)."""
    new = torch.fx.Graph()
    out = new.graph_copy(graph, {})
    new.output(out)
    return new


def symbolic_inputs(gm: torch.fx.GraphModule) -> list[Any] | None:
    """The placeholders' traced values when any is symbolic (a size symbol or a Sym scalar), else None."""
    vals = [n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
    for v in vals:
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return vals
        if isinstance(v, torch.Tensor) and not all(isinstance(s, int) for s in (*v.shape, *v.stride())):
            return vals
    return None


def _eager_reason(example_inputs: Sequence[Any], symbolic: bool = False) -> str | None:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if len(tensors) != len(example_inputs) and not symbolic:
        return "non-tensor graph inputs of a static graph (not symbolic scalars)"
    if symbolic and any(not isinstance(t, (torch.Tensor, int, float)) or isinstance(t, bool) for t in example_inputs):
        return "graph inputs other than tensors, ints and floats"
    if any(not isinstance(s, int) for t in tensors for s in t.shape):
        return "example inputs with symbolic sizes (the backend expects real example values)"
    devices = {t.device.type for t in tensors}
    if len(devices) > 1:
        host = [t for t in tensors if t.device.type == "cpu"]
        if len(devices) > 2 or any(t.dim() != 0 for t in host):
            return f"inputs on several devices {sorted(devices)}"
        # 0-d CPU tensors beside device tensors (optimizer step counters): host values.
        devices.discard("cpu")
    device = devices.pop() if devices else "cpu"
    if device == "cpu" and config.cpu_backend == "eager":
        return "CPU graph with PYJIT_CPU_BACKEND=eager (no CPU code generator)"
    if device == "cpu" and config.cpu_backend == "cpp":
        from ..runtime import cpp_build
        if cpp_build.compiler() is None:
            return f"CPU graph and no working C++ compiler ({cpp_build.unavailable_reason()})"
    if device not in ("cpu", "cuda"):
        return f"device {device} has no code generator"
    return None


def tensor_metadata(values: Sequence[Any]) -> list[Any]:
    """(sizes, strides, storage offset) of each tensor in ``values`` (None for non-tensors). A
    symbolic size is its symbol node's identity: comparing with ``==`` would add guards to the
    shape environment, and the printed expression changes when tracing unifies two symbols."""
    def key(x: Any) -> Any:
        return ("sym", id(x.node)) if isinstance(x, torch.SymInt) else int(x)

    return [(tuple(map(key, t.shape)), tuple(map(key, t.stride())), key(t.storage_offset()))
            if isinstance(t, torch.Tensor) and t.layout == torch.strided else None for t in values]


def refuse_restrided_inputs(before: list[Any], values: Sequence[Any], error: type[Exception]) -> None:
    """Raise ``error`` when tracing changed an input's sizes or strides in place (``t_``,
    ``as_strided_``, ``resize_`` of a graph input): functionalization keeps the values such a
    graph computes but drops the new metadata of the caller's tensor, so the graph must run as
    captured (pyjit's frontend already runs these ops eagerly; this guards other callers)."""
    changed = [i for i, (b, a) in enumerate(zip(before, tensor_metadata(values))) if b != a]
    if changed:
        raise error(f"the graph changes the sizes/strides of input(s) {changed} in place; "
                    "compiled graphs only return values")


def trace_to_aten(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
                  ) -> tuple[torch.fx.GraphModule, Any]:
    """The functional aten graph of ``gm`` (flat outputs) and the output tree spec.

    ``example_inputs`` may be fake tensors with symbolic sizes and ``SymInt``/``SymFloat``
    scalars of one ``ShapeEnv``: the aten graph then keeps the size arithmetic.
    """
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from .decompositions import decomposition_table
    from .passes.rng_order import draw_in_memory_order, has_random_fill

    spec_box: list[Any] = []

    def flat_forward(*args: Any) -> list[Any]:
        with torch.fx.traceback.preserve_node_meta():
            out = torch.fx.Interpreter(gm).run(*args)
        leaves, spec = pytree.tree_flatten(out)
        spec_box.append(spec)
        return leaves

    # Inputs that are already fake (a frontend may pass them) keep their own mode.
    modes = {id(t.fake_mode): t.fake_mode for t in example_inputs if _is_fake(t)}
    if len(modes) > 1:
        raise NotImplementedError("example inputs come from several fake tensor modes")
    fake_mode = next(iter(modes.values())) if modes else FakeTensorMode(allow_non_fake_inputs=True)
    fake_inputs = [fake_mode.from_tensor(t, static_shapes=True) if isinstance(t, torch.Tensor) and not _is_fake(t)
                   else t for t in example_inputs]
    metadata_before = tensor_metadata(fake_inputs)
    if fake_mode.shape_env is None:
        fn = torch.func.functionalize(flat_forward, remove="mutations")
        with fake_mode, torch.no_grad():
            aten_gm = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="real",
                              record_stack_traces=True)(*fake_inputs)
    if fake_mode.shape_env is not None or has_random_fill(aten_gm):
        # Symbolic sizes: C++ functionalization runs composite ops (``linear``, ``matmul``...)
        # through their C++ kernels, which read ``sizes()`` -- and a fake tensor answers that by
        # specialising every size symbol to its example value. So decompose first, in Python
        # (the Python dispatcher keeps sizes symbolic), then functionalize the aten graph.
        # A graph with random fills takes the same two steps: their element order is fixed on
        # the in-place ops, which only the graph before functionalization still holds
        # (passes/rng_order.py).
        dispatcher = enable_python_dispatcher() if fake_mode.shape_env is not None else contextlib.nullcontext()
        with fake_mode, torch.no_grad(), dispatcher:
            decomposed = make_fx(flat_forward, decomposition_table=decomposition_table(), tracing_mode="real",
                                 record_stack_traces=True)(*fake_inputs)
            draw_in_memory_order(decomposed)

            def run_decomposed(*args: Any) -> Any:
                with torch.fx.traceback.preserve_node_meta():
                    return torch.fx.Interpreter(decomposed).run(*args)

            fn = torch.func.functionalize(run_decomposed, remove="mutations")
            aten_gm = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="real",
                              record_stack_traces=True)(*fake_inputs)
    refuse_restrided_inputs(metadata_before, fake_inputs, GraphRefusal)
    # Functionalization leaves dead view nodes behind; they would hide single-use patterns.
    # (In-place copy_ nodes that write inputs back are impure and stay.)
    from .passes.graph_utils import eliminate_dead_code
    eliminate_dead_code(aten_gm.graph)
    aten_gm.recompile()
    return aten_gm, spec_box[-1]


def _traced_already(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
                    ) -> tuple[torch.fx.GraphModule, Any] | None:
    """A training graph's forward or backward as it came out of the joint trace (functional,
    decomposed aten with traced values) and a copy of it with flat outputs, instead of tracing
    it again (a second of a CNN's first call per graph); None when it must be traced.

    Only when every input's traced value has the example input's sizes, strides, storage offset,
    dtype and device (a saved value the compiled forward produced in other strides changes the
    strides that every value after it was traced with), and the graph has no in-place op and no
    random op (their element order is fixed while tracing, ``passes/rng_order.py``)."""
    from .aot.partition import ATEN_FUNCTIONAL

    if not gm.meta.get(ATEN_FUNCTIONAL):
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return None
    for node, example in zip(placeholders, example_inputs):
        traced = node.meta.get("val")
        if isinstance(example, torch.Tensor):
            if not isinstance(traced, torch.Tensor) or tensor_metadata([traced]) != tensor_metadata([example]) \
                    or (traced.dtype, traced.device) != (example.dtype, example.device):
                return None
        elif isinstance(traced, torch.Tensor) or type(traced) is not type(example) or traced != example:
            return None
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if node.target._schema.is_mutable or torch.Tag.nondeterministic_seeded in node.target.tags:
                return None
        elif node.op not in ("placeholder", "output", "call_function"):
            return None
        if node.op == "call_function" and "val" not in node.meta:
            return None
    graph = copy_graph(gm.graph)
    output = next(n for n in graph.nodes if n.op == "output")
    leaves, spec = pytree.tree_flatten(output.args[0])
    if not all(isinstance(leaf, torch.fx.Node) for leaf in leaves):
        return None
    output.args = (list(leaves),)
    from .passes.graph_utils import eliminate_dead_code
    eliminate_dead_code(graph)
    aten_gm = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    aten_gm.meta.update(gm.meta)
    metrics.traced_already += 1
    return aten_gm, spec


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def _compile(gm: torch.fx.GraphModule, example_inputs: list[Any], symbolic: list[Any] | None = None
             ) -> Callable[..., Any]:
    from ..runtime import cache
    from ..runtime.launcher import load_module

    start = time.perf_counter()
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    # The graph's device: CPU inputs beside device ones are host values (passes/host_values.py).
    on_device = [t for t in tensors if t.device.type != "cpu"]
    device = (on_device or tensors)[0].device if tensors else torch.device("cpu")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type == "cuda":
        from ..runtime.precompile import prestart
        prestart()  # compile workers import Triton while this graph is lowered
    gkey = graph_cache.graph_key_fields(gm, symbolic or example_inputs) if config.backend_disk_cache else None
    if gkey is not None:
        warm = _load_cached_graph(gm, gkey, device, example_inputs, symbolic is not None)
        if warm is not None:
            return warm
    # Imported here, after the warm-start check: lowering imports sympy and registers ~500 ops.
    from .symbolic import size_hints

    fallbacks_before = dict(metrics.fallback_ops)
    hints: dict[Any, int] = {}
    lower: dict[Any, Any] = {}
    facts: list[Any] = []
    extra_guards: list[Any] = []
    shape_env = None
    if symbolic is not None:
        alias = symbolic_output_alias(gm)
        if alias is not None:
            raise SymbolicRefusal(alias)
        shape_env = _shape_env_of(symbolic)
        guards_before = len(shape_env.guards) if shape_env is not None else 0
        # A graph derived from a symbolic trace done elsewhere (a training graph's forward or
        # backward, aot/symbolic.py) also checks the guards that trace added.
        guards_before = min(guards_before, gm.meta.get(GUARDS_SINCE, guards_before))
        replaced_before = dict(shape_env.replacements) if shape_env is not None else {}
        aten_gm, out_spec = trace_to_aten(gm, symbolic)
        if shape_env is not None:
            values = getattr(shape_env, "backed_var_to_val", None) or shape_env.var_to_val
            hints = {s: (int(v) if v.is_integer else float(v)) for s, v in values.items()}
            lower = _lower_bounds(shape_env)
            extra_guards = _new_guards(shape_env, guards_before)
            facts = _guard_facts(shape_env)
    else:
        traced_already = _traced_already(gm, example_inputs)
        aten_gm, out_spec = traced_already or trace_to_aten(gm, example_inputs)
    from .passes import run_passes  # attention -> fused SDPA, eval BN folded into conv
    run_passes(aten_gm)
    from .passes.host_values import move_host_values  # CPU values of a CUDA graph: one transfer
    metrics.host_values += move_host_values(aten_gm, device)
    # cuDNN starts on this graph's convolution plans now, while it is lowered (conv_warmup.py),
    # ahead of those queued earlier (a training graph's backward): this graph's first call comes
    # first. The lowering queues them again with the exact layouts it passes (run once per process).
    conv_warmup.request_graph(aten_gm, urgent=True)
    traced = time.perf_counter()
    if events.enabled():
        events.record_span("aten", _graph_label(gm), time.time() - (traced - start), traced - start)
    guards_checked = len(shape_env.guards) if shape_env is not None else 0
    with size_hints(hints, lower, facts):
        module, lowering = _lower_and_generate(aten_gm, device, extra_guards)
    if shape_env is not None:
        _refuse_specialisation(shape_env, replaced_before, guards_checked)
    with events.span("load", _graph_label(gm)):
        key, path, hit = cache.write_module(module.source)
        interpret = device.type == "cpu" and config.cpu_backend == "triton_interpret"
        compiled = load_module(path, key, interpret)
    if events.enabled():
        events.emit("kernels", graph=_graph_label(gm), module=path, module_key=key, module_cache_hit=hit,
                    device=str(device), kernels=_kernel_launches(module.source, module.kernel_names),
                    externs=module.extern_calls)
    metrics.generated_kernel_count += len(module.kernel_names)
    metrics.extern_calls += module.extern_calls
    metrics.reused_buffers += module.reused_buffers
    metrics.compiled_graphs += 1
    metrics.dynamic_graphs += int(symbolic is not None)
    metrics.cache_hits += int(hit)
    code_log.info("generated module for %s (%s):\n%s", _graph_label(gm), path, module.source)
    if config.debug_dir:
        os.makedirs(config.debug_dir, exist_ok=True)
        with open(os.path.join(config.debug_dir, f"pyjit_module_{key[:12]}.py"), "w") as f:
            f.write(module.source)
        with open(os.path.join(config.debug_dir, f"pyjit_aten_graph_{key[:12]}.py"), "w") as f:
            f.write(aten_gm.code)
    time_log.info("compiled %s: trace %.1f ms, lower+codegen %.1f ms, kernels %d", _graph_label(gm),
                  (traced - start) * 1e3, (time.perf_counter() - traced) * 1e3, len(module.kernel_names))
    constants = [t for _, t in lowering.constants]
    if gkey is not None and not constants:
        graph_cache.write_entry(gm, gkey, {"module_key": key,
                                           "out_spec": pytree.treespec_dumps(out_spec),
                                           "kernels": len(module.kernel_names), "externs": module.extern_calls,
                                           "fallbacks": [op for op, n in metrics.fallback_ops.items()
                                                         if n > fallbacks_before.get(op, 0)]})
    fn = _make_callable(gm, compiled.call, out_spec, example_inputs, constants, getattr(compiled, "check", None),
                        _inputs_guarded(gm))
    # For the warm start's frame records (pyjit/frame/warm_start.py): the graph-cache key as
    # computed here (from the symbolic inputs and the ShapeEnv before the aten trace).
    fn.pyjit_graph_key = graph_cache._key_of(gkey) if gkey is not None and not constants else None  # type: ignore[attr-defined]
    return fn


def _lower_and_generate(aten_gm: torch.fx.GraphModule, device: torch.device, extra_guards: list[Any]
                        ) -> tuple[Any, Any]:
    """Loop IR, schedule and generated module of an aten graph: (GeneratedModule, GraphLowering)."""
    from .codegen.wrapper import WrapperCodegen
    from .graph import GraphLowering
    from .ir import Buffer, ReinterpretView
    from .scheduler import Scheduler

    _prefetch_tuning(aten_gm, device, extra_guards)
    progress.stage("lowering")
    with events.span("lowering", f"{len(aten_gm.graph.nodes)} aten nodes"):
        lowering = GraphLowering(aten_gm, device)
        lowering.extra_guards = extra_guards
        lowering.run(*[None] * sum(1 for n in aten_gm.graph.nodes if n.op == "placeholder"))
    progress.stage("generating code")
    rmax = config.backend_persistent_reduction_max
    output_names = set()
    for value in list(lowering.outputs) + [v for _, v in lowering.mutations]:
        if isinstance(value, ReinterpretView):
            output_names.add(value.data.name)
        elif isinstance(value, Buffer):
            output_names.add(value.name)
    with events.span("codegen", f"{len(lowering.buffers)} buffers"):
        scheduler = Scheduler(lowering.buffers, lowering.graph_inputs, output_names, rmax)
        return WrapperCodegen(lowering, scheduler, device, rmax).generate(), lowering


def _kernel_launches(source: str, names: list[str]) -> list[dict[str, str]]:
    """Each kernel of a generated module with the line that launches it (its grid and launch
    parameters), for the compile trace."""
    lines = source.splitlines()
    out = []
    for name in names:
        launch = next((ln.strip() for ln in lines if name in ln and ("[" in ln or "(" in ln)
                       and not ln.lstrip().startswith(("def ", "@", "#", "import ", "from "))
                       and f"{name} =" not in ln), "")
        out.append({"name": name, "launch": launch[:300]})
    return out


_TUNED_MATMULS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)


def _prefetch_tuning(aten_gm: torch.fx.GraphModule, device: torch.device, extra_guards: list[Any]) -> None:
    """Compile the autotuning candidates of every matmul of the graph in one parallel round.

    The lowering tunes matmuls one at a time, and each tuning first compiles its candidates:
    one round of Triton compiles per matmul, each as long as its slowest kernel while most
    compile workers idle (the first call of a GPT-2 bf16 block waited for four such rounds).
    So a graph with several matmuls is lowered once with ``autotune.prefetching()`` (no
    benchmarks; choices stand in as the stored or first candidate), every kernel gathered is
    compiled in one round, and the real lowering that follows tunes against compiled kernels.
    A candidate the first pass did not foresee (an operand that became a prologue only under
    another choice) is compiled where it is tuned, as before. Costs one extra lowering."""
    from ..runtime import autotune, precompile
    from .graph import GraphLowering

    if device.type != "cuda" or not config.autotune or not precompile.enabled():
        return
    matmuls = sum(1 for n in aten_gm.graph.nodes if n.op == "call_function" and n.target in _TUNED_MATMULS)
    if matmuls < 2:
        return
    start = time.perf_counter()
    try:
        with autotune.prefetching() as warmers:
            probe = GraphLowering(aten_gm, device, prefetch=True)
            probe.extra_guards = extra_guards
            probe.run(*[None] * sum(1 for n in aten_gm.graph.nodes if n.op == "placeholder"))
    except Exception as e:  # noqa: BLE001 - the real lowering reports its own errors
        time_log.info("tuning prefetch: the first lowering failed (%s: %s); matmuls compile as tuned",
                      type(e).__name__, e)
        return
    if warmers:
        precompile.warm_launches(warmers)
        time_log.info("tuning prefetch: %d candidate kernel(s) of %d matmul(s) compiled in one round in %.1f ms",
                      len(warmers), matmuls, (time.perf_counter() - start) * 1e3)


def _shape_env_of(values: list[Any]) -> Any:
    for v in values:
        if isinstance(v, (torch.SymInt, torch.SymFloat)):
            return v.node.shape_env
        mode = getattr(v, "fake_mode", None)
        if mode is not None and mode.shape_env is not None:
            return mode.shape_env
    return None


def _new_guards(shape_env: Any, before: int) -> list[Any]:
    """Guards the aten trace added (decompositions may compare sizes the tracer never did),
    as relations over our index functions, for the module's per-call ``check``. A guard the
    ``ShapeEnv`` proves from the symbols' ranges and earlier guards is dropped; one we cannot
    express raises ``NotImplementedError`` (the graph then runs as captured, never unchecked)."""
    from .symbolic import from_torch_expr
    out = []
    for i in range(before, len(shape_env.guards)):
        expr = shape_env.simplify(shape_env.guards[i].expr)
        if bool(expr.is_Boolean) and expr == True:  # noqa: E712 - sympy.true: nothing to check
            continue
        try:
            # Only the guards before this one are axioms (all of them would include itself).
            axioms = tuple(g.expr for g in shape_env.guards[:i])
            static = shape_env._maybe_evaluate_static(expr, axioms=axioms)
        except Exception:  # noqa: BLE001 - a private helper: undecided is the safe answer
            static = None
        if static is not None and bool(static.is_Boolean) and static == True:  # noqa: E712
            continue
        out.append(from_torch_expr(expr))
    return out


class SymbolicRefusal(NotImplementedError):
    """The symbolic path cannot compile this graph without specialising it: it runs as
    captured with the reason logged on ``fallbacks`` (even under ``raise_on_internal_error``)."""


def _refuse_specialisation(shape_env: Any, replaced_before: dict[Any, Any], guards_checked: int) -> None:
    """Raise (the graph then runs as captured, logged) when compiling fixed a size symbol to its
    example value or added guards after ``check`` was generated: the module would otherwise
    serve other sizes with code specialised to these, or rely on guards nobody checks."""
    fixed = {str(k): str(v) for k, v in shape_env.replacements.items()
             if k not in replaced_before and getattr(v, "is_number", False)}
    if fixed:
        raise SymbolicRefusal(f"compiling specialised size symbols to their example values {fixed} "
                                  "(an op's meta function or an aten pass compared them to constants)")
    late = [str(g.expr) for g in shape_env.guards[guards_checked:]]
    if late:
        raise SymbolicRefusal(f"size guards {late} were added after the aten trace and would not be checked")


def _guard_facts(shape_env: Any) -> list[Any]:
    """Every guard of the ``ShapeEnv`` that our index language expresses: each holds on every
    call (the tracer's guards are checked before the frame runs, the aten trace's by the
    module's ``check``), so lowerings may rely on them (``symbolic.known_true``)."""
    from .symbolic import from_torch_expr
    facts = []
    for guard in shape_env.guards:
        try:
            facts.append(from_torch_expr(shape_env.simplify(guard.expr)))
        except NotImplementedError:
            continue  # not usable as a fact; still checked where it was installed
    return facts


def _lower_bounds(shape_env: Any) -> dict[Any, Any]:
    """Each symbol's lower bound from its ``ShapeEnv`` range (None: unbounded below)."""
    out: dict[Any, Any] = {}
    for s, r in getattr(shape_env, "var_to_range", {}).items():
        lo = getattr(r, "lower", None)
        out[s] = int(lo) if lo is not None and getattr(lo, "is_Integer", False) else None
    return out


def _load_cached_graph(gm: torch.fx.GraphModule, gkey: dict[str, str], device: torch.device,
                       example_inputs: list[torch.Tensor], symbolic: bool) -> Callable[..., Any] | None:
    """The compiled callable from the graph cache, or None on a miss (logged on ``cache``).

    ``symbolic``: the graph has symbolic sizes (counted in ``metrics.dynamic_graphs`` like a fresh compile).

    A module that is missing, fails its hash check or fails to load is removed with its index
    entry, so this compile rewrites both.
    """
    from ..runtime import cache
    from ..runtime.launcher import load_module

    entry = graph_cache.read_entry(gm, gkey, _graph_label(gm))
    if entry is None:
        return None
    path = cache.get_path("modules", entry["module_key"], ".py")
    try:
        if path is None:
            raise FileNotFoundError("the module it points at is missing or corrupt")
        compiled = load_module(path, entry["module_key"],
                               device.type == "cpu" and config.cpu_backend == "triton_interpret")
        out_spec = pytree.treespec_loads(entry["out_spec"])
    except Exception as e:  # noqa: BLE001 - a bad entry is a miss, never a crash
        cache_log.warning("pyjit: graph cache entry for %s is unusable (%s: %s); removing it, it will be rebuilt",
                          _graph_label(gm), type(e).__name__, e)
        cache.remove("modules", entry["module_key"], ".py")
        graph_cache.remove_entry(gkey)
        return None
    metrics.generated_kernel_count += int(entry.get("kernels", 0))
    metrics.extern_calls += int(entry.get("externs", 0))
    metrics.compiled_graphs += 1
    metrics.dynamic_graphs += int(symbolic)
    metrics.graph_cache_hits += 1
    for op in entry.get("fallbacks", []):
        metrics.fallback_ops[op] += 1
    fn = _make_callable(gm, compiled.call, out_spec, example_inputs, [], getattr(compiled, "check", None),
                        _inputs_guarded(gm))
    fn.pyjit_graph_key = graph_cache._key_of(gkey)  # type: ignore[attr-defined] # for the warm start
    return fn


# ``gm.meta`` key set by a caller whose guards check, before every call, each tensor input's
# exact type, sizes, strides, dtype, device and requires_grad and the grad mode, as they were
# in ``example_inputs`` (pyjit's frontend for static-shape graphs): the compiled callable then
# skips its own per-call input check. Graphs compiled inside the backend (training forward and
# backward, whose inputs pyjit makes) never carry it.
INPUTS_GUARDED = "pyjit_inputs_guarded"
# ``gm.meta`` key: the number of ``ShapeEnv`` guards that existed before the symbolic trace
# ``gm`` came from (the joint trace of a training graph, aot/symbolic.py); the compiled module
# checks every guard added since, not only those its own aten trace adds, since lowerings rely
# on all of them (``_guard_facts``).
GUARDS_SINCE = "pyjit_guards_since"


def _inputs_guarded(gm: torch.fx.GraphModule) -> bool:
    return bool(getattr(gm, "meta", {}).get(INPUTS_GUARDED))


def _without_autocast(call: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """``call`` run with the caller's autocast off (backend/autocast.py: the aten graph it was
    generated from already holds autocast's casts)."""
    def run(flat: list[Any]) -> Any:
        return call_without_autocast(call, flat)

    return run


def _make_callable(gm: torch.fx.GraphModule, call: Callable[[list[Any]], Any], out_spec: Any,
                   example_inputs: list[torch.Tensor], constants: list[torch.Tensor],
                   check: Callable[[Sequence[Any]], bool] | None = None, inputs_guarded: bool = False,
                   aliases: list[OutputAlias] | None = None) -> Callable[..., Any]:
    # With ``inputs_guarded`` the caller's guards already pinned every input's type, sizes,
    # strides, dtype, device and requires_grad, and grad mode (pyjit's frontend, see
    # INPUTS_GUARDED): re-checking 50 parameters here cost ~100 us a call. Otherwise a static
    # graph checks them per call (input_check.py).
    run_call = _without_autocast(call)  # ``call`` itself stays for warm-up and introspection
    static_check = None if check is not None or inputs_guarded else InputCheck(example_inputs)
    checked = check is not None or not inputs_guarded
    # Rebuilding the output structure is per-call overhead: ``tree_unflatten`` costs ~2 us for a
    # plain tuple. Decide once, by unflattening a probe, whether the structure is exactly one
    # leaf or a plain tuple or list of leaves (namedtuples, nested lists and dicts keep the
    # generic path).
    n_out = out_spec.num_leaves
    probe = pytree.tree_unflatten(list(range(n_out)), out_spec)
    single = n_out == 1 and probe == 0 and type(probe) is int
    flat_tuple = type(probe) is tuple and probe == tuple(range(n_out))
    # A list of leaves (fx's immutable_list: the outputs of a training graph), rebuilt as its type.
    list_type = type(probe) if isinstance(probe, list) and probe == list(range(n_out)) else None

    # 0: first call not made yet; 1: it succeeded; -1: it failed, the graph runs as captured.
    state = [0]
    # Outputs the compiled code returns with another relation to the inputs than eager's (an
    # input buffer for a fresh tensor, a copy for a view): rebuilt per call (backend/aliasing.py).
    if aliases is None:
        aliases = output_aliases(gm) if check is None else fresh_output_views(gm)
    fixer = OutputFixer(aliases) if aliases is not None else None
    fixing = [False]

    def first_call(flat: list[Any]) -> Any:
        """The first call compiles Triton kernels (on their first launch). A kernel that fails to
        compile is a pyjit bug: the graph then runs as captured from now on (logged) instead of
        breaking the user's program. Input mutations are written back after all kernels ran,
        so running the graph as captured after a failure sees the inputs unchanged.
        Before it, the kernels are compiled in parallel (``runtime/precompile.py``)."""
        from ..runtime.precompile import warm_module
        with conv_warmup.active():
            with events.span("kernel_compile", f"parallel compile for {_graph_label(gm)}"):
                _without_autocast(lambda a: warm_module(call, a))(flat)  # its dry run calls the externs too
            try:
                with events.span("kernel_compile", f"first call of {_graph_label(gm)}"):
                    outs = run_call(flat)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:
                if config.raise_on_internal_error:
                    raise
                log.warning("pyjit: the compiled graph %s failed on its first call (%s: %s); running it as "
                            "captured from now on", _graph_label(gm), type(e).__name__, e)
                metrics.eager_graphs.append(f"first call failed: {type(e).__name__}: {e}")
                state[0] = -1
                return None
        state[0] = 1
        if fixer is not None and fixer.plan(outs, flat):
            fixing[0] = True
            outs = fixer.fix(outs, flat)
        return outs

    def compiled_fn(*args: Any) -> Any:
        # The kernels bake in sizes, strides and dtypes: anything else runs as captured.
        # Grad-requiring inputs under grad mode need autograd, which the kernels do not record.
        if checked:
            grad = torch.is_grad_enabled()
            if check is not None:
                # Symbolic sizes: the module checks the inputs against its symbolic layouts.
                # (The module's constants are inputs of ``check`` too, as of ``call``.)
                if not check([*args, *constants] if constants else args) or (
                        grad and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
                    return gm.forward(*args)
            elif static_check is not None and not static_check(args, grad):
                return gm.forward(*args)
        if state[0] == 1:
            outs = run_call([*args, *constants])
            if fixing[0]:
                outs = fixer.fix(outs, args)  # type: ignore[union-attr]
        else:
            outs = first_call([*args, *constants]) if state[0] == 0 else None
            if outs is None:
                return gm.forward(*args)
        if single:
            return outs[0]
        if flat_tuple:
            return tuple(outs)
        if list_type is not None:
            return list_type(outs)
        return pytree.tree_unflatten(list(outs), out_spec)

    compiled_fn.pyjit_call = call  # type: ignore[attr-defined]
    # The module's check of the inputs against its symbolic layouts and guards (None: static).
    compiled_fn.pyjit_check = (lambda a: check([*a, *constants])) if check is not None and constants \
        else check  # type: ignore[attr-defined]
    compiled_fn.pyjit_source = inspect.getsource(inspect.getmodule(call))  # type: ignore[attr-defined]
    return compiled_fn
