"""Graph-level compile cache: a warm start skips tracing, lowering and code generation.

The key hashes the FX graph's code, the example inputs' metadata (sizes, strides, dtypes,
devices, requires_grad; for a dynamic-shape graph its symbolic sizes and strides, never the
example sizes, and the ``ShapeEnv``'s guards, replacements and ranges the compile relies on),
the backend settings that change generated code, the source of
``pyjit/backend`` itself and the torch/Triton/pyjit versions. Only graphs whose behaviour is
fully described by their code are cached: every call target must be a torch op or a torch /
operator / builtins function (a user function called from the graph could change without its
name changing, which would silently serve stale code), and no ``get_attr``/``call_module``
(constant tensors and submodules are not in the code).

Entries are JSON blobs in the ``graphs`` namespace of :mod:`pyjit.runtime.cache` (trusted,
hash-checked, atomic); an entry of the wrong shape is logged, removed and rebuilt. Every lookup
logs a hit or a miss on the ``cache`` channel; a miss names the key field that differs from the
last entry written for a graph of the same name (``GraphModule_<function>`` and arity).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any, Sequence

import torch
import torch.fx

from ..config import config
from .autocast import autocast_state
from ..logs import get_logger
from ..report import events
from ..runtime import cache

log = get_logger("cache")
NAMESPACE = "graphs"

_SAFE_MODULES = ("torch", "_operator", "operator", "builtins", "math")


def _is_torch_callable(target: Any) -> bool:
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in _SAFE_MODULES


@functools.lru_cache(maxsize=None)
def _backend_source_hash() -> str:
    root = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    digest.update(name.encode() + f.read())
    return digest.hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def graph_key_fields(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> dict[str, str] | None:
    """The named parts of the cache key (hashes), or None when the graph must not be cached."""
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            return None
        if node.op == "call_function" and not _is_torch_callable(node.target):
            return None
    # Symbolic inputs (fake tensors / Sym scalars of a dynamic-shape graph) key on their size
    # expressions, never on the example sizes: one entry serves every size.
    inputs = [(tuple(str(s) for s in t.shape), tuple(str(s) for s in t.stride()), str(t.dtype), str(t.device),
               t.requires_grad) if isinstance(t, torch.Tensor) else (type(t).__name__, str(t))
              for t in example_inputs]
    settings = (config.cpu_backend, config.backend_fusion, config.backend_persistent_reduction_max,
                config.backend_persistent_multi_pass_max,
                config.backend_split_reduction_min,
                # Matmul templates: whether they are candidates, and the fp32 precision torch
                # allows (baked into template kernels as TF32 or IEEE dots).
                config.matmul_template, config.matmul_prologue, config.autotune,
                bool(torch.backends.cuda.matmul.allow_tf32),
                # Launch autotuning bakes its choices into the module (codegen/launch_autotune.py),
                # and they hold for one GPU model (so do matmul template choices).
                config.autotune_launch, config.autotune_launch_min_bytes, config.autotune_launch_min_row,
                _cuda_models(example_inputs),
                # Channels-last layout for convolution graphs (passes/layout.py).
                config.layout_opt,
                # Depthwise convolutions generated or extern (lowering/convolution.py).
                config.conv_template,
                # The ambient state the trace to aten reads: autocast's casts become nodes, and
                # factory calls take the default dtype.
                autocast_state(), torch.get_default_dtype())
    fields = {"graph code": _sha(gm.code), "input metadata": _sha(repr(inputs)),
              "backend settings": _sha(repr(settings)), "backend source": _backend_source_hash()}
    state = _shape_env_state(example_inputs)
    if state is not None:
        # Which of those guards the module checks itself (GUARDS_SINCE) is part of it.
        from .compile_fx import GUARDS_SINCE
        fields["shape environment"] = _sha(f"{state} checked from {gm.meta.get(GUARDS_SINCE)}")
    return fields


def _cuda_models(example_inputs: Sequence[Any]) -> tuple[str, ...]:
    """Names of the GPU models the inputs live on (tuned choices are per model)."""
    devices = {t.device for t in example_inputs if isinstance(t, torch.Tensor) and t.device.type == "cuda"}
    return tuple(sorted({torch.cuda.get_device_name(d) for d in devices}))


def _shape_env_state(example_inputs: Sequence[Any]) -> str | None:
    """What a symbolic compile may rely on besides the graph: the ``ShapeEnv``'s guards,
    replacements and symbol ranges (None for a static graph).

    The module is generated assuming the tracer's guards (a slice ``x[:max(3, n // 2)]`` has
    length ``max(3, n // 2)`` only under the guard ``max(3, n // 2) <= n``; under the opposite
    guard the same graph code slices ``n`` rows). Those guards are checked by the frame's
    guards, not by the module's ``check``, so an entry may only serve the same guard state.
    """
    shape_env = None
    for v in example_inputs:
        if isinstance(v, (torch.SymInt, torch.SymFloat)):
            shape_env = v.node.shape_env
        else:
            mode = getattr(v, "fake_mode", None)
            shape_env = getattr(mode, "shape_env", None)
        if shape_env is not None:
            break
    if shape_env is None:
        return None
    guards = sorted({str(g.expr) for g in shape_env.guards})
    replacements = sorted(f"{k}={v}" for k, v in shape_env.replacements.items())
    ranges = sorted(f"{k}:{r}" for k, r in shape_env.var_to_range.items())
    return repr((guards, replacements, ranges))


def graph_key(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> str | None:
    """The cache key of compiling ``gm`` for these inputs, or None when it must not be cached."""
    fields = graph_key_fields(gm, example_inputs)
    return None if fields is None else _key_of(fields)


def _key_of(fields: dict[str, str]) -> str:
    return _sha(json.dumps(fields, sort_keys=True))


def graph_family(gm: torch.fx.GraphModule) -> str:
    """Entries of one family are compared to explain a miss: the graph's name and arity."""
    arity = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    return f"{type(gm).__name__}/{arity}"


