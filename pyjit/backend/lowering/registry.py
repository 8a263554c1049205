"""The lowering registry (aten op -> IR builder) and the helpers every lowering family shares.

A lowering is ``fn(ctx, *args, **kwargs) -> IRNode | tuple``, where ``ctx`` is the
:class:`pyjit.backend.graph.GraphLowering` (passed explicitly) and tensor arguments arrive as
IR nodes. Register one with ``@register_lowering(aten.op)`` (all overloads of a packet, except
``out=``/in-place ones) or ``@register_lowering(aten.op.overload)``. Ops with no lowering
become extern fallbacks (see ``fallbacks.py``); see docs/ir.md "How to add a lowering".
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import sympy
import torch
import torch._prims  # noqa: F401  (registers the prims ops that decompositions produce)
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ..ir import IRNode, Pointwise, StorageBox, View, unwrap
from ..ops_handler import OpsHandler
from ..symbolic import FloorDiv, ModularIndexing

if TYPE_CHECKING:
    from ..graph import GraphLowering

aten = torch.ops.aten
prims = torch.ops.prims
LoweringFn = Callable[..., Any]
LOWERINGS: dict[torch._ops.OpOverload, LoweringFn] = {}


def _overloads(op: Any) -> list[torch._ops.OpOverload]:
    if isinstance(op, torch._ops.OpOverload):
        return [op]
    result = []
    for name in op.overloads():
        if name == "out" or name.endswith("_out") or "out" in name.split("_"):
            continue
        overload = getattr(op, name)
        schema = overload._schema
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            continue  # in-place / out= variants never appear after functionalization
        result.append(overload)
    return result


def register_lowering(*ops: Any, override: bool = False) -> Callable[[LoweringFn], LoweringFn]:
    """Register ``fn`` as the lowering of every overload of ``ops``. A second lowering for an
    overload raises (two families claiming one op is a bug: which one wins would depend on import
    order) unless ``override=True`` says the replacement is meant."""
    def decorator(fn: LoweringFn) -> LoweringFn:
        for op in ops:
            for overload in _overloads(op):
                previous = LOWERINGS.get(overload)
                if previous is not None and previous is not fn and not override:
                    raise ValueError(
                        f"{overload} already has the lowering {previous.__module__}.{previous.__qualname__}; "
                        f"pass override=True to register_lowering to replace it with {fn.__qualname__}")
                LOWERINGS[overload] = fn
        return fn

    return decorator


# --------------------------------------------------------------------------- dtype helpers
def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def meta_of(x: Any) -> Any:
    """A meta tensor (or scalar) standing for ``x`` in torch's type-promotion helpers."""
    from ..symbolic import is_static
    if isinstance(x, IRNode):
        # Promotion depends on the dtype and on 0-dim-ness only: a symbolic size stands as 2.
        size = [s if is_static(s) else 2 for s in x.get_size()]
        return torch.empty(size, dtype=x.get_dtype(), device="meta")
    if isinstance(x, sympy.Basic):  # a symbolic scalar graph input
        return 1.0 if (x.is_real and not x.is_integer) or not x.is_integer else 1
    return x


def promote(*args: Any, kind: ELEMENTWISE_TYPE_PROMOTION_KIND = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
            ) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) under torch's elementwise promotion rules."""
    metas = [meta_of(a) for a in args if isinstance(a, (IRNode, bool, int, float, sympy.Basic))]
    return elementwise_dtypes(*metas, type_promotion_kind=kind)


