"""Modules managed by FSDP: recognised at the call, which then runs natively.

FSDP (``torch.distributed.fsdp.fully_shard``, "FSDP2", and the ``FullyShardedDataParallel``
wrapper, "FSDP1") gathers a module's parameters before its forward and frees them after it,
in module hooks (FSDP2: forward pre-/post-hooks registered on the module; FSDP1: the wrapper's
own ``forward``) that drive collectives on process groups, streams, DTensors and autograd
hooks of the outputs. pyjit does not trace those hooks: a traced frame that calls an FSDP
module breaks the graph there (kind ``distributed``, logged on ``graph_breaks`` with the
module's class), the call runs natively -- hooks included -- and the module's own ``forward``,
when it is user code, is compiled as a callee frame with the gathered parameters, which are
plain tensors by then. Backward runs through FSDP's autograd hooks as in eager: the compiled
graphs' autograd functions hand gradients to the same parameters.

Nothing is imported here: a model can only hold FSDP modules once FSDP's modules are loaded.
"""
from __future__ import annotations

import sys
from typing import Any

_FSDP2_MODULE = "torch.distributed.fsdp._fully_shard._fully_shard"
_FSDP1_MODULE = "torch.distributed.fsdp.fully_sharded_data_parallel"


def fsdp_kind(module: Any) -> str | None:
    """``"fully_shard"`` for a module sharded with FSDP2, ``"FullyShardedDataParallel"`` for an
    FSDP1 wrapper, else None."""
    fsdp2 = sys.modules.get(_FSDP2_MODULE)
    if fsdp2 is not None and issubclass(type(module), getattr(fsdp2, "FSDPModule", ())):
        return "fully_shard"
    fsdp1 = sys.modules.get(_FSDP1_MODULE)
    if fsdp1 is not None and issubclass(type(module), getattr(fsdp1, "FullyShardedDataParallel", ())):
        return "FullyShardedDataParallel"
    return None


def break_reason(module: Any) -> str | None:
    """The graph-break detail for calling ``module`` from traced code, or None when it is no
    FSDP module."""
    kind = fsdp_kind(module)
    if kind is None:
        return None
    return (f"{type(module).__name__} is managed by FSDP ({kind}): its unshard/reshard hooks run natively "
            "and its forward compiles as its own frame")
