"""Running code below autocast with the caller's autocast switched off.

An aten graph traced while autocast was on already holds every cast autocast made, as explicit
``_to_copy`` nodes, and each op's dtype as autocast chose it (fp32 inside an
``autocast(enabled=False)`` region, bf16 outside). Code generated from such a graph, and the
graph itself run op by op, must therefore run with autocast off: otherwise the caller's
autocast, still on around the compiled call, casts the inputs of every extern op (``torch.mm``,
convolutions, attention) again. A matmul eager ran in fp32 would come back in bf16.

:func:`call_without_autocast` is the one place that switches it off and back on. It costs one C
call when no autocast is on. :func:`autocast_state` is the ambient state a trace depends on (part
of the graph cache's key).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

# Device types whose autocast state is switched off around the call.
_DEVICES = ("cpu", "cuda")
_any_autocast = torch._C._is_any_autocast_enabled


def call_without_autocast(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with autocast off for every device type on which it is on now."""
    if not _any_autocast():
        return fn(*args)
    enabled = [d for d in _DEVICES if torch.is_autocast_enabled(d)]
    for d in enabled:
        torch.set_autocast_enabled(d, False)
    try:
        return fn(*args)
    finally:
        for d in enabled:
            torch.set_autocast_enabled(d, True)


def autocast_state() -> tuple[tuple[str, torch.dtype], ...]:
    """(device type, dtype) of each device type whose autocast is on; empty when none is."""
    if not _any_autocast():
        return ()
    return tuple((d, torch.get_autocast_dtype(d)) for d in _DEVICES if torch.is_autocast_enabled(d))
