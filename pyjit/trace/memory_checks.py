"""Eager's memory-overlap errors for in-place ops, decided while tracing.

Eager refuses some in-place writes by where their tensors lie in memory:
``x.index_add_(0, idx, x[:2])`` ("some elements of the input tensor and the written-to tensor
refer to a single memory location"), ``x.expand(4, 4).add_(1)`` ("more than one element of the
written-to tensor refers to a single memory location"). Fake tensors run the ops' meta kernels,
which do not check that, and a compiled graph computes functionally, so the program would return
a value where eager raises.

:func:`overlap_error` looks at the fake tensors of an in-place call: only when an argument shares
memory with the written tensor, or the written tensor overlaps itself, it replays the op on small
real CPU tensors laid out the same way (same storage sharing, sizes, strides and offsets; zeros as
values, which these checks never read) and returns the error eager raises about memory overlap.
The tracer then breaks the graph before the op, so eager runs it and raises its own error with
the user's traceback.
"""
from __future__ import annotations

from typing import Any

import torch

# The stand-in storage is allocated for real: larger written tensors are not checked.
_MAX_BYTES = 1 << 24
_OVERLAP_MESSAGE = "refer to a single memory location"
_INTERNAL_OVERLAP_MESSAGE = "refers to a single memory location"


def _storage_key(t: torch.Tensor) -> Any:
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(t.untyped_storage())


def _static(t: torch.Tensor) -> bool:
    return t.layout == torch.strided and all(isinstance(s, int) for s in (*t.shape, *t.stride(), t.storage_offset()))


def overlap_error(kind: str, target: Any, args: list[Any], kwargs: dict[str, Any]) -> str | None:
    """Eager's memory-overlap error for the in-place call ``target(*args, **kwargs)`` on fake
    tensors (``args[0]`` is the written tensor), or None."""
    if not args or not isinstance(args[0], torch.Tensor) or not _static(args[0]):
        return None
    written = args[0]
    from torch.utils import _pytree as pytree  # imported when used: the other-Python self-check runs on a torch stub

    leaves = [a for a in pytree.tree_leaves((args[1:], kwargs)) if isinstance(a, torch.Tensor)]
    key = _storage_key(written)
    sharing = [a for a in leaves if _storage_key(a) == key]
    if not sharing and torch._debug_has_internal_overlap(written) != 1:
        return None
    if any(not _static(a) for a in [written, *leaves]):
        return None
    nbytes = int(written.untyped_storage().nbytes())
    if nbytes > _MAX_BYTES:
        return None
    memory = torch.zeros(nbytes, dtype=torch.uint8).untyped_storage()

    def stand_in(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if _storage_key(value) == key:
            return torch.empty(0, dtype=value.dtype).set_(memory, value.storage_offset(), value.shape, value.stride())
        return torch.zeros(value.shape, dtype=value.dtype)

    real_args, real_kwargs = pytree.tree_map(stand_in, (args, kwargs))
    try:
        with torch.no_grad():
            if kind == "call_method":
                getattr(real_args[0], target)(*real_args[1:], **real_kwargs)
            else:
                target(*real_args, **real_kwargs)
    except RuntimeError as e:
        message = str(e)
        if _OVERLAP_MESSAGE in message or _INTERNAL_OVERLAP_MESSAGE in message:
            return message.splitlines()[0]
    except Exception:  # noqa: BLE001 - anything else is not the check this replay is for
        return None
    return None