# --------------------------------------------------------------------------- broadcasting
def broadcast_shapes(*shapes: Sequence[int]) -> list[int]:
    from ..symbolic import is_static
    if all(is_static(s) for shape in shapes for s in shape):
        return list(torch.broadcast_shapes(*[tuple(s) for s in shapes]))
    # Symbolic sizes (never 0 or 1): a dimension is its non-1 size, which all must share.
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(ndim):
        sizes = {s[d - ndim + len(s)] for s in shapes if d - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise NotImplementedError(f"cannot broadcast symbolic sizes {sorted(map(str, sizes))}")
        out.append(sizes.pop() if sizes else 1)
    return out


def expand_to(x: IRNode, size: Sequence[int]) -> IRNode:
    """Broadcast ``x`` to ``size`` (numpy rules) as an index transformation."""
    from ..symbolic import as_size
    old = x.get_size()
    size = [as_size(s) for s in size]
    if old == size:
        return x
    lead = len(size) - len(old)
    assert lead >= 0, (old, size)

    def reindex(index: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        out = []
        for d, s in enumerate(old):
            out.append(sympy.Integer(0) if s == 1 and size[lead + d] != 1 else index[lead + d])
        return out

    return View(x, size, reindex)


# --------------------------------------------------------------------------- pointwise construction
Value = Any  # a handler value


def make_pointwise(
    ctx: "GraphLowering",
    inputs: Sequence[Any],
    fn: Callable[..., Value],
    dtype: torch.dtype,
    compute_dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> StorageBox:
    """Elementwise ``fn(ops, *values)`` over broadcast ``inputs`` (IR nodes or Python scalars).

    Tensor inputs are converted to ``compute_dtype`` (when given) before ``fn`` sees them;
    Python scalars become constants of ``compute_dtype`` (or ``dtype``).
    """
    tensors = [i for i in inputs if isinstance(i, IRNode)]
    size = broadcast_shapes(*[t.get_size() for t in tensors]) if tensors else []
    if device is None:
        device = tensors[0].get_device() if tensors else ctx.device
    cdt = compute_dtype
    loaders: list[Any] = []
    for i in inputs:
        if isinstance(i, IRNode):
            loaders.append((expand_to(i, size).make_loader(), i.get_dtype()))
        else:
            loaders.append((None, i))
    origins = set().union(*[t.get_origins() for t in tensors]) if tensors else set()
    origins |= ctx.current_origins()

    def inner_fn(ops: OpsHandler[Any], index: Sequence[sympy.Expr]) -> Value:
        values = []
        for loader, extra in loaders:
            if loader is None:
                values.append(ops.constant(extra, cdt or dtype))
            else:
                v = loader(ops, index)
                if cdt is not None and extra != cdt:
                    v = ops.to_dtype(v, cdt)
                values.append(v)
        out = fn(ops, *values)
        return out

    return StorageBox(Pointwise(device, dtype, size, origins, inner_fn=inner_fn))


def to_dtype_node(ctx: "GraphLowering", x: IRNode, dtype: torch.dtype) -> IRNode:
    if x.get_dtype() == dtype:
        return x
    return make_pointwise(ctx, [x], lambda ops, v: ops.to_dtype(v, dtype), dtype)


def view_reshape_index(old_size: Sequence[int], new_size: Sequence[int]) -> Callable[[Sequence[sympy.Expr]], list[sympy.Expr]]:
    """Index map of a row-major reshape: new index -> flat -> old index."""
    from ..symbolic import contiguous_strides, strided_index, unflatten_index

    new_strides = contiguous_strides(new_size)

    def reindex(index: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        flat = strided_index(index, new_strides)
        return unflatten_index(flat, old_size)

    return reindex


def canonical_dim(dim: int, ndim: int) -> int:
    if ndim == 0:
        return 0
    return dim + ndim if dim < 0 else dim


def canonical_dims(dims: Any, ndim: int) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({canonical_dim(int(d), ndim) for d in dims})


__all__ = [
    "LOWERINGS", "register_lowering", "make_pointwise", "expand_to", "promote", "broadcast_shapes",
    "to_dtype_node", "view_reshape_index", "canonical_dim", "canonical_dims", "unwrap", "FloorDiv",
    "ModularIndexing", "aten", "prims", "ELEMENTWISE_TYPE_PROMOTION_KIND",
]
