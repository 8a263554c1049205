"""Run-time checks generated wrappers call where eager would raise and a kernel cannot.

:func:`check_gather_index`: a gather's index tensor (a graph input of a CPU graph; see
``lowering/indexing.py``) must lie in ``[-size, size)`` (``x[idx]``) or ``[0, size)``
(``index_select``, ``embedding``, ``gather``). Generated kernels clamp indices (they never read
outside a tensor), so without this an out-of-range index would give a value silently where
eager raises ``IndexError``. One ``aminmax`` over the index tensor per call (a few microseconds
for thousands of indices). CUDA graphs are not checked: reading the range would synchronize
the host with the device on every call.
"""
from __future__ import annotations

import torch

from ..errors import GatherIndexError


def check_gather_index(index: torch.Tensor, size: int, negative: bool, site: str) -> None:
    if index.numel() == 0:
        return
    low, high = torch.aminmax(index)
    lo, hi = int(low), int(high)
    least = -size if negative else 0
    if lo < least or hi >= size:
        bad = lo if lo < least else hi
        raise GatherIndexError(f"index {bad} is out of range [{least}, {size}) in {site} "
                               "(eager raises here too)")
