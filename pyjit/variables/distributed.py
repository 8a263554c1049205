"""Calls of ``torch.distributed`` functions met while tracing.

* The in-place c10d collectives (``dist.all_reduce``, ``all_gather_into_tensor``,
  ``reduce_scatter_tensor``, ``broadcast``) with ``async_op=False`` become the functional op
  ``torch.ops._c10d_functional.<op>``, its ``wait_tensor``, and ``written.copy_(result)``:
  the copy goes through the tensor tracker like a user's ``copy_``, so a graph input is written
  back by the backend's mutation machinery exactly as eager's collective writes it.
* ``torch.distributed._functional_collectives`` calls become the functional op and its wait
  (the wait is placed later by the backend, ``backend/passes/collectives.py``).
* Rank, world size, backend and initialization queries are answered at trace time.
* With ``async_op=True`` the same is recorded and the call returns a :class:`WorkVariable`
  whose ``wait()`` is a no-op (the graph's wait goes where the result is first read).
* Everything else of ``torch.distributed`` (a ``Work`` handle that leaves the trace,
  point-to-point ops, object collectives, FSDP/DTensor internals) breaks the graph with kind
  ``distributed`` and runs natively.

Process groups are read at trace time and pinned by identity when they come from a source;
the functional ops take the group's name.
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from ..errors import Unsupported
from ..guards.guards import GuardKind
from ..trace.graph_breaks import unsupported
from .base import BoundMethodVariable, VariableTracker
from .constant import ConstantVariable
from .user_defined import UserDefinedObjectVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator


def call_distributed(tx: "Translator", fn: Any, args: list[VariableTracker],
                     kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """Trace ``fn(*args, **kwargs)`` for a function defined in ``torch.distributed``."""
    from ..distributed import collectives as c

    name = getattr(fn, "__qualname__", repr(fn))
    if fn in c.CONSTANT_QUERIES:
        values = [_value(tx, a, name) for a in args]
        kw = {k: _value(tx, v, name) for k, v in kwargs.items()}
        try:
            return ConstantVariable(fn(*values, **kw))
        except (RuntimeError, ValueError) as e:  # not initialized...: the call raises natively
            unsupported("exception", f"{type(e).__name__}: {e}")
    if fn in c.C10D_INPLACE:
        return _c10d_inplace(tx, fn, name, args, kwargs)
    if fn in c.FUNCOL:
        return _funcol(tx, fn, c.FUNCOL[fn], args, kwargs)
    unsupported("distributed", f"torch.distributed function {getattr(fn, '__module__', '')}.{name} "
                               "is not traced; it runs natively between graphs")


def _bind(fn: Any, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> dict[str, Any]:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        unsupported("exception", f"TypeError: {name}(): {e}")
    bound.apply_defaults()
    return dict(bound.arguments)


def _value(tx: "Translator", v: Any, name: str) -> Any:
    """The Python value of a non-tensor argument (a constant, a process group, a mesh, a
    ``ReduceOp``), pinned by identity when it was read from a source."""
    from .tensor import TensorVariable

    if not isinstance(v, VariableTracker):
        return v  # a default from the signature
    if isinstance(v, TensorVariable):
        unsupported("distributed", f"{name}: a tensor where a constant argument is expected")
    try:
        return v.as_python_constant()
    except Unsupported:
        pass
    value = getattr(v, "value", _MISSING)
    if value is _MISSING:
        unsupported("distributed", f"{name}: argument {v} is not known at trace time")
    if v.source is not None:
        tx.output.guards.add(GuardKind.ID_MATCH, v.source, value)
    return value


_MISSING = object()


def _reduce_op(tx: "Translator", v: Any, name: str) -> str:
    from ..distributed.collectives import reduce_op_name

    try:
        return reduce_op_name(_value(tx, v, name))
    except ValueError as e:
        unsupported("distributed", f"{name}: {e}")


def _group_name(group: Any, name: str) -> str:
    from ..distributed.collectives import group_name

    try:
        return group_name(group)
    except (RuntimeError, ValueError, TypeError, AttributeError) as e:
        unsupported("distributed", f"{name}: process group {group!r} has no functional-collective name ({e})")


def _tensor(v: Any, name: str, param: str) -> Any:
    from .tensor import TensorVariable

    if not isinstance(v, TensorVariable):
        unsupported("distributed", f"{name}: {param} is not a tensor the trace tracks")
    return v


def _functional(tx: "Translator", op: Any, tensor: VariableTracker, *consts: Any) -> VariableTracker:
    """``wait_tensor(op(tensor, *consts))`` recorded in the graph."""
    from ..distributed.collectives import WAIT_OP

    started = tx.output.call(tx, "call_function", op, [tensor, *[ConstantVariable(x) for x in consts]], {})
    return tx.output.call(tx, "call_function", WAIT_OP, [started], {})


def _method(tx: "Translator", obj: VariableTracker, method: str, *args: VariableTracker) -> VariableTracker:
    return obj.var_getattr(tx, method).call_function(tx, list(args), {})


def _c10d_inplace(tx: "Translator", fn: Any, name: str, args: list[VariableTracker],
                  kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from ..distributed import collectives as c

    a = _bind(fn, name, args, kwargs)
    async_op = _value(tx, a.get("async_op", False), name)
    group = _value(tx, a.get("group"), name)
    gname = _group_name(group, name)
    written_param, read_param = c.C10D_INPLACE[fn]
    written = _tensor(a[written_param], name, written_param)
    read = _tensor(a[read_param], name, read_param)
    if torch.is_grad_enabled() and (written.example.requires_grad or read.example.requires_grad):
        # Eager's autograd runs c10d's in-place op through its not-implemented fallback, whose
        # gradients differ from any functional form's: keep eager's exactly.
        unsupported("distributed", f"{name} on a tensor that requires grad runs natively (autograd through "
                                   "c10d's in-place collective is eager's fallback, not a traced formula)")
    ops = torch.ops._c10d_functional
    if fn is c.dist.all_reduce:
        result = _functional(tx, ops.all_reduce.default, read, _reduce_op(tx, a["op"], name), gname)
    elif fn is c.dist.broadcast:
        src, group_src = _value(tx, a.get("src"), name), _value(tx, a.get("group_src"), name)
        if group_src is None:
            if src is None:
                unsupported("exception", f"ValueError: {name}() needs src or group_src")
            group_src = c.group_rank_of(group, src)
        result = _functional(tx, ops.broadcast.default, read, group_src, gname)
    elif fn is c.dist.all_gather_into_tensor:
        result = _functional(tx, ops.all_gather_into_tensor.default, read, c.group_size(gname), gname)
        result = _method(tx, result, "view_as", written)
    else:  # reduce_scatter_tensor
        result = _functional(tx, ops.reduce_scatter_tensor.default, read,
                             _reduce_op(tx, a["op"], name), c.group_size(gname), gname)
        result = _method(tx, result, "view_as", written)
    _method(tx, written, "copy_", result)
    # async_op=True: the graph's wait is moved by the backend to the first use of the result,
    # which is as late as eager's ``work.wait()`` may let the program read it.
    return WorkVariable(name) if async_op else ConstantVariable(None)


def _funcol(tx: "Translator", fn: Any, kind: str, args: list[VariableTracker],
            kwargs: dict[str, VariableTracker]) -> VariableTracker:
    from ..distributed import collectives as c

    name = f"_functional_collectives.{getattr(fn, '__name__', kind)}"
    a = _bind(fn, name, args, kwargs)
    ops = torch.ops._c10d_functional
    if kind == "wait_tensor":
        return tx.output.call(tx, "call_function", c.WAIT_OP, [_tensor(a["tensor"], name, "tensor")], {})
    x = _tensor(a["self"], name, "self")
    gname = _group_name(_value(tx, a["group"], name), name)
    if kind == "all_reduce":
        return _functional(tx, ops.all_reduce.default, x, _reduce_op(tx, a["reduceOp"], name), gname)
    if kind == "broadcast":
        return _functional(tx, ops.broadcast.default, x, _value(tx, a["src"], name), gname)
    size = c.group_size(gname)
    if kind == "all_gather_tensor":
        dim = _value(tx, a["gather_dim"], name)
        out = _functional(tx, ops.all_gather_into_tensor.default, _method(tx, x, "contiguous"), size, gname)
        if dim != 0:
            # Gathered along dim 0 (rank-major): the ranks' chunks concatenated along ``dim``.
            chunks = tx.output.call(tx, "call_function", torch.chunk, [out, ConstantVariable(size)], {})
            out = tx.output.call(tx, "call_function", torch.cat, [chunks, ConstantVariable(dim)], {})
        return out
    # reduce_scatter_tensor: scattered along dim 0; another dim is first moved there in chunks.
    dim = _value(tx, a["scatter_dim"], name)
    op = _reduce_op(tx, a["reduceOp"], name)
    if dim != 0:
        chunks = tx.output.call(tx, "call_function", torch.chunk, [x, ConstantVariable(size), ConstantVariable(dim)], {})
        x = tx.output.call(tx, "call_function", torch.cat, [chunks], {})
    return _functional(tx, ops.reduce_scatter_tensor.default, _method(tx, x, "contiguous"), op, size, gname)


class WorkVariable(VariableTracker):
    """The ``Work`` handle of a traced ``async_op=True`` collective. The collective and its wait
    are already in the graph, so ``wait()`` and ``is_completed()`` answer True; the handle
    cannot leave the trace (returned, stored, or live at a graph break: that frame runs
    natively, with eager's handle)."""

    __slots__ = ("op_name",)

    def __init__(self, op_name: str) -> None:
        super().__init__(None)
        self.op_name = op_name

    def python_type(self) -> type:
        import torch.distributed as dist

        return dist.Work

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name in _WORK_DONE:
            return BoundMethodVariable(self, name)
        unsupported("distributed", f"Work.{name} of {self.op_name}(async_op=True) is not traced")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker],
                    kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name in _WORK_DONE:
            return ConstantVariable(True)
        unsupported("distributed", f"Work.{name}() of {self.op_name}(async_op=True) is not traced")

    def reconstruct(self, cg: Any) -> str:
        unsupported("distributed", f"the Work handle of {self.op_name}(async_op=True) leaves the traced code")

    def __repr__(self) -> str:
        return f"WorkVariable({self.op_name})"


_WORK_DONE = frozenset({"wait", "is_completed", "is_success"})


def is_process_group(value: Any) -> bool:
    """Whether ``value`` is a c10d ``ProcessGroup`` (only asked when torch.distributed is loaded)."""
    import sys

    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    # (by type: isinstance would read the value's __class__, which may be user code)
    return c10d is not None and issubclass(type(value), c10d.ProcessGroup)


class ProcessGroupVariable(UserDefinedObjectVariable):
    """A ``ProcessGroup``, pinned by identity (``builder.wrap``): its name, rank and size are
    constants of the trace."""

    __slots__ = ()

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name in _GROUP_CONSTANTS:
            return ConstantVariable(getattr(self.value, name))
        if name in _GROUP_QUERIES:
            return BoundMethodVariable(self, name)
        return super().var_getattr(tx, name)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker],
                    kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name in _GROUP_QUERIES and not args and not kwargs:
            return ConstantVariable(getattr(self.value, name)())
        unsupported("distributed", f"ProcessGroup.{name}() is not traced")


_GROUP_CONSTANTS = frozenset({"group_name", "group_desc"})
_GROUP_QUERIES = frozenset({"rank", "size", "name"})
