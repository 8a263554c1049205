"""Functional collectives (``torch.ops._c10d_functional.*``) as extern calls.

A collective is communication, not a loop: the wrapper calls the op itself (torch's process
group does the work), so these are externs by design, not fallbacks. ``wait_tensor`` returns
its argument, so its output aliases the collective's buffer: these externs stay out of
``EXTERN_BY_DESIGN``, whose outputs the wrapper may recycle, and are listed in
``EXTERN_NOT_FALLBACK`` instead (no fallback log or count; outputs and inputs never recycled).
Where waits go is decided before lowering, by ``passes/collectives.py``. The scheduler keeps
every collective and its wait even when nothing reads the result, and issues the collectives
in program order (``scheduler._eliminate_dead``, ``_topological``): every rank must issue the
same collectives in the same order, also when rank-dependent code uses different results.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .fallbacks import EXTERN_NOT_FALLBACK, make_extern
from .registry import register_lowering

if TYPE_CHECKING:
    from ..graph import GraphLowering



def _collectives() -> tuple[Any, ...]:
    if not torch.distributed.is_available():
        return ()
    ops = torch.ops._c10d_functional
    return (ops.all_reduce.default, ops.all_gather_into_tensor.default, ops.reduce_scatter_tensor.default,
            ops.broadcast.default, ops.wait_tensor.default)


def _lower(target: Any) -> None:
    @register_lowering(target)
    def lower(ctx: "GraphLowering", *args: Any, **kwargs: Any) -> Any:
        return make_extern(ctx, target, args, kwargs)


COLLECTIVES = _collectives()
# The ops that start communication (not the wait): the scheduler issues them in program order.
COLLECTIVE_STARTS = COLLECTIVES[:-1]
EXTERN_NOT_FALLBACK.update(COLLECTIVES)
for _target in COLLECTIVES:
    _lower(_target)
