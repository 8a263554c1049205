"""Facts about ``torch.distributed`` collectives that the tracer and the backend share.

The tracer rewrites the in-place c10d calls (``dist.all_reduce(x)``...) and the
``torch.distributed._functional_collectives`` calls into torch's functional collective ops,
``torch.ops._c10d_functional.*``, each followed by its ``wait_tensor`` (and, for the c10d
calls, a copy of the result back into the tensor eager would have written): the same form
torch's own compiler traces them to. This module owns what that rewrite needs from torch:

* which callables are collectives and how their arguments are read (:data:`C10D_INPLACE`,
  :data:`FUNCOL`), which ``torch.distributed`` queries are answered at trace time
  (:data:`CONSTANT_QUERIES`);
* a process group argument as the group name the functional ops take
  (:func:`group_name`, :func:`group_size`, :func:`group_rank_of`);
* ``ReduceOp`` values as the functional ops' reduce-op strings (:func:`reduce_op_name`);
* the functional ops themselves (:data:`COLLECTIVE_OPS`, :data:`WAIT_OP`), for the backend's
  extern calls and its wait-placement pass.

Importing it imports ``torch.distributed``; callers import it only when a distributed callable
is met (``torch.distributed.is_available()`` is checked first).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

_ops = torch.ops._c10d_functional

# The functional collectives (each returns a fresh tensor that must be waited on) and the wait.
COLLECTIVE_OPS = (
    _ops.all_reduce.default,
    _ops.all_gather_into_tensor.default,
    _ops.reduce_scatter_tensor.default,
    _ops.broadcast.default,
)
WAIT_OP = _ops.wait_tensor.default

# c10d's in-place collectives: name -> (tensor parameter written, tensor parameter read).
C10D_INPLACE: dict[Any, tuple[str, str]] = {
    dist.all_reduce: ("tensor", "tensor"),
    dist.broadcast: ("tensor", "tensor"),
    dist.all_gather_into_tensor: ("output_tensor", "input_tensor"),
    dist.reduce_scatter_tensor: ("output", "input"),
}

# torch.distributed._functional_collectives: the functions traced as a functional op + wait.
# (``all_gather_tensor``/``reduce_scatter_tensor`` are the deprecated names of the ``_single`` ones.)
FUNCOL = {
    funcol.all_reduce: "all_reduce",
    funcol.all_gather_tensor: "all_gather_tensor",
    funcol.reduce_scatter_tensor: "reduce_scatter_tensor",
    funcol.broadcast: "broadcast",
    funcol.wait_tensor: "wait_tensor",
}
for _name, _kind in (("all_gather_single", "all_gather_tensor"), ("reduce_scatter_single", "reduce_scatter_tensor")):
    if hasattr(funcol, _name):
        FUNCOL[getattr(funcol, _name)] = _kind

# Queries whose answer cannot change while the process group lives: folded into the trace.
CONSTANT_QUERIES = (dist.is_available, dist.is_initialized, dist.get_rank, dist.get_world_size,
                    dist.get_backend)

_REDUCE_OPS = {
    dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.PRODUCT: "product",
    dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max", dist.ReduceOp.BAND: "band",
    dist.ReduceOp.BOR: "bor", dist.ReduceOp.BXOR: "bxor",
}


def is_distributed_callable(fn: Any) -> bool:
    """Whether ``fn`` is a function of ``torch.distributed`` (by its defining module)."""
    mod = getattr(fn, "__module__", None)
    return type(mod) is str and (mod == "torch.distributed" or mod.startswith("torch.distributed."))


def reduce_op_name(op: Any) -> str:
    """``dist.ReduceOp.SUM`` -> ``"sum"`` (strings pass through, lower-cased, as funcol does)."""
    if isinstance(op, str):
        return op.lower()
    for known, name in _REDUCE_OPS.items():
        if op == known:
            return name
    raise ValueError(f"reduce op {op!r} has no functional-collective form (premul_sum and custom ops)")


def resolve_group(group: Any) -> Any:
    """The ``ProcessGroup`` that a c10d ``group=`` argument names (None: the default group)."""
    return dist.group.WORLD if group is None else group


def group_name(group: Any) -> str:
    """The name the functional ops take for a c10d group or any funcol group argument (a
    ``ProcessGroup``, a ``DeviceMesh`` with one dimension, ``(mesh, dim)``, a list of ranks, a
    name)."""
    if group is None or isinstance(group, dist.ProcessGroup):
        return resolve_group(group).group_name
    return funcol._resolve_group_name(group)


def group_size(name: str) -> int:
    """How many ranks the group named ``name`` has."""
    return dist.distributed_c10d._resolve_process_group(name).size()  # type: ignore[arg-type]


def group_rank_of(group: Any, global_rank: int) -> int:
    """``dist.broadcast(src=...)`` names a global rank; the functional op takes the group's rank."""
    pg = resolve_group(group)
    return global_rank if pg is dist.group.WORLD else dist.get_group_rank(pg, global_rank)