def _is_hex_key(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


_ENTRY_SHAPE = {"module_key": str, "out_spec": str, "kernels": int, "externs": int, "fallbacks": list}


def read_entry(gm: torch.fx.GraphModule, fields: dict[str, str], label: str) -> dict[str, Any] | None:
    """The index entry for these key fields, or None (a miss, logged with its reason)."""
    key = _key_of(fields)
    data = cache.get_bytes(NAMESPACE, key, ".json")
    entry: Any = None
    if data is not None:
        try:
            entry = json.loads(data)
        except ValueError:
            entry = None
        if not isinstance(entry, dict) or any(not isinstance(entry.get(k), t) for k, t in _ENTRY_SHAPE.items()) \
                or not _is_hex_key(entry["module_key"]):
            log.warning("pyjit: graph cache entry %s has the wrong shape; removing it, it will be rebuilt", key[:12])
            cache.remove(NAMESPACE, key, ".json")
            entry = None
            data = None
    if data is None:
        if log.isEnabledFor(20) or events.enabled():
            why = cache.explain_miss(NAMESPACE, graph_family(gm), fields)
            log.info("graph cache miss for %s (key %s): %s", label, key[:12], why)
            if events.enabled():
                prefix = "differs from the earlier entry in: "
                events.emit("cache", result="miss", graph=label, key=key[:12], reason=why,
                            fields=why[len(prefix):].split(", ") if why.startswith(prefix) else [])
        return None
    log.info("graph cache hit for %s (key %s)", label, key[:12])
    if events.enabled():
        events.emit("cache", result="hit", graph=label, key=key[:12], reason="", fields=[])
    return entry


def write_entry(gm: torch.fx.GraphModule, fields: dict[str, str], entry: dict[str, Any]) -> None:
    """Store an index entry (write-once) and remember its fields for explaining later misses."""
    key = _key_of(fields)
    cache.put_bytes(NAMESPACE, key, json.dumps(entry).encode(), ".json")
    cache.record_neighbour(NAMESPACE, graph_family(gm), fields)


def remove_entry(fields: dict[str, str]) -> None:
    cache.remove(NAMESPACE, _key_of(fields), ".json")
