"""Training through pyjit's compiler: joint graph, partition, autograd runtime (AOTAutograd design).

``aot_compile(gm, example_inputs, fw_compiler, bw_compiler, decompositions, partition)`` traces
the joint forward/backward aten graph (``joint.py``), splits it (``partition.py``: min-cut with
``networkx`` or the save-what-backward-uses reference), compiles the forward now with
``fw_compiler`` and the backward on its first use with ``bw_compiler`` (both receive aten
graphs and example inputs, torch.compile's backend protocol), and returns a callable running
them behind one ``torch.autograd.Function`` (``runtime.py``). ``compile_training`` is the
entry pyjit's own backend uses for graphs that need autograd (grad enabled and an input
requiring grad); it falls back to the captured graph, logged, on anything unsupported.
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
from .runtime import AOTState, CompiledFunction, make_runtime

__all__ = ["aot_compile", "compile_training", "JointGraph", "PartitionReport", "CompiledFunction"]

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
    label = _label(gm)
    examples = [_detach(t) for t in inputs]
    with torch.no_grad():
        if part.inference_gm is not None and not joint.mutated_inputs and defer_saving:
            # Deferred saving (runtime.py): the saving forward is compiled at the first backward.
            inference_fw = fw_compiler(part.inference_gm, examples)
            state = AOTState(label, joint, part, None, bw_compiler or fw_compiler, fw_compiler, inference_fw)
        else:
            state = AOTState(label, joint, part, fw_compiler(part.fw_gm, examples), bw_compiler or fw_compiler)
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
