"""Functional collectives (``torch.ops._c10d_functional.*``) as extern calls.

A collective is communication, not a loop: the wrapper calls the op itself (torch's process
group does the work), so these are externs by design, not fallbacks. ``wait_tensor`` returns
its argument, so its output aliases the collective's buffer: these externs stay out of
``EXTERN_BY_DESIGN``, whose outputs the wrapper may recycle, and are listed in
``EXTERN_NOT_FALLBACK`` instead (no fallback log or count; outputs and inputs never recycled).
Where waits go is decided before lowering, by ``passes/collectives.py``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .fallbacks import EXTERN_NOT_FALLBACK, make_extern
from .registry import register_lowering

if TYPE_CHECKING:
    from ..graph import GraphLowering

_ops = torch.ops._c10d_functional
COLLECTIVES = (_ops.all_reduce.default, _ops.all_gather_into_tensor.default, _ops.reduce_scatter_tensor.default,
               _ops.broadcast.default, _ops.wait_tensor.default)
EXTERN_NOT_FALLBACK.update(COLLECTIVES)


def _lower(target: Any) -> None:
    @register_lowering(target)
    def lower(ctx: "GraphLowering", *args: Any, **kwargs: Any) -> Any:
        return make_extern(ctx, target, args, kwargs)


for _target in COLLECTIVES:
    _lower(_target)
