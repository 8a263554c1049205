"""Graph-level compile cache: a warm start skips tracing, lowering and code generation.

The key hashes the FX graph's code, the example inputs' metadata (sizes, strides, dtypes,
devices, requires_grad), the backend settings that change generated code, the source of
``pyjit/backend`` itself and the torch/Triton/pyjit versions. Only graphs whose behaviour is
fully described by their code are cached: every call target must be a torch op or a torch /
operator / builtins function (a user function called from the graph could change without its
name changing, which would silently serve stale code), and no ``get_attr``/``call_module``
(constant tensors and submodules are not in the code).
"""
from __future__ import annotations

import functools
import hashlib
import os
from typing import Any, Sequence

import torch
import torch.fx

from ..config import config

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


def graph_key(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> str | None:
    """The cache key of compiling ``gm`` for these inputs, or None when it must not be cached."""
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            return None
        if node.op == "call_function" and not _is_torch_callable(node.target):
            return None
    inputs = [(tuple(t.shape), tuple(t.stride()), str(t.dtype), str(t.device), t.requires_grad)
              for t in example_inputs]
    settings = (config.cpu_backend, config.backend_fusion, config.backend_persistent_reduction_max,
                config.backend_persistent_multi_pass_max,
                config.backend_split_reduction_min)
    text = "\n".join([gm.code, repr(inputs), repr(settings), _backend_source_hash()])
    return hashlib.sha256(text.encode()).hexdigest()
