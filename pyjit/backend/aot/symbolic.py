"""Training graphs with symbolic sizes: one joint graph, partition and compiled pair for all sizes.

A dynamic frame entry (``pyjit.jit(..., dynamic=True)``, or automatic dynamic after a second
size) hands the backend a graph whose placeholders are fake tensors with size symbols of the
tracer's ``ShapeEnv``. When that graph needs autograd, :func:`compile_training_symbolic`:

1. traces the joint graph on those fakes (``joint.trace_joint`` with ``symbolic_fakes``) under
   the Python dispatcher, so composite ops decompose without reading concrete sizes;
2. refuses (``NotImplementedError``) when that trace fixed a size symbol to its example value,
   or when a user output aliases an input (its view is rebuilt from concrete sizes); inputs
   may be tensors or symbolic numbers (a Python int or float that varies between calls);
3. partitions it (min-cut, sizes weighed at their example values): size scalars the backward
   reads (``sym_size`` of an input, arithmetic on sizes) are not forward outputs, they are
   evaluated at run time from the primals' sizes (:func:`size_evaluator`) and passed to the
   backward after the saved tensors;
4. compiles the forward now with pyjit's symbolic path (``compile_fx._compile``: a refusal
   there also refuses here) and the backward on first use (``compile_fx``: a refusal there runs
   that backward as captured, logged). Every compiled graph checks, per call, the guards the
   joint trace added (``GUARDS_SINCE``), since lowerings rely on them.

The caller (``aot.compile_training_dynamic``) falls back to one static training graph per
input size (``compile_training_per_size``) on any refusal, logged on ``fallbacks``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy
import torch
import torch.fx

from ...config import config
from .joint import trace_joint
from .partition import Partitioned, partition_joint
from ..autocast import call_without_autocast
from .runtime import MODULES_TRAINING, AOTState, make_runtime


def compile_training_symbolic(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                              symbolic: Sequence[Any]) -> Callable[..., Any]:
    """The training callable of ``gm`` for every size its symbolic inputs ``symbolic`` allow
    (``example_inputs``: this call's real inputs). Raises ``NotImplementedError`` when the
    graph cannot be compiled symbolically."""
    from torch._dispatch.python import enable_python_dispatcher

    from ..compile_fx import (GUARDS_SINCE, _compile, _refuse_specialisation, _shape_env_of, compile_fx,
                              symbolic_inputs)
    from . import _label
    from .decompositions import training_decomposition_table

    if any(not isinstance(v, (torch.Tensor, torch.SymInt, torch.SymFloat)) for v in symbolic):
        raise NotImplementedError("a graph input that is neither a tensor nor a symbolic number")
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()):
        raise NotImplementedError("parameters or buffers held by the graph module (not graph inputs)")
    shape_env = _shape_env_of(list(symbolic))
    if shape_env is None:
        raise NotImplementedError("symbolic inputs without a ShapeEnv")
    replaced_before = dict(shape_env.replacements)
    guards_before = len(shape_env.guards)
    with enable_python_dispatcher():
        joint = trace_joint(gm, [], list(example_inputs), training_decomposition_table(),
                            symbolic_fakes=list(symbolic))
    if any(not isinstance(u, int) for u in joint.user_outputs):
        raise NotImplementedError("an output aliasing an input or a view of a computed value")
    _refuse_specialisation(shape_env, replaced_before, len(shape_env.guards))
    part = partition_joint(joint, "min_cut")
    for graph in (part.fw_gm, part.bw_gm, part.inference_gm):
        if graph is not None:
            graph.meta[GUARDS_SINCE] = guards_before
    primals = [n.meta["val"] for n in joint.gm.graph.nodes if n.op == "placeholder"][:joint.num_primals]
    pass_unbound_symbols(part, primals, len(joint.tangent_outputs))
    sizes_of = size_evaluator(part.saved_sizes, primals, shape_env)

    def compile_now(graph: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
        # Refusals propagate (the caller then compiles per size) instead of running as captured.
        # An aten graph traced below autocast: compiled with the caller's autocast off.
        return call_without_autocast(_compile, graph, list(inputs), symbolic_inputs(graph))

    label = _label(gm)
    examples = [t.detach() if isinstance(t, torch.Tensor) else t for t in example_inputs]
    with torch.no_grad():
        if part.inference_gm is not None and not joint.mutated_inputs and config.aot_defer_saving \
                and not gm.meta.get(MODULES_TRAINING):
            state = AOTState(label, joint, part, None, compile_fx, compile_fx,
                             compile_now(part.inference_gm, examples), sizes_of)
        else:
            state = AOTState(label, joint, part, compile_now(part.fw_gm, examples), compile_fx,
                             sizes_of=sizes_of)
    if gm.meta.get("pyjit_range_name"):  # the frame's graph name, set by the frontend
        state.range_name = f"{gm.meta['pyjit_range_name']} backward"
    _refuse_specialisation(shape_env, replaced_before, len(shape_env.guards))
    return make_runtime(state, gm, [], gm.forward)


def _size_symbols(values: Sequence[Any]) -> dict[Any, Any]:
    """symbol -> a SymInt that is exactly it, for every size of ``values`` that is a bare
    symbol (tensors' sizes; scalars that are a symbol)."""
    out: dict[Any, Any] = {}
    for value in values:
        sizes = value.shape if isinstance(value, torch.Tensor) else [value]
        for size in sizes:
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                out.setdefault(size.node.expr, size)
    return out


def pass_unbound_symbols(part: Partitioned, primals: Sequence[Any], num_tangents: int) -> None:
    """Give the backward every size symbol of the primals that none of its inputs has as a
    size (a weight's size only in a grad's shape, a guard of the joint trace): one more size
    input each, named after the symbol (which binds it), after the saved sizes."""
    graph = part.bw_gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    bound = _size_symbols([n.meta["val"] for n in placeholders])
    missing = [(sym, value) for sym, value in _size_symbols(primals).items() if sym not in bound]
    if not missing:
        return
    first_tangent = placeholders[len(placeholders) - num_tangents] if num_tangents else None
    for sym, value in sorted(missing, key=lambda item: str(item[0])):
        if first_tangent is not None:
            with graph.inserting_before(first_tangent):
                node = graph.placeholder(str(sym))
        else:
            with graph.inserting_after(placeholders[-1]):
                node = graph.placeholder(str(sym))
            placeholders.append(node)
        node.meta["val"] = value
        part.saved_sizes.append(value)
    part.bw_gm.recompile()


def size_evaluator(sizes: Sequence[Any], primals: Sequence[Any], shape_env: Any
                   ) -> Callable[[Sequence[torch.Tensor]], list[Any]] | None:
    """``primals -> values of sizes`` for one call, or None when ``sizes`` is empty.

    Each size is an expression over the symbols that are plain sizes of the primals (a dimension
    whose size is a bare symbol binds it) or scalar primals; one over any other symbol raises
    ``NotImplementedError``. A bare symbol is read directly (the common case: a batch or
    sequence length); other expressions are evaluated with sympy.
    """
    if not sizes:
        return None
    # symbol -> (primal index, dimension), or (primal index, None) for a scalar primal.
    where: dict[Any, tuple[int, int | None]] = {}
    for i, value in enumerate(primals):
        if isinstance(value, torch.Tensor):
            for d, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    where.setdefault(size.node.expr, (i, d))
        elif isinstance(value, (torch.SymInt, torch.SymFloat)) and isinstance(value.node.expr, sympy.Symbol):
            where.setdefault(value.node.expr, (i, None))
    plan: list[tuple[Any, type]] = []
    for size in sizes:
        expr = shape_env.simplify(size.node.expr)
        missing = expr.free_symbols - where.keys()
        if missing:
            raise NotImplementedError(f"the backward reads the size {expr}, whose symbols "
                                      f"{sorted(map(str, missing))} are no input's size")
        kind = int if isinstance(size, torch.SymInt) else float if isinstance(size, torch.SymFloat) else bool
        plan.append((expr if not expr.is_Symbol else where[expr], kind))

    def value_of(args: Sequence[Any], i: int, d: int | None) -> Any:
        return args[i] if d is None else args[i].shape[d]

    def evaluate(args: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for spec, kind in plan:
            if isinstance(spec, tuple):
                out.append(kind(value_of(args, *spec)))
            else:
                values = {s: sympy.sympify(value_of(args, i, d)) for s, (i, d) in where.items()
                          if s in spec.free_symbols}
                out.append(kind(spec.xreplace(values)))
        return out

    return evaluate
